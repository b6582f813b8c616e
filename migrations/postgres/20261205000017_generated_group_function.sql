-- The group commit's function is now generated from the swap's statements
-- (crates/icegate-store/src/tabulars/swap.rs) and installed by the migration step under a name
-- of its definition (`icegate_swap_group_<hash>`); the hand-written one goes.
DROP FUNCTION IF EXISTS icegate_swap_metadata(TEXT, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], BYTEA[], TEXT[], BIGINT);
