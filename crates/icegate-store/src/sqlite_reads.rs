//! Point reads of a SQLite database on the calling thread.
//!
//! sqlx runs every SQLite connection on a thread of its own and hands each query to it and the
//! rows back: two thread switches per query, which perf measured as about a third of the
//! cycles of a loadTable that reads its row (the load of a catalog larger than the caches). A
//! point read by primary or unique key takes a few microseconds on a connection used in place,
//! less than the hand-off alone, so the hottest reads (a table's row or head by name) run here
//! on a small pool of plain connections, without leaving the request's thread.
//!
//! These connections only read (`PRAGMA query_only`); WAL mode gives each statement the latest
//! committed state, exactly as a pooled sqlx connection would see it. They never wait: the busy
//! timeout is zero, and any error at all (database missing, busy during a WAL recovery, a schema
//! not migrated yet) makes the caller run the same query through sqlx instead, whose answer or
//! error is then the one that counts. A read that has to fetch its pages from disk blocks the
//! thread for as long as those reads take, like any file read: the database of an embedded
//! catalog is small and its pages are normally in the operating system's cache.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, Params, Row};

/// Turns off SQLite's memory statistics, once per process and before SQLite initialises (later
/// it is refused, harmlessly). They are on by default and put every allocation SQLite makes
/// behind one process-wide mutex: perf showed threads reading at once waiting on it.
pub(crate) fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SQLITE_CONFIG_MEMSTATUS takes one int; sqlite3_config is documented as safe to
        // call before sqlite3_initialize, and returns SQLITE_MISUSE (ignored) after it.
        let _ = unsafe { rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0) };
    });
}

/// Page cache of each reading connection (SQLite's default is 2 MiB). Enough for the interior
/// pages and the name index of a 100,000-table catalog (about 6 MB), so a load spread over such
/// a catalog reads one page, its row's, from outside the process: 8% more loads per second
/// than with the default, measured.
const PAGE_CACHE_KIB: i64 = 8 * 1024;

/// Idle connections kept for reuse. Reads run on the runtime's worker threads, so about as
/// many connections are in use at once as there are cores; more are closed after use.
const MAX_IDLE: usize = 16;

pub(crate) struct SqliteReads {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// Reads answered here, and reads handed back to sqlx.
    done: AtomicU64,
    handed_back: AtomicU64,
}

impl SqliteReads {
    /// For the SQLite database file at `path` (see `Database::sqlite_file`: in-memory
    /// databases cannot be opened by other connections).
    pub(crate) fn new(path: &Path) -> Self {
        Self { path: path.to_owned(), idle: Mutex::default(), done: AtomicU64::new(0), handed_back: AtomicU64::new(0) }
    }

    /// Runs `sql` for at most one row. `None`: the read could not be done here, ask sqlx.
    pub(crate) fn query_row<T>(
        &self,
        sql: &str,
        params: impl Params,
        map: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Option<Option<T>> {
        let connection = match self.take() {
            Ok(connection) => connection,
            Err(err) => {
                tracing::debug!(error = %err, "in-place SQLite read unavailable; reading through the pool");
                self.handed_back.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let result = (|| {
            let mut statement = connection.prepare_cached(sql)?;
            let mut rows = statement.query(params)?;
            rows.next()?.map(map).transpose()
        })();
        match result {
            Ok(found) => {
                self.give_back(connection);
                self.done.fetch_add(1, Ordering::Relaxed);
                Some(found)
            }
            Err(err) => {
                // The connection is dropped: a fresh one starts from a clean state.
                tracing::debug!(error = %err, "in-place SQLite read failed; reading through the pool");
                self.handed_back.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Reads answered in place, and reads handed back to sqlx, so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.done.load(Ordering::Relaxed), self.handed_back.load(Ordering::Relaxed))
    }

    fn take(&self) -> rusqlite::Result<Connection> {
        if let Some(connection) = self.idle().pop() {
            return Ok(connection);
        }
        // No CREATE: the database exists once the server has migrated it, and a missing file
        // is the pool's to report. Read-write plus query_only rather than read-only, which in
        // WAL mode would depend on the -shm file's permissions.
        let connection = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        connection.busy_timeout(Duration::ZERO)?;
        connection.pragma_update(None, "query_only", true)?;
        connection.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)?;
        Ok(connection)
    }

    fn give_back(&self, connection: Connection) {
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(connection);
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // Nothing a panic could leave half-done: the vector only holds idle connections.
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rows_and_reuses_its_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let writer = Connection::open(&path).unwrap();
        writer.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)").unwrap();
        writer.execute("INSERT INTO t VALUES ('a', 'one')", []).unwrap();
        let reads = SqliteReads::new(&path);
        let get = |key: &str| reads.query_row("SELECT v FROM t WHERE k = $1", [key], |row| row.get::<_, String>(0));
        assert_eq!(get("a"), Some(Some("one".to_owned())));
        assert_eq!(get("b"), Some(None));
        // A write committed on another connection is seen by the next read.
        writer.execute("UPDATE t SET v = 'two' WHERE k = 'a'", []).unwrap();
        assert_eq!(get("a"), Some(Some("two".to_owned())));
        assert_eq!(reads.idle().len(), 1);
        assert_eq!(reads.counts(), (3, 0));
        // These connections cannot write.
        let write = reads.query_row("DELETE FROM t RETURNING k", [], |row| row.get::<_, String>(0));
        assert_eq!(write, None);
        assert_eq!(get("a"), Some(Some("two".to_owned())));
    }

    #[test]
    fn anything_it_cannot_do_is_left_to_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let reads = SqliteReads::new(&dir.path().join("missing.db"));
        assert_eq!(reads.query_row("SELECT 1", [], |row| row.get::<_, i64>(0)), None);
        assert!(!dir.path().join("missing.db").exists(), "a read must not create the database");
        assert_eq!(reads.counts(), (0, 1));
    }
}
