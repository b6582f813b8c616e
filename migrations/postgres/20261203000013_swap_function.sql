-- A group of single-table commits' compare-and-swaps in one statement (crates/icegate-store/src/
-- group_commit.rs): one round trip and one transaction for the group, where a transaction of
-- BEGIN, one UPDATE per swap and COMMIT took two round trips more than it has swaps.
--
-- Each swap is exactly tabulars::SWAP_SQL: it applies only to the row with its table's id, its
-- expected metadata location, and the name and namespace it was addressed to. They run in the
-- order given (the caller's lock order: ids ascending), each against the rows as the ones
-- before it left them, and the answer says which applied. A row's lock is waited for at most
-- 200 ms (the function's own setting): past that the server aborts the statement, nothing of
-- it applies, and the caller runs the swaps alone.
CREATE FUNCTION icegate_swap_metadata(
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
) RETURNS BOOLEAN[]
LANGUAGE plpgsql
SET lock_timeout = '200ms'
AS $$
DECLARE
    applied BOOLEAN[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        UPDATE tabulars
           SET metadata_location = p_metadata_locations[i], metadata = p_documents[i],
               metadata_gzip = p_gzips[i], location = p_locations[i], updated_at = p_now
         WHERE id = p_ids[i] AND metadata_location = p_expected[i] AND name = p_names[i]
           AND namespace_id = (SELECT n.id FROM namespaces n
                                WHERE n.warehouse_id = p_warehouse_ids[i] AND n.name = p_namespaces[i]);
        applied := applied || FOUND;
    END LOOP;
    RETURN applied;
END
$$;
