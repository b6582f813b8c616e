//! Request and response bodies of the Iceberg REST catalog, named and shaped exactly as in the
//! spec (`rest-catalog-open-api`), so the generated OpenAPI can be compared with it: here the
//! shared ones (namespaces, config, pages), in `tables` the table endpoints'.

pub mod tables;

use std::collections::BTreeMap;

use icegate_catalog::tables::TableIdent;
use icegate_catalog::{NamespaceIdent, WarehouseId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Reference to one or more levels of a namespace.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(example = json!(["accounting", "tax"]))]
pub struct Namespace(pub Vec<String>);

/// An opaque token that allows clients to make use of pagination for list APIs. `null` on the
/// last page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(transparent)]
pub struct PageToken(pub String);

/// Server-provided configuration for the catalog.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CatalogConfig {
    /// Properties that override client configuration; applied after defaults and client
    /// configuration. Always carries `prefix`, the warehouse's opaque URL id.
    pub overrides: BTreeMap<String, String>,
    /// Properties that should be used as default configuration.
    pub defaults: BTreeMap<String, String>,
    /// The endpoints this server implements, as `"<VERB> <path>"`.
    pub endpoints: Vec<String>,
    /// How long a client may retry with one `Idempotency-Key` (ISO-8601 duration).
    #[serde(rename = "idempotency-key-lifetime")]
    pub idempotency_key_lifetime: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConfigQuery {
    /// Warehouse name. Without it the configured default warehouse is used.
    pub warehouse: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListNamespacesQuery {
    /// Opaque token from a previous page; send it empty to start paginating. Without it every
    /// result comes in one response.
    #[serde(rename = "pageToken")]
    #[param(rename = "pageToken")]
    pub page_token: Option<String>,
    /// Page size when paginating (at most 1000).
    #[serde(rename = "pageSize")]
    #[param(rename = "pageSize")]
    pub page_size: Option<i64>,
    /// Parent namespace, levels separated by `%1F`; top-level namespaces when absent.
    pub parent: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ListNamespacesResponse {
    #[serde(rename = "next-page-token")]
    pub next_page_token: Option<PageToken>,
    pub namespaces: Vec<Namespace>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateNamespaceRequest {
    pub namespace: Namespace,
    /// Configured string to string map of properties for the namespace.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateNamespaceResponse {
    pub namespace: Namespace,
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct GetNamespaceResponse {
    pub namespace: Namespace,
    pub properties: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UpdateNamespacePropertiesRequest {
    #[serde(default)]
    pub removals: Vec<String>,
    #[serde(default)]
    pub updates: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UpdateNamespacePropertiesResponse {
    /// Keys that were added or updated.
    pub updated: Vec<String>,
    /// Keys that were removed.
    pub removed: Vec<String>,
    /// Keys requested for removal that were not found.
    pub missing: Vec<String>,
}

/// `/v1/{prefix}/...`
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct PrefixPath {
    /// Warehouse prefix from `/v1/config`.
    pub prefix: String,
}

/// `/v1/{prefix}/namespaces/{namespace}/...`
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NamespacePath {
    /// Warehouse prefix from `/v1/config`.
    pub prefix: String,
    /// Namespace, levels separated by `%1F`.
    pub namespace: String,
}

/// `/v1/{prefix}/namespaces/{namespace}/tables/{table}/...`
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TablePath {
    /// Warehouse prefix from `/v1/config`.
    pub prefix: String,
    /// Namespace, levels separated by `%1F`.
    pub namespace: String,
    /// A table name.
    pub table: String,
}

impl PrefixPath {
    /// The warehouse the prefix names (resolved by the service).
    pub fn warehouse(&self) -> WarehouseId {
        WarehouseId::new(self.prefix.as_str())
    }
}

impl NamespacePath {
    /// The warehouse and the namespace, parsed.
    pub fn parse(&self) -> icegate_catalog::Result<(WarehouseId, NamespaceIdent)> {
        Ok((WarehouseId::new(self.prefix.as_str()), NamespaceIdent::parse_encoded(&self.namespace)?))
    }
}

impl TablePath {
    /// The warehouse and the table, parsed.
    pub fn parse(&self) -> icegate_catalog::Result<(WarehouseId, TableIdent)> {
        Ok((WarehouseId::new(self.prefix.as_str()), TableIdent::parse(&self.namespace, &self.table)?))
    }
}

impl ViewPath {
    /// The warehouse and the view, parsed.
    pub fn parse(&self) -> icegate_catalog::Result<(WarehouseId, TableIdent)> {
        Ok((WarehouseId::new(self.prefix.as_str()), TableIdent::parse_view(&self.namespace, &self.view)?))
    }
}

/// `/v1/{prefix}/namespaces/{namespace}/views/{view}`
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ViewPath {
    /// Warehouse prefix from `/v1/config`.
    pub prefix: String,
    /// Namespace, levels separated by `%1F`.
    pub namespace: String,
    /// A view name.
    pub view: String,
}
