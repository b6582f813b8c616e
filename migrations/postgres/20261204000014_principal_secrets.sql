-- The version of a principal's client secret: 1 for its first, one more at every rotation.
-- Tokens carry the version they were issued under and are refused once it is not the current
-- one, so rotating a secret ends the tokens issued with the old secret (not only new ones).
-- Secrets keep their hash in `secret_hash`: HMAC-SHA-256 under a salt of their own from now on;
-- Argon2id hashes of earlier versions are replaced by that form at their next use.
ALTER TABLE principals ADD COLUMN secret_version BIGINT NOT NULL DEFAULT 1;
-- What an external identity provider calls the principal (its `preferred_username`), shown
-- beside its name. Principals of external issuers are named by the issuer's subject, which the
-- user cannot change; a username often can be, and must not decide who a name is.
ALTER TABLE principals ADD COLUMN display_name TEXT;
-- When the token whose claims last set an external principal's claim memberships was issued
-- (its `iat`, else its `exp`, in seconds): a token issued earlier, seen later (by another
-- replica, say), does not set them back to what it says.
ALTER TABLE principals ADD COLUMN claims_issued_at BIGINT;
