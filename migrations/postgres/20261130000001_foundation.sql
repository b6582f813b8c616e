-- Foundation schema: warehouses, namespaces and namespace properties.
--
-- Ids are UUID strings and timestamps epoch milliseconds (BIGINT) so that one set of queries
-- serves PostgreSQL and SQLite. Names are compared with the "C" collation: keyset pagination
-- needs an order that is byte-wise and identical on both stores, not locale dependent.

CREATE TABLE warehouses (
    id           TEXT   NOT NULL,
    name         TEXT   COLLATE "C" NOT NULL,
    storage_root TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    CONSTRAINT warehouses_pkey PRIMARY KEY (id),
    CONSTRAINT warehouses_name_key UNIQUE (name)
);

-- `name` is the full namespace path, levels joined by U+001F, unique per warehouse.
-- `parent_id` links a child to its parent. Both foreign keys are deliberately NO ACTION: a
-- DELETE of a warehouse or namespace that still has children fails inside the database, which
-- makes "drop only when empty" race-free without taking explicit locks.
CREATE TABLE namespaces (
    id           TEXT   NOT NULL,
    warehouse_id TEXT   NOT NULL,
    parent_id    TEXT,
    name         TEXT   COLLATE "C" NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL,
    CONSTRAINT namespaces_pkey PRIMARY KEY (id),
    CONSTRAINT namespaces_name_key UNIQUE (warehouse_id, name),
    CONSTRAINT namespaces_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    CONSTRAINT namespaces_parent_fk FOREIGN KEY (parent_id) REFERENCES namespaces (id)
);

-- Serves listing children of a parent (and top-level namespaces with parent_id IS NULL) in name
-- order, and the foreign key check when a parent is deleted.
CREATE INDEX namespaces_children_idx ON namespaces (parent_id, name);
CREATE INDEX namespaces_top_level_idx ON namespaces (warehouse_id, name) WHERE parent_id IS NULL;

-- One row per property, so concurrent updates of different keys never overwrite each other.
CREATE TABLE namespace_properties (
    namespace_id TEXT NOT NULL,
    key          TEXT COLLATE "C" NOT NULL,
    value        TEXT NOT NULL,
    CONSTRAINT namespace_properties_pkey PRIMARY KEY (namespace_id, key),
    CONSTRAINT namespace_properties_namespace_fk FOREIGN KEY (namespace_id)
        REFERENCES namespaces (id) ON DELETE CASCADE
);
