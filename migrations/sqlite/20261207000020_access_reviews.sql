-- The twin of migrations/postgres/20261207000020_access_reviews.sql; see the comments there.

-- `review`: SQLite cannot change a constraint, so the grants table is made anew (nothing
-- references it yet; grant_usage below is made after).
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
    CONSTRAINT grants_privilege_check CHECK (privilege IN ('describe', 'read', 'write', 'create', 'drop', 'manage_grants', 'admin', 'audit', 'review')),
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

CREATE TABLE grant_usage (
    grant_id     TEXT   NOT NULL,
    principal_id TEXT   NOT NULL,
    last_used_at INTEGER NOT NULL,
    CONSTRAINT grant_usage_pkey PRIMARY KEY (grant_id, principal_id),
    CONSTRAINT grant_usage_grant_fk FOREIGN KEY (grant_id) REFERENCES grants (id) ON DELETE CASCADE,
    CONSTRAINT grant_usage_principal_fk FOREIGN KEY (principal_id) REFERENCES principals (id) ON DELETE CASCADE
);

CREATE TABLE access_reviews (
    id           TEXT   NOT NULL,
    scope        TEXT   NOT NULL,
    warehouse_id TEXT,
    description  TEXT,
    created_by   TEXT   NOT NULL,
    created_at   INTEGER NOT NULL,
    closed_by    TEXT,
    closed_at    INTEGER,
    CONSTRAINT access_reviews_pkey PRIMARY KEY (id)
);
CREATE INDEX access_reviews_created ON access_reviews (created_at);

CREATE TABLE access_review_lines (
    review_id    TEXT    NOT NULL,
    line         INTEGER NOT NULL,
    entry        TEXT    NOT NULL,
    decision     TEXT,
    decided_by   TEXT,
    decided_at   INTEGER,
    comment      TEXT,
    CONSTRAINT access_review_lines_pkey PRIMARY KEY (review_id, line),
    CONSTRAINT access_review_lines_review_fk FOREIGN KEY (review_id) REFERENCES access_reviews (id) ON DELETE CASCADE,
    CONSTRAINT access_review_lines_decision_check CHECK (decision IN ('attest', 'revoke-grant', 'revoke-membership'))
);

CREATE TABLE legal_holds (
    id             TEXT   NOT NULL,
    securable_type TEXT   NOT NULL,
    warehouse_id   TEXT   NOT NULL,
    namespace_id   TEXT,
    tabular_id     TEXT,
    reason         TEXT   NOT NULL,
    placed_by      TEXT   NOT NULL,
    placed_at      INTEGER NOT NULL,
    lift_requested_by TEXT,
    lift_requested_by_id TEXT,
    lift_requested_at INTEGER,
    CONSTRAINT legal_holds_pkey PRIMARY KEY (id),
    CONSTRAINT legal_holds_type_check CHECK (securable_type IN ('warehouse', 'namespace', 'table', 'view')),
    CONSTRAINT legal_holds_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    CONSTRAINT legal_holds_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id),
    CONSTRAINT legal_holds_tabular_fk FOREIGN KEY (tabular_id) REFERENCES tabulars (id)
);
CREATE INDEX legal_holds_warehouse ON legal_holds (warehouse_id);
CREATE INDEX legal_holds_namespace ON legal_holds (namespace_id);
CREATE INDEX legal_holds_tabular ON legal_holds (tabular_id);
