//! Adopting existing Parquet datasets as Iceberg tables in place (issue 34, being built): the
//! pieces that need no storage or catalog state come first.

pub mod hive;
