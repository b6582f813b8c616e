-- The twin of migrations/postgres/20261208000022_soft_delete.sql; see the comments there.
CREATE TABLE deleted_tabulars (
    id                TEXT   NOT NULL,
    warehouse_id      TEXT   NOT NULL,
    namespace         TEXT   NOT NULL,
    name              TEXT   NOT NULL,
    kind              TEXT   NOT NULL,
    uuid              TEXT   NOT NULL,
    location          TEXT   NOT NULL,
    extra_locations   TEXT   NOT NULL,
    metadata_location TEXT   NOT NULL,
    metadata          TEXT   NOT NULL,
    metadata_gzip     BLOB,
    grants            TEXT   NOT NULL,
    created_at        INTEGER NOT NULL,
    dropped_at        INTEGER NOT NULL,
    dropped_by        TEXT   NOT NULL,
    restorable_until  INTEGER NOT NULL,
    lease_until       INTEGER NOT NULL,
    purge_due         INTEGER,
    state             TEXT   NOT NULL,
    superseded        TEXT,
    CONSTRAINT deleted_tabulars_pkey PRIMARY KEY (id),
    CONSTRAINT deleted_tabulars_kind_check CHECK (kind IN ('table', 'view')),
    CONSTRAINT deleted_tabulars_state_check CHECK (state IN ('deleted', 'purging')),
    CONSTRAINT deleted_tabulars_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX deleted_tabulars_listing_idx ON deleted_tabulars (warehouse_id, dropped_at, id);
CREATE INDEX deleted_tabulars_uuid_idx ON deleted_tabulars (warehouse_id, uuid);
CREATE INDEX deleted_tabulars_expiry_idx ON deleted_tabulars (restorable_until);

ALTER TABLE location_leases ADD COLUMN deleted_id TEXT NOT NULL DEFAULT '';
CREATE INDEX location_leases_deleted_idx ON location_leases (deleted_id);
ALTER TABLE tasks ADD COLUMN rerun_at INTEGER;
