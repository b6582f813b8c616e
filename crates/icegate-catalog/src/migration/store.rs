//! What a migration keeps (migration 25): the run (its source, with secrets sealed, what it
//! selected, its state and report) and each table's state machine. Every change of state is a
//! compare-and-swap on the state it moves from, so two workers (or a worker and a rollback)
//! never both act on one table.

use serde_json::Value;

use crate::Result;

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Planned,
    Running,
    Completed,
    Failed,
    RolledBack,
}

/// Where one table of a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableState {
    /// Selected; nothing done at the source yet.
    Planned,
    /// The source accepts no more commits; `fenced_location` is what moves.
    Fenced,
    /// icegate holds it (`tabular_id`).
    Registered,
    /// icegate's table equals the source's.
    Verified,
    /// The source's entry is gone for good.
    Retired,
    /// The source is restored (with `handed_back` when icegate took commits), icegate's entry gone.
    RolledBack,
    Failed,
    /// Left out by the plan (a conflict, a location outside the warehouse), with the reason.
    Skipped,
}

macro_rules! states {
    ($name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }

            pub fn parse(value: &str) -> Result<Self> {
                match value {
                    $($text => Ok(Self::$variant),)*
                    other => Err(crate::CatalogError::bad_request(format!(
                        concat!("unknown ", stringify!($name), " {:?}"),
                        other
                    ))),
                }
            }
        }
    };
}

states!(RunState {
    Planned => "planned",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
    RolledBack => "rolled-back",
});

states!(TableState {
    Planned => "planned",
    Fenced => "fenced",
    Registered => "registered",
    Verified => "verified",
    Retired => "retired",
    RolledBack => "rolled-back",
    Failed => "failed",
    Skipped => "skipped",
});

impl TableState {
    /// A table in one of these states is being moved: its source object is in no other run.
    pub fn is_live(self) -> bool {
        matches!(self, Self::Planned | Self::Fenced | Self::Registered | Self::Verified)
    }
}

/// A migration run.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    pub id: String,
    pub target_warehouse_id: String,
    /// `rest`, `sql` or `glue`.
    pub source_kind: String,
    /// The source's description, its secrets sealed.
    pub source: Value,
    pub selection: Value,
    pub dry_run: bool,
    pub state: RunState,
    pub report: Value,
    pub created_at_ms: i64,
    pub created_by: String,
    pub updated_at_ms: i64,
}

/// One table (or view) of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationTable {
    pub id: String,
    pub migration_id: String,
    /// `table` or `view`.
    pub kind: String,
    /// The source object's identity across runs: one live migration of it at a time.
    pub source_key: String,
    pub source_namespace: Vec<String>,
    pub source_name: String,
    pub target_namespace: Vec<String>,
    pub target_name: String,
    pub state: TableState,
    pub planned_location: Option<String>,
    pub fenced_location: Option<String>,
    /// What undoing the fence needs (the source's exact state before it).
    pub fence: Option<Value>,
    pub tabular_id: Option<String>,
    pub handed_back: Option<String>,
    pub report: Option<Value>,
    pub error: Option<String>,
    pub updated_at_ms: i64,
}

/// A table's move from one state to the next, with what the step learned (`None`: unchanged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub fenced_location: Option<String>,
    pub fence: Option<Value>,
    pub tabular_id: Option<String>,
    pub handed_back: Option<String>,
    pub report: Option<Value>,
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_as_written_and_only_moving_ones_are_live() {
        for state in [RunState::Planned, RunState::Running, RunState::Completed, RunState::Failed, RunState::RolledBack]
        {
            assert_eq!(RunState::parse(state.as_str()).unwrap(), state);
        }
        let all = [
            TableState::Planned,
            TableState::Fenced,
            TableState::Registered,
            TableState::Verified,
            TableState::Retired,
            TableState::RolledBack,
            TableState::Failed,
            TableState::Skipped,
        ];
        for state in all {
            assert_eq!(TableState::parse(state.as_str()).unwrap(), state);
        }
        let live: Vec<&str> = all.iter().filter(|s| s.is_live()).map(|s| s.as_str()).collect();
        assert_eq!(live, ["planned", "fenced", "registered", "verified"], "migration 25's live index says the same");
        assert!(TableState::parse("moved").is_err() && RunState::parse("").is_err());
    }
}
