//! The two OpenAPI documents icegate serves and commits to `openapi/`: the Iceberg REST surface
//! it implements, and the management API (plus the operational endpoints).

use axum::Router;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::routes::{
    access, adoption, audit, config, holds, lifecycle, maintenance, migrations, namespaces, oauth, ops, reviews,
    tables, tasks, views, warehouses,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "icegate: Apache Iceberg REST Catalog API",
        description = "The subset of the Iceberg REST catalog specification (1.11) that icegate implements. \
                       Generated from icegate's code; `GET /v1/config` lists the same endpoints.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(crate::error::IcebergErrorResponse, crate::error::ErrorModel)),
    tags(
        (name = "Configuration API", description = "Catalog configuration for clients"),
        (name = "OAuth2 API", description = "Tokens for principals with client credentials"),
        (name = "Catalog API", description = "Namespaces, tables and views"),
    )
)]
struct IcebergRestDoc;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "icegate management API",
        description = "Administration of icegate: warehouses (and, as they land, principals, roles and grants), \
                       plus the operational endpoints. Errors use the Iceberg error body.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(crate::error::IcebergErrorResponse, crate::error::ErrorModel)),
    tags(
        (name = "Warehouses", description = "Storage roots that hold namespaces, tables and views"),
        (name = "Access control", description = "Principals, roles and grants"),
        (name = "Audit", description = "The audit trail: who did what, and what was handed out"),
        (name = "Access reviews", description = "Who can do what, and campaigns that attest or revoke it"),
        (name = "Legal holds", description = "What may not be dropped, purged or moved while a hold stands"),
        (name = "Tasks", description = "Background work the catalog runs: its progress, results and cancellation"),
        (name = "Adoption", description = "Parquet datasets adopted in place as Iceberg tables: read-only source locations, adoptions, re-syncs"),
        (name = "Migration", description = "Tables moved from another catalog: a plan, a fence at the source, verification, rollback and retirement"),
        (name = "Lifecycle", description = "Dropped tables and views: kept restorable for their hold, undropped, purged by tasks"),
        (name = "Operations", description = "Health, readiness and metrics"),
    )
)]
struct ManagementDoc;

/// The generated documents.
pub struct Documents {
    pub iceberg_rest: Document,
    pub management: Document,
}

impl Documents {
    /// `"VERB /v1/{prefix}/..."` for every catalog operation, in document order: the
    /// `endpoints` list of `/v1/config`.
    pub fn endpoints(&self) -> Vec<String> {
        let mut endpoints = Vec::new();
        for (path, item) in self.iceberg_rest.paths.paths.iter() {
            if !path.starts_with("/v1/{prefix}/") {
                continue;
            }
            for (method, operation) in operations_of(item) {
                if operation.is_some() {
                    endpoints.push(format!("{method} {path}"));
                }
            }
        }
        endpoints
    }

    /// Every documented `(METHOD, path)` of both documents.
    pub fn operations(&self) -> std::collections::HashSet<(String, String)> {
        let mut operations = std::collections::HashSet::new();
        for document in [&self.iceberg_rest, &self.management] {
            for (path, item) in document.paths.paths.iter() {
                for (method, operation) in operations_of(item) {
                    if operation.is_some() {
                        operations.insert((method.to_owned(), path.clone()));
                    }
                }
            }
        }
        operations
    }

    /// Each documented operation's id (`loadTable`, `createPrincipal`, ...), by verb and path.
    pub fn operation_ids(&self) -> std::collections::HashMap<(String, String), String> {
        let mut ids = std::collections::HashMap::new();
        for document in [&self.iceberg_rest, &self.management] {
            for (path, item) in document.paths.paths.iter() {
                for (method, operation) in operations_of(item) {
                    if let Some(id) = operation.and_then(|operation| operation.operation_id.clone()) {
                        ids.insert((method.to_owned(), path.clone()), id);
                    }
                }
            }
        }
        ids
    }

    pub fn iceberg_rest_yaml(&self) -> String {
        self.iceberg_rest.to_yaml().expect("the Iceberg REST document serialises")
    }

    pub fn management_yaml(&self) -> String {
        self.management.to_yaml().expect("the management document serialises")
    }
}

