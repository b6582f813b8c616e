//! Views: create, load, replace (commit), drop, rename, register, list.
//!
//! View metadata semantics come from the `iceberg` crate's `ViewMetadataBuilder`; commits go
//! through the commit engine shared with tables (`crate::commit`).

use crate::ident::NamespaceIdent;
use std::collections::HashMap;

use iceberg::ViewUpdate;
use iceberg::spec::{Schema, ViewFormatVersion, ViewMetadata, ViewMetadataBuilder, ViewVersion};
use serde::{Deserialize, Serialize};

use crate::access::Privilege;
use crate::commit::{MAX_COMMIT_ATTEMPTS, MetadataKind, Staged, Staging};
use crate::context::RequestContext;
use crate::error::{CatalogError, Result};
use crate::ids::WarehouseId;
use crate::schema_cost::Pending;
use crate::service::{Catalog, Listing};
use crate::store::{MetadataSwap, Tabular, TabularKind, Warehouse};
use crate::tables::{TableIdent, location_inside};

/// The one view requirement of the spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ViewRequirement {
    #[serde(rename = "assert-view-uuid")]
    AssertViewUuid { uuid: uuid::Uuid },
}

/// A createView request: its schema as it came, built once the create is authorized.
#[derive(Debug)]
pub struct CreateView {
    pub name: String,
    pub location: Option<String>,
    pub schema: Pending<Schema>,
    pub view_version: ViewVersion,
    pub properties: HashMap<String, String>,
}

/// A view as the REST API returns it.
#[derive(Debug, Clone)]
pub struct ViewResult {
    pub metadata_location: String,
    pub metadata_json: String,
}

/// Parses view metadata, once its schemas were walked against the limits
/// (`Catalog::document_cost`).
fn parse_view(json: &str, what: &str) -> Result<ViewMetadata> {
    serde_json::from_str(json).map_err(|e| CatalogError::bad_request(format!("invalid view metadata {what}: {e}")))
}

fn to_json(metadata: &ViewMetadata) -> Result<String> {
    serde_json::to_string(metadata)
        .map_err(|e| CatalogError::Internal(anyhow::anyhow!("serialising view metadata: {e}")))
}

fn view_file_location(metadata: &ViewMetadata, previous: Option<&str>) -> String {
    let version = previous
        .and_then(|p| p.rsplit('/').next())
        .map(|file| file.chars().take_while(char::is_ascii_digit).collect::<String>())
        .and_then(|digits| digits.parse::<u64>().ok())
        .map_or(0, |v| v + 1);
    format!(
        "{}/metadata/{version:05}-{}.metadata.json",
        metadata.location().trim_end_matches('/'),
        uuid::Uuid::new_v4()
    )
}

fn apply(builder: ViewMetadataBuilder, update: ViewUpdate) -> Result<ViewMetadataBuilder> {
    Ok(match update {
        ViewUpdate::AssignUuid { uuid } => builder.assign_uuid(uuid),
        ViewUpdate::UpgradeFormatVersion { format_version } => builder.upgrade_format_version(format_version)?,
        ViewUpdate::AddSchema { schema, .. } => builder.add_schema(schema),
        ViewUpdate::SetLocation { location } => builder.set_location(location),
        ViewUpdate::SetProperties { updates } => builder.set_properties(updates)?,
        ViewUpdate::RemoveProperties { removals } => builder.remove_properties(&removals),
        ViewUpdate::AddViewVersion { view_version } => builder.add_version(view_version)?,
        ViewUpdate::SetCurrentViewVersion { view_version_id } => builder.set_current_version_id(view_version_id)?,
    })
}

crate::service::area!(
    /// The views' operations ([`Catalog::views`]).
    Views, views
);

impl Catalog {
    async fn load_view_row(&self, warehouse: &Warehouse, view: &TableIdent) -> Result<Option<Tabular>> {
        self.store().load_tabular(&warehouse.id, &view.namespace, &view.name, TabularKind::View).await
    }

