//! HTTP tests over a real listener: every endpoint's happy path and errors, on both stores.

mod auth;
mod common;
mod config;
mod faults;
mod idempotency;
mod layer;
mod local_files;
mod management;
mod namespaces;
mod oidc;
mod operators;
mod reference;
mod schemas;
mod tables;
mod tokens;
mod views;
