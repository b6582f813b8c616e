-- The audit trail (crates/icegate-store/src/audit.rs): one record per change, written in the
-- change's own transaction, each linked to the one before by a SHA-256 hash in one gap-free
-- chain (`seq` 1, 2, 3, ...). `record` is the canonical text that is hashed; the other columns
-- are copies of its fields for searching, checked against it by `icegate audit verify`.
CREATE TABLE audit_log (
    seq          INTEGER PRIMARY KEY CHECK (seq > 0),
    at_ms        BIGINT NOT NULL,
    operation    TEXT,
    principal_id TEXT,
    actor        TEXT NOT NULL,
    record       TEXT NOT NULL,
    hash         TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at_ms);
CREATE INDEX audit_log_principal ON audit_log (principal_id, seq);

-- The chain's head: the last record's sequence number and hash (0 and 64 zeros before the
-- first). Every append takes it (SQLite: under the write lock the transaction holds).
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- Append-only: records are never changed or removed through the database's normal paths.
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit trail is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit trail is append-only');
END;
