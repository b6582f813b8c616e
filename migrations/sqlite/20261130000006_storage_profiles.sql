-- Storage profiles and the extra locations a table owns.
--
-- `storage_profile` is the warehouse's profile as JSON (secrets sealed with the configured key,
-- never in plain text); `profile_version` grows with every change so that caches keyed by it
-- (object store clients, vended credentials) miss after an update.
ALTER TABLE warehouses ADD COLUMN storage_profile TEXT NOT NULL DEFAULT '{"type":"file"}';
ALTER TABLE warehouses ADD COLUMN profile_version BIGINT NOT NULL DEFAULT 1;

-- Locations a table writes to outside its base location (`write.data.path`,
-- `write.metadata.path`). They take part in the overlap check like base locations, so no table
-- can point a path into another table's files and be handed credentials for them.
CREATE TABLE tabular_locations (
    tabular_id   TEXT NOT NULL,
    warehouse_id TEXT NOT NULL,
    location     TEXT NOT NULL,
    CONSTRAINT tabular_locations_pkey PRIMARY KEY (tabular_id, location),
    CONSTRAINT tabular_locations_tabular_fk FOREIGN KEY (tabular_id) REFERENCES tabulars (id) ON DELETE CASCADE
);

CREATE INDEX tabular_locations_location_idx ON tabular_locations (warehouse_id, location);
