//! Who acts and what is decided about what: the vocabulary of authorization that the request
//! context, the access store and every write share (a leaf: it depends on names and errors only).

use std::fmt;

use crate::error::CatalogError;
use crate::ident::NamespaceIdent;
use crate::ids::{PrincipalId, WarehouseId};

/// Tables and views share one name space per namespace; `kind` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TabularKind {
    Table,
    View,
}

impl TabularKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::View => "view",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Privilege {
    Describe,
    Read,
    Write,
    Create,
    Drop,
    ManageGrants,
    Admin,
    /// Reading the audit trail: on the server every record, on a warehouse its records.
    Audit,
    /// Reviewing access: reading who can do what on the securable (and inside it) and deciding
    /// the lines of review campaigns about it.
    Review,
}

impl Privilege {
    pub const ALL: [Privilege; 9] = [
        Privilege::Describe,
        Privilege::Read,
        Privilege::Write,
        Privilege::Create,
        Privilege::Drop,
        Privilege::ManageGrants,
        Privilege::Admin,
        Privilege::Audit,
        Privilege::Review,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Describe => "describe",
            Self::Read => "read",
            Self::Write => "write",
            Self::Create => "create",
            Self::Drop => "drop",
            Self::ManageGrants => "manage_grants",
            Self::Admin => "admin",
            Self::Audit => "audit",
            Self::Review => "review",
        }
    }

    pub fn parse(value: &str) -> Result<Self, CatalogError> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == value)
            .ok_or_else(|| CatalogError::bad_request(format!("unknown privilege {value:?}")))
    }

    /// Whether holding `self` grants `wanted`: `admin` grants everything but `audit` and
    /// `review` (those who administer a warehouse neither read its trail nor review its access:
    /// segregation of duties; server admins do both by a rule of their own), `write` grants
    /// `read`, and every privilege grants `describe`.
    pub fn grants(self, wanted: Privilege) -> bool {
        self == wanted
            || (self == Privilege::Admin && !matches!(wanted, Privilege::Audit | Privilege::Review))
            || wanted == Privilege::Describe
            || (self == Privilege::Write && wanted == Privilege::Read)
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a request acts on, resolved to the warehouse id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Server,
    Warehouse { warehouse_id: WarehouseId },
    Namespace { warehouse_id: WarehouseId, namespace: NamespaceIdent },
    Tabular { warehouse_id: WarehouseId, namespace: NamespaceIdent, name: String, kind: TabularKind },
}

/// Who acts: the caller of a request, or the system doing a named job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// `auth.mode = none`: anyone who reaches the server, allowed everything.
    Anonymous,
    /// An authenticated principal, and how it proved who it is.
    Principal { id: PrincipalId, name: String, via: Authentication },
    /// The system: start-up, or background work (`job`, the task it runs), allowed everything
    /// for the reason its task records.
    System { job: String, task_id: Option<String> },
}

/// How a principal proved who it is (for the record of what it did: never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// A token icegate issued for the principal's client credentials; `token`: the first 16 hex
    /// digits of the token's SHA-256, to tell its tokens apart.
    Icegate { token: String },
    /// A token of an external (OIDC) issuer: the issuer, the subject it vouched for, and the
    /// token's digest as above.
    Oidc { issuer: String, subject: String, token: String },
    /// No request: a tool or a test acting as the principal.
    Direct,
}

impl Authentication {
    /// The digest that names a token in records: 16 hex digits of its SHA-256.
    pub fn token_digest(sha256: &[u8; 32]) -> String {
        sha256[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Caller {
    /// No authorization applies: authentication is off, or the system acts.
    pub fn unrestricted(&self) -> bool {
        !matches!(self, Self::Principal { .. })
    }

    /// The principal's id; `None` for the anonymous caller and the system.
    pub fn principal_id(&self) -> Option<&PrincipalId> {
        match self {
            Self::Principal { id, .. } => Some(id),
            Self::Anonymous | Self::System { .. } => None,
        }
    }

    /// How logs and records name who acted: the principal's name, `anonymous`, or
    /// `system:<job>[:<task id>]`.
    pub fn describe(&self) -> String {
        match self {
            Self::Principal { name, .. } => name.clone(),
            Self::Anonymous => "anonymous".to_owned(),
            Self::System { job, task_id: Some(task) } => format!("system:{job}:{task}"),
            Self::System { job, task_id: None } => format!("system:{job}"),
        }
    }
}

/// One authorization decision: what was asked for on what, and the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub target: Target,
    pub privilege: Privilege,
    pub outcome: Outcome,
    /// For a decision a grant allowed: that grant (`None` otherwise, or when none is known: a
    /// decision about a container allowed by what is held inside it).
    pub grant: Option<std::sync::Arc<HeldGrant>>,
}

/// A grant as a decision names it: its id, the role it is granted to, the privilege, the type
/// of securable it was granted on (the target itself or a container of it), and its expiry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeldGrant {
    pub id: String,
    pub role: String,
    pub privilege: Privilege,
    pub securable_type: String,
    pub expires_at_ms: Option<i64>,
}

/// How a [`Decision`] came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No authorization applies (`auth.mode = none`, or work no principal asked for).
    Unrestricted,
    /// Allowed: the caller holds `by` on the target (granted there or on a container), and
    /// `by` includes the privilege asked for.
    Granted { by: Privilege },
    /// Allowed to describe: the caller holds something inside the target.
    Inside,
    /// Refused with 403: the caller may see the target but lacks the privilege.
    Forbidden,
    /// Refused as if the target did not exist: the caller may not even see it.
    Hidden,
}

impl Outcome {
    pub fn allowed(self) -> bool {
        matches!(self, Self::Unrestricted | Self::Granted { .. } | Self::Inside)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unrestricted => "unrestricted",
            Self::Granted { .. } => "granted",
            Self::Inside => "inside",
            Self::Forbidden => "forbidden",
            Self::Hidden => "hidden",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            Target::Server => "server".to_owned(),
            Target::Warehouse { warehouse_id } => format!("warehouse {warehouse_id}"),
            Target::Namespace { warehouse_id, namespace } => format!("namespace {warehouse_id}/{namespace}"),
            Target::Tabular { warehouse_id, namespace, name, kind } => {
                format!("{} {warehouse_id}/{namespace}.{name}", kind.as_str())
            }
        };
        match self.outcome {
            Outcome::Granted { by } => write!(f, "{} on {target}: granted by {by}", self.privilege),
            outcome => write!(f, "{} on {target}: {}", self.privilege, outcome.as_str()),
        }
    }
}
