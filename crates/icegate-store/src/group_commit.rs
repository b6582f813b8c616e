//! Group commit of metadata swaps: single-table commits that arrive while the database is busy
//! committing are swapped together in the next transaction, so they share one transaction and
//! one log sync.
//!
//! SQLite has one writer, and every transaction ends with a sync of its WAL (`synchronous =
//! FULL`: an acknowledged commit survives a power loss). One sync per commit bounds commits per
//! second by the disk's sync latency, which rises with whatever else the disk is writing (each
//! commit also writes a metadata file). PostgreSQL syncs its WAL for concurrent commits
//! together, but each commit was still a transaction of its own, with its round trips and its
//! backend's work, on cores it may share with the catalog (docs/benchmarks.md, "Fifth pass").
//!
//! A committer task takes every swap queued while the previous group committed and runs each
//! one's compare-and-swap (`tabulars::swap`, the one definition of a swap's statements) in one
//! transaction; each swap still applies
//! only against its own expected metadata location, so a group is exactly as if its swaps ran
//! one after another (two of the same table: the second conflicts and its commit is staged again
//! on the first, as with any lost race). A group's swaps are independent commits: none waits
//! for another's outcome, and the engine answers each on its own.
//!
//! The group runs on a connection of the committer's own:
//! - SQLite: the database file, in one call on the blocking pool. Through sqlx each statement of
//!   the group (`BEGIN`, every `UPDATE`, `COMMIT`) is a round trip to the connection's worker
//!   thread (perf put that channel at 6% of a small commit's samples, and the thread wake-ups
//!   around such hand-offs at about 20%). The committer takes the same turn among this
//!   process's writers as any write transaction ([`SqlStore::write_turn`]).
//! - PostgreSQL: the store's URL (one connection more than the pool's), where the group is one
//!   statement, a function generated from the swap's statements (`tabulars::swap::POSTGRES_GROUP`,
//!   installed by the migrations): one round trip and one implicit
//!   transaction, where `BEGIN`, an `UPDATE` per swap and `COMMIT` took two more round trips
//!   than it has swaps. The connection is checked before use when it idled; its statements are
//!   cancelled by the server past 20 s; it is left alone for 10 s when it does not open or
//!   serve (or the database lacks the function), and its groups run through the pool meanwhile.
//!
//! A group that fails is answered by what is known of it:
//! - The server answered with an error (PostgreSQL, severity ERROR: a statement timeout, a lock
//!   timeout, a deadlock, a serialization failure, a value of one swap it refused): it rolled
//!   the group back, nothing of it applied, and each swap runs again alone, off the committer.
//!   So one commit's failure stays that commit's, and a swap that applies alone is answered as
//!   applied.
//! - It may still apply (the connection failed, the server ended the session, or it did not
//!   answer within 30 s): a database that received the statement goes on and commits it though
//!   its client is gone. Reading the rows now could find them as they were and delete files
//!   they are about to point at, so the outcome is settled first, by a fence: the group's first
//!   step inserts its token into `swap_fences` (and its last deletes it, in the same
//!   transaction); the settler inserts the same token from another connection. That insert
//!   waits for the group while it runs, and once it returns (inserted, or refused as a
//!   duplicate) the group has committed or rolled back for good, or will fail at its first
//!   step should it ever start. Then every swap gets the error and the commit engine reads the
//!   rows back. When it cannot be settled within 10 s, every swap answers `CommitStateUnknown`
//!   and the engine keeps its files. Settling runs off the committer, whose next groups go
//!   through the pool meanwhile. The fence names the group, not a session, so it holds behind
//!   a connection pooler too (where a server process id would name someone else's session).
//! - SQLite, whose connection is in-process: every swap gets the error and the engine reads the
//!   rows back. The SQLite connection is closed (which rolls back what the failure left open)
//!   and opened afresh for the next group.
//!
//! Through the pool (an in-memory SQLite database, which has no file to open; a PostgreSQL
//! committer whose connection is unavailable) a group is a transaction of `UPDATE`s, whose
//! `COMMIT`, should it fail unanswered, is answered `CommitStateUnknown` (`swap_error`).
//!
//! On PostgreSQL a group must not wait for a row another transaction holds (a drop, a rename,
//! a multi-table commit, another replica's group, an operator's session): it would hold up, for
//! as long, the commits of every table queued behind it, and while it holds some rows and waits
//! for another it could close a cycle of waits. So the function first locks the group's rows
//! that are free, by id (`tabulars::lock_order`, the one order every multi-row write of table
//! and view rows takes), skipping the held ones, and swaps only those; a swap whose row was held
//! runs alone, off the committer, and waits for its row there. Through the pool the group is a
//! transaction of `UPDATE`s in that order that waits at most 200 ms for any row
//! ([`POSTGRES_GROUP_BEGIN`]). No swap that may have applied ever runs again: it would conflict
//! with itself, and the engine would delete the metadata file the row now points at.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use icegate_catalog::CatalogError;
use icegate_catalog::store::{MetadataSwap, SwapOutcome};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use crate::audit::Entry;
use crate::tabulars::lock_order;
use crate::tabulars::swap::{self, POSTGRES_GROUP};
use crate::{Backend, SqlStore, db_error, is_violation, refused_by_postgres, store_unavailable, swap_error};

