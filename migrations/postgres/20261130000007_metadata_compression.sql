-- Table and view metadata documents are tens of kilobytes once a table has history, and every
-- commit stores a new one: PostgreSQL's default TOAST compression (pglz) then costs more CPU
-- than the rest of the commit. lz4 compresses them several times faster at a similar ratio.
-- Servers built without lz4 (or older than 14) keep pglz; existing values are not rewritten.
DO $$
BEGIN
    ALTER TABLE tabulars ALTER COLUMN metadata SET COMPRESSION lz4;
EXCEPTION
    WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
        RAISE NOTICE 'lz4 compression is not available; metadata keeps the default compression';
END
$$;
