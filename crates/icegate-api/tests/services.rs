//! Authorization decided by the services themselves, with no HTTP in between: a catalog over a
//! real store, principals holding grants, and each service method called with the principal's
//! request context. What the HTTP suites check through the routes, these check at the layer
//! that decides, including the system's own context and the decisions every write carries.

use std::collections::HashMap;
use std::sync::Arc;

use icegate_catalog::access::{AccessStore, Authorizer, Caller, Privilege, SecurableRef, SecurableType};
use icegate_catalog::context::Outcome;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::tables::CreateTable;
use icegate_catalog::tables::SnapshotMode;
use icegate_catalog::{
    Catalog, CatalogError, CatalogStore, NamespaceIdent, RequestContext, StorageRoot, WarehouseName,
};
use icegate_store::testing::{TestBackend, TestDatabase};

struct Lab {
    catalog: Catalog,
    access: Arc<dyn AccessStore>,
    authorizer: Arc<Authorizer>,
    prefix: String,
    _db: TestDatabase,
    _dir: tempfile::TempDir,
}

impl Lab {
    async fn new(backend: TestBackend) -> Self {
        let db = TestDatabase::new(backend).await;
        let store: Arc<dyn CatalogStore> = Arc::new(db.store.clone());
        let access: Arc<dyn AccessStore> = Arc::new(db.store.clone());
        let dir = tempfile::tempdir().unwrap();
        let name = WarehouseName::parse("default").unwrap();
        let root = StorageRoot::parse(&format!("file://{}", dir.path().display())).unwrap();
        let warehouse = store.ensure_warehouse(&WriteContext::NONE, &name, &root).await.unwrap();
        let catalog = Catalog::new(store, Arc::new(icegate_storage::ObjectStoreIo::new()), Some(name));
        let authorizer = Arc::new(Authorizer::new(access.clone()));
        Self { catalog, access, authorizer, prefix: warehouse.id, _db: db, _dir: dir }
    }

    /// A principal whose own role holds `grants` (privilege on a namespace of `default`).
    async fn principal(&self, name: &str, grants: &[(Privilege, &[&str])]) -> RequestContext {
        let write = WriteContext::NONE;
        let principal = self.access.create_principal(&write, name, &format!("{name}-id"), "unused").await.unwrap();
        let role = format!("{name}-role");
        self.access.create_role(&write, &role).await.unwrap();
        self.access.add_role_member(&write, &role, name).await.unwrap();
        for (privilege, levels) in grants {
            let securable = SecurableRef {
                kind: SecurableType::Namespace,
                warehouse: Some("default".into()),
                namespace: Some(NamespaceIdent::from_levels(levels.iter().copied()).unwrap()),
                name: None,
            };
            self.access.grant(&write, &role, *privilege, (&securable, None), None).await.unwrap();
        }
        RequestContext::new(Caller::Principal { id: principal.id, name: name.into() }, self.authorizer.clone())
    }

    fn system(&self) -> RequestContext {
        RequestContext::system("test-setup", None)
    }

    async fn namespace(&self, ctx: &RequestContext, name: &str) -> Result<(), CatalogError> {
        self.catalog
            .create_namespace(ctx, &self.prefix, vec![name.into()], icegate_catalog::Properties::new())
            .await
            .map(|_| ())
    }

    async fn table(&self, ctx: &RequestContext, namespace: &str, name: &str) -> Result<(), CatalogError> {
        let schema = serde_json::value::RawValue::from_string(
            r#"{"type": "struct", "fields": [{"id": 1, "name": "x", "required": false, "type": "long"}]}"#.into(),
        )
        .unwrap();
        let request = CreateTable {
            name: name.into(),
            location: None,
            schema: icegate_catalog::schema_cost::Pending::new(schema, "schema"),
            partition_spec: None,
            write_order: None,
            properties: HashMap::new(),
            stage_create: false,
        };
        self.catalog.create_table(ctx, &self.prefix, namespace, request).await.map(|_| ())
    }
}

fn hidden(result: Result<impl Sized, CatalogError>) -> bool {
    matches!(result, Err(CatalogError::NotFound { .. }))
}

fn forbidden(result: Result<impl Sized, CatalogError>) -> bool {
    matches!(result, Err(CatalogError::Forbidden(_)))
}

/// A principal holding `create` in one namespace creates tables there, reads them (its own
/// creation), and sees nothing of a namespace it holds nothing in: answered as missing.
async fn each_service_decides_on_what_it_parsed(lab: Lab) {
    let system = lab.system();
    lab.namespace(&system, "sales").await.unwrap();
    lab.namespace(&system, "hr").await.unwrap();
    lab.table(&system, "hr", "salaries").await.unwrap();
    let writer = lab.principal("writer", &[(Privilege::Create, &["sales"])]).await;
    lab.table(&writer, "sales", "orders").await.unwrap();
    let prefix = lab.prefix.clone();
    assert!(hidden(lab.catalog.load_table(&writer, &prefix, "hr", "salaries", SnapshotMode::All).await));
    assert!(hidden(lab.table(&writer, "hr", "bonus").await), "create in a namespace it cannot see");
    assert!(hidden(lab.catalog.load_namespace(&writer, &prefix, "hr").await));
    assert!(hidden(lab.catalog.load_namespace(&writer, &prefix, "nowhere").await), "missing looks the same");
    let listed = lab.catalog.list_namespaces(&writer, &prefix, None, None, None).await.unwrap();
    let names: Vec<String> = listed.items.iter().map(ToString::to_string).collect();
    assert_eq!(names, ["sales"], "only what it holds something in");
    // Seeing the namespace is not creating in it.
    let reader = lab.principal("reader", &[(Privilege::Describe, &["hr"])]).await;
    assert!(forbidden(lab.table(&reader, "hr", "bonus").await), "it may see hr: 403, not 404");
    // It sees hr's tables (describe is inherited), but reads none of them.
    assert!(forbidden(lab.catalog.load_table(&reader, &prefix, "hr", "salaries", SnapshotMode::All).await));
    // Each decision was recorded, with its outcome.
    reader.with_decisions(|decisions| {
        assert!(decisions.iter().any(|d| d.privilege == Privilege::Create && d.outcome == Outcome::Forbidden));
    });
}

/// The system acts unrestricted and says so: its decisions and its writes name it.
async fn the_system_acts_unrestricted_and_is_named(lab: Lab) {
    let ctx = RequestContext::system("maintenance", Some("task-7"));
    lab.namespace(&ctx, "ops").await.unwrap();
    ctx.with_decisions(|decisions| {
        assert!(!decisions.is_empty());
        assert!(decisions.iter().all(|d| d.outcome == Outcome::Unrestricted), "{decisions:?}");
    });
    let write = ctx.write();
    assert_eq!(write.actor.describe(), "system:maintenance:task-7");
    assert_eq!(write.decisions.len(), ctx.with_decisions(|d| d.len()));
}

macro_rules! service_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Lab::new(super::TestBackend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Lab::new(super::TestBackend::Postgres).await).await
                }
            )*
        }
    };
}

service_tests!(each_service_decides_on_what_it_parsed, the_system_acts_unrestricted_and_is_named);
