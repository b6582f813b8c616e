//! Each noun's verbs.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Subcommand;
use icegate_api::routes::access::{
    CreatePrincipalRequest, CreateRoleRequest, GrantRequest, ListGrantsResponse, ListPrincipalsResponse,
    ListRolesResponse, NamespaceParam, PrincipalCredentials, PrincipalResponse, RoleResponse, Securable,
};
use icegate_api::routes::adoption::{AdoptionResponse, AdoptionsResponse};
use icegate_api::routes::audit::AuditPageResponse;
use icegate_api::routes::lifecycle::{ListDeletedResponse, UndropRequest, UndropResponse};
use icegate_api::routes::maintenance::{MaintenanceRequest, MaintenanceResponse};
use icegate_api::routes::migrations::{MigrationRequest, MigrationResponse, MigrationsResponse, RollbackRequest};
use icegate_api::routes::reviews::{EffectiveAccessResponse, ListReviewsResponse, ReviewResponse};
use icegate_api::routes::tasks::{ListTasksResponse, TaskResponse};
use icegate_api::routes::warehouses::{
    CreateWarehouseRequest, ListWarehousesResponse, StorageProfileInput, WarehouseResponse,
};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::{Client, Failure, Outcome, Output, encode, namespace_path};
use super::names;
use super::output::{Table, bytes, or_dash, print, time};

/// A noun's verb, run with a signed-in client.
#[async_trait::async_trait]
pub trait Verb {
    async fn run(self, client: &Client) -> Outcome<()>;
}

fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Outcome<T> {
    let text = std::fs::read_to_string(path).map_err(|e| Failure(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| Failure(format!("{}: {e}", path.display())))
}

fn key_values(pairs: &[String]) -> Outcome<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| Failure(format!("{pair:?} is not key=value")))
        })
        .collect()
}

// --- warehouses ---------------------------------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum WarehouseVerb {
    /// The warehouses the caller may see.
    List,
    /// One warehouse: its storage (without secrets) and settings.
    Show { name: String },
    /// Create a warehouse.
    Create {
        name: String,
        /// `file:///absolute/path` or `s3://bucket/prefix`.
        #[arg(long)]
        storage_root: String,
        /// A storage profile as JSON (see docs/storage.md); default: `file`.
        #[arg(long)]
        storage_profile: Option<std::path::PathBuf>,
    },
    /// Replace a warehouse's storage profile with the one in a JSON file.
    SetStorageProfile { name: String, file: std::path::PathBuf },
    /// Delete an empty warehouse.
    Delete { name: String },
}

fn warehouse_table(warehouses: &[WarehouseResponse]) -> String {
    let mut table = Table::new(&["name", "storage root", "storage", "created"]);
    for w in warehouses {
        let kind = serde_json::to_value(&w.storage_profile).ok().and_then(|v| v["type"].as_str().map(str::to_owned));
        table.row(vec![w.name.clone(), w.storage_root.clone(), or_dash(kind), time(w.created_at_ms)]);
    }
    table.render()
}

#[async_trait::async_trait]
impl Verb for WarehouseVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::List => {
                let listed: ListWarehousesResponse = client.get("/management/v1/warehouses").await?;
                print(out, &listed, |l| warehouse_table(&l.warehouses))
            }
            Self::Show { name } => {
                let shown: WarehouseResponse =
                    client.get(&format!("/management/v1/warehouses/{}", encode(&name))).await?;
                print(out, &shown, |w| {
                    let profile = serde_json::to_string_pretty(&w.storage_profile).unwrap_or_default();
                    let settings = serde_json::to_string_pretty(&w.settings).unwrap_or_default();
                    format!(
                        "{}\nstorage profile: {profile}\nsettings: {settings}",
                        warehouse_table(std::slice::from_ref(w))
                    )
                })
            }
            Self::Create { name, storage_root, storage_profile } => {
                let storage_profile: Option<StorageProfileInput> =
                    storage_profile.as_deref().map(read_json).transpose()?;
                let request = CreateWarehouseRequest { name, storage_root, storage_profile };
                let created: WarehouseResponse = client.post("/management/v1/warehouses", &request).await?;
                print(out, &created, |w| format!("created warehouse {} at {}", w.name, w.storage_root))
            }
            Self::SetStorageProfile { name, file } => {
                let profile: StorageProfileInput = read_json(&file)?;
                let path = format!("/management/v1/warehouses/{}/storage-profile", encode(&name));
                let updated: WarehouseResponse = client.call(Method::PUT, &path, Some(&profile)).await?;
                print(out, &updated, |w| format!("warehouse {}: storage profile version {}", w.name, w.profile_version))
            }
            Self::Delete { name } => {
                client.delete(&format!("/management/v1/warehouses/{}", encode(&name))).await?;
                print(out, &json!({ "deleted": name }), |_| format!("deleted warehouse {name}"))
            }
        }
    }
}

// --- namespaces ---------------------------------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum NamespaceVerb {
    /// The namespaces of a warehouse (`WAREHOUSE`), or below one (`WAREHOUSE.NAMESPACE`).
    List { parent: String },
    /// Create a namespace (`WAREHOUSE.NAMESPACE`, nested ones dotted).
    Create {
        name: String,
        /// A property, `key=value` (repeat it).
        #[arg(long = "property", short = 'p')]
        properties: Vec<String>,
    },
    /// A namespace's properties.
    Show { name: String },
    /// Drop an empty namespace.
    Drop { name: String },
}

