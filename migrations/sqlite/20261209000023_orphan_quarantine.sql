-- The twin of migrations/postgres/20261209000023_orphan_quarantine.sql; see the comments there.
CREATE TABLE quarantined_files (
    tabular_id     TEXT    NOT NULL,
    location       TEXT    NOT NULL,
    warehouse_id   TEXT    NOT NULL,
    size           INTEGER NOT NULL,
    modified_at    INTEGER NOT NULL,
    quarantined_at INTEGER NOT NULL,
    delete_after   INTEGER NOT NULL,
    task_id        TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    restored_by    TEXT,
    CONSTRAINT quarantined_files_pkey PRIMARY KEY (tabular_id, location),
    CONSTRAINT quarantined_files_state_check CHECK (state IN ('quarantined', 'restored')),
    CONSTRAINT quarantined_files_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX quarantined_files_listing_idx ON quarantined_files (warehouse_id, tabular_id, location);

ALTER TABLE tabular_locations ADD COLUMN recorded_at INTEGER NOT NULL DEFAULT 0;
UPDATE tabular_locations SET recorded_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);
