//! The one error type of the domain layer. The HTTP layer maps each variant to an Iceberg error
//! body in one place (`icegate_api::error`), so the variants are chosen by what a client must be
//! able to tell apart, not by where the failure happened.

/// What kind of object a "not found" is about: clients dispatch on the exception type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Warehouse,
    Namespace,
    Table,
    View,
    /// A principal, role, membership or grant.
    AccessControl,
    /// An adoption or a source location.
    Adoption,
    /// A migration run.
    Migration,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The request is malformed or names something invalid.
    #[error("{0}")]
    BadRequest(String),
    /// The named object does not exist.
    #[error("{message}")]
    NotFound { kind: ObjectKind, message: String },
    /// An object with that name exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// The caller is not authenticated (missing, malformed, expired or forged credentials).
    /// The reason is logged, not sent.
    #[error("{0}")]
    NotAuthorized(String),
    /// The caller may see the object but lacks the privilege for this action.
    #[error("{0}")]
    Forbidden(String),
    /// A namespace still holds namespaces, tables or views.
    #[error("{0}")]
    NamespaceNotEmpty(String),
    /// A warehouse still holds namespaces.
    #[error("{0}")]
    WarehouseNotEmpty(String),
    /// The change would break an invariant of the catalog (removing the last server admin).
    #[error("{0}")]
    Conflict(String),
    /// The request is well formed but contradicts itself (a key both updated and removed).
    #[error("{0}")]
    Unprocessable(String),
    /// A commit's requirements do not hold against the current metadata; the client should
    /// refresh and retry.
    #[error("{0}")]
    CommitFailed(String),
    /// The commit may or may not have been applied: the client must check before retrying.
    #[error("{0}")]
    CommitStateUnknown(String),
    /// The request names a feature icegate does not implement.
    #[error("{0}")]
    Unsupported(String),
    /// Another request with the same `Idempotency-Key` applied its mutation first.
    #[error("a request with this Idempotency-Key was applied already")]
    IdempotencyKeyUsed,
    /// The metadata store cannot be reached; the client may retry.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else. The cause is logged with an error id and never sent to the client.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl CatalogError {
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::BadRequest(msg.into())
    }

    pub fn no_such_warehouse(name: impl std::fmt::Display) -> Self {
        Self::NotFound { kind: ObjectKind::Warehouse, message: format!("Warehouse does not exist: {name}") }
    }

    pub fn no_such_table(table: impl std::fmt::Display) -> Self {
        Self::NotFound { kind: ObjectKind::Table, message: format!("Table does not exist: {table}") }
    }

    pub fn no_such_view(view: impl std::fmt::Display) -> Self {
        Self::NotFound { kind: ObjectKind::View, message: format!("View does not exist: {view}") }
    }

    /// An adoption or a source location that does not exist (`message` names it).
    pub fn no_such_adoption(message: String) -> Self {
        Self::NotFound { kind: ObjectKind::Adoption, message }
    }

    pub fn no_such_namespace(ns: impl std::fmt::Display) -> Self {
        Self::NotFound { kind: ObjectKind::Namespace, message: format!("Namespace does not exist: {ns}") }
    }

    /// A commit whose outcome cannot be known: `what` happened while committing.
    pub fn commit_state_unknown(what: &str) -> Self {
        Self::CommitStateUnknown(format!(
            "{what} while committing; the commit may or may not have been applied. Reload before retrying."
        ))
    }
}

pub type Result<T, E = CatalogError> = std::result::Result<T, E>;

/// Errors of the `iceberg` crate while validating or applying metadata changes: a failed
/// requirement is a commit conflict (409), invalid input a bad request (400).
impl From<iceberg::Error> for CatalogError {
    fn from(err: iceberg::Error) -> Self {
        use iceberg::ErrorKind as K;
        match err.kind() {
            K::CatalogCommitConflicts => Self::CommitFailed(err.message().to_owned()),
            K::DataInvalid | K::PreconditionFailed => Self::BadRequest(err.message().to_owned()),
            K::FeatureUnsupported => Self::Unsupported(err.message().to_owned()),
            _ => Self::Internal(anyhow::Error::new(err).context("iceberg metadata operation failed")),
        }
    }
}
