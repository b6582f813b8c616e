//! PostgreSQL: single-table commits swapped in groups on the committer's own connection
//! (`group_commit`), the one lock order of multi-row writes, and what a group answers when its
//! connection or the server fails.

use super::*;

use std::sync::Mutex;
use std::time::Duration;

use sqlx::Connection;
use tokio::net::{TcpListener, TcpStream};

/// PostgreSQL: two tables a and b (a's id sorts first), in namespace `db` of a new warehouse.
async fn two_postgres_tables()
-> (TestDatabase, icegate_catalog::WarehouseId, icegate_catalog::TabularId, icegate_catalog::TabularId) {
    let db = TestDatabase::new(TestBackend::Postgres).await;
    let wh = warehouse(&db.store, "w").await;
    db.store.create_namespace(&WriteContext::NONE, &wh, &ns("db"), &Properties::new()).await.unwrap();
    let a = table(&db.store, &wh, "a", "file:///w/db/a").await.unwrap();
    let b = table(&db.store, &wh, "b", "file:///w/db/b").await.unwrap();
    assert!(a < b, "ids are time-ordered");
    (db, wh, a, b)
}

/// A connection of its own to the test's database, in a transaction that holds `id`'s row.
async fn hold_row(url: &str, id: &str) -> sqlx::PgConnection {
    let mut holder = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM tabulars WHERE id = $1 FOR UPDATE").bind(id).execute(&mut holder).await.unwrap();
    holder
}

/// Waits until `waiting` sessions of the test's database wait for a lock.
async fn until_waiting_for_locks(url: &str, waiting: i64) {
    let mut watcher = sqlx::PgConnection::connect(url).await.unwrap();
    for _ in 0..1000 {
        let now: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if now >= waiting {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no session waited for a lock");
}

/// Whether `id`'s row can be locked right now (another transaction does not hold it).
async fn row_is_free(url: &str, id: &str) -> bool {
    let mut probe = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut probe).await.unwrap();
    let free = sqlx::query("SELECT 1 FROM tabulars WHERE id = $1 FOR UPDATE NOWAIT").bind(id).execute(&mut probe).await;
    sqlx::raw_sql("ROLLBACK").execute(&mut probe).await.unwrap();
    free.is_ok()
}

async fn metadata_location(db: &TestDatabase, wh: &icegate_catalog::WarehouseId, name: &str) -> String {
    db.store.load_tabular(wh, &ns("db"), name, TabularKind::Table).await.unwrap().unwrap().metadata_location
}

/// A group of single-table commits whose second row another transaction holds: the group
/// swaps the free row without waiting, and the other swap runs alone, waiting for its row; so
/// the commit of the free table is answered while the other still waits, and both apply.
#[tokio::test(flavor = "current_thread")]
async fn a_postgres_group_held_up_by_a_locked_row_runs_its_swaps_alone() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    let mut holder = hold_row(&db.url, &b).await;
    // Spawned on this thread, both are queued before the committer runs: one group.
    let store = Arc::new(db.store.clone());
    let swap_a = tokio::spawn({
        let (store, swap) = (store.clone(), swap(&a, &wh, "a", a0, "a1"));
        async move { store.swap_metadata(&WriteContext::NONE, &[swap]).await }
    });
    let swap_b = tokio::spawn({
        let (store, swap) = (store.clone(), swap(&b, &wh, "b", b0, "b1"));
        async move { store.swap_metadata(&WriteContext::NONE, &[swap]).await }
    });
    let applied = tokio::time::timeout(std::time::Duration::from_secs(20), swap_a).await;
    assert_eq!(applied.expect("a's commit waits for b's lock").unwrap().unwrap(), SwapOutcome::Applied);
    assert_eq!(metadata_location(&db, &wh, "a").await, "a1");
    assert!(!swap_b.is_finished(), "b's swap went ahead of the transaction holding its row");
    assert_eq!(metadata_location(&db, &wh, "b").await, b0);
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    assert_eq!(swap_b.await.unwrap().unwrap(), SwapOutcome::Applied);
    assert_eq!(metadata_location(&db, &wh, "b").await, "b1");
    assert_eq!(db.store.group_commits(), Some((1, 0)), "both swaps were one group");
    assert_eq!(db.store.swaps_run_alone(), 1);
}

