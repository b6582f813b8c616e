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

-- Locations of dropped tables and views, kept from other tables, views and namespaces until
-- the credentials vended for them while they existed have expired (the STS session duration
-- of the warehouse's profile): otherwise a table or namespace made there later would be
-- reachable with them. Not tied to a namespace, so they never block a namespace's drop.
CREATE TABLE location_leases (
    warehouse_id TEXT NOT NULL,
    location     TEXT    NOT NULL,
    tabular_uuid TEXT    NOT NULL,
    expires_at   INTEGER NOT NULL
);

CREATE INDEX location_leases_location_idx ON location_leases (warehouse_id, location);
