-- Catalog-to-catalog migration (issue 35): a run moves tables of another catalog (an Iceberg
-- REST catalog, a JDBC/SQL catalog, Glue) into a warehouse, each table through a persisted,
-- resumable state machine: planned → fenced (the source stops accepting commits) → registered
-- (icegate holds it) → verified → retired (the source's entry is gone), or rolled back (the
-- source restored as it was, the target entry removed). No data or metadata file is touched.
CREATE TABLE migrations (
    id                  TEXT   NOT NULL,
    target_warehouse_id TEXT   NOT NULL,
    -- 'rest', 'sql' or 'glue', and the source's description with its secrets sealed (JSON).
    source_kind         TEXT   NOT NULL,
    source              TEXT   NOT NULL,
    -- What the request selected (namespaces, tables, include, namespace-mapping), JSON.
    selection           TEXT   NOT NULL,
    dry_run             BIGINT NOT NULL,
    state               TEXT   NOT NULL,
    -- The run's report (plan, conflicts, per-state counts), JSON.
    report              TEXT   NOT NULL,
    created_at          BIGINT NOT NULL,
    created_by          TEXT   NOT NULL,
    updated_at          BIGINT NOT NULL,
    CONSTRAINT migrations_pkey PRIMARY KEY (id),
    CONSTRAINT migrations_source_kind_check CHECK (source_kind IN ('rest', 'sql', 'glue')),
    CONSTRAINT migrations_state_check CHECK (state IN ('planned', 'running', 'completed', 'failed', 'rolled-back')),
    CONSTRAINT migrations_warehouse_fk FOREIGN KEY (target_warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX migrations_listing_idx ON migrations (id);

-- Each table's (or view's) state machine.
CREATE TABLE migration_tables (
    id               TEXT   NOT NULL,
    migration_id     TEXT   NOT NULL,
    kind             TEXT   NOT NULL,
    -- The source object's identity across runs (its catalog and name): one live migration of
    -- it at a time.
    source_key       TEXT   NOT NULL,
    source_namespace TEXT   NOT NULL,
    source_name      TEXT   NOT NULL,
    target_namespace TEXT   NOT NULL,
    target_name      TEXT   NOT NULL,
    state            TEXT   NOT NULL,
    -- The metadata location the plan saw, and the one the fence froze (what moves).
    planned_location TEXT   COLLATE "C",
    fenced_location  TEXT   COLLATE "C",
    -- What undoing the fence needs (the source's exact state before it), JSON.
    fence            TEXT,
    -- The table icegate registered.
    tabular_id       TEXT,
    -- A rolled-back table that took commits at icegate: the metadata handed back to the source.
    handed_back      TEXT   COLLATE "C",
    report           TEXT,
    error            TEXT,
    updated_at       BIGINT NOT NULL,
    CONSTRAINT migration_tables_pkey PRIMARY KEY (id),
    CONSTRAINT migration_tables_kind_check CHECK (kind IN ('table', 'view')),
    CONSTRAINT migration_tables_state_check CHECK (state IN
        ('planned', 'fenced', 'registered', 'verified', 'retired', 'rolled-back', 'failed', 'skipped')),
    CONSTRAINT migration_tables_ident_key UNIQUE (migration_id, source_namespace, source_name),
    CONSTRAINT migration_tables_migration_fk FOREIGN KEY (migration_id) REFERENCES migrations (id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX migration_tables_live_idx ON migration_tables (source_key)
    WHERE state IN ('planned', 'fenced', 'registered', 'verified');
CREATE INDEX migration_tables_tabular_idx ON migration_tables (tabular_id);
