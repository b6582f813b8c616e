-- Locations of staged creates (stage-create), reserved until the credentials vended for them
-- expire. A staged table is not in the catalog yet, but its creator holds read-write
-- credentials for its locations: until those expire no other table, view or namespace may be
-- placed there (the overlap check reads reservations like table locations). Only the principal
-- that staged it may place the same table (namespace and name) at exactly a reserved location,
-- which its commit does; the commit removes the rows of the locations it took, and nothing else
-- ends a reservation before it expires (staging again extends it). Expired rows are ignored by the checks and removed by later reservations. A namespace
-- holding an unexpired reservation cannot be dropped (the foreign key refuses, as for tables):
-- a namespace made anew under the same name must not find credentials out for its directory.
CREATE TABLE location_reservations (
    warehouse_id TEXT NOT NULL,
    namespace_id TEXT NOT NULL,
    name         TEXT NOT NULL,
    principal    TEXT NOT NULL,
    location     TEXT COLLATE "C" NOT NULL,
    expires_at   BIGINT NOT NULL,
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
    location     TEXT COLLATE "C" NOT NULL,
    -- The dropped table's or view's uuid: registering that same table again is not kept out.
    tabular_uuid TEXT NOT NULL,
    expires_at   BIGINT NOT NULL
);

CREATE INDEX location_leases_location_idx ON location_leases (warehouse_id, location);
