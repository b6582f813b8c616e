-- Large metadata documents are stored compressed, as gzip members made once by the commit that
-- wrote them (the same bytes answer `Accept-Encoding: gzip` loads). `metadata` is then empty.
ALTER TABLE tabulars ADD COLUMN metadata_gzip BLOB;
