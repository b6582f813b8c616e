//! Catalog-to-catalog migration into icegate (issue 35, being built): what a run and each of its
//! tables keep, and the source catalogs as a migration sees them.

pub mod source;
pub mod spec;
pub mod store;
