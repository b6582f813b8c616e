-- The twin of migrations/postgres/20261204000015_secret_grace.sql; see the comments there.
ALTER TABLE principals ADD COLUMN previous_secret_hash TEXT;
ALTER TABLE principals ADD COLUMN previous_secret_until INTEGER;
