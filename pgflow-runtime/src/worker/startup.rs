//! The startup lifecycle, in the order the design fixes: connect, normalize, reject duplicate
//! slugs, compile or verify every deployment, derive the queue's pairs, check coverage,
//! register and print the banner.

use std::collections::{BTreeSet, HashMap};

use crate::db::Db;
use uuid::Uuid;

use crate::engine::{self, Activation, CompileStatus};
use crate::names::QueueName;
use crate::process::Notifications;
use crate::worker::config::{Connection, WorkerSettings};
use crate::worker::error::WorkerError;
use crate::worker::handlers::HandlerTable;
use crate::worker::registry::RegisteredFlow;

/// Everything a started worker runs with.
pub(super) struct Started {
    /// The client it runs on: what it shares with the client's other workers.
    pub client: crate::Client,
    /// The worker's pool (its client's).
    pub pool: Db,
    /// Its id, as registered.
    pub worker_id: Uuid,
    /// The queue it polls.
    pub queue: QueueName,
    /// The steps it runs, and so the pairs its claims support.
    pub handlers: HandlerTable,
    /// What startup did to each carried flow, in registry order.
    pub flow_states: Vec<FlowStartup>,
}

/// What a worker's startup did to one carried flow.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowStartup {
    /// The concrete flow.
    pub flow_slug: String,
    /// Compiled now, or verified against the stored definition.
    pub compile: CompileStatus,
    /// Its standing in its alias after startup.
    pub activation: Activation,
}

/// How the worker was asked to pick its queue.
pub(super) enum QueueChoice {
    /// `Worker::start(flow)`: the flow's default queue.
    DefaultOf(String),
    /// An explicit queue.
    Explicit,
}

