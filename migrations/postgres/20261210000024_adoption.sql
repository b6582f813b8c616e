-- Adopting Parquet datasets in place (issue 34).
--
-- A source location is a prefix a warehouse may adopt files from, read-only. It never overlaps
-- a table's or view's location (both ways: the checks in `locations` look here too), so no
-- purge, expiry, orphan clean-up or metadata clean-up, which act only inside a table's own
-- recorded locations, can reach a file of it; vended credentials and signing may read it, never
-- write it.
CREATE TABLE source_locations (
    warehouse_id TEXT   NOT NULL,
    location     TEXT   COLLATE "C" NOT NULL,
    created_at   BIGINT NOT NULL,
    created_by   TEXT   NOT NULL,
    CONSTRAINT source_locations_pkey PRIMARY KEY (warehouse_id, location),
    CONSTRAINT source_locations_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX source_locations_location_idx ON source_locations (location);

-- An adopted dataset: the source prefix, the table its files were added to, and how it is
-- kept in sync. The table's manifests are the truth of which files it holds; `adoption_files`
-- keeps what each file looked like when it was added (size, ETag or mtime), so a file
-- rewritten in place under the same name is noticed and refused, never added twice.
CREATE TABLE adoptions (
    id           TEXT   NOT NULL,
    warehouse_id TEXT   NOT NULL,
    tabular_id   TEXT   NOT NULL,
    namespace    TEXT   NOT NULL,
    name         TEXT   NOT NULL,
    source       TEXT   COLLATE "C" NOT NULL,
    -- The request's partitioning, mode, sync interval and what to do with files that vanish.
    settings     TEXT   NOT NULL,
    mode         TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    created_by   TEXT   NOT NULL,
    CONSTRAINT adoptions_pkey PRIMARY KEY (id),
    CONSTRAINT adoptions_mode_check CHECK (mode IN ('snapshot', 'continuous')),
    CONSTRAINT adoptions_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX adoptions_tabular_idx ON adoptions (tabular_id);
CREATE INDEX adoptions_warehouse_idx ON adoptions (warehouse_id, id);

CREATE TABLE adoption_files (
    adoption_id TEXT   NOT NULL,
    location    TEXT   COLLATE "C" NOT NULL,
    size        BIGINT NOT NULL,
    -- The store's ETag (S3), empty where it has none (local files: `modified_at` decides).
    etag        TEXT   NOT NULL,
    modified_at BIGINT NOT NULL,
    snapshot_id BIGINT NOT NULL,
    CONSTRAINT adoption_files_pkey PRIMARY KEY (adoption_id, location),
    CONSTRAINT adoption_files_adoption_fk FOREIGN KEY (adoption_id) REFERENCES adoptions (id) ON DELETE CASCADE
);

-- Each run's report (the first adoption, every re-sync), kept with the adoption.
CREATE TABLE adoption_runs (
    id          TEXT   NOT NULL,
    adoption_id TEXT   NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    snapshot_id BIGINT,
    report      TEXT   NOT NULL,
    CONSTRAINT adoption_runs_pkey PRIMARY KEY (id),
    CONSTRAINT adoption_runs_adoption_fk FOREIGN KEY (adoption_id) REFERENCES adoptions (id) ON DELETE CASCADE
);
CREATE INDEX adoption_runs_adoption_idx ON adoption_runs (adoption_id, started_at);
