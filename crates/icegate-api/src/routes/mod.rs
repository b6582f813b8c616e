//! HTTP handlers, one module per resource. Handlers stay thin: extract, call one catalog
//! service function, shape the response.

pub mod access;
pub mod config;
pub mod namespaces;
pub mod oauth;
pub mod ops;
pub mod tables;
pub mod views;
pub mod warehouses;