/// At most this many swaps share a transaction.
const MAX_GROUP: usize = 64;

/// A group takes no swap whose document would bring the group's documents past this many bytes
/// (it starts the next group; a group's first swap always goes): one PostgreSQL message carries
/// them all.
const MAX_GROUP_BYTES: usize = 32 << 20;

/// The committer's own PostgreSQL connection: checked before use after this long idle (the
/// server or something between may have closed it meanwhile) ...
const POSTGRES_IDLE_CHECK: Duration = Duration::from_secs(1);
/// ... whose statements the server cancels past this long (it then answers, and nothing of the
/// group applied) ...
const POSTGRES_STATEMENT_TIMEOUT: &str = "20s";
/// ... and given up on, should the server not answer at all, after this long: the group's
/// outcome is then settled as after a lost connection ...
const POSTGRES_GIVE_UP: Duration = Duration::from_secs(30);
/// ... and, when it does not open or does not serve, left alone this long, its groups run
/// through the pool meanwhile.
const POSTGRES_RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long settling a group's outcome may take (see the module documentation); past it the
/// group's outcome is unknown.
const POSTGRES_SETTLE: Duration = Duration::from_secs(10);
/// Fences of settled groups are removed after this long, by the location-hold expiry job (a
/// statement still on its way to the server by then is not to be feared).
pub(crate) const FENCE_KEPT_MS: i64 = 24 * 3600 * 1000;

/// How a PostgreSQL group begins: in READ COMMITTED whatever the server's default (an `UPDATE`
/// that waited for a row then checks its expected location against the row as committed, and
/// cannot fail to serialize), waiting at most this long for any one row's lock before the server
/// aborts it and its swaps run alone (see the module documentation). Commits hold a row for
/// milliseconds; a wait this long means something else holds it.
pub(crate) const POSTGRES_GROUP_BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '200ms'";

type Reply = oneshot::Sender<Result<SwapOutcome, CatalogError>>;

/// A queued swap, with the audit record it appends when it applies.
type Queued = (MetadataSwap, Option<Entry>);

/// The queue of swaps waiting for the committer (started with the first swap).
pub(crate) struct GroupCommit {
    queue: std::sync::OnceLock<mpsc::UnboundedSender<(Queued, Reply)>>,
    /// What the committer's own connection connects to (`None`: an in-memory database).
    own: Option<Own>,
    counts: Arc<Counts>,
}

/// The database the committer's own connection connects to.
#[derive(Clone)]
pub(crate) enum Own {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL server: its URL, and how long a connection may take to open.
    Postgres(String, Duration),
}

/// Groups committed on the committer's own connection, through the pool, and swaps run alone.
#[derive(Default)]
struct Counts {
    own: AtomicU64,
    pooled: AtomicU64,
    /// Swaps run alone: of groups the server refused, or whose row another transaction held.
    alone: AtomicU64,
}

