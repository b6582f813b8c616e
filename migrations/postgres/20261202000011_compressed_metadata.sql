-- Large metadata documents are stored compressed, as gzip members made once by the commit that
-- wrote them (the same bytes answer `Accept-Encoding: gzip` loads). `metadata` is then empty.
-- Compressing them again would only cost CPU: the column is stored out of line, uncompressed.
ALTER TABLE tabulars ADD COLUMN metadata_gzip BYTEA;
ALTER TABLE tabulars ALTER COLUMN metadata_gzip SET STORAGE EXTERNAL;