#[async_trait::async_trait]
impl Verb for NamespaceVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::List { parent } => {
                let mut parts = names::parts(&parent)?;
                let warehouse = parts.remove(0);
                let prefix = client.prefix(&warehouse).await?;
                let mut path = format!("/v1/{prefix}/namespaces?pageSize=1000");
                if !parts.is_empty() {
                    path.push_str(&format!("&parent={}", namespace_path(&parts)));
                }
                let listed: Value = client.get(&path).await?;
                let namespaces: Vec<Vec<String>> =
                    serde_json::from_value(listed["namespaces"].clone()).unwrap_or_default();
                let document = json!({ "warehouse": warehouse, "namespaces": namespaces });
                print(out, &document, |_| {
                    let mut table = Table::new(&["namespace"]);
                    for ns in &namespaces {
                        table.row(vec![names::joined(&[vec![warehouse.clone()], ns.clone()].concat())]);
                    }
                    table.render()
                })
            }
            Self::Create { name, properties } => {
                let (warehouse, levels) = names::namespace(&name)?;
                let prefix = client.prefix(&warehouse).await?;
                let body = json!({ "namespace": levels, "properties": key_values(&properties)? });
                let created: Value = client.post(&format!("/v1/{prefix}/namespaces"), &body).await?;
                print(out, &created, |_| format!("created namespace {name}"))
            }
            Self::Show { name } => {
                let (warehouse, levels) = names::namespace(&name)?;
                let prefix = client.prefix(&warehouse).await?;
                let shown: Value = client.get(&format!("/v1/{prefix}/namespaces/{}", namespace_path(&levels))).await?;
                print(out, &shown, |s| {
                    let mut table = Table::new(&["property", "value"]);
                    if let Some(properties) = s["properties"].as_object() {
                        for (k, v) in properties {
                            table.row(vec![k.clone(), v.as_str().unwrap_or_default().to_owned()]);
                        }
                    }
                    format!("namespace {name}\n{}", table.render())
                })
            }
            Self::Drop { name } => {
                let (warehouse, levels) = names::namespace(&name)?;
                let prefix = client.prefix(&warehouse).await?;
                client.delete(&format!("/v1/{prefix}/namespaces/{}", namespace_path(&levels))).await?;
                print(out, &json!({ "dropped": name }), |_| format!("dropped namespace {name}"))
            }
        }
    }
}

// --- tables -------------------------------------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum TableVerb {
    /// The tables of a namespace (`WAREHOUSE.NAMESPACE`).
    List { namespace: String },
    /// A table: schema, partition spec, sort order, snapshots, refs, properties and size.
    Show { name: String },
    /// Drop a table (kept restorable for the warehouse's hold; `--purge` deletes its files after it).
    Drop {
        name: String,
        #[arg(long)]
        purge: bool,
    },
    /// Bring back a dropped table (the newest of that name, or `--id`).
    Undrop {
        name: String,
        #[arg(long)]
        id: Option<String>,
    },
    /// The dropped tables and views a warehouse keeps.
    Deleted { warehouse: String },
}

fn table_summary(name: &str, loaded: &Value) -> String {
    let metadata = &loaded["metadata"];
    let mut out = format!(
        "table {name}\nlocation: {}\nmetadata: {}\nformat version: {}\n",
        metadata["location"].as_str().unwrap_or_default(),
        loaded["metadata-location"].as_str().unwrap_or_default(),
        metadata["format-version"]
    );
    let current_schema = metadata["current-schema-id"].as_i64();
    let schemas = metadata["schemas"].as_array().cloned().unwrap_or_default();
    if let Some(schema) = schemas.iter().find(|s| s["schema-id"].as_i64() == current_schema) {
        let mut table = Table::new(&["id", "column", "type", "required"]);
        for field in schema["fields"].as_array().into_iter().flatten() {
            let kind = match &field["type"] {
                Value::String(s) => s.clone(),
                other => other["type"].as_str().unwrap_or("nested").to_owned(),
            };
            table.row(vec![
                field["id"].to_string(),
                field["name"].as_str().unwrap_or_default().to_owned(),
                kind,
                field["required"].as_bool().unwrap_or(false).to_string(),
            ]);
        }
        out.push_str(&format!("\nschema {}\n{}\n", schema["schema-id"], table.render()));
    }
    let spec_id = metadata["default-spec-id"].as_i64();
    if let Some(spec) =
        metadata["partition-specs"].as_array().into_iter().flatten().find(|s| s["spec-id"].as_i64() == spec_id)
    {
        let fields: Vec<String> = spec["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                format!(
                    "{} ({} of field {})",
                    f["name"].as_str().unwrap_or_default(),
                    f["transform"].as_str().unwrap_or_default(),
                    f["source-id"]
                )
            })
            .collect();
        out.push_str(&format!(
            "\npartition spec {spec_id:?}: {}\n",
            if fields.is_empty() { "unpartitioned".into() } else { fields.join(", ") }
        ));
    }
    let order_id = metadata["default-sort-order-id"].as_i64();
    if let Some(order) =
        metadata["sort-orders"].as_array().into_iter().flatten().find(|s| s["order-id"].as_i64() == order_id)
    {
        let fields: Vec<String> = order["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                format!(
                    "{} {} of field {}",
                    f["transform"].as_str().unwrap_or_default(),
                    f["direction"].as_str().unwrap_or_default(),
                    f["source-id"]
                )
            })
            .collect();
        out.push_str(&format!(
            "sort order: {}\n",
            if fields.is_empty() { "unsorted".into() } else { fields.join(", ") }
        ));
    }
    let mut snapshots = Table::new(&["snapshot", "committed", "operation", "records", "files", "size"]);
    let mut size = None;
    for snapshot in metadata["snapshots"].as_array().into_iter().flatten() {
        let summary = &snapshot["summary"];
        let field = |k: &str| summary[k].as_str().map(str::to_owned);
        snapshots.row(vec![
            snapshot["snapshot-id"].to_string(),
            snapshot["timestamp-ms"].as_i64().map(time).unwrap_or_default(),
            or_dash(field("operation")),
            or_dash(field("total-records")),
            or_dash(field("total-data-files")),
            or_dash(field("total-files-size").and_then(|s| s.parse::<u64>().ok()).map(bytes)),
        ]);
        if snapshot["snapshot-id"] == metadata["current-snapshot-id"] {
            size = field("total-files-size").and_then(|s| s.parse::<u64>().ok());
        }
    }
    out.push_str(&format!(
        "\nsnapshots (current {}, size {})\n{}\n",
        metadata["current-snapshot-id"],
        or_dash(size.map(bytes)),
        snapshots.render()
    ));
    let mut refs = Table::new(&["ref", "type", "snapshot"]);
    for (name, r) in metadata["refs"].as_object().into_iter().flatten() {
        refs.row(vec![name.clone(), r["type"].as_str().unwrap_or_default().to_owned(), r["snapshot-id"].to_string()]);
    }
    out.push_str(&format!("\n{}\n", refs.render()));
    let mut properties = Table::new(&["property", "value"]);
    for (k, v) in metadata["properties"].as_object().into_iter().flatten() {
        properties.row(vec![k.clone(), v.as_str().unwrap_or_default().to_owned()]);
    }
    out.push_str(&format!("\n{}", properties.render()));
    out
}