/// Another transaction holding b and then taking a, while a group swaps a then b: the group
/// never waits for b (it swaps a and leaves b to run alone), so no deadlock forms and nothing
/// is answered as failed.
#[tokio::test(flavor = "current_thread")]
async fn a_postgres_group_never_waits_for_a_row_so_it_cannot_deadlock() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    let store = Arc::new(db.store.clone());
    let mut other = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut other).await.unwrap();
    let touch = "UPDATE tabulars SET updated_at = updated_at + 1 WHERE id = $1";
    sqlx::query(touch).bind(b.as_str()).execute(&mut other).await.unwrap();
    let swaps = tokio::spawn({
        let store = store.clone();
        let (swap_a, swap_b) = (swap(&a, &wh, "a", a0, "a1"), swap(&b, &wh, "b", b0, "b1"));
        async move {
            let write = WriteContext::NONE;
            let (a, b) = tokio::join!(
                store.swap_metadata(&write, std::slice::from_ref(&swap_a)),
                store.swap_metadata(&write, std::slice::from_ref(&swap_b)),
            );
            (a.unwrap(), b.unwrap())
        }
    });
    // b's swap, alone, waits for the other transaction, which now takes a: a is free.
    until_waiting_for_locks(&db.url, 1).await;
    sqlx::query(touch).bind(a.as_str()).execute(&mut other).await.unwrap();
    sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    let outcomes = tokio::time::timeout(std::time::Duration::from_secs(20), swaps).await.unwrap().unwrap();
    assert_eq!(outcomes, (SwapOutcome::Applied, SwapOutcome::Applied));
    assert_eq!(metadata_location(&db, &wh, "a").await, "a1");
    assert_eq!(metadata_location(&db, &wh, "b").await, "b1");
    assert_eq!(store.group_commits(), Some((1, 0)), "both swaps were one group");
    assert_eq!(store.swaps_run_alone(), 1);
}

/// A group swaps its rows in id order, whatever the order its swaps arrived in, and answers
/// each swap its own outcome.
#[tokio::test(flavor = "current_thread")]
async fn a_postgres_group_answers_each_swap_its_own_outcome() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let a0 = "file:///w/db/a/metadata/00000-x.metadata.json";
    let store = Arc::new(db.store.clone());
    // b (stale) queues before a (current); a's id sorts first.
    let stale = tokio::spawn({
        let (store, swap) = (store.clone(), swap(&b, &wh, "b", "stale", "b1"));
        async move { store.swap_metadata(&WriteContext::NONE, &[swap]).await.unwrap() }
    });
    let current = tokio::spawn({
        let (store, swap) = (store.clone(), swap(&a, &wh, "a", a0, "a1"));
        async move { store.swap_metadata(&WriteContext::NONE, &[swap]).await.unwrap() }
    });
    assert_eq!((stale.await.unwrap(), current.await.unwrap()), (SwapOutcome::Conflict(0), SwapOutcome::Applied));
    assert_eq!(metadata_location(&db, &wh, "a").await, "a1");
    assert_eq!(store.group_commits(), Some((1, 0)), "both swaps were one group");
}

/// The committer's own connection, closed by the server while idle, is opened again before the
/// next group; a database without the group's function (not migrated to it) commits through
/// the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_group_survives_its_connection_closing_and_a_missing_function() {
    let (db, wh, a, _) = two_postgres_tables().await;
    let a0 = "file:///w/db/a/metadata/00000-x.metadata.json";
    let store = &db.store;
    let write = WriteContext::NONE;
    assert_eq!(store.swap_metadata(&write, &[swap(&a, &wh, "a", a0, "a1")]).await.unwrap(), SwapOutcome::Applied);
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let function = icegate_store::testing::postgres_group_function();
    let closed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'SELECT {function}%') AS t"
    )))
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(closed, 1, "the committer's connection was found and closed");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(store.swap_metadata(&write, &[swap(&a, &wh, "a", "a1", "a2")]).await.unwrap(), SwapOutcome::Applied);
    assert_eq!(store.group_commits(), Some((2, 0)), "both groups ran on the committer's connection");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP FUNCTION {function}"))).execute(&mut admin).await.unwrap();
    assert_eq!(store.swap_metadata(&write, &[swap(&a, &wh, "a", "a2", "a3")]).await.unwrap(), SwapOutcome::Applied);
    assert_eq!(store.group_commits(), Some((2, 1)), "the group without its function ran through the pool");
    assert_eq!(metadata_location(&db, &wh, "a").await, "a3");
}

