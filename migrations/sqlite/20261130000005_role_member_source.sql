-- The twin of migrations/postgres/20261130000005_role_member_source.sql.
ALTER TABLE role_members ADD COLUMN source TEXT NOT NULL DEFAULT 'manual';
