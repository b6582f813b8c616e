//! One way to write: every store method that changes the catalog takes the change's
//! `WriteContext` and commits through `commit_write` (which records the request's idempotency
//! key with the change, and is where its audit records and the tasks it queues will be written).
//! This reads the store's own source: a mutating method that writes without a `WriteContext`, or
//! a transaction committed anywhere else, fails it and is named.

use std::path::Path;

/// Methods that write without a `WriteContext`, and why.
const NOT_CHANGES: &[(&str, &str)] = &[
    ("finalize_idempotency_key", "the key's own answer, after the change it belongs to"),
    ("delete_idempotency_key", "the key's own lifecycle"),
    ("delete_idempotency_keys_before", "the key's own lifecycle (the expiry job)"),
    (
        "append_on",
        "the audit chain's append, inside the transaction of the change it records (its callers hold the WriteContext)",
    ),
    ("expire_location_holds", "expired holds' own lifecycle (the expiry job); no live hold is touched"),
    (
        "fence",
        "writes the source catalog's database (sources/sql.rs: a migration's fence), not icegate's; the step is \
         recorded through the migration's state (step_migration_table, with a WriteContext)",
    ),
    ("unfence", "writes the source catalog's database (undoing a migration's fence), as fence"),
    ("retire", "writes the source catalog's database (removing a migrated table's entry there), as fence"),
    ("enqueue", "the task queue's bookkeeping (a change's own tasks will go through commit_write)"),
    ("claim", "the task queue's bookkeeping"),
    ("heartbeat", "the task queue's bookkeeping"),
    ("finish", "the task queue's bookkeeping"),
    ("cancel", "the task queue's bookkeeping"),
    ("remove_ended_tasks", "the task queue's bookkeeping (the expiry job); no queued or running task is touched"),
    (
        "start_purge",
        "a deleted entry's purge begins (it can no longer be undropped): the purge task's bookkeeping; the \
         drop that queued it was recorded, and so is the purge's end (end_purge, with a WriteContext)",
    ),
    (
        "expire_deleted_entries",
        "deleted entries whose hold ended without a purge are forgotten (the lifecycle sweep): their drop was \
         recorded with its end of hold; no file is touched",
    ),
    (
        "forget_quarantine_of_gone_tables",
        "the orphan quarantine of tables the catalog no longer has (the maintenance sweep): bookkeeping of files \
         never deleted, whose quarantine was recorded",
    ),
    (
        "store_grant_use",
        "when grants were last used: bookkeeping of decisions, written in batches, no change of the catalog",
    ),
];

/// Files that commit transactions themselves, and why.
const OWN_COMMITS: &[(&str, &str)] = &[
    ("lib.rs", "commit_write itself"),
    (
        "audit.rs",
        "records of requests that are not changes (reads, vends, refusals), appended in groups in transactions \
         of their own: they change nothing but the trail",
    ),
    ("tasks.rs", "the task queue's bookkeeping: a run's end and the rerun asked for while it ran, in one transaction"),
    (
        "tabulars/deleted.rs",
        "the bookkeeping of deleted entries without a WriteContext (a purge's start, the sweep's expiry; see \
         NOT_CHANGES); undrop and a purge's end go through commit_write",
    ),
    (
        "group_commit.rs",
        "the group committer's transactions (and a swap run again alone), for swaps that carry no idempotency \
         key; each runs the swap's statements (`tabulars/swap.rs`), where a row every swap writes is added",
    ),
];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
            let name = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            out.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The `async fn`s of a file: name, signature and body (up to the next `fn` at that indent).
fn functions(text: &str) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    let starts: Vec<usize> = text
        .match_indices("async fn ")
        .map(|(i, _)| i)
        .filter(|i| {
            text[..*i].rsplit('\n').next().is_some_and(|line| {
                line.trim().is_empty()
                    || line.trim() == "pub(crate)"
                    || line.trim() == "pub(super)"
                    || line.trim() == "pub"
            })
        })
        .collect();
    for (n, start) in starts.iter().enumerate() {
        // The function ends at the closing brace at its own indentation.
        let line_start = text[..*start].rfind('\n').map_or(0, |i| i + 1);
        let indent = &text[line_start..*start];
        let indent = &indent[..indent.len() - indent.trim_start().len()];
        let next = starts.get(n + 1).copied().unwrap_or(text.len());
        let close = format!("\n{indent}}}\n");
        let end = text[*start..].find(&close).map_or(next, |i| *start + i + close.len());
        let item = &text[*start..end];
        let name = item["async fn ".len()..].split(['(', '<']).next().unwrap().to_owned();
        let (signature, body) = item.split_once(" {\n").unwrap_or((item, ""));
        found.push((name, signature.to_owned(), body.to_owned()));
    }
    found
}

#[test]
fn every_change_is_written_through_commit_write() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 10, "read the store's sources");
    let mut offenders = Vec::new();
    for (file, text) in &files {
        if file == "testing.rs" || file == "faults.rs" {
            continue;
        }
        let own_commits = OWN_COMMITS.iter().any(|(f, _)| f == file);
        if text.contains(".commit()") && !own_commits {
            offenders.push(format!("{file}: commits a transaction itself; use commit_write"));
        }
        if own_commits {
            continue;
        }
        for (name, signature, body) in functions(text) {
            let writes = ["INSERT INTO", "UPDATE ", "DELETE FROM"].iter().any(|sql| body.contains(sql));
            let called_with_a_write = signature.contains("WriteContext") || signature.contains("WriteTx");
            let exempt = NOT_CHANGES.iter().any(|(n, _)| *n == name);
            if writes && !called_with_a_write && !exempt {
                offenders.push(format!("{file}: {name} writes without a WriteContext"));
            }
            let on_the_pool = body.contains(".execute(&self.pool)") || body.contains(".execute(&store.pool)");
            if writes && on_the_pool && !exempt {
                offenders.push(format!("{file}: {name} may write on the pool, outside a write transaction"));
            }
        }
    }
    assert!(offenders.is_empty(), "outside the one write path:\n{}", offenders.join("\n"));
}
