-- Idempotency keys of mutating requests (the spec's `Idempotency-Key` header).
--
-- A row is inserted in the same transaction as the mutation it guards, with status and body
-- still NULL: a second request with the key then fails on the primary key instead of applying
-- the mutation twice. Once the response is known, status and body are filled in ("finalised")
-- and replayed to retries. Deterministic 4xx answers are finalised without a mutation.
CREATE TABLE idempotency_keys (
    key        TEXT   NOT NULL,
    -- "<METHOD> <path>": a key reused for another operation is refused.
    operation  TEXT   NOT NULL,
    status     INTEGER,
    body       TEXT,
    created_at BIGINT NOT NULL,
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key)
);

-- Serves the periodic removal of expired keys.
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (created_at);
