-- The twin of migrations/postgres/20261204000014_principal_secrets.sql; see the comments there.
ALTER TABLE principals ADD COLUMN secret_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE principals ADD COLUMN display_name TEXT;
ALTER TABLE principals ADD COLUMN claims_issued_at INTEGER;
