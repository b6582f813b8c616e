-- Where a role membership comes from: 'manual' (the management API) or 'claim' (the roles or
-- groups claim of an external OIDC token, synchronised when a new token is first seen).
-- Claim memberships that a later token no longer carries are removed; manual ones never are.
ALTER TABLE role_members ADD COLUMN source TEXT NOT NULL DEFAULT 'manual';
