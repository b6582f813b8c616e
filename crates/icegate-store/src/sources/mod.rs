//! Catalogs a migration moves tables from, reached over SQL (issue 35): the JDBC/SQL catalog.

mod sql;

pub use sql::{SqlSource, connection_url};