#[async_trait::async_trait]
impl Verb for TableVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::List { namespace } => {
                let (warehouse, levels) = names::namespace(&namespace)?;
                let prefix = client.prefix(&warehouse).await?;
                let listed: Value = client
                    .get(&format!("/v1/{prefix}/namespaces/{}/tables?pageSize=1000", namespace_path(&levels)))
                    .await?;
                let tables: Vec<String> = listed["identifiers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i["name"].as_str().map(str::to_owned))
                    .collect();
                print(out, &json!({ "namespace": levels, "tables": tables }), |_| {
                    let mut table = Table::new(&["table"]);
                    for t in &tables {
                        table.row(vec![names::joined(
                            &[vec![warehouse.clone()], levels.clone(), vec![t.clone()]].concat(),
                        )]);
                    }
                    table.render()
                })
            }
            Self::Show { name } => {
                let (warehouse, levels, table) = names::table(&name)?;
                let prefix = client.prefix(&warehouse).await?;
                let path = format!("/v1/{prefix}/namespaces/{}/tables/{}", namespace_path(&levels), encode(&table));
                let loaded: Value = client.get(&path).await?;
                let document =
                    json!({ "metadata-location": loaded["metadata-location"], "metadata": loaded["metadata"] });
                print(out, &document, |d| table_summary(&name, d))
            }
            Self::Drop { name, purge } => {
                let (warehouse, levels, table) = names::table(&name)?;
                let prefix = client.prefix(&warehouse).await?;
                let path = format!(
                    "/v1/{prefix}/namespaces/{}/tables/{}?purgeRequested={purge}",
                    namespace_path(&levels),
                    encode(&table)
                );
                client.delete(&path).await?;
                print(out, &json!({ "dropped": name, "purge": purge }), |_| format!("dropped table {name}"))
            }
            Self::Undrop { name, id } => {
                let (warehouse, levels, table) = names::table(&name)?;
                let request = UndropRequest { namespace: levels, name: table, id, new_namespace: None, new_name: None };
                let path = format!("/management/v1/warehouses/{}/undrop", encode(&warehouse));
                let undropped: UndropResponse = client.post(&path, &request).await?;
                print(out, &undropped, |u| format!("undropped {name} (id {})", u.id))
            }
            Self::Deleted { warehouse } => {
                let path = format!("/management/v1/warehouses/{}/deleted", encode(&warehouse));
                let listed: ListDeletedResponse = client.get(&path).await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["name", "kind", "dropped", "by", "restorable until", "id"]);
                    for d in &l.deleted {
                        let full = names::joined(
                            &[vec![warehouse.clone()], d.namespace.clone(), vec![d.name.clone()]].concat(),
                        );
                        let until =
                            if d.restorable { time(d.restorable_until_ms) } else { or_dash(d.not_restorable.clone()) };
                        table.row(vec![
                            full,
                            d.kind.clone(),
                            time(d.dropped_at_ms),
                            d.dropped_by.clone(),
                            until,
                            d.id.clone(),
                        ]);
                    }
                    table.render()
                })
            }
        }
    }
}

// --- principals, roles, grants, access ----------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum PrincipalVerb {
    /// Create a principal; prints its client id and secret once.
    Create {
        name: String,
    },
    List,
    Show {
        name: String,
    },
    /// A new client secret, printed once (the old one stops working, or after `--grace-seconds`).
    RotateSecret {
        name: String,
        #[arg(long)]
        grace_seconds: Option<u64>,
    },
    Delete {
        name: String,
    },
}

fn principal_table(principals: &[PrincipalResponse]) -> String {
    let mut table = Table::new(&["name", "client id", "roles", "created"]);
    for p in principals {
        table.row(vec![p.name.clone(), or_dash(p.client_id.clone()), p.roles.join(","), time(p.created_at_ms)]);
    }
    table.render()
}

fn credentials_text(c: &PrincipalCredentials) -> String {
    format!(
        "principal {}\nclient id:     {}\nclient secret: {}\n(the secret is shown once: store it now)",
        c.name, c.client_id, c.client_secret
    )
}

