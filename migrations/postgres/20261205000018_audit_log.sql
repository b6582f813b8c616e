-- The audit trail (crates/icegate-store/src/audit.rs): one record per change, written in the
-- change's own transaction, each linked to the one before by a SHA-256 hash in one gap-free
-- chain (`seq` 1, 2, 3, ...). `record` is the canonical text that is hashed; the other columns
-- are copies of its fields for searching, checked against it by `icegate audit verify`.
CREATE TABLE audit_log (
    seq          BIGINT NOT NULL CHECK (seq > 0),
    at_ms        BIGINT NOT NULL,
    operation    TEXT,
    principal_id TEXT,
    actor        TEXT NOT NULL,
    record       TEXT NOT NULL,
    hash         TEXT NOT NULL,
    CONSTRAINT audit_log_pkey PRIMARY KEY (seq)
);
CREATE INDEX audit_log_at ON audit_log (at_ms);
CREATE INDEX audit_log_principal ON audit_log (principal_id, seq);

-- The chain's head: the last record's sequence number and hash (0 and 64 zeros before the
-- first). Every append locks it (FOR UPDATE), last in its transaction, so appends of
-- concurrent transactions and replicas queue in one order and never fork the chain.
CREATE TABLE audit_head (
    id   INTEGER NOT NULL CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL,
    CONSTRAINT audit_head_pkey PRIMARY KEY (id)
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- Append-only: the catalog's own role cannot change or remove records (deployments that want
-- more give the catalog a role with INSERT only on audit_log; see docs).
CREATE FUNCTION icegate_audit_append_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION icegate_audit_append_only();
