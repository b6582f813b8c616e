//! The operators' CLI: `icegate <noun> <verb>` against a running server, through its management
//! API (with the API's own request and response types) and its Iceberg REST API. Objects are
//! named `warehouse.namespace.table` (see [`names`]); `--output json` prints one document per
//! command; the exit code is 0 on success, 1 when the server refused or the call failed (with
//! the server's message), 2 for a usage error. Long work (`task watch`, `migration run`) shows a
//! progress bar fed by the task's progress and prints the final report.

pub mod client;
mod commands;
pub mod names;
mod output;

use clap::Subcommand;
pub use client::Connection;
pub use commands::*;

/// The nouns, each with its verbs and the connection.
#[derive(Subcommand, Debug)]
pub enum Remote {
    /// Warehouses: list, show, create, set-storage-profile, delete.
    Warehouse {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: WarehouseVerb,
    },
    /// Namespaces: list, create, show, drop (`WAREHOUSE.NAMESPACE`).
    Namespace {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: NamespaceVerb,
    },
    /// Tables: list, show (schema, spec, snapshots, refs, properties, size), drop, undrop,
    /// deleted (`WAREHOUSE.NAMESPACE.TABLE`).
    Table {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: TableVerb,
    },
    /// Principals: create (prints the secret once), list, show, rotate-secret, delete.
    Principal {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: PrincipalVerb,
    },
    /// Roles and their members.
    Role {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: RoleVerb,
    },
    /// Grants of privileges to roles.
    Grant {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: GrantVerb,
    },
    /// Who can act on what, and why.
    Access {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: AccessVerb,
    },
    /// Background tasks: list, show, cancel, watch.
    Task {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: TaskVerb,
    },
    /// Maintenance: plan, run (snapshot expiry and orphan clean-up, followed to their end).
    Maintenance {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: MaintenanceVerb,
    },
    /// Adopt Parquet datasets in place: run, list, show, sync.
    Adopt {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: AdoptVerb,
    },
    /// Migrations from another catalog: plan, run, status, list, rollback, retire.
    Migration {
        #[command(flatten)]
        connection: Connection,
        #[command(subcommand)]
        verb: MigrationVerb,
    },
}

impl Remote {
    /// Runs the command; the process's exit code.
    pub async fn run(self) -> std::process::ExitCode {
        match self {
            Self::Warehouse { connection, verb } => run(&connection, verb).await,
            Self::Namespace { connection, verb } => run(&connection, verb).await,
            Self::Table { connection, verb } => run(&connection, verb).await,
            Self::Principal { connection, verb } => run(&connection, verb).await,
            Self::Role { connection, verb } => run(&connection, verb).await,
            Self::Grant { connection, verb } => run(&connection, verb).await,
            Self::Access { connection, verb } => run(&connection, verb).await,
            Self::Task { connection, verb } => run(&connection, verb).await,
            Self::Migration { connection, verb } => run(&connection, verb).await,
            Self::Maintenance { connection, verb } => run(&connection, verb).await,
            Self::Adopt { connection, verb } => run(&connection, verb).await,
        }
    }
}

/// Runs a noun's verb; the process's exit code.
pub async fn run<V: commands::Verb>(connection: &Connection, verb: V) -> std::process::ExitCode {
    let client = match client::Client::new(connection) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("icegate: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match verb.run(&client).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("icegate: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
