-- Locations of staged creates: the twin of migrations/postgres/20261201000010_location_reservations.sql.
CREATE TABLE location_reservations (
    warehouse_id TEXT    NOT NULL,
    namespace_id TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    principal    TEXT    NOT NULL,
    location     TEXT    NOT NULL,
    expires_at   INTEGER NOT NULL,
    CONSTRAINT location_reservations_pkey PRIMARY KEY (namespace_id, name, location),
    CONSTRAINT location_reservations_namespace_fk FOREIGN KEY (namespace_id) REFERENCES namespaces (id)
);

CREATE INDEX location_reservations_location_idx ON location_reservations (warehouse_id, location);
