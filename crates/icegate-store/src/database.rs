//! The database a URL names, parsed once, and the ownership of a SQLite file.
//!
//! Everything that needs to know which database a URL means (the backend, the SQLite file,
//! whether it is in memory) asks [`Database`], which reads the URL exactly as sqlx will open it.
//! [`Owner`] is the lock by which one `icegate serve` owns a SQLite file: the store keeps table
//! heads in memory only while it holds one (another writer's commits would go unseen).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// A database URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Database {
    url: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Postgres,
    /// A SQLite database file (other connections, and other processes, can open it).
    SqliteFile(PathBuf),
    /// An in-memory SQLite database: only this pool's connections see it.
    SqliteMemory,
}

impl Database {
    /// `postgres://...`, `postgresql://...` or `sqlite:...` (a file, or `:memory:` /
    /// `mode=memory`).
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let kind = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Kind::Postgres
        } else if url.starts_with("sqlite:") {
            // As sqlx reads it, so the file named here is the file the pool opens.
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(url).context("invalid SQLite URL")?;
            let path = options.get_filename();
            let name = path.to_string_lossy();
            if url.contains("mode=memory") || name.is_empty() || name == ":memory:" || name.starts_with("file:") {
                Kind::SqliteMemory
            } else {
                Kind::SqliteFile(path.to_owned())
            }
        } else {
            anyhow::bail!("unsupported database URL scheme (expected postgres:// or sqlite://)")
        };
        Ok(Self { url: url.to_owned(), kind })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database as an operator names it (no password): `PostgreSQL at host:port, database
    /// `x` as user `y``, or the SQLite file.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Postgres => match sqlx::postgres::PgConnectOptions::from_str(&self.url) {
                Ok(options) => format!(
                    "PostgreSQL at {}:{}, database `{}` as user `{}`",
                    options.get_host(),
                    options.get_port(),
                    options.get_database().unwrap_or(options.get_username()),
                    options.get_username()
                ),
                Err(_) => "PostgreSQL".to_owned(),
            },
            Kind::SqliteFile(path) => format!("the SQLite database {}", path.display()),
            Kind::SqliteMemory => "an in-memory SQLite database".to_owned(),
        }
    }

    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Postgres => Backend::Postgres,
            Kind::SqliteFile(_) | Kind::SqliteMemory => Backend::Sqlite,
        }
    }

    /// The SQLite database file, when the URL names one.
    pub fn sqlite_file(&self) -> Option<&Path> {
        match &self.kind {
            Kind::SqliteFile(path) => Some(path),
            Kind::Postgres | Kind::SqliteMemory => None,
        }
    }

    /// Creates the directory of a SQLite file, so that `mode=rwc` can create the file itself.
    pub(crate) fn prepare(&self) -> anyhow::Result<()> {
        if let Some(dir) = self.sqlite_file().and_then(Path::parent).filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        Ok(())
    }
}

/// The exclusive lock on `<database>.owner` by which one process owns a SQLite file; released
/// when it is dropped or the process ends, however it ends.
#[derive(Debug)]
pub(crate) struct Owner {
    _file: std::fs::File,
}

impl Owner {
    /// Locks `path`'s owner file, or says which server holds it.
    pub(crate) fn lock(path: &Path) -> anyhow::Result<Self> {
        let lock_path = format!("{}.owner", path.display());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {lock_path}"))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
                "another icegate serve is using the SQLite database {} (it holds {lock_path}); one server per \
                 SQLite file: stop the other one, or use PostgreSQL (database.url) to run replicas",
                path.display()
            ),
            Err(std::fs::TryLockError::Error(err)) => Err(err).with_context(|| format!("locking {lock_path}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend_and_file() {
        let pg = Database::parse("postgres://u@127.0.0.1:5432/db").unwrap();
        assert_eq!((pg.backend(), pg.sqlite_file()), (Backend::Postgres, None));
        assert_eq!(Database::parse("postgresql://h/db").unwrap().backend(), Backend::Postgres);
        let file = Database::parse("sqlite:///tmp/some/catalog.db?mode=rwc").unwrap();
        assert_eq!(file.backend(), Backend::Sqlite);
        assert_eq!(file.sqlite_file(), Some(Path::new("/tmp/some/catalog.db")));
        assert_eq!(Database::parse("sqlite:relative.db").unwrap().sqlite_file(), Some(Path::new("relative.db")));
        for memory in ["sqlite::memory:", "sqlite://shared.db?mode=memory&cache=shared"] {
            let db = Database::parse(memory).unwrap();
            assert_eq!((db.backend(), db.sqlite_file()), (Backend::Sqlite, None), "{memory}");
        }
        assert!(Database::parse("mysql://h/db").is_err());
    }

    #[test]
    fn a_sqlite_file_has_one_owner_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let first = Owner::lock(&path).unwrap();
        let refused = Owner::lock(&path).unwrap_err();
        assert!(refused.to_string().contains("another icegate serve"), "{refused}");
        drop(first);
        Owner::lock(&path).expect("free again once the owner is gone");
    }
}