/// A multi-table commit takes its rows' locks by id whatever the order of its tables, and its
/// warehouses' locks before any row's: while it waits for the first row (or the warehouse), it
/// holds none of the others, so it cannot deadlock with a group or another such commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_multi_table_commit_takes_locks_in_one_order() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    let store = Arc::new(db.store.clone());
    // Tables named b then a; a's row is held.
    let mut holder = hold_row(&db.url, &a).await;
    let commit = tokio::spawn({
        let (store, swaps) = (store.clone(), [swap(&b, &wh, "b", b0, "b1"), swap(&a, &wh, "a", a0, "a1")]);
        async move { store.swap_metadata(&WriteContext::NONE, &swaps).await }
    });
    until_waiting_for_locks(&db.url, 1).await;
    assert!(row_is_free(&db.url, &b).await, "the commit locked b before waiting for a");
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    assert_eq!(commit.await.unwrap().unwrap(), SwapOutcome::Applied);
    assert_eq!(
        (metadata_location(&db, &wh, "a").await, metadata_location(&db, &wh, "b").await),
        ("a1".into(), "b1".into())
    );

    // b moves to a new location (the warehouse's lock), a does not; the warehouse is held.
    let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM warehouses WHERE id = $1 FOR NO KEY UPDATE")
        .bind(wh.as_str())
        .execute(&mut holder)
        .await
        .unwrap();
    let mut moved = swap(&b, &wh, "b", "b1", "b2");
    moved.location = "file:///w/db/b-moved".into();
    moved.locations_changed = true;
    let commit = tokio::spawn({
        let (store, swaps) = (store.clone(), [swap(&a, &wh, "a", "a1", "a2"), moved]);
        async move { store.swap_metadata(&WriteContext::NONE, &swaps).await }
    });
    until_waiting_for_locks(&db.url, 1).await;
    assert!(row_is_free(&db.url, &a).await, "the commit locked a before waiting for the warehouse");
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    assert_eq!(commit.await.unwrap().unwrap(), SwapOutcome::Applied);
    assert_eq!(
        (metadata_location(&db, &wh, "a").await, metadata_location(&db, &wh, "b").await),
        ("a2".into(), "b2".into())
    );
}

/// When the committer's own PostgreSQL connection cannot open (here: its role may hold one
/// connection, which the pool has), groups commit through the pool, with the same outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_groups_commit_through_the_pool_when_their_connection_does_not_open() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    let role = format!("icegate_one_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN PASSWORD 'one' CONNECTION LIMIT 1; \
         GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    // The test database's URL, as that role.
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let host = rest.split_once('@').filter(|(user, _)| !user.contains('/')).map_or(rest, |(_, host)| host);
    let url = format!("{scheme}://{role}:one@{host}");
    let store = icegate_store::SqlStore::connect_lazy(&icegate_store::StoreOptions {
        url,
        max_connections: 1,
        acquire_timeout: std::time::Duration::from_secs(10),
    })
    .unwrap();
    store.ping().await.unwrap(); // the pool holds the role's one connection
    let write = WriteContext::NONE;
    let (to_a1, stale) = (swap(&a, &wh, "a", a0, "a1"), swap(&b, &wh, "b", "stale", "b1"));
    let (first, second) = tokio::join!(
        store.swap_metadata(&write, std::slice::from_ref(&to_a1)),
        store.swap_metadata(&write, std::slice::from_ref(&stale)),
    );
    assert_eq!((first.unwrap(), second.unwrap()), (SwapOutcome::Applied, SwapOutcome::Conflict(0)));
    let applied = store.swap_metadata(&write, &[swap(&b, &wh, "b", b0, "b1")]).await.unwrap();
    assert_eq!(applied, SwapOutcome::Applied);
    assert_eq!(
        (metadata_location(&db, &wh, "a").await, metadata_location(&db, &wh, "b").await),
        ("a1".into(), "b1".into())
    );
    let (own, pooled) = store.group_commits().unwrap();
    assert!(own == 0 && pooled >= 1, "own {own}, pooled {pooled}");
    store.close().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}; DROP ROLE {role}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
}

