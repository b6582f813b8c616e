//! The audit trail on both stores: every change is recorded in its own transaction, in one
//! gap-free hash chain; a record that cannot be written fails its change; the trail refuses
//! updates and deletes; and `verify_audit` names the first link that tampering broke.

use std::sync::Arc;

use icegate_catalog::actors::{Decision, Outcome, Privilege, Target};
use icegate_catalog::audit::{Answered, AuditEvent, AuditFilter, AuditStore, RequestRecord};
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::storage::AccessLevel;
use icegate_catalog::store::prelude::*;
use icegate_catalog::{NamespaceIdent, Properties, RequestContext, StorageRoot, WarehouseName};
use icegate_store::testing::TestDatabase;
use sqlx::{AssertSqlSafe, Row};

/// A connection of the test's own to its database, beside the store's pool (an attacker with
/// the database's credentials, or an auditor).
async fn raw(db: &TestDatabase) -> sqlx::AnyPool {
    sqlx::any::install_default_drivers();
    sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&db.url).await.unwrap()
}

async fn run(pool: &sqlx::AnyPool, sql: &str) -> Result<u64, sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(pool).await.map(|done| done.rows_affected())
}

fn is_postgres(db: &TestDatabase) -> bool {
    db.url.starts_with("postgres")
}

/// A warehouse made by the system, and `n` namespaces made by principal `p` (with an operation).
async fn changes(db: &TestDatabase, n: usize) -> icegate_catalog::WarehouseId {
    let store = &db.store;
    let system = RequestContext::system("set-up", None).write();
    let warehouse = store
        .create_warehouse(
            &system,
            &WarehouseName::parse("w").unwrap(),
            &StorageRoot::parse("file:///tmp/w").unwrap(),
            &icegate_catalog::storage::StorageProfile::File,
        )
        .await
        .unwrap();
    for i in 0..n {
        let mut write = WriteContext::by_principal("p", None);
        write.operation = Some("createNamespace".into());
        let ns = NamespaceIdent::from_levels([format!("n{i}")]).unwrap();
        store.create_namespace(&write, &warehouse.id, &ns, &Properties::new()).await.unwrap();
    }
    warehouse.id
}

async fn each_change_is_one_record_in_one_chain(db: TestDatabase) {
    changes(&db, 3).await;
    let check = db.store.verify_audit().await.unwrap();
    assert_eq!((check.records, check.broken), (4, None));
    let pool = raw(&db).await;
    let rows = sqlx::query("SELECT seq, operation, principal_id, actor, record FROM audit_log ORDER BY seq")
        .fetch_all(&pool)
        .await
        .unwrap();
    let seqs: Vec<i64> = rows.iter().map(|r| r.get("seq")).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(rows[0].get::<String, _>("actor"), "system:set-up");
    assert_eq!(rows[0].get::<Option<String>, _>("principal_id"), None);
    let record: serde_json::Value = serde_json::from_str(&rows[1].get::<String, _>("record")).unwrap();
    assert_eq!(record["actor"]["kind"], "principal");
    assert_eq!(record["actor"]["id"], "p");
    assert_eq!(record["operation"], "createNamespace");
    assert_eq!(rows[1].get::<Option<String>, _>("operation").as_deref(), Some("createNamespace"));
    // The tests' own set-up records nothing.
    let ns = NamespaceIdent::from_levels(["quiet"]).unwrap();
    let wh = db.store.list_warehouses(None).await.unwrap().remove(0).id;
    db.store.create_namespace(&WriteContext::NONE, &wh, &ns, &Properties::new()).await.unwrap();
    assert_eq!(db.store.verify_audit().await.unwrap().records, 4);
}

/// A change whose record cannot be written is not applied.
async fn a_change_without_its_record_is_not_applied(db: TestDatabase) {
    let wh = changes(&db, 1).await;
    let pool = raw(&db).await;
    run(&pool, "DROP TABLE audit_head").await.unwrap();
    let mut write = WriteContext::by_principal("p", None);
    write.operation = Some("createNamespace".into());
    let ns = NamespaceIdent::from_levels(["lost"]).unwrap();
    assert!(db.store.create_namespace(&write, &wh, &ns, &Properties::new()).await.is_err());
    assert!(!db.store.namespace_exists(&wh, &ns).await.unwrap(), "the change went with its record");
}