#[async_trait::async_trait]
impl Verb for PrincipalVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::Create { name } => {
                let created: PrincipalCredentials =
                    client.post("/management/v1/principals", &CreatePrincipalRequest { name }).await?;
                print(out, &created, credentials_text)
            }
            Self::List => {
                let listed: ListPrincipalsResponse = client.get("/management/v1/principals").await?;
                print(out, &listed, |l| principal_table(&l.principals))
            }
            Self::Show { name } => {
                let shown: PrincipalResponse =
                    client.get(&format!("/management/v1/principals/{}", encode(&name))).await?;
                print(out, &shown, |p| principal_table(std::slice::from_ref(p)))
            }
            Self::RotateSecret { name, grace_seconds } => {
                let path = format!("/management/v1/principals/{}/rotate-secret", encode(&name));
                let rotated: PrincipalCredentials =
                    client.post(&path, &json!({ "grace-period-seconds": grace_seconds })).await?;
                print(out, &rotated, credentials_text)
            }
            Self::Delete { name } => {
                client.delete(&format!("/management/v1/principals/{}", encode(&name))).await?;
                print(out, &json!({ "deleted": name }), |_| format!("deleted principal {name}"))
            }
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum RoleVerb {
    Create {
        name: String,
    },
    List,
    Delete {
        name: String,
    },
    /// Add a principal to a role.
    Add {
        role: String,
        principal: String,
    },
    /// Remove a principal from a role.
    Remove {
        role: String,
        principal: String,
    },
}

#[async_trait::async_trait]
impl Verb for RoleVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        let member = |role: &str, principal: &str| {
            format!("/management/v1/roles/{}/principals/{}", encode(role), encode(principal))
        };
        match self {
            Self::Create { name } => {
                let created: RoleResponse = client.post("/management/v1/roles", &CreateRoleRequest { name }).await?;
                print(out, &created, |r| format!("created role {}", r.name))
            }
            Self::List => {
                let listed: ListRolesResponse = client.get("/management/v1/roles").await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["role", "principals"]);
                    for r in &l.roles {
                        table.row(vec![r.name.clone(), r.principals.join(",")]);
                    }
                    table.render()
                })
            }
            Self::Delete { name } => {
                client.delete(&format!("/management/v1/roles/{}", encode(&name))).await?;
                print(out, &json!({ "deleted": name }), |_| format!("deleted role {name}"))
            }
            Self::Add { role, principal } => {
                client.call::<Value, ()>(Method::PUT, &member(&role, &principal), None).await?;
                print(out, &json!({ "role": role, "added": principal }), |_| format!("{principal} is in {role}"))
            }
            Self::Remove { role, principal } => {
                client.delete(&member(&role, &principal)).await?;
                print(out, &json!({ "role": role, "removed": principal }), |_| format!("{principal} left {role}"))
            }
        }
    }
}

/// `server`, `warehouse:W`, `namespace:W.NS`, `table:W.NS.T` or `view:W.NS.V`.
fn securable(text: &str) -> Outcome<Securable> {
    let (kind, name) = text.split_once(':').unwrap_or((text, ""));
    let securable = |warehouse: Option<String>, namespace: Option<Vec<String>>, name: Option<String>| Securable {
        kind: kind.to_owned(),
        warehouse,
        namespace: namespace.map(NamespaceParam::Levels),
        name,
    };
    match kind {
        "server" => Ok(securable(None, None, None)),
        "warehouse" => Ok(securable(Some(name.to_owned()), None, None)),
        "namespace" => {
            let (warehouse, levels) = names::namespace(name)?;
            Ok(securable(Some(warehouse), Some(levels), None))
        }
        "table" | "view" => {
            let (warehouse, levels, table) = names::table(name)?;
            Ok(securable(Some(warehouse), Some(levels), Some(table)))
        }
        _ => Err(Failure(format!(
            "{text:?}: a securable is server, warehouse:W, namespace:W.NS, table:W.NS.T or view:W.NS.V"
        ))),
    }
}

fn securable_text(s: &Securable) -> String {
    let namespace = match &s.namespace {
        Some(NamespaceParam::Levels(levels)) => levels.clone(),
        Some(NamespaceParam::Joined(joined)) => vec![joined.clone()],
        None => Vec::new(),
    };
    let parts: Vec<String> = s.warehouse.iter().cloned().chain(namespace).chain(s.name.iter().cloned()).collect();
    if parts.is_empty() { s.kind.clone() } else { format!("{}:{}", s.kind, names::joined(&parts)) }
}

#[derive(Subcommand, Debug)]
pub enum GrantVerb {
    /// Grant PRIVILEGE on SECURABLE to ROLE (`server`, `warehouse:W`, `namespace:W.NS`, `table:W.NS.T`).
    Add {
        role: String,
        privilege: String,
        securable: String,
        /// When the grant ends, milliseconds since the epoch.
        #[arg(long)]
        expires_at_ms: Option<i64>,
    },
    /// Revoke a grant.
    Remove { role: String, privilege: String, securable: String },
    /// A role's grants.
    List { role: String },
}

#[async_trait::async_trait]
impl Verb for GrantVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::Add { role, privilege, securable: on, expires_at_ms } => {
                let request = GrantRequest { role, privilege, securable: securable(&on)?, expires_at_ms };
                let granted: Value = client.post("/management/v1/grants", &request).await?;
                print(out, &granted, |_| format!("granted {} on {on} to {}", request.privilege, request.role))
            }
            Self::Remove { role, privilege, securable: on } => {
                let request = GrantRequest { role, privilege, securable: securable(&on)?, expires_at_ms: None };
                let revoked: Value = client.call(Method::DELETE, "/management/v1/grants", Some(&request)).await?;
                print(out, &revoked, |_| format!("revoked {} on {on} from {}", request.privilege, request.role))
            }
            Self::List { role } => {
                let listed: ListGrantsResponse =
                    client.get(&format!("/management/v1/grants?role={}", encode(&role))).await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["role", "privilege", "on", "expires"]);
                    for g in &l.grants {
                        table.row(vec![
                            g.role.clone(),
                            g.privilege.clone(),
                            securable_text(&g.securable),
                            or_dash(g.expires_at_ms.map(time)),
                        ]);
                    }
                    table.render()
                })
            }
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum AccessVerb {
    /// Every principal that can act on a table (`W.NS.T`), namespace (`W.NS`) or warehouse
    /// (`W`), with the grant and role that give it.
    WhoCan { name: String },
    /// Access-review campaigns: create, list, show, decide (attest or revoke), close.
    Review {
        #[command(subcommand)]
        verb: ReviewVerb,
    },
}

