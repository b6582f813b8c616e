-- A rotated secret's grace period: the previous secret's hash, and until when (milliseconds
-- since the epoch) it still gets tokens and tokens issued under it still work, so credentials
-- can be rolled through a fleet without downtime. NULL: the previous secret died at rotation.
ALTER TABLE principals ADD COLUMN previous_secret_hash TEXT;
ALTER TABLE principals ADD COLUMN previous_secret_until BIGINT;
