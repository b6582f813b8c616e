-- PostgreSQL compresses metadata documents with lz4 from this version on; SQLite stores them as
-- they are. This migration keeps both databases' schema versions in step.
SELECT 1;
