//! The last-server-admin guard: changes that may remove an admin count them after, under a lock.

use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::{CatalogError, Result};
use sqlx::{AssertSqlSafe, Row};

use crate::{SqlStore, db_error};

/// Grants on the server apply through a membership from an OIDC claim only if the issuer's
/// configuration names that role in `admin_roles` (source `claim-admin`).
pub(super) const SERVER_GRANTS_NOT_BY_CLAIM: &str = "(g.securable_type <> 'server' OR m.source <> 'claim')";

/// Joins and conditions after `FROM principals p` that select the principals holding `admin`
/// on the server through a grant that does not expire and a membership not derived from an
/// issuer's claims (those come and go with tokens): the ones who can recover the catalog.
pub(super) const SERVER_ADMINS: &str = "JOIN role_members m ON m.principal_id = p.id \
     JOIN grants g ON g.role_id = m.role_id \
     WHERE g.securable_type = 'server' AND g.privilege = 'admin' AND g.expires_at IS NULL AND m.source = 'manual'";

/// Serialises the changes that can remove a server admin (PostgreSQL; SQLite's write lock does
/// it there), so two concurrent removals of the last two admins cannot both pass.
const ADMIN_CHANGE_LOCK: i64 = 7_598_805_577_148_362_613;

impl SqlStore {
    /// Begins a change that may remove server admins, with how many there are before it.
    pub(super) async fn begin_admin_change(&self) -> Result<(crate::WriteTx, i64)> {
        let mut tx = self.begin_write().await?;
        if self.backend == crate::Backend::Postgres {
            // Read committed whatever the database's default: the count below must see what
            // the transaction that held the lock before committed (under repeatable read the
            // snapshot would be taken when the lock was asked for, and two admins removing each
            // other would both count the other).
            sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED").execute(&mut *tx).await.map_err(db_error)?;
            sqlx::query(AssertSqlSafe(format!("SELECT pg_advisory_xact_lock({ADMIN_CHANGE_LOCK})")))
                .execute(&mut *tx)
                .await
                .map_err(db_error)?;
        }
        let before = count_server_admins(&mut tx).await?;
        Ok((tx, before))
    }

    /// Commits the change, unless it took the last server admin away: then nothing changes, and
    /// the answer (409) says why. A catalog without admins to begin with (authentication off,
    /// none made yet) is not held to it.
    pub(super) async fn commit_admin_change(
        &self,
        mut tx: crate::WriteTx,
        write: &WriteContext,
        before: i64,
        change: impl FnOnce() -> String,
    ) -> Result<()> {
        if before > 0 && count_server_admins(&mut tx).await? == 0 {
            tx.rollback().await.map_err(db_error)?;
            return Err(CatalogError::Conflict(format!(
                "{} would leave no principal holding admin on the server (through a grant that does not \
                 expire); grant admin to another principal first. Whoever runs the server can recover \
                 with `icegate bootstrap --recover`",
                change()
            )));
        }
        self.commit_write(tx, write).await
    }
}

async fn count_server_admins(tx: &mut crate::WriteTx) -> Result<i64> {
    let row = sqlx::query(AssertSqlSafe(format!("SELECT COUNT(DISTINCT p.id) AS n FROM principals p {SERVER_ADMINS}")))
        .fetch_one(&mut **tx)
        .await
        .map_err(db_error)?;
    row.try_get::<i64, _>("n").map_err(db_error)
}
