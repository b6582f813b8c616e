-- Security hardening (issue 13).
--
-- 1. Grants on tables and views name the object by id only. They used to keep the namespace the
--    object was in when granted, so after a rename into another namespace access reviews showed
--    the old name, a revoke by either name found nothing, and dropping the old namespace would
--    have taken the grant with it. Duplicates that only differed by that namespace are merged
--    first (the one granted first is kept; if their expiries differed the kept one decides,
--    which can only shorten access).
DELETE FROM grants
 WHERE securable_type IN ('table', 'view')
   AND id NOT IN (SELECT MIN(id) FROM grants WHERE securable_type IN ('table', 'view')
                  GROUP BY role_id, privilege, securable_type, tabular_id);
UPDATE grants SET namespace_id = NULL WHERE securable_type IN ('table', 'view');

-- 2. Idempotency keys belong to the principal that sent them ('' when authentication is off)
--    and to one request: `request_digest` is the SHA-256 of the method, path and body, so a key
--    reused with another body is refused instead of replaying the first answer. Another
--    principal's key of the same value is another key. Stored responses no longer carry storage
--    credentials (they are vended again on replay), so the keys of the old form are dropped:
--    their bodies may hold credentials, and they expire within the key lifetime anyway.
DELETE FROM idempotency_keys;
ALTER TABLE idempotency_keys ADD COLUMN principal TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (principal, key);