#[async_trait::async_trait]
impl Verb for AccessVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let name = match self {
            Self::WhoCan { name } => name,
            Self::Review { verb } => return verb.run(client).await,
        };
        let mut parts = names::parts(&name)?;
        let mut query = vec![format!("warehouse={}", encode(&parts.remove(0)))];
        if parts.len() >= 2 {
            let table = parts.pop().unwrap_or_default();
            query.push(format!("namespace={}", encode(&parts.join("\u{1f}"))));
            query.push(format!("table={}", encode(&table)));
        } else if let Some(namespace) = parts.first() {
            query.push(format!("namespace={}", encode(namespace)));
        }
        let report: EffectiveAccessResponse =
            client.get(&format!("/management/v1/access-reviews/effective?{}", query.join("&"))).await?;
        print(client.output, &report, |r| {
            let mut table = Table::new(&["principal", "privilege", "via role", "granted on", "relation", "last used"]);
            for line in &r.lines {
                let s = &line.securable;
                let parts: Vec<String> = s
                    .warehouse
                    .iter()
                    .cloned()
                    .chain(s.namespace.iter().flatten().cloned())
                    .chain(s.name.iter().cloned())
                    .collect();
                let on =
                    if parts.is_empty() { s.kind.clone() } else { format!("{}:{}", s.kind, names::joined(&parts)) };
                table.row(vec![
                    line.principal.clone(),
                    line.privilege.clone(),
                    line.role.clone(),
                    on,
                    line.relation.clone(),
                    or_dash(line.last_used_at_ms.map(time)),
                ]);
            }
            table.render()
        })
    }
}

// --- tasks and migrations -----------------------------------------------------------------

#[derive(Subcommand, Debug)]
pub enum TaskVerb {
    /// Tasks, newest first.
    List {
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        state: Option<String>,
    },
    Show {
        id: String,
    },
    Cancel {
        id: String,
    },
    /// Follow a task with a progress bar until it ends; prints its result.
    Watch {
        id: String,
    },
}

fn task_table(tasks: &[TaskResponse]) -> String {
    let mut table = Table::new(&["id", "kind", "state", "progress", "attempts", "reason"]);
    for t in tasks {
        let progress = match t.progress.total {
            Some(total) => format!("{}/{total}", t.progress.done),
            None => t.progress.done.to_string(),
        };
        table.row(vec![
            t.id.clone(),
            t.kind.clone(),
            t.state.clone(),
            progress,
            format!("{}/{}", t.attempts, t.max_attempts),
            t.reason.clone(),
        ]);
    }
    table.render()
}

fn ended(state: &str) -> bool {
    matches!(state, "done" | "failed" | "cancelled")
}