/// A loopback TCP proxy in front of PostgreSQL whose connections can all be cut at once, as a
/// failing network, a NAT or a load balancer would: the client's end fails at once, while the
/// server's session goes on with what it received until it next writes to its socket.
struct Proxy {
    url: String,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    accepting: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to the server of `url`; [`Proxy::url`] is `url` through it.
    async fn start(url: &str) -> Self {
        let mut proxied = url::Url::parse(url).unwrap();
        let upstream = format!("{}:{}", proxied.host_str().unwrap(), proxied.port().unwrap_or(5432));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        proxied.set_host(Some("127.0.0.1")).unwrap();
        proxied.set_port(Some(listener.local_addr().unwrap().port())).unwrap();
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accepting = tokio::spawn({
            let links = links.clone();
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let upstream = upstream.clone();
                    let link = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    links.lock().unwrap().push(link.abort_handle());
                }
            }
        });
        Self { url: proxied.to_string(), links, accepting }
    }

    /// Closes every connection made so far, both ends; new ones are still let through.
    fn cut(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.accepting.abort();
    }
}

/// A store on the test's database through `proxy`.
fn store_through(proxy: &Proxy) -> icegate_store::SqlStore {
    icegate_store::SqlStore::connect_lazy(&icegate_store::StoreOptions {
        url: proxy.url.clone(),
        max_connections: 4,
        acquire_timeout: Duration::from_secs(10),
    })
    .unwrap()
}

/// Makes every transaction that moves a row to a metadata location containing `slow` sleep for
/// `seconds` when it commits (a deferred constraint trigger runs at `COMMIT`): a commit the
/// client can lose its connection during.
async fn slow_commits(url: &str, seconds: u32) {
    let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NEW.metadata_location LIKE '%slow%' THEN PERFORM pg_sleep({seconds}); END IF; RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER UPDATE ON tabulars DEFERRABLE INITIALLY DEFERRED \
           FOR EACH ROW EXECUTE FUNCTION slow_commit()"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
}

/// Waits until a session of the test's database sleeps in `slow_commit`.
async fn until_a_commit_sleeps(url: &str) {
    let mut watcher = sqlx::PgConnection::connect(url).await.unwrap();
    for _ in 0..1000 {
        let sleeping: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'",
        )
        .fetch_one(&mut watcher)
        .await
        .unwrap();
        if sleeping > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no commit slept");
}

/// The connection of a group is lost while the server is committing it. The server goes on
/// and commits the group after its client is gone, so reading the rows at once would find them
/// as they were and let the engine delete the file they are about to point at. The committer
/// first settles the group by its fence, which waits for the group's transaction to end: the
/// rows it then answers about are final (here: the group applied, 3 s after the connection was
/// lost, and the answer came after that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_connection_is_lost_is_settled_before_it_is_answered() {
    let (db, wh, a, _) = two_postgres_tables().await;
    let a0 = "file:///w/db/a/metadata/00000-x.metadata.json";
    slow_commits(&db.url, 3).await;
    let proxy = Proxy::start(&db.url).await;
    let store = Arc::new(store_through(&proxy));
    let swap = tokio::spawn({
        let (store, swap) = (store.clone(), swap(&a, &wh, "a", a0, "a1-slow"));
        async move { store.swap_metadata(&WriteContext::NONE, &[swap]).await }
    });
    until_a_commit_sleeps(&db.url).await;
    proxy.cut();
    let answer = swap.await.unwrap();
    assert!(matches!(answer, Err(CatalogError::Unavailable(_))), "settled, then answered: {answer:?}");
    assert_eq!(store.group_commits(), Some((1, 0)), "the group ran on the committer's connection");
    // What the engine reads now is final.
    let answered = db.store.metadata_location_of(&a).await.unwrap();
    assert_eq!(answered.as_deref(), Some("a1-slow"), "the server committed the group, before the answer");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(db.store.metadata_location_of(&a).await.unwrap(), answered);
    // The group deleted its own token; the settler's stays, so that no late copy of the
    // statement could ever apply.
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let fences: i64 = sqlx::query_scalar("SELECT count(*) FROM swap_fences").fetch_one(&mut admin).await.unwrap();
    assert_eq!(fences, 1);
}

