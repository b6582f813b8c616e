-- The twin of migrations/postgres/20261207000021_audit_retention.sql; see the comments there.
CREATE TABLE audit_base (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_base (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

DROP TRIGGER audit_log_no_delete;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
WHEN OLD.seq > (SELECT seq FROM audit_base WHERE id = 1)
BEGIN
    SELECT RAISE(ABORT, 'the audit trail is append-only: that record is after the retention cut');
END;

CREATE TRIGGER audit_base_forward BEFORE UPDATE ON audit_base
WHEN NEW.seq < OLD.seq OR NEW.seq > (SELECT seq FROM audit_head WHERE id = 1)
    OR (NEW.seq <> OLD.seq AND NEW.hash IS NOT (SELECT hash FROM audit_log WHERE seq = NEW.seq))
    OR (NEW.seq = OLD.seq AND NEW.hash <> OLD.hash)
BEGIN
    SELECT RAISE(ABORT, 'the audit trail''s base only moves forward, up to the head, to a record it holds');
END;
CREATE TRIGGER audit_base_no_delete BEFORE DELETE ON audit_base
BEGIN
    SELECT RAISE(ABORT, 'the audit trail''s base only moves forward, up to the head');
END;
CREATE TRIGGER audit_base_no_insert BEFORE INSERT ON audit_base
BEGIN
    SELECT RAISE(ABORT, 'the audit trail has one base');
END;

CREATE TRIGGER audit_head_forward BEFORE UPDATE ON audit_head
WHEN NEW.seq < OLD.seq
BEGIN
    SELECT RAISE(ABORT, 'the audit trail''s head only moves forward');
END;
CREATE TRIGGER audit_head_no_delete BEFORE DELETE ON audit_head
BEGIN
    SELECT RAISE(ABORT, 'the audit trail''s head only moves forward');
END;
