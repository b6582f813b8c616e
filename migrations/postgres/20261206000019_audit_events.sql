-- The audit trail records more than changes (issue 32): reads, credential vends, signatures,
-- refusals, tokens and start-ups, each with what it was about and how it ended. These columns
-- are copies of the record's fields for searching (`GET /management/v1/audit`), checked
-- against it by `icegate audit verify`: the warehouse and the resource (namespace levels and
-- name, joined by U+001F) the request was about, and its outcome. The records before this
-- migration are all applied changes.
ALTER TABLE audit_log ADD COLUMN warehouse_id TEXT;
ALTER TABLE audit_log ADD COLUMN resource TEXT;
ALTER TABLE audit_log ADD COLUMN outcome TEXT NOT NULL DEFAULT 'applied';
CREATE INDEX audit_log_warehouse ON audit_log (warehouse_id, seq);
CREATE INDEX audit_log_operation ON audit_log (operation, seq);
CREATE INDEX audit_log_actor ON audit_log (actor, seq);

-- `audit`: reading the audit trail (on the server: every record; on a warehouse: that
-- warehouse's records).
ALTER TABLE grants DROP CONSTRAINT grants_privilege_check;
ALTER TABLE grants ADD CONSTRAINT grants_privilege_check
    CHECK (privilege IN ('describe', 'read', 'write', 'create', 'drop', 'manage_grants', 'admin', 'audit'));

-- A warehouse's settings (a JSON document of the keys set; see WarehouseSettings):
-- `audit.record-reads` first.
ALTER TABLE warehouses ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