/// How a group's transaction failed.
enum Failed {
    /// The server answered with an error (PostgreSQL): nothing of the group applied, and its
    /// swaps may run again, alone.
    Refused(sqlx::Error),
    /// PostgreSQL: the group statement failed unanswered and may still apply; its outcome is
    /// to be settled by its fence `token` before its swaps are answered.
    Unsettled { token: String, error: String },
    /// Anything else: the error for every swap (the engine reads the rows back, unless it is
    /// `CommitStateUnknown`).
    Other(CatalogError),
}

impl Failed {
    /// The failure of one of the group's statements; `commits`: whether that statement could
    /// commit the group (an autocommit statement, or the `COMMIT`), and so may still apply.
    fn from_sqlx(err: sqlx::Error, commits: bool) -> Self {
        if refused_by_postgres(&err) {
            Self::Refused(err)
        } else if commits {
            Self::Other(swap_error(err))
        } else {
            Self::Other(db_error(err))
        }
    }
}

impl GroupCommit {
    pub(crate) fn new(own: Option<Own>) -> Self {
        Self { queue: std::sync::OnceLock::new(), own, counts: Arc::default() }
    }

    /// Groups committed so far on the committer's own connection, and through the pool.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.counts.own.load(Ordering::Relaxed), self.counts.pooled.load(Ordering::Relaxed))
    }

    /// Swaps run alone: of groups the server refused, or whose row another transaction held.
    pub(crate) fn alone(&self) -> u64 {
        self.counts.alone.load(Ordering::Relaxed)
    }

    /// Swaps `swap` in with the next group and answers how it ended; `audit`: its record,
    /// appended to the audit chain in the group's transaction when it applies.
    pub(crate) async fn swap(
        &self,
        store: &SqlStore,
        swap: MetadataSwap,
        audit: Option<Entry>,
    ) -> Result<SwapOutcome, CatalogError> {
        let queue = self.queue.get_or_init(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            // The committer holds a store without this queue, so it ends when the last store
            // holding the queue is dropped.
            let writer = self.own.clone().map(|own| match own {
                Own::Sqlite(file) => Writer::Sqlite { file, connection: None },
                Own::Postgres(url, timeout) => Writer::Postgres(PgWriter::new(url, timeout)),
            });
            tokio::spawn(committer(store.without_group(), writer, self.counts.clone(), receiver));
            sender
        });
        let (reply, answer) = oneshot::channel();
        queue
            .send(((swap, audit), reply))
            .map_err(|_| CatalogError::Unavailable("the metadata store is shutting down; retry".into()))?;
        // The committer went away with the swap (the process is ending): it may have been sent.
        answer.await.map_err(|_| CatalogError::commit_state_unknown("the metadata store shut down"))?
    }
}

