-- Dropped tables and views, kept restorable for their hold period (`lifecycle.soft-delete.hold`)
-- and, when the drop asked for a purge, until the purge task has deleted their files. The row
-- leaves `tabulars` at the drop (its name is free at once); what undrop needs to put it back is
-- here: the row's values, its recorded locations and its grants. Its locations stay leased
-- (`location_leases.deleted_id`) so no other table is made where its files still are.
CREATE TABLE deleted_tabulars (
    id                TEXT   NOT NULL,
    warehouse_id      TEXT   NOT NULL,
    -- The namespace it was in, by name: that namespace may be dropped and made again.
    namespace         TEXT   COLLATE "C" NOT NULL,
    name              TEXT   COLLATE "C" NOT NULL,
    kind              TEXT   NOT NULL,
    -- The table-uuid or view-uuid of its last metadata (registering it again finds the entry).
    uuid              TEXT   NOT NULL,
    location          TEXT   COLLATE "C" NOT NULL,
    -- A JSON array of the other locations recorded for it (tabular_locations).
    extra_locations   TEXT   NOT NULL,
    metadata_location TEXT   NOT NULL,
    metadata          TEXT   NOT NULL,
    metadata_gzip     BYTEA,
    -- A JSON array of the grants on it when it was dropped.
    grants            TEXT   NOT NULL,
    created_at        BIGINT NOT NULL,
    dropped_at        BIGINT NOT NULL,
    dropped_by        TEXT   NOT NULL,
    restorable_until  BIGINT NOT NULL,
    -- When credentials vended for it while it existed expire.
    lease_until       BIGINT NOT NULL,
    -- Set when the drop asked for a purge: when it is due.
    purge_due         BIGINT,
    -- 'deleted' (restorable until restorable_until or the purge), 'purging' (its files are being
    -- deleted: no longer restorable).
    state             TEXT   NOT NULL,
    -- Why it can no longer be undropped though its hold lasts (its metadata registered again).
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

-- A task queued with `rerun_if_running` whose key was held by a running task asks that task for
-- one more run, due then: queued when it ends (a change made while it ran is not missed).
ALTER TABLE tasks ADD COLUMN rerun_at BIGINT;
