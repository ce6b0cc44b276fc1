//! The pgflow SQL core: PGMQ installation, the `pgflow` schema's embedded migrations and schema
//! version checks.
//!
//! [`install`] puts everything a database needs in place: PGMQ first (the server's `pgmq`
//! extension when it has one, otherwise PGMQ's own SQL as embedded in the `pgmq` crate), then
//! the `pgflow` schema: its versioned migrations (`migrations/`: tables, types, indexes,
//! constraints) and then its functions, views and triggers (`functions/`, re-applied whenever
//! they change), in one transaction. It is idempotent and safe to call from many processes at
//! once.
//! [`check_schema`] tells a worker or client whether the database matches this code.

mod contract;
mod error;
mod functions;
mod install;
mod ledger;
mod migrations;
mod pooling;
mod roles;

pub use contract::{
    EntryPoint, documented_error_codes, entry_points, raised_error_codes, roles_of,
};
pub use error::{InstallError, connection_target};
pub use functions::{FUNCTION_FILES, FunctionFile, code_functions_checksum, functions_current};
pub use install::{InstallReport, PgmqSource, install, install_url};
pub use migrations::{SchemaStatus, check_schema, code_migration_versions, code_schema_version};
pub use pooling::{Pooling, split_pooling};
pub use roles::{PgflowRole, grant_role};
