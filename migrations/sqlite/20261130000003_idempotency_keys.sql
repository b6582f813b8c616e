-- Idempotency keys: the twin of migrations/postgres/20261130000003_idempotency_keys.sql.
CREATE TABLE idempotency_keys (
    key        TEXT    NOT NULL,
    operation  TEXT    NOT NULL,
    status     INTEGER,
    body       TEXT,
    created_at INTEGER NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key)
);

CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
