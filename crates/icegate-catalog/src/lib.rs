//! icegate's domain: identifiers parsed at the edge, the catalog and access-management
//! services that HTTP handlers call (each operation takes a [`RequestContext`] and decides its
//! own authorization on the values it parsed), and the store traits that `icegate-store`
//! implements.
//!
//! Nothing here knows about SQL, and of HTTP only what the Iceberg REST protocol makes part of
//! an operation's meaning: a loaded table's ETag (the spec's `If-None-Match` contract), the
//! catalog's base URL (vended credentials name their refresh endpoint), and an idempotency
//! key's operation (`"<METHOD> <path>"`, which a reused key must match). Handlers translate
//! requests into these types, the services decide, and the store persists.

pub mod access;
pub mod access_admin;
pub mod actors;
pub mod adoption;
pub mod audit;
pub mod audit_archive;
mod authorization;
pub mod budget;
pub mod cache;
pub mod clock;
mod commit;
mod commit_budget;
pub mod context;
pub mod detach;
pub mod error;
pub mod files;
pub mod holds;
pub mod idempotency;
pub mod ident;
pub mod ids;
pub mod jobs;
pub mod lifecycle;
pub mod maintenance;
pub mod metadata_cache;
pub mod migration;
pub mod namespaces;
pub mod pagination;
pub mod reviews;
pub mod schema_cost;
pub mod service;
pub mod storage;
pub mod store;
pub mod tables;
pub mod tokens;
pub mod views;
pub mod warehouses;

pub use context::RequestContext;
pub use error::{CatalogError, ObjectKind, Result};
pub use ident::{NamespaceIdent, StorageRoot, WarehouseName};
pub use ids::{NamespaceId, PrincipalId, TabularId, WarehouseId};
pub use service::Catalog;
pub use store::{CatalogStore, Properties};