async fn committer(
    store: SqlStore,
    mut writer: Option<Writer>,
    counts: Arc<Counts>,
    mut queue: mpsc::UnboundedReceiver<(Queued, Reply)>,
) {
    // A swap that did not fit in the previous group: it starts the next.
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match queue.recv().await {
                Some(first) => first,
                None => break,
            },
        };
        let turn = store.write_turn().await;
        // Everything that queued up meanwhile goes in the same transaction.
        let mut bytes = document_bytes(&first.0.0);
        let mut swaps = vec![first.0];
        let mut replies = vec![first.1];
        while swaps.len() < MAX_GROUP {
            let Ok((swap, reply)) = queue.try_recv() else { break };
            let more = document_bytes(&swap.0);
            if bytes + more > MAX_GROUP_BYTES {
                carried = Some((swap, reply));
                break;
            }
            bytes += more;
            swaps.push(swap);
            replies.push(reply);
        }
        let swaps = Arc::new(swaps);
        let own = match writer.as_mut() {
            Some(writer) => writer.commit(swaps.clone(), store.now_ms()).await,
            None => None,
        };
        let outcomes = match own {
            Some(outcomes) => {
                counts.own.fetch_add(1, Ordering::Relaxed);
                outcomes
            }
            None => {
                counts.pooled.fetch_add(1, Ordering::Relaxed);
                commit_group(&store, &swaps).await.map(|outcomes| outcomes.into_iter().map(Some).collect())
            }
        };
        drop(turn);
        let swaps = Arc::try_unwrap(swaps).unwrap_or_else(|shared| (*shared).clone());
        let outcomes = match outcomes {
            Ok(outcomes) => outcomes,
            Err(Failed::Refused(err)) => {
                tracing::debug!(error = %err, swaps = swaps.len(), "the server refused a group of swaps; running them alone");
                vec![None; swaps.len()]
            }
            Err(Failed::Other(err)) => {
                for reply in replies {
                    let _ = reply.send(Err(copy_error(&err)));
                }
                continue;
            }
            // Settled off the committer: the group's commits wait, the next groups need not.
            Err(Failed::Unsettled { token, error }) => {
                let store = store.clone();
                tokio::spawn(async move {
                    let err = settle(&store, &token, &error).await;
                    for reply in replies {
                        let _ = reply.send(Err(copy_error(&err)));
                    }
                });
                continue;
            }
        };
        for ((swap, reply), outcome) in swaps.into_iter().zip(replies).zip(outcomes) {
            match outcome {
                Some(outcome) => {
                    let _ = reply.send(Ok(outcome));
                }
                // Not applied, and free to run again: alone, off the committer (it may wait for
                // its row).
                None => {
                    counts.alone.fetch_add(1, Ordering::Relaxed);
                    let store = store.clone();
                    tokio::spawn(async move {
                        let _ = reply.send(swap_alone(&store, &swap).await);
                    });
                }
            }
        }
    }
}

/// The bytes of a swap's document as the group sends it.
fn document_bytes(swap: &MetadataSwap) -> usize {
    swap.metadata_gzip.as_ref().map_or(swap.metadata.len(), |gzip| gzip.len())
}

/// One swap in a transaction of its own (it may wait for its row). Only its `COMMIT` can apply
/// it: a failure before leaves nothing behind.
async fn swap_alone(store: &SqlStore, (one, audit): &Queued) -> Result<SwapOutcome, CatalogError> {
    let begin = match store.backend {
        Backend::Postgres => "BEGIN ISOLATION LEVEL READ COMMITTED",
        Backend::Sqlite => "BEGIN IMMEDIATE",
    };
    let mut tx = store.pool.begin_with(begin).await.map_err(db_error)?;
    let applied = swap::apply(&mut tx, store.backend, (one, audit.as_ref()), store.now_ms()).await.map_err(db_error)?;
    tx.commit().await.map_err(swap_error)?;
    Ok(if applied { SwapOutcome::Applied } else { SwapOutcome::Conflict(0) })
}

/// The committer's own connection, opened on first use.
enum Writer {
    Sqlite { file: PathBuf, connection: Option<Connection> },
    Postgres(PgWriter),
}

/// Each swap's outcome, in the group's order; `None`: not applied, to run again alone.
type Outcomes = Vec<Option<SwapOutcome>>;

impl Writer {
    /// Runs the group's swaps on the committer's own connection. `None` when the connection
    /// does not open (or cannot serve): the group is the pool's to run.
    async fn commit(&mut self, swaps: Arc<Vec<Queued>>, now: i64) -> Option<Result<Outcomes, Failed>> {
        match self {
            Self::Sqlite { file, connection } => commit_sqlite(file, connection, swaps, now)
                .await
                .map(|outcomes| outcomes.map(|outcomes| outcomes.into_iter().map(Some).collect())),
            Self::Postgres(writer) => writer.commit(&swaps, now).await,
        }
    }
}

/// The group in one transaction on the blocking pool.
async fn commit_sqlite(
    file: &Path,
    slot: &mut Option<Connection>,
    swaps: Arc<Vec<Queued>>,
    now: i64,
) -> Option<Result<Vec<SwapOutcome>, Failed>> {
    let (file, connection) = (file.to_owned(), slot.take());
    let ran = tokio::task::spawn_blocking(move || {
        let mut connection = match connection {
            Some(connection) => connection,
            None => open(&file)?,
        };
        let outcomes = run_group(&mut connection, &swaps, now);
        Ok::<_, rusqlite::Error>((connection, outcomes))
    })
    .await;
    match ran {
        Ok(Ok((connection, Ok(outcomes)))) => {
            *slot = Some(connection);
            Some(Ok(outcomes))
        }
        // Dropping the connection rolls back whatever the failure left open.
        Ok(Ok((_, Err(err)))) => Some(Err(Failed::Other(sqlite_error(err)))),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "the group committer's SQLite connection does not open; committing through the pool");
            None
        }
        Err(err) => Some(Err(Failed::Other(CatalogError::Internal(anyhow::anyhow!(
            "committing a group of metadata swaps: {err}"
        ))))),
    }
}

