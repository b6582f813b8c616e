-- Foundation schema: warehouses, namespaces and namespace properties.
-- The twin of migrations/postgres/20261130000001_foundation.sql; see the comments there.
-- SQLite compares TEXT byte-wise by default, which is the order the PostgreSQL schema asks for
-- with COLLATE "C". Foreign keys are enforced: icegate turns PRAGMA foreign_keys on.

CREATE TABLE warehouses (
    id           TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    storage_root TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    CONSTRAINT warehouses_pkey PRIMARY KEY (id),
    CONSTRAINT warehouses_name_key UNIQUE (name)
);

CREATE TABLE namespaces (
    id           TEXT    NOT NULL,
    warehouse_id TEXT    NOT NULL,
    parent_id    TEXT,
    name         TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    CONSTRAINT namespaces_pkey PRIMARY KEY (id),
    CONSTRAINT namespaces_name_key UNIQUE (warehouse_id, name),
    CONSTRAINT namespaces_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    CONSTRAINT namespaces_parent_fk FOREIGN KEY (parent_id) REFERENCES namespaces (id)
);

CREATE INDEX namespaces_children_idx ON namespaces (parent_id, name);
CREATE INDEX namespaces_top_level_idx ON namespaces (warehouse_id, name) WHERE parent_id IS NULL;

CREATE TABLE namespace_properties (
    namespace_id TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    CONSTRAINT namespace_properties_pkey PRIMARY KEY (namespace_id, key),
    CONSTRAINT namespace_properties_namespace_fk FOREIGN KEY (namespace_id)
        REFERENCES namespaces (id) ON DELETE CASCADE
);
