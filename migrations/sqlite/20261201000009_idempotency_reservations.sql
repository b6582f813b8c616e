-- A mutation that records an Idempotency-Key writes, with its change, the id of the request
-- that made it (`reservation`). The request's final answer is stored by filling in exactly the
-- row it reserved, so "did this request's mutation commit?" is read from the row itself rather
-- than carried out of the store beside the result; a concurrent duplicate that reserved
-- nothing cannot fill in another request's row.
ALTER TABLE idempotency_keys ADD COLUMN reservation TEXT;