/// 32 writers at once: one chain, no gap, no fork.
async fn concurrent_changes_make_one_gap_free_chain(db: TestDatabase) {
    let wh = changes(&db, 0).await;
    let store = Arc::new(db.store.clone());
    let mut writers = Vec::new();
    for i in 0..32 {
        let (store, wh) = (store.clone(), wh.clone());
        writers.push(tokio::spawn(async move {
            let mut write = WriteContext::by_principal(&format!("p{i}"), None);
            write.operation = Some("createNamespace".into());
            let ns = NamespaceIdent::from_levels([format!("c{i}")]).unwrap();
            store.create_namespace(&write, &wh, &ns, &Properties::new()).await.unwrap();
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let check = db.store.verify_audit().await.unwrap();
    assert_eq!((check.records, check.broken), (33, None));
}

/// The trail refuses changes through the database's normal paths; with its guard removed (an
/// attacker holding the database's owner), every kind of tampering is found, at its record.
async fn tampering_is_refused_and_found(db: TestDatabase) {
    changes(&db, 4).await;
    let pool = raw(&db).await;
    // Append-only: the rows are still there, as they were.
    assert!(run(&pool, "UPDATE audit_log SET actor = 'someone else' WHERE seq = 2").await.is_err());
    assert!(run(&pool, "DELETE FROM audit_log WHERE seq = 2").await.is_err());
    assert_eq!(db.store.verify_audit().await.unwrap().broken, None);
    if is_postgres(&db) {
        run(&pool, "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only").await.unwrap();
        run(&pool, "ALTER TABLE audit_log DISABLE TRIGGER audit_log_cut_only").await.unwrap();
    } else {
        run(&pool, "DROP TRIGGER audit_log_no_update").await.unwrap();
        run(&pool, "DROP TRIGGER audit_log_no_delete").await.unwrap();
    }
    let broken_at = || async { db.store.verify_audit().await.unwrap().broken.map(|(seq, _)| seq) };
    let row = |seq: i64| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query("SELECT record, hash, principal_id FROM audit_log WHERE seq = $1")
                .bind(seq)
                .fetch_one(&pool)
                .await
                .unwrap();
            (row.get::<String, _>("record"), row.get::<String, _>("hash"), row.get::<Option<String>, _>("principal_id"))
        }
    };
    let set = |seq: i64, record: String, hash: String| {
        let pool = pool.clone();
        async move {
            sqlx::query("UPDATE audit_log SET record = $1, hash = $2 WHERE seq = $3")
                .bind(record)
                .bind(hash)
                .bind(seq)
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let (record3, hash3, _) = row(3).await;
    // Edited: the record's text changed.
    set(3, record3.replace("\"p\"", "\"q\""), hash3.clone()).await;
    assert_eq!(broken_at().await, Some(3));
    set(3, record3.clone(), hash3.clone()).await;
    assert_eq!(broken_at().await, None);
    // Edited with its own hash recomputed: the next record no longer links to it.
    let (_, hash2, _) = row(2).await;
    let forged = record3.replace("\"idempotency-key\":null", "\"idempotency-key\":\"k\"");
    assert_ne!(forged, record3);
    set(3, forged.clone(), icegate_store::audit::link(&hash2, &forged)).await;
    assert_eq!(broken_at().await, Some(4));
    set(3, record3.clone(), hash3.clone()).await;
    // A searchable column that says something its record does not.
    run(&pool, "UPDATE audit_log SET principal_id = 'q' WHERE seq = 3").await.unwrap();
    assert_eq!(broken_at().await, Some(3));
    run(&pool, "UPDATE audit_log SET principal_id = 'p' WHERE seq = 3").await.unwrap();
    assert_eq!(broken_at().await, None);
    let actor: String = sqlx::query_scalar("SELECT actor FROM audit_log WHERE seq = 3").fetch_one(&pool).await.unwrap();
    run(&pool, "UPDATE audit_log SET actor = 'admin' WHERE seq = 3").await.unwrap();
    assert_eq!(broken_at().await, Some(3), "the actor column alone");
    sqlx::query("UPDATE audit_log SET actor = $1 WHERE seq = 3").bind(actor).execute(&pool).await.unwrap();
    assert_eq!(broken_at().await, None);
    // No row can be numbered outside the chain.
    assert!(
        run(&pool, "INSERT INTO audit_log (seq, at_ms, actor, record, hash) VALUES (0, 0, 'admin', '{}', 'x')")
            .await
            .is_err()
    );
    // Re-ordered: records 2 and 3 swapped.
    let (record2, hash2, _) = row(2).await;
    set(2, record3.clone(), hash3.clone()).await;
    set(3, record2.clone(), hash2.clone()).await;
    assert_eq!(broken_at().await, Some(2));
    set(2, record2.clone(), hash2.clone()).await;
    set(3, record3.clone(), hash3.clone()).await;
    assert_eq!(broken_at().await, None);
    // Removed from the end (the last record): the head still names it.
    let (record4, hash4, _) = row(4).await;
    run(&pool, "DELETE FROM audit_log WHERE seq = 5").await.unwrap();
    assert_eq!(broken_at().await, Some(5), "the head names record 5, the chain ends at 4");
    // Another record 5 put in its place, with a valid link: not the one the head names.
    let forged = record4.replace("createNamespace", "dropNamespace");
    sqlx::query(
        "INSERT INTO audit_log (seq, at_ms, operation, principal_id, actor, record, hash) \
         SELECT 5, at_ms, 'dropNamespace', principal_id, actor, $1, $2 FROM audit_log WHERE seq = 4",
    )
    .bind(&forged)
    .bind(icegate_store::audit::link(&hash4, &forged))
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(broken_at().await, Some(5));
    // Removed from the middle.
    run(&pool, "DELETE FROM audit_log WHERE seq = 3").await.unwrap();
    assert_eq!(broken_at().await, Some(3));
}

/// Single-table commits go through the group committer (SQLite: its own connection; PostgreSQL:
/// the generated function) and append their records in the group's transaction; a swap that
/// conflicts records nothing.
async fn grouped_commits_are_recorded_in_the_chain(db: TestDatabase) {
    let wh = changes(&db, 1).await;
    let ns = NamespaceIdent::from_levels(["n0"]).unwrap();
    let store = Arc::new(db.store.clone());
    let mut writers = Vec::new();
    for t in 0..8 {
        let name = format!("t{t}");
        let location = format!("file:///tmp/w/n0/{name}");
        let first = format!("{location}/metadata/0.json");
        let id = store
            .create_tabular(
                &RequestContext::system("set-up", None).write(),
                &icegate_catalog::store::NewTabular {
                    warehouse_id: &wh,
                    namespace: &ns,
                    name: &name,
                    kind: icegate_catalog::store::TabularKind::Table,
                    location: &location,
                    extra_locations: &[],
                    metadata_location: &first,
                    metadata: "{}",
                    metadata_gzip: None,
                },
            )
            .await
            .unwrap();
        let (store, wh, ns) = (store.clone(), wh.clone(), ns.clone());
        writers.push(tokio::spawn(async move {
            let mut expected = first;
            for v in 1..=5 {
                let next = format!("{location}/metadata/{v}.json");
                let swap = icegate_catalog::store::MetadataSwap {
                    id: id.clone(),
                    warehouse_id: wh.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                    expected_metadata_location: expected.clone(),
                    metadata_location: next.clone(),
                    metadata: "{}".into(),
                    metadata_gzip: None,
                    location: location.clone(),
                    extra_locations: Vec::new(),
                    locations_changed: false,
                };
                let mut write = WriteContext::by_principal("p", None);
                write.operation = Some("updateTable".into());
                let outcome = store.swap_metadata(&write, std::slice::from_ref(&swap)).await.unwrap();
                assert_eq!(outcome, icegate_catalog::store::SwapOutcome::Applied);
                // The same swap again: it conflicts, and records nothing.
                let again = store.swap_metadata(&write, &[swap]).await.unwrap();
                assert_eq!(again, icegate_catalog::store::SwapOutcome::Conflict(0));
                expected = next;
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let check = db.store.verify_audit().await.unwrap();
    // The warehouse, the namespace, eight creates and forty applied commits.
    assert_eq!((check.records, check.broken), (2 + 8 + 40, None));
    let (own, _) = db.store.group_commits().unwrap();
    assert!(own > 0, "the commits went through the committer's own connection");
    let pool = raw(&db).await;
    let rows =
        sqlx::query("SELECT record FROM audit_log WHERE operation = 'updateTable'").fetch_all(&pool).await.unwrap();
    assert_eq!(rows.len(), 40);
    for row in rows {
        let record: serde_json::Value = serde_json::from_str(&row.get::<String, _>("record")).unwrap();
        assert!(record["change"]["metadata-location"].as_str().unwrap().ends_with(".json"), "{record}");
        assert_eq!(record["actor"]["id"], "p");
    }
}

/// A request about table `ns.name` of `wh` by principal `who`: a decision, maybe a vend.
fn request(
    wh: &icegate_catalog::WarehouseId,
    (ns, name): (&str, &str),
    who: &str,
    operation: &str,
    (status, answered): (u16, Answered),
) -> RequestRecord {
    let mut write = WriteContext::by_principal(who, None);
    write.operation = Some(operation.into());
    write.request_id = Some(format!("req-{who}-{name}").into());
    let outcome = match answered {
        Answered::Refused => Outcome::Forbidden,
        _ => Outcome::Granted { by: Privilege::Read },
    };
    write.decisions = vec![Decision {
        target: Target::Tabular {
            warehouse_id: wh.clone(),
            namespace: NamespaceIdent::from_levels(ns.split('.')).unwrap(),
            name: name.into(),
            kind: icegate_catalog::actors::TabularKind::Table,
        },
        privilege: Privilege::Read,
        outcome,
        grant: None,
    }];
    if operation == "loadCredentials" {
        write.events = vec![AuditEvent::Vended {
            tabular_id: Some(icegate_catalog::TabularId::new("t-1")),
            prefix: format!("s3://lake/{ns}/{name}"),
            level: AccessLevel::Read,
            expires_at_ms: Some(1_000),
            access_key_id: Some("ASIAEXAMPLE".into()),
            refresh: true,
        }];
    }
    RequestRecord { write, authenticated: true, status: Some(status), answered }
}

/// Requests that are not changes (reads, vends, refusals), recorded by many callers at once
/// between changes: appended in groups, in one gap-free chain with the changes, each with its
/// searchable columns, found again by every filter.
async fn requests_are_recorded_in_groups_and_found_by_their_filters(db: TestDatabase) {
    let wh = changes(&db, 1).await;
    let store = Arc::new(db.store.clone());
    let mut callers = Vec::new();
    for i in 0..48 {
        let (store, wh) = (store.clone(), wh.clone());
        callers.push(tokio::spawn(async move {
            let (ns, operation, ended) = match i % 4 {
                0 => ("n1", "loadTable", (200, Answered::Allowed)),
                1 => ("n10", "loadTable", (200, Answered::Allowed)),
                2 => ("n1.deep", "loadCredentials", (200, Answered::Allowed)),
                _ => ("n1", "loadTable", (403, Answered::Refused)),
            };
            let name = format!("t{}", i % 3);
            store.record(request(&wh, (ns, &name), &format!("p{}", i % 2), operation, ended)).await.unwrap();
            if i % 8 == 0 {
                let mut write = WriteContext::by_principal("p", None);
                write.operation = Some("createNamespace".into());
                let ns = NamespaceIdent::from_levels([format!("c{i}")]).unwrap();
                store.create_namespace(&write, &wh, &ns, &Properties::new()).await.unwrap();
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let check = db.store.verify_audit().await.unwrap();
    // The warehouse, one namespace, 48 requests and 6 namespaces made among them.
    assert_eq!((check.records, check.broken), (2 + 48 + 6, None));
    let found = |filter: AuditFilter| {
        let store = store.clone();
        async move { store.audit_records(&filter, 1000).await.unwrap() }
    };
    let all = found(AuditFilter::default()).await;
    assert_eq!(all.len(), 56);
    assert!(all.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    let refused = found(AuditFilter { outcome: Some("refused".into()), ..Default::default() }).await;
    assert_eq!(refused.len(), 12);
    for record in &refused {
        let record: serde_json::Value = serde_json::from_str(&record.record).unwrap();
        assert_eq!(record["status"], 403);
        assert_eq!(record["decisions"][0]["outcome"], "forbidden");
    }
    // The namespace `n1` and what is inside it (`n1.deep`), not `n10`.
    let in_n1 = found(AuditFilter { namespace: Some(vec!["n1".into()]), ..Default::default() }).await;
    assert_eq!(in_n1.len(), 36);
    let in_deep = found(AuditFilter { namespace: Some(vec!["n1".into(), "deep".into()]), ..Default::default() }).await;
    assert_eq!(in_deep.len(), 12);
    let one_table =
        found(AuditFilter { namespace: Some(vec!["n10".into()]), name: Some("t0".into()), ..Default::default() }).await;
    assert!(!one_table.is_empty());
    for record in &one_table {
        let record: serde_json::Value = serde_json::from_str(&record.record).unwrap();
        assert_eq!(record["subject"]["namespace"], serde_json::json!(["n10"]));
        assert_eq!(record["subject"]["name"], "t0");
        assert_eq!(record["subject"]["kind"], "table");
    }
    let named_t2 = found(AuditFilter { name: Some("t2".into()), ..Default::default() }).await;
    assert_eq!(named_t2.len(), 16);
    let vends = found(AuditFilter { operation: Some("loadCredentials".into()), ..Default::default() }).await;
    assert_eq!(vends.len(), 12);
    for record in &vends {
        let record: serde_json::Value = serde_json::from_str(&record.record).unwrap();
        let event = &record["events"][0];
        assert_eq!(event["kind"], "credentials-refreshed");
        assert_eq!(event["access-key-id"], "ASIAEXAMPLE");
        assert_eq!(event["access"], "read");
        assert_eq!(record["subject"]["warehouse-id"], wh.as_str());
    }
    let by_p1 = found(AuditFilter { actor: Some("p1".into()), ..Default::default() }).await;
    assert_eq!(by_p1.len(), 24);
    let other_warehouse = found(AuditFilter { warehouse_id: Some("elsewhere".into()), ..Default::default() }).await;
    assert!(other_warehouse.is_empty());
    // Pages: after a sequence number, up to another.
    let page = found(AuditFilter { after_seq: Some(10), until_seq: Some(20), ..Default::default() }).await;
    assert_eq!(page.iter().map(|r| r.seq).collect::<Vec<_>>(), (11..=20).collect::<Vec<_>>());
    let times = found(AuditFilter { since_ms: Some(i64::MAX - 1), ..Default::default() }).await;
    assert!(times.is_empty());
    // A searchable column changed behind the trail's back is found.
    let pool = raw(&db).await;
    if is_postgres(&db) {
        run(&pool, "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only").await.unwrap();
    } else {
        run(&pool, "DROP TRIGGER audit_log_no_update").await.unwrap();
    }
    let seq = refused[0].seq;
    sqlx::query("UPDATE audit_log SET outcome = 'allowed' WHERE seq = $1").bind(seq).execute(&pool).await.unwrap();
    assert_eq!(db.store.verify_audit().await.unwrap().broken.map(|(at, _)| at), Some(seq));
    sqlx::query("UPDATE audit_log SET outcome = 'refused', resource = 'n9' WHERE seq = $1")
        .bind(seq)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(db.store.verify_audit().await.unwrap().broken.map(|(at, _)| at), Some(seq));
}

/// A request whose record cannot be written fails (the caller answers 503 and hands nothing
/// out), and nothing of it is in the trail.
async fn a_request_without_its_record_fails(db: TestDatabase) {
    let wh = changes(&db, 0).await;
    let pool = raw(&db).await;
    run(&pool, "DROP TABLE audit_head").await.unwrap();
    let err =
        db.store.record(request(&wh, ("n1", "t"), "p", "loadCredentials", (200, Answered::Allowed))).await.unwrap_err();
    assert!(matches!(err, icegate_catalog::CatalogError::Unavailable(_)), "{err:?}");
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_log").fetch_one(&pool).await.unwrap();
    assert_eq!(count, 1, "the warehouse's record alone");
}

/// Two replicas on one database (two stores, each with its own pool, recorder and group
/// committer), each recording requests and making changes and grouped commits at once: one
/// chain, no gap, no fork, every record there once.
async fn replicas_share_one_chain(db: TestDatabase) {
    let wh = changes(&db, 1).await;
    let other = icegate_store::SqlStore::connect_lazy(&icegate_store::StoreOptions {
        url: db.url.clone(),
        max_connections: 8,
        acquire_timeout: std::time::Duration::from_secs(10),
    })
    .unwrap();
    let replicas = [Arc::new(db.store.clone()), Arc::new(other)];
    let mut callers = Vec::new();
    for i in 0..40 {
        let (store, wh) = (replicas[i % 2].clone(), wh.clone());
        callers.push(tokio::spawn(async move {
            let name = format!("t{i}");
            store
                .record(request(&wh, ("n0", &name), &format!("p{i}"), "loadTable", (200, Answered::Allowed)))
                .await
                .unwrap();
            if i % 4 == 0 {
                let mut write = WriteContext::by_principal("p", None);
                write.operation = Some("createNamespace".into());
                let ns = NamespaceIdent::from_levels([format!("r{i}")]).unwrap();
                store.create_namespace(&write, &wh, &ns, &Properties::new()).await.unwrap();
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let check = db.store.verify_audit().await.unwrap();
    // The warehouse, one namespace, 40 requests and 10 namespaces.
    assert_eq!((check.records, check.broken), (2 + 40 + 10, None));
    let filter = AuditFilter { operation: Some("loadTable".into()), ..Default::default() };
    let loads = db.store.audit_records(&filter, 100).await.unwrap();
    let mut names: Vec<String> = loads
        .iter()
        .map(|r| {
            let record: serde_json::Value = serde_json::from_str(&r.record).unwrap();
            record["subject"]["name"].as_str().unwrap().to_owned()
        })
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    expected.sort();
    assert_eq!(names, expected, "every request recorded once");
}

/// Retention's cut: the base moves to a record and what is at or below it goes, in one
/// transaction with the cut's own record; verify walks from the base; nothing after the base can
/// be removed, and the base never moves back or past the head.
async fn a_retention_cut_keeps_the_chain_verifiable(db: TestDatabase) {
    changes(&db, 5).await;
    let system = RequestContext::system("audit-checkpoint", Some("t1")).write();
    let ends = db.store.audit_ends().await.unwrap();
    assert_eq!((ends.base.0, ends.head.0), (0, 6));
    db.store.cut_audit(&system, 4).await.unwrap();
    let ends = db.store.audit_ends().await.unwrap();
    assert_eq!(ends.base.0, 4);
    assert_eq!(ends.head.0, 7, "the cut is recorded");
    // Cutting again at or below the base changes nothing (a resumed task).
    db.store.cut_audit(&system, 3).await.unwrap();
    assert_eq!(db.store.audit_ends().await.unwrap().head.0, 7);
    let check = db.store.verify_audit().await.unwrap();
    assert_eq!((check.records, check.broken), (3, None));
    let left = db.store.audit_records(&AuditFilter::default(), 100).await.unwrap();
    assert_eq!(left.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 6, 7]);
    let cut: serde_json::Value = serde_json::from_str(&left[2].record).unwrap();
    assert_eq!(cut["change"]["audit-cut"]["removed"], 4);
    assert_eq!(cut["actor"]["job"], "audit-checkpoint");
    // Only the cut removes records; the base moves only forward, up to the head.
    let pool = raw(&db).await;
    assert!(run(&pool, "DELETE FROM audit_log WHERE seq = 5").await.is_err());
    assert!(run(&pool, "UPDATE audit_base SET seq = 2").await.is_err());
    assert!(run(&pool, "UPDATE audit_base SET seq = 99").await.is_err());
    assert!(run(&pool, "DELETE FROM audit_base").await.is_err());
    assert!(run(&pool, "UPDATE audit_base SET seq = 6, hash = 'forged'").await.is_err());
    assert!(run(&pool, "UPDATE audit_base SET hash = 'forged'").await.is_err());
    assert!(run(&pool, "UPDATE audit_head SET seq = 1").await.is_err());
    assert!(run(&pool, "DELETE FROM audit_head").await.is_err());
    if is_postgres(&db) {
        assert!(run(&pool, "TRUNCATE audit_base").await.is_err());
        assert!(run(&pool, "TRUNCATE audit_head").await.is_err());
    }
    assert_eq!(db.store.verify_audit().await.unwrap().broken, None);
    // A cut at a record not in the store is refused.
    assert!(db.store.cut_audit(&system, 50).await.is_err());
}

icegate_store::on_both_backends!(
    a_retention_cut_keeps_the_chain_verifiable,
    replicas_share_one_chain,
    requests_are_recorded_in_groups_and_found_by_their_filters,
    a_request_without_its_record_fails,
    each_change_is_one_record_in_one_chain,
    a_change_without_its_record_is_not_applied,
    concurrent_changes_make_one_gap_free_chain,
    tampering_is_refused_and_found,
    grouped_commits_are_recorded_in_the_chain,
);