/// A group whose token was fenced before it ran (a settler got there first: the statement was
/// still on its way) fails at its first step and applies nothing, whatever it would have done.
#[tokio::test(flavor = "current_thread")]
async fn a_group_fenced_before_it_runs_applies_nothing() {
    let (db, wh, a, _) = two_postgres_tables().await;
    let a0 = "file:///w/db/a/metadata/00000-x.metadata.json";
    let mut connection = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // The group of one swap of a, from a0 to a1, under `token`.
    let group = |token: &'static str| {
        sqlx::query_scalar::<_, Vec<i16>>(sqlx::AssertSqlSafe(format!(
            "SELECT {}($1, 0, ARRAY['a1'], ARRAY['{{}}'], ARRAY[NULL::bytea], ARRAY['file:///w/db/a'], \
             ARRAY[$2], ARRAY[$3], ARRAY['a'], ARRAY[$4], ARRAY['db'], ARRAY[NULL::bigint], ARRAY[NULL::text], \
             ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[NULL::text], \
             ARRAY[NULL::text])",
            icegate_store::testing::postgres_group_function()
        )))
        .bind(token)
        .bind(a.as_str())
        .bind(a0)
        .bind(wh.as_str())
    };
    sqlx::query("INSERT INTO swap_fences (token, created_at) VALUES ('late', 0)")
        .execute(&mut connection)
        .await
        .unwrap();
    let late = group("late").fetch_one(&mut connection).await;
    assert!(late.is_err(), "{late:?}");
    assert_eq!(metadata_location(&db, &wh, "a").await, a0);
    // The same group with a token of its own applies.
    assert_eq!(group("own").fetch_one(&mut connection).await.unwrap(), vec![1]);
    assert_eq!(metadata_location(&db, &wh, "a").await, "a1");
}

/// A multi-table commit (through the pool, where no fence is taken) whose connection is lost
/// during its `COMMIT` is answered "state unknown" at once, and indeed the server commits it
/// afterwards; had the rows been read back when the connection failed, they would have said
/// "not applied".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_connection_is_lost_during_its_commit_is_answered_unknown() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    slow_commits(&db.url, 2).await;
    let proxy = Proxy::start(&db.url).await;
    let store = Arc::new(store_through(&proxy));
    let commit = tokio::spawn({
        let (store, swaps) = (store.clone(), [swap(&a, &wh, "a", a0, "a1-slow"), swap(&b, &wh, "b", b0, "b1")]);
        async move { store.swap_metadata(&WriteContext::NONE, &swaps).await }
    });
    until_a_commit_sleeps(&db.url).await;
    proxy.cut();
    let answer = commit.await.unwrap();
    assert!(matches!(answer, Err(CatalogError::CommitStateUnknown(_))), "{answer:?}");
    assert_eq!(db.store.metadata_location_of(&a).await.unwrap().as_deref(), Some(a0), "not yet applied");
    let mut applied = false;
    for _ in 0..100 {
        if db.store.metadata_location_of(&a).await.unwrap().as_deref() == Some("a1-slow") {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(applied, "the server committed after its client was gone");
    assert_eq!(db.store.metadata_location_of(&b).await.unwrap().as_deref(), Some("b1"));
}

/// A group the server refuses (here: one swap's row fails a check) applied nothing; each of its
/// swaps runs again alone, so only the commit at fault fails and the others apply.
#[tokio::test(flavor = "current_thread")]
async fn a_group_the_server_refuses_runs_its_swaps_alone_and_fails_only_the_one_at_fault() {
    let (db, wh, a, b) = two_postgres_tables().await;
    let (a0, b0) = ("file:///w/db/a/metadata/00000-x.metadata.json", "file:///w/db/b/metadata/00000-x.metadata.json");
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("ALTER TABLE tabulars ADD CONSTRAINT no_refused CHECK (metadata_location NOT LIKE '%refused%')")
        .execute(&mut admin)
        .await
        .unwrap();
    // Both queue before the committer runs (one thread): one group.
    let store = Arc::new(db.store.clone());
    let (to_refuse, to_apply) = (swap(&a, &wh, "a", a0, "a1-refused"), swap(&b, &wh, "b", b0, "b1"));
    let write = WriteContext::NONE;
    let (refused, applied) = tokio::join!(
        store.swap_metadata(&write, std::slice::from_ref(&to_refuse)),
        store.swap_metadata(&write, std::slice::from_ref(&to_apply)),
    );
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(applied.unwrap(), SwapOutcome::Applied);
    assert_eq!(metadata_location(&db, &wh, "a").await, a0);
    assert_eq!(metadata_location(&db, &wh, "b").await, "b1");
    assert_eq!(store.group_commits(), Some((1, 0)), "both swaps were one group");
    assert_eq!(store.swaps_run_alone(), 2);
}