/// Follows task `id` until it ends, showing its progress on standard error for people: a
/// progress bar on a terminal, a line at each change otherwise (a log, a CI job).
async fn watch(client: &Client, id: &str) -> Outcome<TaskResponse> {
    use std::io::IsTerminal;
    let people = client.output == Output::Table;
    let bar = (people && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar
    });
    let mut last = String::new();
    loop {
        let task: TaskResponse = client.get(&format!("/management/v1/tasks/{}", encode(id))).await?;
        let total = task.progress.total.unwrap_or(task.progress.done).max(task.progress.done);
        match &bar {
            Some(bar) => {
                bar.set_length(u64::try_from(total.max(1)).unwrap_or(1));
                bar.set_position(u64::try_from(task.progress.done).unwrap_or(0));
                bar.set_message(format!("{} {}", task.kind, task.state));
            }
            None if people => {
                let line = format!("{} {} {}/{total}", task.kind, task.state, task.progress.done);
                if line != last {
                    eprintln!("{line}");
                    last = line;
                }
            }
            None => {}
        }
        if ended(&task.state) {
            if let Some(bar) = &bar {
                bar.finish();
            }
            return Ok(task);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn task_report(task: &TaskResponse) -> String {
    let result = task.result.as_ref().map(|r| serde_json::to_string_pretty(r).unwrap_or_default());
    format!(
        "task {} ({}) {}\n{}{}",
        task.id,
        task.kind,
        task.state,
        result.map(|r| format!("result: {r}\n")).unwrap_or_default(),
        task.last_error.as_ref().map(|e| format!("error: {e}")).unwrap_or_default()
    )
}

#[async_trait::async_trait]
impl Verb for TaskVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::List { kind, state } => {
                let mut query = vec!["pageSize=100".to_owned()];
                query.extend(kind.map(|k| format!("kind={}", encode(&k))));
                query.extend(state.map(|s| format!("state={}", encode(&s))));
                let listed: ListTasksResponse =
                    client.get(&format!("/management/v1/tasks?{}", query.join("&"))).await?;
                print(out, &listed, |l| task_table(&l.tasks))
            }
            Self::Show { id } => {
                let task: TaskResponse = client.get(&format!("/management/v1/tasks/{}", encode(&id))).await?;
                print(out, &task, task_report)
            }
            Self::Cancel { id } => {
                let task: Value =
                    client.post(&format!("/management/v1/tasks/{}/cancel", encode(&id)), &json!({})).await?;
                print(out, &task, |_| format!("cancelled task {id}"))
            }
            Self::Watch { id } => {
                let task = watch(client, &id).await?;
                print(out, &task, task_report)?;
                if task.state == "done" { Ok(()) } else { Err(Failure(format!("task {id} {}", task.state))) }
            }
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct MigrationSpec {
    /// The source as JSON (`{"type": "sql", "uri", "catalog-name"}`, `{"type": "rest", ...}`,
    /// `{"type": "glue", ...}`; see docs/migration.md), inline or `@file.json`.
    #[arg(long)]
    source: String,
    /// The warehouse the tables move into.
    #[arg(long)]
    target: String,
    /// Only this namespace (dotted; repeat it).
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
    /// Only this table (`namespace.table`, dotted; repeat it).
    #[arg(long = "table")]
    tables: Vec<String>,
    /// Only tables whose `namespace.table` this regular expression matches.
    #[arg(long)]
    include: Option<String>,
    /// `source.ns=target.ns` (repeat it).
    #[arg(long = "map")]
    mapping: Vec<String>,
}

impl MigrationSpec {
    fn request(self, dry_run: bool) -> Outcome<MigrationRequest> {
        let text = match self.source.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path).map_err(|e| Failure(format!("{path}: {e}")))?,
            None => self.source,
        };
        let source = serde_json::from_str(&text).map_err(|e| Failure(format!("--source: {e}")))?;
        let list = |values: Vec<String>| -> Outcome<Option<Vec<Vec<String>>>> {
            if values.is_empty() {
                return Ok(None);
            }
            values.iter().map(|v| names::parts(v)).collect::<Outcome<Vec<_>>>().map(Some)
        };
        Ok(MigrationRequest {
            source,
            target_warehouse: self.target,
            namespaces: list(self.namespaces)?,
            tables: list(self.tables)?,
            include: self.include,
            namespace_mapping: key_values(&self.mapping)?,
            dry_run,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum MigrationVerb {
    /// Plan a migration (a dry run): what moves where, and the conflicts.
    Plan(MigrationSpec),
    /// Run a migration, following it with a progress bar until it ends (unless `--no-wait`).
    Run {
        #[command(flatten)]
        spec: MigrationSpec,
        #[arg(long)]
        no_wait: bool,
    },
    /// A migration's state and each table's.
    Status { id: String },
    /// The migrations of a warehouse (every one, for server admins).
    List {
        #[arg(long)]
        warehouse: Option<String>,
    },
    /// Roll a migration back (all of it, or `--table NAMESPACE.TABLE`, by target name; repeat it).
    Rollback {
        id: String,
        #[arg(long = "table")]
        tables: Vec<String>,
    },
    /// Remove the source's fenced entries of the verified tables.
    Retire { id: String },
}

fn migration_text(m: &MigrationResponse) -> String {
    let mut out = format!(
        "migration {} ({}) into {}: {}\n",
        m.id,
        if m.dry_run { "dry run" } else { "run" },
        m.target_warehouse,
        m.state
    );
    if m.tables.is_empty() {
        let mut table = Table::new(&["source", "target", "moves", "conflict"]);
        for p in m.report["plan"].as_array().into_iter().flatten() {
            let name = |v: &Value| {
                let mut parts: Vec<String> = serde_json::from_value(v["namespace"].clone()).unwrap_or_default();
                parts.push(v["name"].as_str().unwrap_or_default().to_owned());
                names::joined(&parts)
            };
            table.row(vec![
                name(&p["source"]),
                name(&p["target"]),
                p["moves"].to_string(),
                or_dash(p["conflict"].as_str()),
            ]);
        }
        out.push_str(&table.render());
    } else {
        let mut table = Table::new(&["source", "target", "state", "error"]);
        for t in &m.tables {
            let source = names::joined(&[t.source_namespace.clone(), vec![t.source_name.clone()]].concat());
            let target = names::joined(&[t.target_namespace.clone(), vec![t.target_name.clone()]].concat());
            table.row(vec![source, target, t.state.clone(), or_dash(t.error.clone())]);
        }
        out.push_str(&table.render());
    }
    out
}

#[async_trait::async_trait]
impl Verb for MigrationVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::Plan(spec) => {
                let planned: MigrationResponse = client.post("/management/v1/migrations", &spec.request(true)?).await?;
                print(out, &planned, migration_text)
            }
            Self::Run { spec, no_wait } => {
                let started: MigrationResponse =
                    client.post("/management/v1/migrations", &spec.request(false)?).await?;
                if let (false, Some(task)) = (no_wait, started.task_id.as_deref()) {
                    watch(client, task).await?;
                }
                let ended: MigrationResponse =
                    client.get(&format!("/management/v1/migrations/{}", encode(&started.id))).await?;
                print(out, &ended, migration_text)?;
                match ended.state.as_str() {
                    "failed" => Err(Failure(format!("migration {} failed: see its tables' errors", ended.id))),
                    _ => Ok(()),
                }
            }
            Self::Status { id } => {
                let shown: MigrationResponse =
                    client.get(&format!("/management/v1/migrations/{}", encode(&id))).await?;
                print(out, &shown, migration_text)
            }
            Self::List { warehouse } => {
                let query = warehouse.map(|w| format!("?warehouse={}", encode(&w))).unwrap_or_default();
                let listed: MigrationsResponse = client.get(&format!("/management/v1/migrations{query}")).await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["id", "state", "target", "source", "created"]);
                    for m in &l.migrations {
                        table.row(vec![
                            m.id.clone(),
                            m.state.clone(),
                            m.target_warehouse.clone(),
                            or_dash(m.source["type"].as_str()),
                            time(m.created_at_ms),
                        ]);
                    }
                    table.render()
                })
            }
            Self::Rollback { id, tables } => {
                let tables = if tables.is_empty() {
                    None
                } else {
                    Some(tables.iter().map(|t| names::parts(t)).collect::<Outcome<Vec<_>>>()?)
                };
                let path = format!("/management/v1/migrations/{}/rollback", encode(&id));
                let rolled: MigrationResponse = client.post(&path, &RollbackRequest { tables }).await?;
                print(out, &rolled, migration_text)
            }
            Self::Retire { id } => {
                let path = format!("/management/v1/migrations/{}/retire", encode(&id));
                let retired: MigrationResponse = client.post(&path, &json!({})).await?;
                print(out, &retired, migration_text)
            }
        }
    }
}

