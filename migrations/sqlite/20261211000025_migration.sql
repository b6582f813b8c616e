-- The twin of migrations/postgres/20261211000025_migration.sql; see the comments there.
CREATE TABLE migrations (
    id                  TEXT   NOT NULL,
    target_warehouse_id TEXT   NOT NULL,
    source_kind         TEXT   NOT NULL,
    source              TEXT   NOT NULL,
    selection           TEXT   NOT NULL,
    dry_run             INTEGER NOT NULL,
    state               TEXT   NOT NULL,
    report              TEXT   NOT NULL,
    created_at          INTEGER NOT NULL,
    created_by          TEXT   NOT NULL,
    updated_at          INTEGER NOT NULL,
    CONSTRAINT migrations_pkey PRIMARY KEY (id),
    CONSTRAINT migrations_source_kind_check CHECK (source_kind IN ('rest', 'sql', 'glue')),
    CONSTRAINT migrations_state_check CHECK (state IN ('planned', 'running', 'completed', 'failed', 'rolled-back')),
    CONSTRAINT migrations_warehouse_fk FOREIGN KEY (target_warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX migrations_listing_idx ON migrations (id);

CREATE TABLE migration_tables (
    id               TEXT   NOT NULL,
    migration_id     TEXT   NOT NULL,
    kind             TEXT   NOT NULL,
    source_key       TEXT   NOT NULL,
    source_namespace TEXT   NOT NULL,
    source_name      TEXT   NOT NULL,
    target_namespace TEXT   NOT NULL,
    target_name      TEXT   NOT NULL,
    state            TEXT   NOT NULL,
    planned_location TEXT,
    fenced_location  TEXT,
    fence            TEXT,
    tabular_id       TEXT,
    handed_back      TEXT,
    report           TEXT,
    error            TEXT,
    updated_at       INTEGER NOT NULL,
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
