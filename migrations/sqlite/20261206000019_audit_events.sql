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
-- warehouse's records). SQLite cannot change a constraint: the table is made anew (nothing
-- references it).
CREATE TABLE grants_new (
    id             TEXT   NOT NULL,
    role_id        TEXT   NOT NULL,
    privilege      TEXT   NOT NULL,
    securable_type TEXT   NOT NULL,
    warehouse_id   TEXT,
    namespace_id   TEXT,
    tabular_id     TEXT,
    expires_at     INTEGER,
    created_at     INTEGER NOT NULL,
    CONSTRAINT grants_pkey PRIMARY KEY (id),
    CONSTRAINT grants_privilege_check CHECK (privilege IN ('describe', 'read', 'write', 'create', 'drop', 'manage_grants', 'admin', 'audit')),
    CONSTRAINT grants_type_check CHECK (securable_type IN ('server', 'warehouse', 'namespace', 'table', 'view')),
    CONSTRAINT grants_role_fk FOREIGN KEY (role_id) REFERENCES roles (id) ON DELETE CASCADE,
    CONSTRAINT grants_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE,
    CONSTRAINT grants_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id) ON DELETE CASCADE,
    CONSTRAINT grants_tabular_fk FOREIGN KEY (tabular_id) REFERENCES tabulars (id) ON DELETE CASCADE
);
INSERT INTO grants_new (id, role_id, privilege, securable_type, warehouse_id, namespace_id, tabular_id, expires_at, created_at)
    SELECT id, role_id, privilege, securable_type, warehouse_id, namespace_id, tabular_id, expires_at, created_at FROM grants;
DROP TABLE grants;
ALTER TABLE grants_new RENAME TO grants;
CREATE UNIQUE INDEX grants_unique_idx
    ON grants (role_id, privilege, securable_type, COALESCE(warehouse_id, ''), COALESCE(namespace_id, ''), COALESCE(tabular_id, ''));
CREATE INDEX grants_namespace_idx ON grants (namespace_id);
CREATE INDEX grants_tabular_idx ON grants (tabular_id);
CREATE INDEX grants_warehouse_idx ON grants (warehouse_id);

-- A warehouse's settings (a JSON document of the keys set; see WarehouseSettings):
-- `audit.record-reads` first.
ALTER TABLE warehouses ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
