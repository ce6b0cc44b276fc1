//! The startup lifecycle, in the order the design fixes: connect, normalize, reject duplicate
//! slugs, compile or verify every deployment, derive the queue's pairs, check coverage,
//! register and print the banner.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use uuid::Uuid;

use crate::engine::{self, CompileStatus, SupportedPairs};
use crate::names::QueueName;
use crate::worker::config::{Connection, WorkerSettings};
use crate::worker::error::WorkerError;
use crate::worker::registry::RegisteredFlow;

/// Everything a started worker runs with.
pub struct Started {
    pub pool: PgPool,
    pub worker_id: Uuid,
    pub queue: QueueName,
    pub pairs: SupportedPairs,
    pub flows: HashMap<String, RegisteredFlow>,
}

/// How the worker was asked to pick its queue.
pub enum QueueChoice {
    /// `Worker::start(flow)`: the flow's default queue.
    DefaultOf(String),
    /// An explicit queue.
    Explicit,
}

pub async fn start(
    flows: Vec<RegisteredFlow>,
    queue: QueueName,
    choice: QueueChoice,
    settings: &WorkerSettings,
) -> Result<Started, WorkerError> {
    let pool = connect(settings).await?;
    check_schema(&pool).await?;

    // 1. Normalize: every deployment already carries its alias (a plain flow is its own),
    //    version and routes. 2. Reject duplicate concrete slugs.
    let mut by_slug: HashMap<String, RegisteredFlow> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for flow in flows {
        let slug = flow.definition.slug.as_str().to_owned();
        if by_slug.insert(slug.clone(), flow).is_some() {
            return Err(WorkerError::DuplicateFlow { flow_slug: slug });
        }
        order.push(slug);
    }

    // 3. Compile or verify every deployment (commits independently of what follows).
    let mut states = Vec::new();
    for slug in &order {
        let flow = &by_slug[slug];
        let status = engine::compile_flow(&pool, &flow.definition)
            .await
            .map_err(|source| WorkerError::Compile {
                flow_slug: slug.clone(),
                source,
            })?;
        states.push((slug.clone(), status));
    }

    // 4. The exact pairs routed to this queue.
    let mut pairs = SupportedPairs::new();
    for slug in &order {
        pairs.extend_routed_to(&by_slug[slug].definition, &queue);
    }
    if let QueueChoice::DefaultOf(flow_slug) = &choice
        && pairs.is_empty()
    {
        let definition = &by_slug[flow_slug].definition;
        let queues: BTreeSet<String> = definition
            .steps
            .iter()
            .map(|s| definition.queue_of(s).as_str().to_owned())
            .collect();
        return Err(WorkerError::NothingOnDefaultQueue {
            flow_slug: flow_slug.clone(),
            queue_name: queue.as_str().to_owned(),
            queues: queues.into_iter().collect::<Vec<_>>().join(", "),
        });
    }

    // 5. Coverage: every executable or recoverable task on the queue and every started run
    //    that can still reach it must be of a pair this worker carries.
    let gaps = engine::queue_coverage_gaps(&pool, &queue, &pairs).await?;
    if !gaps.is_empty() {
        return Err(WorkerError::Coverage {
            queue_name: queue.as_str().to_owned(),
            gaps,
        });
    }

    // 6. Register and announce.
    let worker_id = Uuid::new_v4();
    let function_name = settings.resolved_function_name();
    engine::register_worker(&pool, worker_id, &queue, &function_name, &order).await?;
    let flows_text = states
        .iter()
        .map(|(slug, status)| {
            let state = match status {
                CompileStatus::Compiled => "compiled",
                CompileStatus::Verified => "verified",
            };
            format!("{slug} ({state})")
        })
        .collect::<Vec<_>>()
        .join(", ");
    tracing::info!(
        queue = queue.as_str(),
        worker_id = %worker_id,
        function = function_name.as_str(),
        flows = flows_text.as_str(),
        max_concurrent = settings.max_concurrent,
        batch_size = settings.batch_size,
        "pgflow worker started"
    );

    Ok(Started {
        pool,
        worker_id,
        queue,
        pairs,
        flows: by_slug,
    })
}

async fn connect(settings: &WorkerSettings) -> Result<PgPool, WorkerError> {
    let url = match &settings.connection {
        Connection::Pool(pool) => return Ok(pool.clone()),
        Connection::Url(url) => url.clone(),
        Connection::FromEnv => {
            std::env::var("DATABASE_URL").map_err(|_| WorkerError::NoDatabase)?
        }
    };
    let options = PgConnectOptions::from_str(&url).map_err(WorkerError::Connect)?;
    PgPoolOptions::new()
        .max_connections(settings.max_pg_connections)
        .connect_with(options)
        .await
        .map_err(WorkerError::Connect)
}

async fn check_schema(pool: &PgPool) -> Result<(), WorkerError> {
    use pgflow_sql::SchemaStatus;
    let status = pgflow_sql::check_schema(pool)
        .await
        .map_err(|e| WorkerError::Schema(e.to_string()))?;
    match status {
        SchemaStatus::Current => Ok(()),
        SchemaStatus::NotInstalled => Err(WorkerError::Schema(
            "pgflow is not installed in this database; run `pgflow install` (or \
             `pgflow::install(&pool)`) first"
                .to_owned(),
        )),
        SchemaStatus::Outdated { database, code } => Err(WorkerError::Schema(format!(
            "the database's pgflow schema is at version {database}, older than this worker's \
             {code}; run `pgflow install` to upgrade it"
        ))),
        SchemaStatus::Newer { database, code } => Err(WorkerError::Schema(format!(
            "the database's pgflow schema is at version {database}, newer than this worker's \
             {code}; deploy the newer pgflow in this worker"
        ))),
    }
}
