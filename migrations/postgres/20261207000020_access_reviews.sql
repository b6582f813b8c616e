-- Access reviews and legal holds (issue 32).

-- `review`: reading who can do what on a securable and deciding review campaigns about it.
ALTER TABLE grants DROP CONSTRAINT grants_privilege_check;
ALTER TABLE grants ADD CONSTRAINT grants_privilege_check
    CHECK (privilege IN ('describe', 'read', 'write', 'create', 'drop', 'manage_grants', 'admin', 'audit', 'review'));

-- When a grant last decided an allowed request of a principal: kept in memory by each replica
-- and written here in batches (the later time wins), never once per request.
CREATE TABLE grant_usage (
    grant_id     TEXT   NOT NULL,
    principal_id TEXT   NOT NULL,
    last_used_at BIGINT NOT NULL,
    CONSTRAINT grant_usage_pkey PRIMARY KEY (grant_id, principal_id),
    CONSTRAINT grant_usage_grant_fk FOREIGN KEY (grant_id) REFERENCES grants (id) ON DELETE CASCADE,
    CONSTRAINT grant_usage_principal_fk FOREIGN KEY (principal_id) REFERENCES principals (id) ON DELETE CASCADE
);

-- A review campaign: the effective access of a scope frozen at `created_at`. Evidence outlives
-- what it is about, so the scope is kept by id and by name, without foreign keys.
CREATE TABLE access_reviews (
    id           TEXT   NOT NULL,
    scope        TEXT   NOT NULL,
    warehouse_id TEXT,
    description  TEXT,
    created_by   TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    closed_by    TEXT,
    closed_at    BIGINT,
    CONSTRAINT access_reviews_pkey PRIMARY KEY (id)
);
CREATE INDEX access_reviews_created ON access_reviews (created_at);

-- One line of a campaign: a principal holding a privilege through a role's grant, as it was
-- when the campaign began, and what its reviewer decided.
CREATE TABLE access_review_lines (
    review_id    TEXT    NOT NULL,
    line         INTEGER NOT NULL,
    entry        TEXT    NOT NULL,
    decision     TEXT,
    decided_by   TEXT,
    decided_at   BIGINT,
    comment      TEXT,
    CONSTRAINT access_review_lines_pkey PRIMARY KEY (review_id, line),
    CONSTRAINT access_review_lines_review_fk FOREIGN KEY (review_id) REFERENCES access_reviews (id) ON DELETE CASCADE,
    CONSTRAINT access_review_lines_decision_check CHECK (decision IN ('attest', 'revoke-grant', 'revoke-membership'))
);

-- A legal hold on a warehouse, namespace, table or view: while it stands, icegate does not drop,
-- purge or move the object out of its namespace, nor delete its files. The foreign keys
-- (without cascade) make the database refuse removing a held object too.
CREATE TABLE legal_holds (
    id             TEXT   NOT NULL,
    securable_type TEXT   NOT NULL,
    warehouse_id   TEXT   NOT NULL,
    namespace_id   TEXT,
    tabular_id     TEXT,
    reason         TEXT   NOT NULL,
    placed_by      TEXT   NOT NULL,
    placed_at      BIGINT NOT NULL,
    lift_requested_by TEXT,
    lift_requested_by_id TEXT,
    lift_requested_at BIGINT,
    CONSTRAINT legal_holds_pkey PRIMARY KEY (id),
    CONSTRAINT legal_holds_type_check CHECK (securable_type IN ('warehouse', 'namespace', 'table', 'view')),
    CONSTRAINT legal_holds_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    CONSTRAINT legal_holds_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id),
    CONSTRAINT legal_holds_tabular_fk FOREIGN KEY (tabular_id) REFERENCES tabulars (id)
);
CREATE INDEX legal_holds_warehouse ON legal_holds (warehouse_id);
CREATE INDEX legal_holds_namespace ON legal_holds (namespace_id);
CREATE INDEX legal_holds_tabular ON legal_holds (tabular_id);