    async fn insert_view(
        &self,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        view: &TableIdent,
        location: &str,
        document: ViewResult,
        write_file: bool,
    ) -> Result<ViewResult> {
        let ViewResult { metadata_location, metadata_json } = &document;
        self.check_size("document", metadata_json.len())?;
        if write_file {
            // Before the file is written: no file lands in another table's or view's directory.
            let locations = [location.to_owned()];
            self.store()
                .check_locations_free(&ctx.write(), &warehouse.id, (&view.namespace, &view.name), &locations, None)
                .await?;
            self.files().write_new(warehouse, metadata_location, bytes::Bytes::from(metadata_json.to_owned())).await?;
        }
        let created = self
            .store()
            .create_tabular(
                &ctx.write(),
                &view.new_row(TabularKind::View, warehouse, location, &[], metadata_location, metadata_json),
            )
            .await;
        if let Err(err) = created {
            // Unless the row may yet be created, pointing at the file.
            if write_file && !matches!(err, CatalogError::CommitStateUnknown(_)) {
                let _ = self.files().delete(warehouse, metadata_location).await;
            }
            return Err(err);
        }
        Ok(document)
    }

    async fn view_with(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        view: &TableIdent,
        privilege: Privilege,
    ) -> Result<ViewResult> {
        let (warehouse, allowed) =
            self.tabular_with(ctx, prefix, (&view.namespace, &view.name), TabularKind::View, privilege).await?;
        let missing = || CatalogError::no_such_view(view);
        let row = self.load_view_row(&warehouse, view).await?.ok_or_else(missing)?;
        // The decision was about the view read (a name can change meaning meanwhile).
        let target = crate::authorization::tabular_target(&warehouse, &view.namespace, &view.name, TabularKind::View);
        let changed = || CatalogError::Unavailable(format!("{view} was renamed or replaced while loading; retry"));
        ctx.confirm(&target, privilege, allowed, &row.id, missing, changed).await?;
        Ok(ViewResult { metadata_location: row.metadata_location, metadata_json: row.metadata })
    }
}

/// One view's requirements and updates (built once the commit is authorized on the view).
pub(crate) struct ViewChange {
    view: TableIdent,
    requirements: Vec<ViewRequirement>,
    updates: Vec<Pending<ViewUpdate>>,
}

/// View commits (replaceView).
pub(crate) struct ViewCommit;

/// A staged view commit's answer, and its room in the commit budget, held until it is answered.
pub(crate) struct ViewStaged {
    result: ViewResult,
    _reserved: crate::commit_budget::Reserved,
}

impl MetadataKind for ViewCommit {
    type Change = ViewChange;
    type Extra = ViewStaged;
    type Output = ViewResult;

    async fn stage(
        &self,
        catalog: &Catalog,
        ctx: &RequestContext,
        warehouse: &Warehouse,
        changes: &[ViewChange],
    ) -> Result<Staging<ViewStaged, ViewResult>> {
        let mut staged = Vec::with_capacity(changes.len());
        for ViewChange { view, requirements, updates } in changes {
            let missing = || CatalogError::no_such_view(view);
            let row = catalog.load_view_row(warehouse, view).await?.ok_or_else(missing)?;
            // Decided about the view this commit changes (by id), not only its name.
            let target =
                crate::authorization::tabular_target(warehouse, &view.namespace, &view.name, TabularKind::View);
            let renamed = || CatalogError::CommitFailed(format!("{view} was renamed or replaced meanwhile; retry"));
            ctx.require_on(&target, Privilege::Write, &row.id, missing, renamed).await?;
            // Authorized: the stored document and the updates are walked against the limits,
            // and room for what the commit builds is taken (as for tables), before building.
            let limits = catalog.schema_limits();
            let stored: std::sync::Arc<str> = row.metadata.as_str().into();
            let document = catalog.document_cost_of("the view's stored metadata", stored).await?;
            let (request_bytes, cost) = crate::schema_cost::total_cost(updates, limits)?;
            let parse = (row.metadata.len() as u64).saturating_add(document.build_bytes());
            let held = crate::commit_budget::held_by(row.metadata.len(), parse, request_bytes, cost.build_bytes());
            let reserved = catalog.reserve_room(ctx, held).await?;
            let base = parse_view(&row.metadata, "in the store")?;
            for requirement in requirements {
                let ViewRequirement::AssertViewUuid { uuid } = requirement;
                if *uuid != base.uuid() {
                    return Err(crate::tables::view_uuid_mismatch(base.uuid(), *uuid));
                }
            }
            let mut builder = base.into_builder();
            for update in updates {
                builder = apply(builder, update.build(limits)?.clone())?;
            }
            let metadata = builder.build()?.metadata;
            let location = location_inside(warehouse.storage_root.as_str(), metadata.location())?;
            let metadata_json = to_json(&metadata)?;
            catalog.check_size("document", metadata_json.len())?;
            // As for tables: the view's schemas, a new one among them, must pass the limits.
            if updates.iter().any(|update| matches!(update.build(limits), Ok(ViewUpdate::AddSchema { .. }))) {
                catalog.document_cost("the view's new metadata", &metadata_json)?;
            }
            let metadata_location = view_file_location(&metadata, Some(&row.metadata_location));
            let moved = location != row.location;
            staged.push(Staged {
                ident: view.clone(),
                // A moved view: placement-checked before its file is written, and again by the swap.
                new_locations: if moved { vec![location.clone()] } else { Vec::new() },
                swap: Some(MetadataSwap {
                    id: row.id,
                    warehouse_id: warehouse.id.clone(),
                    namespace: view.namespace.clone(),
                    name: view.name.clone(),
                    expected_metadata_location: row.metadata_location,
                    metadata_location: metadata_location.clone(),
                    metadata: metadata_json.as_str().into(),
                    metadata_gzip: None,
                    locations_changed: moved,
                    extra_locations: Vec::new(),
                    location,
                }),
                extra: ViewStaged { result: ViewResult { metadata_location, metadata_json }, _reserved: reserved },
            });
        }
        Ok(Staging::Swap(staged))
    }

