-- Tables and views ("tabulars"). They share one name space per namespace, so one table holds
-- both, with `kind` telling them apart and one unique constraint over (namespace_id, name).
--
-- `metadata` is the current metadata JSON, kept beside `metadata_location` so loadTable never
-- reads object storage. Commits are a compare-and-swap on this row:
--   UPDATE tabulars SET metadata_location = $new, ... WHERE id = $id AND metadata_location = $old
-- and only the request whose swap matched wins; losers see zero rows updated.
CREATE TABLE tabulars (
    id                TEXT   NOT NULL,
    warehouse_id      TEXT   NOT NULL,
    namespace_id      TEXT   NOT NULL,
    name              TEXT   COLLATE "C" NOT NULL,
    kind              TEXT   NOT NULL,
    -- The base location without a trailing slash; the table owns everything below it.
    location          TEXT   COLLATE "C" NOT NULL,
    metadata_location TEXT   NOT NULL,
    metadata          TEXT   NOT NULL,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    CONSTRAINT tabulars_pkey PRIMARY KEY (id),
    CONSTRAINT tabulars_name_key UNIQUE (namespace_id, name),
    CONSTRAINT tabulars_kind_check CHECK (kind IN ('table', 'view')),
    CONSTRAINT tabulars_warehouse_fk FOREIGN KEY (warehouse_id) REFERENCES warehouses (id),
    -- NO ACTION: a namespace that still holds tables or views cannot be dropped.
    CONSTRAINT tabulars_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
);

-- Serves listing a namespace's tables or views in name order.
CREATE INDEX tabulars_listing_idx ON tabulars (namespace_id, kind, name);
-- Serves the location-overlap checks (exact, ancestor and descendant lookups by range).
CREATE INDEX tabulars_location_idx ON tabulars (warehouse_id, location);
