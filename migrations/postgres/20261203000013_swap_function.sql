-- A group of single-table commits' compare-and-swaps in one statement (crates/icegate-store/src/
-- group_commit.rs): one round trip and one transaction for the group, where a transaction of
-- BEGIN, one UPDATE per swap and COMMIT took two round trips more than it has swaps.
--
-- First it locks the group's rows that no other transaction holds, by id, skipping the others
-- (it never waits for a row, so it can be in no deadlock and holds up no commit behind it).
-- Then each swap whose row it locked runs exactly as tabulars::SWAP_SQL: it applies only to the
-- row with its table's id, its expected metadata location, and the name and namespace it was
-- addressed to; in the order given, each against the row as the ones before it left it. The
-- answer says, per swap: 1 applied, 0 conflicted, 2 not run (its row was held, or is gone):
-- the caller runs those alone. The lock timeout is only a backstop.
--
-- It runs with the caller's rights (not SECURITY DEFINER), and with the search path it was
-- created with, the one the migrations created the tables with: a session's search path cannot
-- point its tables at others of the same names.
--
-- Its first step inserts the group's fence token and its last deletes it, in the group's own
-- transaction (see swap_fences below).

-- Fences of group commits. A committer whose connection failed during a group, not knowing
-- whether the server had the statement (it commits it anyway when it had), inserts the group's
-- token from another connection: that insert waits for the group while it runs (its own insert
-- of the token is not yet committed), and once it returns, inserted or refused as a duplicate,
-- the group has committed or rolled back for good, or will fail at its first step should it
-- ever start. Only then are the rows read to learn the outcome. Rows are those settlers'
-- fences (a group deletes its own), removed after a day.
CREATE TABLE swap_fences (
    token      TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    CONSTRAINT swap_fences_pkey PRIMARY KEY (token)
);

CREATE FUNCTION icegate_swap_metadata(
    p_token              TEXT,
    p_ids                TEXT[],
    p_expected           TEXT[],
    p_names              TEXT[],
    p_warehouse_ids      TEXT[],
    p_namespaces         TEXT[],
    p_metadata_locations TEXT[],
    p_documents          TEXT[],
    p_gzips              BYTEA[],
    p_locations          TEXT[],
    p_now                BIGINT
) RETURNS SMALLINT[]
LANGUAGE plpgsql
SET lock_timeout = '200ms'
SET search_path FROM CURRENT
AS $$
DECLARE
    locked  TEXT[];
    outcome SMALLINT[] := '{}';
BEGIN
    INSERT INTO swap_fences (token, created_at) VALUES (p_token, p_now);
    SELECT coalesce(array_agg(free.id), '{}') INTO locked
      FROM (SELECT t.id FROM tabulars t WHERE t.id = ANY (p_ids)
             ORDER BY t.id FOR NO KEY UPDATE SKIP LOCKED) AS free;
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        IF NOT (p_ids[i] = ANY (locked)) THEN
            outcome := outcome || 2::SMALLINT;
            CONTINUE;
        END IF;
        UPDATE tabulars
           SET metadata_location = p_metadata_locations[i], metadata = p_documents[i],
               metadata_gzip = p_gzips[i], location = p_locations[i], updated_at = p_now
         WHERE id = p_ids[i] AND metadata_location = p_expected[i] AND name = p_names[i]
           AND namespace_id = (SELECT n.id FROM namespaces n
                                WHERE n.warehouse_id = p_warehouse_ids[i] AND n.name = p_namespaces[i]);
        outcome := outcome || (CASE WHEN FOUND THEN 1 ELSE 0 END)::SMALLINT;
    END LOOP;
    DELETE FROM swap_fences WHERE token = p_token;
    RETURN outcome;
END
$$;
