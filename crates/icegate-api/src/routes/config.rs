//! `GET /v1/config`: what a client needs to talk to one warehouse.

use std::collections::BTreeMap;

use axum::extract::State;

use crate::AppState;
use crate::error::{ApiError, IcebergErrorResponse};
use crate::extract::{Context, Json, Query};
use crate::models::{CatalogConfig, ConfigQuery};

/// List all catalog configuration settings
///
/// Resolves the warehouse (by name, or the configured default) to its opaque `prefix` and lists
/// every endpoint this server implements.
#[utoipa::path(
    get,
    path = "/v1/config",
    tag = "Configuration API",
    operation_id = "getConfig",
    params(ConfigQuery),
    responses(
        (status = 200, description = "Server specified configuration values.", body = CatalogConfig),
        (status = 400, description = "No warehouse given and no default configured", body = IcebergErrorResponse),
        (status = 404, description = "Warehouse not found", body = IcebergErrorResponse),
        (status = 503, description = "Metadata store unavailable", body = IcebergErrorResponse),
    )
)]
pub async fn get_config(
    State(state): State<AppState>,
    Context(ctx): Context,
    Query(query): Query<ConfigQuery>,
) -> Result<Json<CatalogConfig>, ApiError> {
    let warehouse = state.catalog.warehouses().config(&ctx, query.warehouse.as_deref()).await?;
    // The separator percent-encoded, as the spec asks (`%1F` unless configured otherwise).
    let separator = state.catalog.namespace_separator();
    let encoded =
        percent_encoding::utf8_percent_encode(&separator.to_string(), percent_encoding::NON_ALPHANUMERIC).to_string();
    let overrides = BTreeMap::from([
        ("prefix".to_owned(), warehouse.id.into_string()),
        ("namespace-separator".to_owned(), encoded),
    ]);
    // PyIceberg's own suites read this catalog property to know that namespace levels cannot
    // hold a dot (with `.` as the separator they cannot).
    let defaults = if separator == '.' {
        BTreeMap::from([("supports_dot_in_identifier".to_owned(), "false".to_owned())])
    } else {
        BTreeMap::new()
    };
    Ok(Json(CatalogConfig {
        overrides,
        defaults,
        endpoints: state.endpoints.as_ref().clone(),
        idempotency_key_lifetime: Some(crate::idempotency::iso8601(state.idempotency_lifetime)),
    }))
}
