-- Tables and views ("tabulars"): the twin of migrations/postgres/20261130000002_tabulars.sql;
-- see the comments there.
CREATE TABLE tabulars (
    id                TEXT    NOT NULL,
    warehouse_id      TEXT    NOT NULL,
    namespace_id      TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    location          TEXT    NOT NULL,
    metadata_location TEXT    NOT NULL,
    metadata          TEXT    NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    CONSTRAINT tabulars_pkey PRIMARY KEY (id),
    CONSTRAINT tabulars_name_key UNIQUE (namespace_id, name),
    CONSTRAINT tabulars_kind_check CHECK (kind IN ('table', 'view')),
    CONSTRAINT tabulars_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    CONSTRAINT tabulars_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
);

CREATE INDEX tabulars_listing_idx ON tabulars (namespace_id, kind, name);
CREATE INDEX tabulars_location_idx ON tabulars (warehouse_id, location);