    async fn applied(&self, _catalog: &Catalog, _warehouse: &Warehouse, staged: Staged<ViewStaged>) -> ViewResult {
        staged.extra.result
    }

    fn gave_up(&self) -> CatalogError {
        CatalogError::CommitFailed(format!(
            "gave up after {MAX_COMMIT_ATTEMPTS} attempts: the view is being changed concurrently; retry"
        ))
    }
}

impl Views<'_> {
    pub async fn create(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        request: CreateView,
    ) -> Result<ViewResult> {
        let view = TableIdent::view(namespace.clone(), &request.name)?;
        let (warehouse, _) = self.namespace_with(ctx, prefix, &view.namespace, Privilege::Create).await?;
        if !self.store().namespace_exists(&warehouse.id, &view.namespace).await? {
            return Err(CatalogError::no_such_namespace(&view.namespace));
        }
        let location = match &request.location {
            Some(location) => location_inside(warehouse.storage_root.as_str(), location)?,
            None => Catalog::default_location_of(&warehouse, &view.namespace, &view.name, "view")?,
        };
        // Authorized: the schema is walked against the limits, room for what it builds is
        // taken in the commit budget, and only then is it built.
        let limits = self.schema_limits();
        let cost = request.schema.cost(limits)?;
        let property_bytes: usize = request.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
        let request_bytes = request.schema.json_bytes() + property_bytes;
        let _room =
            self.reserve_room(ctx, crate::commit_budget::held_by(0, 0, request_bytes, cost.build_bytes())).await?;
        let schema = request.schema.into_built(limits)?;
        let metadata = ViewMetadataBuilder::new(
            location.clone(),
            schema,
            request.view_version,
            ViewFormatVersion::V1,
            request.properties,
        )?
        .build()?
        .metadata;
        let metadata_json = to_json(&metadata)?;
        self.check_placement(ctx, &warehouse, &view.namespace, std::slice::from_ref(&location)).await?;
        let metadata_location = view_file_location(&metadata, None);
        let document = ViewResult { metadata_location, metadata_json };
        self.insert_view(ctx, &warehouse, &view, &location, document, true).await
    }

    pub async fn load(&self, ctx: &RequestContext, prefix: &WarehouseId, view: &TableIdent) -> Result<ViewResult> {
        self.view_with(ctx, prefix, view, Privilege::Read).await
    }

    pub async fn exists(&self, ctx: &RequestContext, prefix: &WarehouseId, view: &TableIdent) -> Result<()> {
        self.view_with(ctx, prefix, view, Privilege::Describe).await.map(|_| ())
    }

    pub async fn list(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        namespace: &NamespaceIdent,
        page: (Option<&str>, Option<i64>),
    ) -> Result<Listing<TableIdent>> {
        self.list_tabulars(ctx, prefix, namespace, TabularKind::View, page).await
    }

    pub async fn drop(&self, ctx: &RequestContext, prefix: &WarehouseId, view: &TableIdent) -> Result<()> {
        let (warehouse, allowed) =
            self.tabular_with(ctx, prefix, (&view.namespace, &view.name), TabularKind::View, Privilege::Drop).await?;
        // The view decided about (by id) is the one dropped, and no other.
        let (namespace, name) = (&view.namespace, view.name.as_str());
        let decided = &mut [(Privilege::Drop, allowed)];
        let head = self.confirmed_head(ctx, &warehouse.id, (namespace, name), TabularKind::View, decided).await?;
        // No credentials are vended for views: no lease but while it is restorable.
        let options = self.drop_options(&warehouse, namespace, false, 0).await?;
        self.store()
            .drop_tabular(&ctx.write(), &warehouse.id, (namespace, name), TabularKind::View, options, Some(&head.id))
            .await?
            .ok_or_else(|| CatalogError::no_such_view(view))?;
        // Grants follow objects: a view made anew under this name is another one.
        ctx.access_changed();
        Ok(())
    }

    pub async fn register(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        view: &TableIdent,
        metadata_location: &str,
    ) -> Result<ViewResult> {
        let (warehouse, _) = self.namespace_with(ctx, prefix, &view.namespace, Privilege::Create).await?;
        let root = warehouse.storage_root.as_str();
        location_inside(root, metadata_location)?;
        self.check_placement(ctx, &warehouse, &view.namespace, &[metadata_location.to_owned()]).await?;
        // As for tables: read in the caller's turn, walked, room taken, then parsed.
        let turn = self.room_turn(ctx).await;
        let bytes = self.files().read(&warehouse, metadata_location, self.max_metadata_bytes()).await?;
        let bytes = crate::tables::metadata_file_json(metadata_location, bytes, self.max_metadata_bytes())?;
        let text: std::sync::Arc<str> =
            String::from_utf8(bytes).map_err(|_| CatalogError::bad_request("view metadata is not UTF-8 JSON"))?.into();
        let cost = self.document_cost_of(&format!("metadata file {metadata_location}"), text.clone()).await?;
        let _room =
            self.reserve_room_in(turn, crate::commit_budget::held_by(text.len(), cost.build_bytes(), 0, 0)).await?;
        let metadata = parse_view(&text, metadata_location)?;
        let location = location_inside(root, metadata.location())?;
        self.check_placement(ctx, &warehouse, &view.namespace, std::slice::from_ref(&location)).await?;
        // The metadata file must be the view's own, inside its location.
        if !metadata_location.strip_prefix(location.as_str()).is_some_and(|rest| rest.starts_with('/')) {
            return Err(CatalogError::bad_request(format!(
                "metadata file {metadata_location} must lie inside the view's location {location}"
            )));
        }
        let document =
            ViewResult { metadata_location: metadata_location.to_owned(), metadata_json: to_json(&metadata)? };
        self.insert_view(ctx, &warehouse, view, &location, document, false).await
    }

    /// replaceView: checks requirements, applies updates, writes the file, swaps the pointer
    /// (the commit engine shared with tables); re-applies on a lost race while the
    /// requirements still hold.
    pub async fn replace(
        &self,
        ctx: &RequestContext,
        prefix: &WarehouseId,
        view: TableIdent,
        requirements: Vec<ViewRequirement>,
        updates: Vec<Pending<ViewUpdate>>,
    ) -> Result<ViewResult> {
        self.check_update_count(requirements.len(), updates.len())?;
        let (warehouse, _) =
            self.tabular_with(ctx, prefix, (&view.namespace, &view.name), TabularKind::View, Privilege::Write).await?;
        let change = ViewChange { view, requirements, updates };
        let mut results = self.run_commit(ctx, warehouse, ViewCommit, vec![change]).await?;
        Ok(results.remove(0))
    }
}