/// The committer's own PostgreSQL connection.
struct PgWriter {
    url: String,
    /// How long a connection may take to open (the pool's acquire timeout).
    timeout: Duration,
    /// The connection, and when it last answered.
    connection: Option<(sqlx::PgConnection, Instant)>,
    /// Not before then: it did not open or serve the last time.
    retry_at: Option<Instant>,
}

impl PgWriter {
    fn new(url: String, timeout: Duration) -> Self {
        Self { url, timeout, connection: None, retry_at: None }
    }

    /// The connection, checked when it idled, opened when there is none; `None` when it cannot
    /// be had now.
    async fn connection(&mut self) -> Option<sqlx::PgConnection> {
        use sqlx::{ConnectOptions as _, Connection as _};
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        if let Some((mut connection, used)) = self.connection.take() {
            if used.elapsed() < POSTGRES_IDLE_CHECK {
                return Some(connection);
            }
            if matches!(tokio::time::timeout(self.timeout, connection.ping()).await, Ok(Ok(()))) {
                return Some(connection);
            }
        }
        // Read committed whatever the server's default: a swap checks its expected location
        // against the row as committed, and cannot fail to serialize. The server cancels a
        // statement that runs too long, so a group's failure is the server's answer.
        let options = self.url.parse::<sqlx::postgres::PgConnectOptions>().map(|options| {
            options.options([
                ("default_transaction_isolation", "read committed"),
                ("statement_timeout", POSTGRES_STATEMENT_TIMEOUT),
            ])
        });
        let opened = match options {
            Ok(options) => match tokio::time::timeout(self.timeout, options.connect()).await {
                Ok(opened) => opened.map_err(|err| err.to_string()),
                Err(_) => Err("timed out".to_owned()),
            },
            Err(err) => Err(err.to_string()),
        };
        match opened {
            Ok(connection) => Some(connection),
            Err(error) => {
                self.retry_at = Some(Instant::now() + POSTGRES_RETRY_AFTER);
                tracing::warn!(%error, "the group committer's PostgreSQL connection does not open; committing through the pool");
                None
            }
        }
    }

