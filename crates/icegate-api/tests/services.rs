//! Authorization decided by the services themselves, with no HTTP in between: a catalog over a
//! real store, principals holding grants, and each service method called with the principal's
//! request context. What the HTTP suites check through the routes, these check at the layer
//! that decides, including the system's own context and the decisions every write carries.

use std::collections::HashMap;
use std::sync::Arc;

use icegate_catalog::access::{AccessStore, Authorizer, Caller, Privilege, SecurableRef, SecurableType};
use icegate_catalog::context::Outcome;
use icegate_catalog::idempotency::WriteContext;
use icegate_catalog::storage::AccessLevel;
use icegate_catalog::tables::CreateTable;
use icegate_catalog::tables::SnapshotMode;
use icegate_catalog::tables::{TableIdent, TableResult};
use icegate_catalog::{
    Catalog, CatalogError, CatalogStore, NamespaceIdent, RequestContext, StorageRoot, WarehouseId, WarehouseName,
};
use icegate_store::testing::{TestBackend, TestDatabase};

struct Lab {
    catalog: Catalog,
    access: Arc<dyn AccessStore>,
    authorizer: Arc<Authorizer>,
    prefix: WarehouseId,
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
        let via = icegate_catalog::actors::Authentication::Direct;
        RequestContext::new(Caller::Principal { id: principal.id, name: name.into(), via }, self.authorizer.clone())
    }

    fn system(&self) -> RequestContext {
        RequestContext::system("test-setup", None)
    }

    async fn namespace(&self, ctx: &RequestContext, name: &str) -> Result<(), CatalogError> {
        let namespace = NamespaceIdent::from_levels([name]).unwrap();
        self.catalog
            .namespaces()
            .create(ctx, &self.prefix, namespace, icegate_catalog::Properties::new())
            .await
            .map(|_| ())
    }

    async fn table(&self, ctx: &RequestContext, namespace: &str, name: &str) -> Result<(), CatalogError> {
        self.create_table(ctx, namespace, name).await.map(|_| ())
    }

    async fn create_table(
        &self,
        ctx: &RequestContext,
        namespace: &str,
        name: &str,
    ) -> Result<TableResult, CatalogError> {
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
        let namespace = NamespaceIdent::from_levels([namespace]).unwrap();
        self.catalog.tables().create(ctx, &self.prefix, &namespace, request).await
    }
}

fn table(namespace: &str, name: &str) -> TableIdent {
    TableIdent::parse(namespace, name).unwrap()
}

fn namespace(name: &str) -> NamespaceIdent {
    NamespaceIdent::from_levels([name]).unwrap()
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
    let tables = lab.catalog.tables();
    assert!(hidden(tables.load(&writer, &prefix, &table("hr", "salaries"), SnapshotMode::All).await));
    assert!(hidden(lab.table(&writer, "hr", "bonus").await), "create in a namespace it cannot see");
    let namespaces = lab.catalog.namespaces();
    assert!(hidden(namespaces.load(&writer, &prefix, &namespace("hr")).await));
    assert!(hidden(namespaces.load(&writer, &prefix, &namespace("nowhere")).await), "missing looks the same");
    let listed = namespaces.list(&writer, &prefix, None, None, None).await.unwrap();
    let names: Vec<String> = listed.items.iter().map(ToString::to_string).collect();
    assert_eq!(names, ["sales"], "only what it holds something in");
    // Seeing the namespace is not creating in it.
    let reader = lab.principal("reader", &[(Privilege::Describe, &["hr"])]).await;
    assert!(forbidden(lab.table(&reader, "hr", "bonus").await), "it may see hr: 403, not 404");
    // It sees hr's tables (describe is inherited), but reads none of them.
    assert!(forbidden(tables.load(&reader, &prefix, &table("hr", "salaries"), SnapshotMode::All).await));
    // Each decision was recorded, with its outcome.
    reader.with_decisions(|decisions| {
        assert!(decisions.iter().any(|d| d.privilege == Privilege::Create && d.outcome == Outcome::Forbidden));
    });
}

