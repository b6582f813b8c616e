-- Security hardening: the twin of migrations/postgres/20261201000008_security_hardening.sql.
DELETE FROM grants
 WHERE securable_type IN ('table', 'view')
   AND id NOT IN (SELECT MIN(id) FROM grants WHERE securable_type IN ('table', 'view')
                  GROUP BY role_id, privilege, securable_type, tabular_id);
UPDATE grants SET namespace_id = NULL WHERE securable_type IN ('table', 'view');

-- SQLite cannot change a primary key in place: the table is made anew (its rows are dropped, as
-- on PostgreSQL).
DROP TABLE idempotency_keys;
CREATE TABLE idempotency_keys (
    principal      TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    operation      TEXT    NOT NULL,
    request_digest TEXT    NOT NULL,
    status         INTEGER,
    body           TEXT,
    created_at     INTEGER NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