// --- maintenance, adoption, audit, access reviews -----------------------------------------

/// The scope `WAREHOUSE[.NAMESPACE...[.TABLE]]` of maintenance: with `--table`, the last part
/// is the table.
fn scope(name: &str, table: bool) -> Outcome<(String, Option<Vec<String>>, Option<String>)> {
    let mut parts = names::parts(name)?;
    let warehouse = parts.remove(0);
    let table =
        if table { Some(parts.pop().ok_or_else(|| Failure(format!("{name:?} names no table")))?) } else { None };
    Ok((warehouse, (!parts.is_empty()).then_some(parts), table))
}

/// Every task id an answer names (`task-id` or `task` fields, at any depth).
fn task_ids(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("task-id" | "task", Value::String(id)) if !id.is_empty() => out.push(id.clone()),
                    _ => task_ids(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| task_ids(v, out)),
        _ => {}
    }
}

#[derive(Subcommand, Debug)]
pub enum MaintenanceVerb {
    /// What snapshot expiry and orphan clean-up would remove, per table (`W`, `W.NS` or, with
    /// `--table`, `W.NS.T`).
    Plan {
        scope: String,
        #[arg(long)]
        table: bool,
        /// `expire-snapshots`, `remove-orphans` (repeat it; default both).
        #[arg(long = "action")]
        actions: Vec<String>,
    },
    /// Queue the maintenance tasks and follow them to their end (unless `--no-wait`).
    Run {
        scope: String,
        #[arg(long)]
        table: bool,
        #[arg(long = "action")]
        actions: Vec<String>,
        #[arg(long)]
        no_wait: bool,
    },
}

#[async_trait::async_trait]
impl Verb for MaintenanceVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let (verb, scope_name, table, actions, wait) = match self {
            Self::Plan { scope, table, actions } => ("plan", scope, table, actions, false),
            Self::Run { scope, table, actions, no_wait } => ("run", scope, table, actions, !no_wait),
        };
        let (warehouse, namespace, table) = scope(&scope_name, table)?;
        let request = MaintenanceRequest {
            namespace,
            table,
            actions: (!actions.is_empty()).then_some(actions),
            page_token: None,
            page_size: None,
        };
        let path = format!("/management/v1/warehouses/{}/maintenance/{verb}", encode(&warehouse));
        let answer: MaintenanceResponse = client.post(&path, &request).await?;
        let mut tasks = Vec::new();
        if wait {
            let mut ids = Vec::new();
            task_ids(&json!(answer.tables), &mut ids);
            for id in ids {
                tasks.push(watch(client, &id).await?);
            }
        }
        let document = json!({ "tables": answer.tables, "tasks": tasks });
        print(client.output, &document, |d| {
            let mut out = serde_json::to_string_pretty(&d["tables"]).unwrap_or_default();
            for task in &tasks {
                out.push('\n');
                out.push_str(&task_report(task));
            }
            out
        })?;
        match tasks.iter().find(|t| t.state != "done") {
            Some(t) => Err(Failure(format!("task {} {}", t.id, t.state))),
            None => Ok(()),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum AdoptVerb {
    /// Adopt a Parquet dataset in place as table `W.NS.T`; a large one is adopted by a task,
    /// followed to its end.
    Run {
        table: String,
        /// The dataset's prefix (`s3://...` or `file:///...`).
        #[arg(long)]
        source: String,
        /// `none`, `hive`, or a JSON partitioning (`{"type": "spec", "fields": [...]}`).
        #[arg(long, default_value = "none")]
        partitioning: String,
        /// `snapshot` or `continuous`.
        #[arg(long, default_value = "snapshot")]
        mode: String,
        #[arg(long)]
        dry_run: bool,
    },
    /// A warehouse's adoptions.
    List { warehouse: String },
    /// One adoption with its runs (newest first), each with its report.
    Show { warehouse: String, id: String },
    /// Re-sync an adoption now.
    Sync { warehouse: String, id: String },
}

#[async_trait::async_trait]
impl Verb for AdoptVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::Run { table, source, partitioning, mode, dry_run } => {
                let (warehouse, namespace, name) = names::table(&table)?;
                let partitioning: Value = match partitioning.as_str() {
                    "none" | "hive" => json!({ "type": partitioning }),
                    other => serde_json::from_str(other).map_err(|e| Failure(format!("--partitioning: {e}")))?,
                };
                let body = json!({
                    "source": source, "namespace": namespace, "name": name, "partitioning": partitioning,
                    "mode": mode, "dry-run": dry_run,
                });
                let path = format!("/management/v1/warehouses/{}/adoptions", encode(&warehouse));
                let mut report: Value = client.post(&path, &body).await?;
                if let Some(task) = report["task-id"].as_str().map(str::to_owned) {
                    let ended = watch(client, &task).await?;
                    report = ended.result.clone().unwrap_or(report);
                    if ended.state != "done" {
                        print(out, &report, |r| serde_json::to_string_pretty(r).unwrap_or_default())?;
                        return Err(Failure(format!("task {task} {}", ended.state)));
                    }
                }
                print(out, &report, |r| {
                    format!(
                        "adopted {table}: {} files, {} rows added; {} skipped",
                        r["files-added"],
                        r["rows-added"],
                        r["files-skipped"].as_array().map_or(0, Vec::len)
                    )
                })
            }
            Self::List { warehouse } => {
                let path = format!("/management/v1/warehouses/{}/adoptions", encode(&warehouse));
                let listed: AdoptionsResponse = client.get(&path).await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["id", "table", "source", "mode"]);
                    for a in &l.adoptions {
                        let name = names::joined(&[a.namespace.clone(), vec![a.name.clone()]].concat());
                        table.row(vec![a.id.clone(), name, a.source.clone(), a.mode.clone()]);
                    }
                    table.render()
                })
            }
            Self::Show { warehouse, id } => {
                let path = format!("/management/v1/warehouses/{}/adoptions/{}", encode(&warehouse), encode(&id));
                let shown: AdoptionResponse = client.get(&path).await?;
                print(out, &shown, |a| serde_json::to_string_pretty(a).unwrap_or_default())
            }
            Self::Sync { warehouse, id } => {
                let path = format!("/management/v1/warehouses/{}/adoptions/{}/sync", encode(&warehouse), encode(&id));
                let report: Value = client.post(&path, &json!({})).await?;
                print(out, &report, |r| {
                    format!("re-synced: {} files, {} rows added", r["files-added"], r["rows-added"])
                })
            }
        }
    }
}

