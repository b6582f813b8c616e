-- Orphan clean-up in two phases (`remove-orphans` tasks): files below a table's recorded
-- locations that no live metadata references are first quarantined here (nothing is deleted),
-- and deleted only once `delete_after` has passed and a new scan still finds them unreferenced
-- and unchanged. A warehouse admin can restore a quarantined file until then: it stays, and no
-- later scan quarantines it again.
CREATE TABLE quarantined_files (
    tabular_id     TEXT   NOT NULL,
    location       TEXT   COLLATE "C" NOT NULL,
    warehouse_id   TEXT   NOT NULL,
    size           BIGINT NOT NULL,
    -- The file's last-modified time when it was quarantined: a file rewritten since is not the
    -- one quarantined, and is not deleted.
    modified_at    BIGINT NOT NULL,
    quarantined_at BIGINT NOT NULL,
    delete_after   BIGINT NOT NULL,
    -- The task that quarantined it.
    task_id        TEXT   NOT NULL,
    state          TEXT   NOT NULL,
    restored_by    TEXT,
    CONSTRAINT quarantined_files_pkey PRIMARY KEY (tabular_id, location),
    CONSTRAINT quarantined_files_state_check CHECK (state IN ('quarantined', 'restored')),
    CONSTRAINT quarantined_files_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX quarantined_files_listing_idx ON quarantined_files (warehouse_id, tabular_id, location);

-- When each location was recorded for its table: orphan clean-up never takes a file older than
-- the time its table came to own the location (a folder a table claims later may hold files
-- that are not its own). Locations recorded before this migration count from the migration.
ALTER TABLE tabular_locations ADD COLUMN recorded_at BIGINT NOT NULL DEFAULT 0;
UPDATE tabular_locations SET recorded_at = (extract(epoch from now()) * 1000)::bigint;
