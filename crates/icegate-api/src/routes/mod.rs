//! HTTP handlers, one module per resource. A handler extracts (path, query, body, headers, the
//! request context), calls the catalog service and shapes the response: status, headers, body.
//! A table response is the service's table and the service's storage access for it (two calls);
//! a storage profile goes to the service with its secrets in plain text (`UnsealedProfile`), and
//! the service seals them.

pub mod access;
pub mod adoption;
pub mod audit;
pub mod config;
pub mod holds;
pub mod lifecycle;
pub mod maintenance;
pub mod migrations;
pub mod namespaces;
pub mod oauth;
pub mod ops;
pub mod reviews;
pub mod tables;
pub mod tasks;
pub mod views;
pub mod warehouses;
