//! HTTP handlers, one module per resource. A handler extracts (path, query, body, the request
//! context), calls a catalog service method and shapes the response: status, headers, body.
//! Table responses also carry storage access (`tables::storage_access`, the credentials or
//! signing configuration for the caller's level), and loadTable answers `If-None-Match` here;
//! warehouse handlers seal the secrets of a profile before the service stores it.

pub mod access;
pub mod config;
pub mod namespaces;
pub mod oauth;
pub mod ops;
pub mod tables;
pub mod views;
pub mod warehouses;
