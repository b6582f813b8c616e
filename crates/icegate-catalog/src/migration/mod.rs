//! Catalog-to-catalog migration into icegate (issue 35, being built): what a run and each of its
//! tables keep, first.

pub mod store;