/// `icegate audit search`: the audit trail as the server answers it (auditors and server admins).
#[derive(clap::Args, Debug)]
pub struct AuditSearch {
    /// Records at or after this time (milliseconds since the epoch).
    #[arg(long)]
    since: Option<i64>,
    #[arg(long)]
    until: Option<i64>,
    /// A principal's name.
    #[arg(long)]
    principal: Option<String>,
    /// An operation (`loadTable`, `commitTable`, ...).
    #[arg(long)]
    action: Option<String>,
    #[arg(long)]
    warehouse: Option<String>,
    /// `allowed`, `denied` or `failed`.
    #[arg(long)]
    outcome: Option<String>,
    /// Records at most (1-1000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

#[async_trait::async_trait]
impl Verb for AuditSearch {
    async fn run(self, client: &Client) -> Outcome<()> {
        let mut query = vec![format!("pageSize={}", self.limit)];
        let mut add = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                query.push(format!("{key}={}", encode(&value)));
            }
        };
        add("since", self.since.map(|v| v.to_string()));
        add("until", self.until.map(|v| v.to_string()));
        add("principal", self.principal);
        add("action", self.action);
        add("warehouse", self.warehouse);
        add("outcome", self.outcome);
        let page: AuditPageResponse = client.get(&format!("/management/v1/audit?{}", query.join("&"))).await?;
        print(client.output, &page, |p| {
            let mut table = Table::new(&["seq", "at", "record"]);
            for r in &p.records {
                table.row(vec![r.seq.to_string(), time(r.at_ms), r.text.clone()]);
            }
            table.render()
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum ReviewVerb {
    /// Open a campaign over a scope (`W`, `W.NS`, `W.NS.T`; none: the server).
    Create {
        scope: Option<String>,
        #[arg(long)]
        description: Option<String>,
    },
    List,
    /// A campaign with its lines and decisions.
    Show {
        id: String,
    },
    /// Decide a line: `attest` or `revoke-grant`.
    Decide {
        id: String,
        line: i64,
        decision: String,
        #[arg(long)]
        comment: Option<String>,
    },
    Close {
        id: String,
    },
}

fn review_text(r: &ReviewResponse) -> String {
    let mut out = format!(
        "review {} ({}){}\n",
        r.id,
        if r.closed_at_ms.is_some() { "closed" } else { "open" },
        r.description.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
    );
    let mut table = Table::new(&["line", "principal", "privilege", "via role", "decision"]);
    for line in r.lines.iter().flatten() {
        table.row(vec![
            line.line.to_string(),
            line.entry.principal.clone(),
            line.entry.privilege.clone(),
            line.entry.role.clone(),
            or_dash(line.decision.clone()),
        ]);
    }
    out.push_str(&table.render());
    out
}

#[async_trait::async_trait]
impl Verb for ReviewVerb {
    async fn run(self, client: &Client) -> Outcome<()> {
        let out = client.output;
        match self {
            Self::Create { scope, description } => {
                let mut body = json!({ "scope": {}, "description": description });
                if let Some(scope) = scope {
                    let mut parts = names::parts(&scope)?;
                    body["scope"]["warehouse"] = json!(parts.remove(0));
                    if parts.len() >= 2 {
                        body["scope"]["table"] = json!(parts.pop());
                    }
                    if !parts.is_empty() {
                        body["scope"]["namespace"] = json!(parts);
                    }
                }
                let created: ReviewResponse = client.post("/management/v1/access-reviews", &body).await?;
                print(out, &created, review_text)
            }
            Self::List => {
                let listed: ListReviewsResponse = client.get("/management/v1/access-reviews").await?;
                print(out, &listed, |l| {
                    let mut table = Table::new(&["id", "state", "created", "by", "description"]);
                    for r in &l.reviews {
                        let state = if r.closed_at_ms.is_some() { "closed" } else { "open" };
                        table.row(vec![
                            r.id.clone(),
                            state.into(),
                            time(r.created_at_ms),
                            r.created_by.clone(),
                            or_dash(r.description.clone()),
                        ]);
                    }
                    table.render()
                })
            }
            Self::Show { id } => {
                let shown: ReviewResponse =
                    client.get(&format!("/management/v1/access-reviews/{}", encode(&id))).await?;
                print(out, &shown, review_text)
            }
            Self::Decide { id, line, decision, comment } => {
                let body = json!({ "decisions": [{ "line": line, "decision": decision, "comment": comment }] });
                let path = format!("/management/v1/access-reviews/{}/decisions", encode(&id));
                let decided: Value = client.post(&path, &body).await?;
                print(out, &decided, |_| format!("line {line}: {decision}"))
            }
            Self::Close { id } => {
                let closed: Value =
                    client.post(&format!("/management/v1/access-reviews/{}/close", encode(&id)), &json!({})).await?;
                print(out, &closed, |_| format!("closed review {id}"))
            }
        }
    }
}
