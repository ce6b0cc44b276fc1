//! The state every handler shares: a leaf, so that handlers and routes can both name it.

use std::sync::Arc;

use pgflow_runtime::{Client, Db};

use crate::config::DashboardConfig;
use crate::throughput::Throughput;

/// What every handler reads.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Reads and run control, with one shared listener for run events.
    pub client: Client,
    /// The operator's choices.
    pub config: Arc<DashboardConfig>,
    /// Recent readings of the queues' message counters.
    pub throughput: Arc<Throughput>,
}

impl AppState {
    /// State for a dashboard of the database behind `db`.
    pub(crate) fn new(config: DashboardConfig, db: Db) -> Self {
        Self {
            client: Client::new(db),
            config: Arc::new(config),
            throughput: Arc::new(Throughput::default()),
        }
    }

    /// The database.
    pub(crate) fn db(&self) -> &Db {
        self.client.db()
    }
}