/// Access to a table's files is what the decision gave, and nothing without one: read with
/// `read`, read-write with `write` or for the creator of the table; a commit's result, read
/// without a decision about files, carries none (so nothing can be vended from it).
async fn file_access_is_only_what_a_decision_gave(lab: Lab) {
    let system = lab.system();
    lab.namespace(&system, "sales").await.unwrap();
    lab.table(&system, "sales", "orders").await.unwrap();
    let prefix = lab.prefix.clone();
    let tables = lab.catalog.tables();
    let orders = table("sales", "orders");
    let level = |result: &TableResult| result.access.map(|grant| grant.level());
    let reader = lab.principal("reader", &[(Privilege::Read, &["sales"])]).await;
    let loaded = tables.load(&reader, &prefix, &orders, SnapshotMode::All).await.unwrap();
    assert_eq!(level(&loaded), Some(AccessLevel::Read));
    let writer = lab.principal("writer", &[(Privilege::Write, &["sales"])]).await;
    let loaded = tables.load(&writer, &prefix, &orders, SnapshotMode::All).await.unwrap();
    assert_eq!(level(&loaded), Some(AccessLevel::ReadWrite));
    // The creator of a table reads and writes what it created, holding only `create`...
    let creator = lab.principal("creator", &[(Privilege::Create, &["sales"])]).await;
    let created = lab.create_table(&creator, "sales", "mine").await.unwrap();
    assert_eq!(level(&created), Some(AccessLevel::ReadWrite));
    // ... but loading it again needs `read`, like any table.
    assert!(forbidden(tables.load(&creator, &prefix, &table("sales", "mine"), SnapshotMode::All).await));
    // A commit answers with the new metadata and no access to files.
    let update =
        serde_json::value::RawValue::from_string(r#"{"action": "set-properties", "updates": {"k": "v"}}"#.into())
            .unwrap();
    let change = icegate_catalog::tables::TableChange {
        table: orders.clone(),
        requirements: Vec::new(),
        updates: vec![icegate_catalog::schema_cost::Pending::new(update, "update")],
        base: None,
    };
    let committed = tables.commit(&writer, &prefix, change).await.unwrap();
    assert_eq!(committed.access, None);
}

/// A commit decides whether the caller may see the table before it reads it: a table it may
/// not see is answered as missing, and the decisions of one that may show `describe` first,
/// then `write` on the table read.
async fn a_commit_decides_before_it_reads(lab: Lab) {
    let system = lab.system();
    lab.namespace(&system, "hr").await.unwrap();
    lab.table(&system, "hr", "salaries").await.unwrap();
    let prefix = lab.prefix.clone();
    let change = || icegate_catalog::tables::TableChange {
        table: table("hr", "salaries"),
        requirements: Vec::new(),
        updates: Vec::new(),
        base: None,
    };
    let stranger = lab.principal("stranger", &[]).await;
    assert!(hidden(lab.catalog.tables().commit(&stranger, &prefix, change()).await));
    let writer = lab.principal("writer", &[(Privilege::Write, &["hr"])]).await;
    lab.catalog.tables().commit(&writer, &prefix, change()).await.unwrap();
    let asked: Vec<Privilege> = writer
        .decisions()
        .into_iter()
        .filter(|d| matches!(d.target, icegate_catalog::access::Target::Tabular { .. }))
        .map(|d| d.privilege)
        .collect();
    assert_eq!(asked, [Privilege::Describe, Privilege::Write]);
}

/// A caller authenticated by an icegate token says so, naming the token by a digest (never the
/// token), the same for every request with that token, and another for another token.
async fn a_token_caller_says_how_it_authenticated(lab: Lab) {
    use icegate_catalog::actors::Authentication;
    let write = WriteContext::NONE;
    let secret = icegate_catalog::tokens::random_secret();
    let hash = icegate_catalog::tokens::hash_secret(&secret).unwrap();
    lab.access.create_principal(&write, "etl", "etl-client", &hash).await.unwrap();
    let settings = icegate_catalog::tokens::AuthSettings {
        required: true,
        issuer: "icegate".into(),
        audience: "icegate".into(),
        token_lifetime: std::time::Duration::from_secs(3600),
        leeway: std::time::Duration::from_secs(5),
    };
    let authenticator = icegate_catalog::tokens::Authenticator::new(settings, lab.access.clone(), None).await.unwrap();
    let via = |token: &str| {
        let caller = authenticator.authenticate(Some(&format!("Bearer {token}"))).unwrap().caller;
        let Caller::Principal { name, via, .. } = caller else { panic!("not a principal: {caller:?}") };
        assert_eq!(name, "etl");
        via
    };
    let first = authenticator.issue_token("etl-client", &secret).await.unwrap().access_token;
    let Authentication::Icegate { token } = via(&first) else { panic!("not an icegate token") };
    assert_eq!(token.len(), 16);
    assert!(!first.contains(&token), "a digest, not a piece of the token");
    assert_eq!(via(&first), Authentication::Icegate { token: token.clone() }, "once verified, the same");
    let second = authenticator.issue_token("etl-client", &secret).await.unwrap().access_token;
    assert_ne!(via(&second), Authentication::Icegate { token }, "another token, another digest");
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

service_tests!(
    each_service_decides_on_what_it_parsed,
    file_access_is_only_what_a_decision_gave,
    a_commit_decides_before_it_reads,
    a_token_caller_says_how_it_authenticated,
    the_system_acts_unrestricted_and_is_named
);
