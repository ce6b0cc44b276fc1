//! The state every handler shares: a leaf, so that handlers and routes can both name it.

use std::sync::Arc;

use pgflow_runtime::{Client, Db};

use crate::config::DashboardConfig;
use crate::replica::{Lag, ReplicaLag};
use crate::throughput::Throughput;

/// What every handler reads.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Run control and run events, on the primary.
    pub client: Client,
    /// Where the pages read: a replica when one was given, else the primary.
    reads: Db,
    /// How far behind the replica is (`None`: the pages read from the primary).
    replica: Option<Arc<ReplicaLag>>,
    /// The operator's choices.
    pub config: Arc<DashboardConfig>,
    /// Recent readings of the queues' message counters.
    pub throughput: Arc<Throughput>,
}

impl AppState {
    /// State for a dashboard of the database behind `db`, whose pages read from `replica`
    /// when one is given.
    pub(crate) fn new(config: DashboardConfig, db: Db, replica: Option<Db>) -> Self {
        let (reads, replica) = match replica {
            Some(replica) => {
                let lag = Arc::new(ReplicaLag::default());
                ReplicaLag::start_reading(&lag, replica.clone());
                (replica, Some(lag))
            }
            None => (db.clone(), None),
        };
        Self {
            client: Client::new(db),
            reads,
            replica,
            config: Arc::new(config),
            throughput: Arc::new(Throughput::default()),
        }
    }

    /// The primary: for actions, and what must see the latest state.
    pub(crate) fn db(&self) -> &Db {
        self.client.db()
    }

    /// Where the pages read.
    pub(crate) fn reads(&self) -> &Db {
        &self.reads
    }

    /// How far behind the replica the pages read from is (`None`: they read from the
    /// primary).
    pub(crate) fn replica_lag(&self) -> Option<Lag> {
        self.replica.as_ref().map(|lag| lag.latest())
    }
}
