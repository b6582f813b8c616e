-- The twin of migrations/postgres/20261210000024_adoption.sql; see the comments there.
CREATE TABLE source_locations (
    warehouse_id TEXT    NOT NULL,
    location     TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL,
    CONSTRAINT source_locations_pkey PRIMARY KEY (warehouse_id, location),
    CONSTRAINT source_locations_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX source_locations_location_idx ON source_locations (location);

CREATE TABLE adoptions (
    id           TEXT    NOT NULL,
    warehouse_id TEXT    NOT NULL,
    tabular_id   TEXT    NOT NULL,
    namespace    TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    source       TEXT    NOT NULL,
    settings     TEXT    NOT NULL,
    mode         TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL,
    CONSTRAINT adoptions_pkey PRIMARY KEY (id),
    CONSTRAINT adoptions_mode_check CHECK (mode IN ('snapshot', 'continuous')),
    CONSTRAINT adoptions_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id) ON DELETE CASCADE
);
CREATE INDEX adoptions_tabular_idx ON adoptions (tabular_id);
CREATE INDEX adoptions_warehouse_idx ON adoptions (warehouse_id, id);

CREATE TABLE adoption_files (
    adoption_id TEXT    NOT NULL,
    location    TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    etag        TEXT    NOT NULL,
    modified_at INTEGER NOT NULL,
    snapshot_id INTEGER NOT NULL,
    CONSTRAINT adoption_files_pkey PRIMARY KEY (adoption_id, location),
    CONSTRAINT adoption_files_adoption_fk FOREIGN KEY (adoption_id) REFERENCES adoptions (id) ON DELETE CASCADE
);

CREATE TABLE adoption_runs (
    id          TEXT    NOT NULL,
    adoption_id TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    snapshot_id INTEGER,
    report      TEXT    NOT NULL,
    CONSTRAINT adoption_runs_pkey PRIMARY KEY (id),
    CONSTRAINT adoption_runs_adoption_fk FOREIGN KEY (adoption_id) REFERENCES adoptions (id) ON DELETE CASCADE
);
CREATE INDEX adoption_runs_adoption_idx ON adoption_runs (adoption_id, started_at);