pub(super) async fn start(
    flows: Vec<RegisteredFlow>,
    queue: QueueName,
    choice: QueueChoice,
    settings: &WorkerSettings,
) -> Result<Started, WorkerError> {
    let client = connect(settings).await?;
    for schedule in &client.config().schedules {
        schedule.validate()?;
    }
    if let Notifications::Url(url) = client.config().notifications() {
        crate::process::notifier::listen_options(url)
            .map_err(|source| WorkerError::InvalidListenUrl { source })?;
    }
    let pool = client.db().clone();
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

    let function_name = settings.resolved_function_name();
    loop {
        // A worker of a function disabled by a rollout neither compiles, activates nor registers.
        wait_until_enabled(&pool, &function_name, &queue, settings).await?;

        // 3. Compile or verify every deployment, then activate the newest version of each
        //    alias (never backwards). Both commit independently of what follows: if a later
        //    step fails, queued work waits durably for a correct worker.
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
        let activations = activate(&pool, &order, &by_slug).await?;

        // 4. The exact pairs routed to this queue, with their handlers.
        let mut handlers = HandlerTable::routed_to(order.iter().map(|slug| &by_slug[slug]), &queue);
        let pairs = handlers.pairs();
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

        // 5. Coverage: active alias targets routed here, draining versions whose started runs
        //    can still reach the queue, and every queued or started task on it.
        let gaps = engine::queue_coverage_gaps(&pool, &queue, pairs).await?;
        if !gaps.is_empty() {
            return Err(WorkerError::Coverage {
                queue_name: queue.as_str().to_owned(),
                gaps,
            });
        }

        // 5a. What a completion of each pair may claim for this worker at release.
        let releases = engine::claims_at_release(&pool, &queue, pairs).await?;
        handlers.set_releases(releases);

        // 5b. Declare the process's schedules.
        for schedule in &client.config().schedules {
            if engine::define_schedule(&pool, schedule).await? {
                tracing::info!(schedule = schedule.name(), "schedule declared");
            }
        }

        // 6. Register (unless a rollout disabled the function meanwhile) and announce.
        let worker_id = Uuid::new_v4();
        if !engine::register_worker(
            &pool,
            worker_id,
            &queue,
            &function_name,
            &order,
            settings.heartbeat_interval,
        )
        .await?
        {
            tracing::info!(
                queue = queue.as_str(),
                function = function_name.as_str(),
                "the worker function was disabled during startup; waiting for the rollout to finish"
            );
            continue;
        }
        let flow_states: Vec<FlowStartup> = states
            .into_iter()
            .map(|(flow_slug, compile)| FlowStartup {
                activation: activations
                    .get(&flow_slug)
                    .copied()
                    .unwrap_or(Activation::Inactive),
                flow_slug,
                compile,
            })
            .collect();
        let flows_text = flow_states
            .iter()
            .map(|f| {
                let compiled = match f.compile {
                    CompileStatus::Compiled => "compiled",
                    CompileStatus::Verified => "verified",
                };
                format!("{} ({compiled}, {})", f.flow_slug, f.activation.as_str())
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
        return Ok(Started {
            client,
            pool,
            worker_id,
            queue,
            handlers,
            flow_states,
        });
    }
}

/// Activates, per alias, the registry's newest version; reports every flow's standing.
async fn activate(
    pool: &Db,
    order: &[String],
    flows: &HashMap<String, RegisteredFlow>,
) -> Result<HashMap<String, Activation>, WorkerError> {
    let mut newest: HashMap<&str, &str> = HashMap::new();
    for slug in order {
        let definition = &flows[slug].definition;
        let alias = definition.alias.as_str();
        let is_newer = newest
            .get(alias)
            .is_none_or(|current| flows[*current].definition.version < definition.version);
        if is_newer {
            newest.insert(alias, slug.as_str());
        }
    }
    // Activate first, then read the standing of the older versions.
    let mut states = HashMap::new();
    for slug in newest.values() {
        states.insert((*slug).to_owned(), engine::activate_flow(pool, slug).await?);
    }
    for slug in order {
        if !states.contains_key(slug) {
            states.insert(slug.clone(), engine::alias_state(pool, slug).await?);
        }
    }
    Ok(states)
}

/// Waits while a rollout keeps the worker's function disabled, logging now and then.
async fn wait_until_enabled(
    pool: &Db,
    function_name: &str,
    queue: &QueueName,
    settings: &WorkerSettings,
) -> Result<(), WorkerError> {
    let mut last_log: Option<std::time::Instant> = None;
    while !engine::function_enabled(pool, function_name).await? {
        if last_log.is_none_or(|at| at.elapsed() >= LOG_WHILE_DISABLED_EVERY) {
            tracing::info!(
                queue = queue.as_str(),
                function = function_name,
                "worker function disabled by a rollout; waiting until `pgflow rollout finish` enables it"
            );
            last_log = Some(std::time::Instant::now());
        }
        tokio::time::sleep(
            settings
                .heartbeat_interval
                .min(std::time::Duration::from_secs(1)),
        )
        .await;
    }
    Ok(())
}

/// How often a waiting worker says it is still waiting.
const LOG_WHILE_DISABLED_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The client the worker runs on: the one it was given, or one of its own over its pool or URL.
async fn connect(settings: &WorkerSettings) -> Result<crate::Client, WorkerError> {
    let url = match &settings.connection {
        Connection::Client(client) => return Ok(client.clone()),
        Connection::Pool(pool) => return Ok(crate::Client::new(pool.clone())),
        Connection::Url(url) => url.clone(),
        Connection::FromEnv => {
            std::env::var("DATABASE_URL").map_err(|_| WorkerError::NoDatabase)?
        }
    };
    let db = crate::connect::db(&url, settings.max_pg_connections).await?;
    Ok(crate::Client::new(db))
}

async fn check_schema(db: &Db) -> Result<(), WorkerError> {
    use pgflow_sql::SchemaStatus;
    let pool = db.pool();
    let status = pgflow_sql::check_schema(pool)
        .await
        .map_err(|e| WorkerError::Schema(e.to_string()))?;
    match status {
        SchemaStatus::Current => {
            // Same versioned schema, so the same function signatures: another release's
            // bodies still serve this worker, but say so.
            if !pgflow_sql::functions_current(pool).await.unwrap_or(true) {
                tracing::warn!(
                    "the database's pgflow functions differ from this worker's; run `pgflow \
                     install` with the newest pgflow to bring them in line"
                );
            }
            Ok(())
        }
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