/// The operations of one path item with their HTTP verbs.
pub fn operations_of(
    item: &utoipa::openapi::PathItem,
) -> [(&'static str, Option<&utoipa::openapi::path::Operation>); 8] {
    [
        ("GET", item.get.as_ref()),
        ("HEAD", item.head.as_ref()),
        ("POST", item.post.as_ref()),
        ("PUT", item.put.as_ref()),
        ("PATCH", item.patch.as_ref()),
        ("DELETE", item.delete.as_ref()),
        ("OPTIONS", item.options.as_ref()),
        ("TRACE", item.trace.as_ref()),
    ]
}

/// Every route, registered together with its OpenAPI operation.
pub fn routes() -> (Router<AppState>, Documents) {
    let (iceberg_router, iceberg_rest) = OpenApiRouter::with_openapi(IcebergRestDoc::openapi())
        .routes(routes!(config::get_config))
        .routes(routes!(oauth::get_token))
        .routes(routes!(namespaces::list_namespaces, namespaces::create_namespace))
        .routes(routes!(namespaces::load_namespace, namespaces::namespace_exists, namespaces::drop_namespace))
        .routes(routes!(namespaces::update_properties))
        .routes(routes!(tables::list_tables, tables::create_table))
        .routes(routes!(tables::register_table))
        .routes(routes!(tables::load_credentials))
        .routes(routes!(tables::sign_request))
        .routes(routes!(tables::load_table, tables::update_table, tables::drop_table, tables::table_exists))
        .routes(routes!(tables::unregister_table))
        .routes(routes!(tables::rename_table))
        .routes(routes!(tables::report_metrics))
        .routes(routes!(tables::commit_transaction))
        .routes(routes!(views::list_views, views::create_view))
        .routes(routes!(views::load_view, views::replace_view, views::drop_view, views::view_exists))
        .routes(routes!(views::rename_view))
        .routes(routes!(views::register_view))
        .split_for_parts();
    let (management_router, management) = OpenApiRouter::with_openapi(ManagementDoc::openapi())
        .routes(routes!(warehouses::create_warehouse, warehouses::list_warehouses))
        .routes(routes!(warehouses::get_warehouse, warehouses::delete_warehouse))
        .routes(routes!(warehouses::update_storage_profile))
        .routes(routes!(warehouses::update_settings))
        .routes(routes!(audit::search_audit))
        .routes(routes!(access::create_principal, access::list_principals))
        .routes(routes!(access::get_principal, access::delete_principal))
        .routes(routes!(access::rotate_secret))
        .routes(routes!(access::create_role, access::list_roles))
        .routes(routes!(access::get_role, access::delete_role))
        .routes(routes!(access::add_member, access::remove_member))
        .routes(routes!(access::grant, access::revoke, access::list_grants))
        .routes(routes!(access::grants_on))
        .routes(routes!(access::whoami))
        .routes(routes!(reviews::effective_access))
        .routes(routes!(reviews::create_review, reviews::list_reviews))
        .routes(routes!(reviews::get_review))
        .routes(routes!(reviews::decide_review))
        .routes(routes!(reviews::close_review))
        .routes(routes!(reviews::diff_reviews))
        .routes(routes!(holds::place_hold, holds::list_holds))
        .routes(routes!(holds::lift_hold))
        .routes(routes!(tasks::list_tasks))
        .routes(routes!(tasks::get_task))
        .routes(routes!(tasks::cancel_task))
        .routes(routes!(lifecycle::list_deleted))
        .routes(routes!(lifecycle::undrop))
        .routes(routes!(maintenance::plan))
        .routes(routes!(maintenance::run))
        .routes(routes!(maintenance::list_quarantine))
        .routes(routes!(maintenance::restore))
        .routes(routes!(
            adoption::add_source_location,
            adoption::list_source_locations,
            adoption::remove_source_location
        ))
        .routes(routes!(adoption::adopt, adoption::list_adoptions))
        .routes(routes!(adoption::get_adoption))
        .routes(routes!(adoption::sync_adoption))
        .routes(routes!(migrations::create_migration, migrations::list_migrations))
        .routes(routes!(migrations::get_migration))
        .routes(routes!(migrations::rollback_migration))
        .routes(routes!(migrations::retire_migration))
        .routes(routes!(ops::health))
        .routes(routes!(ops::ready))
        .routes(routes!(ops::metrics))
        .split_for_parts();
    let mut management = management;
    allow_profile_tags(&mut management);
    (iceberg_router.merge(management_router), Documents { iceberg_rest, management })
}

/// A storage profile is tagged by its `type` (`"type": "s3"` beside the S3 fields), which the
/// generator writes as `allOf` of the fields' schema and the tag; the fields' schema refuses
/// properties it does not list (the server refuses unknown fields), so strict validators read the
/// two together as refusing every S3 profile. The tag is listed among the fields as well.
fn allow_profile_tags(document: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    let Some(components) = document.components.as_mut() else { return };
    if let Some(RefOr::T(Schema::Object(fields))) = components.schemas.get_mut("S3ProfileInput") {
        let tag = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["s3"]))
            .description(Some("The profile's type tag, `s3`."))
            .build();
        fields.properties.insert("type".to_owned(), RefOr::T(Schema::Object(tag)));
    }
}

/// The documents alone (for `icegate openapi` and the tests).
pub fn documents() -> Documents {
    routes().1
}

#[cfg(test)]
mod profile_tests {
    #[test]
    fn the_s3_profile_fields_admit_their_type_tag() {
        let document = serde_json::to_value(&super::documents().management).unwrap();
        let fields = &document["components"]["schemas"]["S3ProfileInput"];
        assert_eq!(fields["additionalProperties"], false, "unknown fields are still refused");
        assert_eq!(fields["properties"]["type"]["enum"], serde_json::json!(["s3"]), "{fields}");
    }
}