    /// The group in one statement: the generated group function (`swap::POSTGRES_GROUP`) fences itself
    /// with a new token, locks the rows of the group that no other transaction holds, by id,
    /// never waiting, and swaps those in the order given ([`lock_order`]); a swap whose row was
    /// held is answered `None`, to run alone.
    async fn commit(&mut self, swaps: &[Queued], now: i64) -> Option<Result<Outcomes, Failed>> {
        let mut connection = self.connection().await?;
        let token = uuid::Uuid::new_v4().to_string();
        let order = lock_order(swaps.iter().map(|(swap, _)| swap));
        let ordered: Vec<(&MetadataSwap, Option<&Entry>)> =
            order.iter().map(|&i| (&swaps[i].0, swaps[i].1.as_ref())).collect();
        let namespaces: Vec<String> = ordered.iter().map(|(swap, _)| swap.namespace.encoded()).collect();
        let statement = POSTGRES_GROUP.call(&token, &ordered, &namespaces, now).fetch_one(&mut connection);
        let answered = match tokio::time::timeout(POSTGRES_GIVE_UP, statement).await {
            Ok(Ok(codes)) => codes,
            // The function is missing (a database not migrated to this version): nothing ran,
            // and the pool's path needs no function.
            Ok(Err(sqlx::Error::Database(db))) if db.code().as_deref() == Some("42883") => {
                self.retry_at = Some(Instant::now() + POSTGRES_RETRY_AFTER);
                tracing::warn!(error = %db, "the group commit function is missing (run `icegate migrate`); committing through the pool");
                return None;
            }
            // The server answered: the connection serves on.
            Ok(Err(err)) if refused_by_postgres(&err) => {
                self.connection = Some((connection, Instant::now()));
                return Some(Err(Failed::Refused(err)));
            }
            // Anything else may still apply: it is settled before anyone reads the rows. The
            // connection is dropped (closed), and not used again for a while.
            failed => {
                let error = match failed {
                    Ok(Err(err)) => err.to_string(),
                    _ => format!("no answer in {POSTGRES_GIVE_UP:?}"),
                };
                self.retry_at = Some(Instant::now() + POSTGRES_RETRY_AFTER);
                return Some(Err(Failed::Unsettled { token, error }));
            }
        };
        self.connection = Some((connection, Instant::now()));
        // The statement committed: should its answer not say what became of each swap, the
        // engine reads the rows back.
        if answered.len() != swaps.len() {
            let what = format!("{} outcomes for {} swaps", answered.len(), swaps.len());
            return Some(Err(Failed::Other(unexpected_answer(what))));
        }
        let mut outcomes = vec![None; swaps.len()];
        for (&index, code) in order.iter().zip(answered) {
            outcomes[index] = match code {
                1 => Some(SwapOutcome::Applied),
                0 => Some(SwapOutcome::Conflict(0)),
                2 => None, // its row was held: not run
                _ => return Some(Err(Failed::Other(unexpected_answer(format!("an outcome {code}"))))),
            };
        }
        Some(Ok(outcomes))
    }
}

/// Settles the outcome of the group fenced by `token`, whose statement failed unanswered
/// (`error`): inserts the token into `swap_fences` through the pool. The insert waits for the
/// group while it runs; inserted, or refused as a duplicate (the group committed), the group's
/// rows are final. The error for the group's swaps: unavailable once settled (the engine reads
/// the rows back), `CommitStateUnknown` when it cannot be.
async fn settle(store: &SqlStore, token: &str, error: &str) -> CatalogError {
    let now = store.now_ms();
    let fenced = tokio::time::timeout(POSTGRES_SETTLE, async {
        let inserted = sqlx::query("INSERT INTO swap_fences (token, created_at) VALUES ($1, $2)")
            .bind(token)
            .bind(now)
            .execute(&store.pool)
            .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(err) if is_violation(&err, sqlx::error::ErrorKind::UniqueViolation) => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await;
    match fenced {
        Ok(Ok(())) => {
            tracing::warn!(%error, "a group commit's statement failed unanswered; its outcome is settled, the rows are read back");
            // The fence stays a day (the location-hold expiry job removes it).
            store_unavailable(&error)
        }
        failed => {
            let why = match failed {
                Ok(Err(err)) => err.to_string(),
                _ => format!("no answer in {POSTGRES_SETTLE:?}"),
            };
            tracing::error!(%error, %why, "a group commit's statement failed unanswered and could not be settled: its outcome is unknown");
            CatalogError::commit_state_unknown("the metadata store's connection failed")
        }
    }
}

/// The group statement committed, but its answer does not say what became of each swap.
fn unexpected_answer(what: String) -> CatalogError {
    CatalogError::Internal(anyhow::anyhow!("the group commit function answered {what}"))
}

/// As the pool's connections are (`SqlStore::open`), and with every commit's WAL synced before
/// it is acknowledged, as sqlx's default `synchronous = FULL` does for theirs.
pub(crate) fn open(file: &Path) -> rusqlite::Result<Connection> {
    // No CREATE: the pool created and migrated the database before any swap.
    let connection =
        Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    connection.busy_timeout(Duration::from_secs(10))?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    Ok(connection)
}

/// [`commit_group`] on the committer's connection.
fn run_group(connection: &mut Connection, swaps: &[Queued], now: i64) -> rusqlite::Result<Vec<SwapOutcome>> {
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut outcomes = Vec::with_capacity(swaps.len());
    for (one, audit) in swaps {
        let applied = swap::apply_sqlite(&tx, (one, audit.as_ref()), now)?;
        outcomes.push(if applied { SwapOutcome::Applied } else { SwapOutcome::Conflict(0) });
    }
    tx.commit()?;
    Ok(outcomes)
}

/// As `db_error` for sqlx's: busy after the timeout is unavailable, the rest internal.
pub(crate) fn sqlite_error(err: rusqlite::Error) -> CatalogError {
    let busy = matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        store_unavailable(&err)
    } else {
        CatalogError::Internal(anyhow::Error::new(err).context("committing a group of metadata swaps failed"))
    }
}

/// Runs every swap's compare-and-swap in one transaction: each applies or conflicts on its own.
/// Rows are taken in [`lock_order`], outcomes answered in the group's order.
async fn commit_group(store: &SqlStore, swaps: &[Queued]) -> Result<Vec<SwapOutcome>, Failed> {
    let begin = match store.backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => POSTGRES_GROUP_BEGIN,
    };
    let mut tx = store.pool.begin_with(begin).await.map_err(|err| Failed::from_sqlx(err, false))?;
    let now = store.now_ms();
    let mut outcomes = vec![SwapOutcome::Applied; swaps.len()];
    for index in lock_order(swaps.iter().map(|(swap, _)| swap)) {
        // Dropping the transaction rolls it back (before the connection is used again).
        let (one, audit) = &swaps[index];
        let applied = swap::apply(&mut tx, store.backend, (one, audit.as_ref()), now)
            .await
            .map_err(|err| Failed::from_sqlx(err, false))?;
        if !applied {
            outcomes[index] = SwapOutcome::Conflict(0);
        }
    }
    tx.commit().await.map_err(|err| Failed::from_sqlx(err, true))?;
    Ok(outcomes)
}

