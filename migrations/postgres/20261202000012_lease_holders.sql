-- Who dropped (or unregistered) the table a lease keeps locations for: the same table registered
-- again is let into its leased locations only by that principal, not by anyone who learns its
-- metadata file's path. Leases made before this record no one.
ALTER TABLE location_leases ADD COLUMN principal TEXT NOT NULL DEFAULT '';
