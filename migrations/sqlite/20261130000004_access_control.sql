-- Access control: the twin of migrations/postgres/20261130000004_access_control.sql; see the
-- comments there.
CREATE TABLE principals (
    id          TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    client_id   TEXT,
    secret_hash TEXT,
    issuer      TEXT,
    subject     TEXT,
    created_at  INTEGER NOT NULL,
    CONSTRAINT principals_pkey PRIMARY KEY (id),
    CONSTRAINT principals_name_key UNIQUE (name),
    CONSTRAINT principals_client_id_key UNIQUE (client_id),
    CONSTRAINT principals_subject_key UNIQUE (issuer, subject)
);

CREATE TABLE roles (
    id         TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    created_at INTEGER NOT NULL,
    CONSTRAINT roles_pkey PRIMARY KEY (id),
    CONSTRAINT roles_name_key UNIQUE (name)
);

CREATE TABLE role_members (
    role_id      TEXT NOT NULL,
    principal_id TEXT NOT NULL,
    CONSTRAINT role_members_pkey PRIMARY KEY (role_id, principal_id),
    CONSTRAINT role_members_role_fk FOREIGN KEY (role_id) REFERENCES roles (id) ON DELETE CASCADE,
    CONSTRAINT role_members_principal_fk FOREIGN KEY (principal_id) REFERENCES principals (id) ON DELETE CASCADE
);
-- Serves "the roles of this principal", the first step of every authorization decision.
CREATE INDEX role_members_principal_idx ON role_members (principal_id);

-- A grant of one privilege to a role on one securable. The securable columns that apply to
-- its type are set (server: none; warehouse: warehouse_id; namespace: + namespace_id; table or
-- view: + tabular_id). Grants go with the object they are on (ON DELETE CASCADE) and survive
-- renames, because they reference ids, not names.
CREATE TABLE grants (
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
    CONSTRAINT grants_privilege_check CHECK (privilege IN ('describe', 'read', 'write', 'create', 'drop', 'manage_grants', 'admin')),
    CONSTRAINT grants_type_check CHECK (securable_type IN ('server', 'warehouse', 'namespace', 'table', 'view')),
    CONSTRAINT grants_role_fk FOREIGN KEY (role_id) REFERENCES roles (id) ON DELETE CASCADE,
    CONSTRAINT grants_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE,
    CONSTRAINT grants_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id) ON DELETE CASCADE,
    CONSTRAINT grants_tabular_fk FOREIGN KEY (tabular_id) REFERENCES tabulars (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX grants_unique_idx
    ON grants (role_id, privilege, securable_type, COALESCE(warehouse_id, ''), COALESCE(namespace_id, ''), COALESCE(tabular_id, ''));
CREATE INDEX grants_namespace_idx ON grants (namespace_id);
CREATE INDEX grants_tabular_idx ON grants (tabular_id);
CREATE INDEX grants_warehouse_idx ON grants (warehouse_id);

-- Server-wide settings shared by every replica, such as the token signing key generated once.
CREATE TABLE server_settings (
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    CONSTRAINT server_settings_pkey PRIMARY KEY (key)
);