/// The same error for each swap of a failed group (errors are not `Clone`).
fn copy_error(err: &CatalogError) -> CatalogError {
    match err {
        CatalogError::Unavailable(message) => CatalogError::Unavailable(message.clone()),
        CatalogError::CommitStateUnknown(message) => CatalogError::CommitStateUnknown(message.clone()),
        other => CatalogError::Internal(anyhow::anyhow!("committing a group of metadata swaps failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database error with the SQLSTATE `code`, as the server sends it.
    #[derive(Debug)]
    struct Server(&'static str);

    impl std::fmt::Display for Server {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "server error {}", self.0)
        }
    }

    impl std::error::Error for Server {}

    impl sqlx::error::DatabaseError for Server {
        fn message(&self) -> &str {
            "server error"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn database(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Server(code)))
    }

    /// A failure that may still apply is one the server did not answer: a lost connection, or
    /// the session ended (connection exceptions, shutdown); an error the server answered, or a
    /// statement that never left, is settled.
    #[test]
    fn only_unanswered_statements_may_still_apply() {
        let reset = || sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        for err in [reset(), database("08006"), database("57P01"), database("57P02"), sqlx::Error::WorkerCrashed] {
            assert!(crate::may_still_apply(&err), "{err}");
        }
        for err in [database("57014"), database("55P03"), database("23505"), database("5"), sqlx::Error::PoolTimedOut] {
            assert!(!crate::may_still_apply(&err), "{err}");
        }
    }

    /// Only what PostgreSQL answered with an error runs again alone; a failure of the statement
    /// that commits is unknown when it may still apply, and any other failure goes to the
    /// commit engine (SQLite's errors among them: its own group path answers them).
    #[test]
    fn only_groups_the_server_refused_run_again() {
        let reset = || sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        for commits in [false, true] {
            assert!(matches!(Failed::from_sqlx(database("5"), commits), Failed::Other(CatalogError::Unavailable(_))));
            assert!(matches!(Failed::from_sqlx(sqlx::Error::PoolTimedOut, commits), Failed::Other(_)));
        }
        assert!(matches!(Failed::from_sqlx(reset(), true), Failed::Other(CatalogError::CommitStateUnknown(_))));
        // Before its COMMIT a transaction whose connection failed can never apply.
        assert!(matches!(Failed::from_sqlx(reset(), false), Failed::Other(CatalogError::Unavailable(_))));
    }
}
