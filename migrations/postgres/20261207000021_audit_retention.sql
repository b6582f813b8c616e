-- Audit retention (issue 32): records older than `audit.retention` are exported to the
-- checkpoint location, checkpointed, and then removed. `audit_base` is where the chain in the
-- table starts after such cuts: the last removed record's sequence number and hash (0 and 64
-- zeros before any cut). `icegate audit verify` starts there, and requires a checkpoint in
-- object storage that vouches for it.
CREATE TABLE audit_base (
    id   INTEGER NOT NULL CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL,
    CONSTRAINT audit_base_pkey PRIMARY KEY (id)
);
INSERT INTO audit_base (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');

-- Records stay append-only; only those at or below the base may be removed (the cut moves the
-- base and removes them in one transaction). The base only moves forward, and never past the
-- head.
DROP TRIGGER audit_log_append_only ON audit_log;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION icegate_audit_append_only();

CREATE FUNCTION icegate_audit_cut_only() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF OLD.seq > (SELECT seq FROM audit_base WHERE id = 1) THEN
        RAISE EXCEPTION 'the audit trail is append-only: record % is after the retention cut', OLD.seq;
    END IF;
    RETURN OLD;
END
$$;
CREATE TRIGGER audit_log_cut_only BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION icegate_audit_cut_only();

-- The base names a record the table holds, with that record's hash, when it moves.
CREATE FUNCTION icegate_audit_base_forward() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.seq < OLD.seq OR NEW.seq > (SELECT seq FROM audit_head WHERE id = 1)
       OR (NEW.seq <> OLD.seq AND NEW.hash IS DISTINCT FROM (SELECT hash FROM audit_log WHERE seq = NEW.seq))
       OR (NEW.seq = OLD.seq AND NEW.hash <> OLD.hash) THEN
        RAISE EXCEPTION 'the audit trail''s base only moves forward, up to the head, to a record it holds';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_base_forward BEFORE UPDATE OR DELETE ON audit_base
    FOR EACH ROW EXECUTE FUNCTION icegate_audit_base_forward();
CREATE TRIGGER audit_base_fixed BEFORE INSERT OR TRUNCATE ON audit_base
    FOR EACH STATEMENT EXECUTE FUNCTION icegate_audit_append_only();

-- The head only moves forward; it is never removed.
CREATE FUNCTION icegate_audit_head_forward() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.seq < OLD.seq THEN
        RAISE EXCEPTION 'the audit trail''s head only moves forward';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_head_forward BEFORE UPDATE OR DELETE ON audit_head
    FOR EACH ROW EXECUTE FUNCTION icegate_audit_head_forward();
CREATE TRIGGER audit_head_fixed BEFORE INSERT OR TRUNCATE ON audit_head
    FOR EACH STATEMENT EXECUTE FUNCTION icegate_audit_append_only();
