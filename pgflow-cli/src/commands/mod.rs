//! The commands' implementations, one module per group: each calls the library's typed
//! functions and prints text (tables that fit) by default or JSON with `--json`.

mod aliases;
mod control;
mod dashboard;
mod graph;
mod install;
mod prune;
mod rollout;
mod runs;
mod schedules;
mod status;
mod workers;

use pgflow::ConnectError;
use pgflow_runtime::admin::inspect::{self, FlowName};

use self::runs::JsonArg;
use crate::args::{
    AliasCommand, Cli, Command, FlowCommand, QueueCommand, RolloutCommand, SchedulesCommand,
    WorkersCommand,
};
use crate::failure::Failure;
use crate::output::Output;

/// Runs one command.
pub(crate) async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli.database_url.clone().ok_or_else(|| {
        Failure::usage("no database given: pass --database-url or set DATABASE_URL")
    })?;
    let out = Output::detect(cli.json);
    if let Command::Install = cli.command {
        return install::install(&url, &out).await;
    }
    if let Command::Dashboard {
        listen,
        token,
        read_only,
        hide_payloads,
        metrics,
    } = cli.command
    {
        let pool = connect(&url, dashboard::CONNECTIONS).await?;
        let replica = match &cli.read_url {
            Some(read_url) => Some(connect(read_url, dashboard::CONNECTIONS).await?),
            None => None,
        };
        let options = dashboard::Options {
            listen,
            token,
            read_only,
            hide_payloads,
            metrics,
        };
        return dashboard::serve(pool, replica, options).await;
    }
    let pool = connect(&url, 2).await?;
    // What only reads goes to the replica when one is given.
    let reads = match &cli.read_url {
        Some(read_url) => connect(read_url, 2).await?,
        None => pool.clone(),
    };
    match cli.command {
        Command::Install | Command::Dashboard { .. } => unreachable!("handled above"),
        Command::Grant { login, role } => install::grant(&pool, &out, &login, role.role()).await,
        Command::Alias(AliasCommand::Set { alias, flow }) => {
            aliases::set(&pool, &out, &alias, &flow).await
        }
        Command::Alias(AliasCommand::List) => aliases::list(&reads, &out).await,
        Command::DrainStatus { flow, queue } => {
            aliases::drain_status(&pool, &out, &flow, queue.as_deref()).await
        }
        Command::Rollout(RolloutCommand::Begin {
            functions,
            queues,
            timeout,
            no_wait,
        }) => rollout::begin(&pool, &out, functions, queues, timeout, no_wait).await,
        Command::Rollout(RolloutCommand::Finish { rollout_id }) => {
            rollout::finish(&pool, &out, rollout_id).await
        }
        Command::Rollout(RolloutCommand::Status { all }) => rollout::status(&pool, &out, all).await,
        Command::Status => status::status(&reads, &out).await,
        Command::Runs {
            flow,
            status,
            limit,
        } => runs::list(&reads, &out, flow.as_deref(), status, limit).await,
        Command::Run { run_id, full } => runs::show(&reads, &out, &run_id, full).await,
        Command::Start {
            flow,
            input,
            input_file,
            idempotency_key,
            at,
            after,
            priority,
            throttle,
            window,
            drop,
            singleton,
            in_turn,
            debounce,
        } => {
            let input = runs::read_json(input.as_deref(), input_file.as_deref(), JsonArg::INPUT)?;
            let mut how = pgflow::engine::StartRuns::new().priority(priority.unwrap_or_default());
            // A delay counts on the database's clock, not this machine's.
            how = match after {
                Some(delay) => how.start_after(Some(delay)),
                None => how.start_at(at),
            };
            if let Some(key) = idempotency_key {
                how = how.idempotency_keys(vec![Some(key)]);
            }
            if let (Some(key), Some(window)) = (throttle, window) {
                let excess = if drop {
                    pgflow::Excess::Drop
                } else {
                    pgflow::Excess::Refuse
                };
                how.throttle = Some(pgflow::engine::Throttle::new(
                    vec![Some(key)],
                    window,
                    excess,
                ));
            }
            if let Some(key) = singleton {
                how.singleton_keys = Some(vec![Some(key)]);
                how.singleton_in_turn = in_turn;
            }
            match (debounce, window) {
                (Some(key), Some(window)) => {
                    how.debounce = Some(pgflow::engine::Debounce::new(vec![Some(key)], window));
                }
                (None, Some(_)) if how.throttle.is_none() => {
                    return Err(Failure::usage(
                        "--window goes with --throttle or --debounce",
                    ));
                }
                _ => {}
            }
            runs::start(&pool, &out, &flow, &input, &how).await
        }
        Command::Signal {
            run_id,
            name,
            payload,
            payload_file,
        } => {
            let payload = runs::read_json(
                payload.as_deref(),
                payload_file.as_deref(),
                JsonArg::PAYLOAD,
            )?;
            let run_id = resolve_run_id(&pool, &run_id).await?;
            runs::signal(&pool, &out, run_id, &name, &payload).await
        }
        Command::Emit {
            name,
            key,
            payload,
            payload_file,
        } => {
            let payload = runs::read_json(
                payload.as_deref(),
                payload_file.as_deref(),
                JsonArg::PAYLOAD,
            )?;
            runs::emit(&pool, &out, &name, &key, payload).await
        }
        Command::Graph { flow, format, run } => {
            graph::graph(&reads, &out, &flow, format, run.as_deref()).await
        }
        Command::Workers(WorkersCommand::List { all }) => workers::list(&reads, &out, all).await,
        Command::Workers(WorkersCommand::Deprecate { function }) => {
            workers::deprecate(&pool, &out, &function).await
        }
        Command::Queue(QueueCommand::Pause { queue, reason }) => {
            workers::pause_queue(&pool, &out, &queue, reason.as_deref()).await
        }
        Command::Queue(QueueCommand::Resume { queue }) => {
            workers::resume_queue(&pool, &out, &queue).await
        }
        Command::Queue(QueueCommand::Aging { queue, limit }) => {
            workers::set_priority_aging(&pool, &out, &queue, limit).await
        }
        Command::Queue(QueueCommand::Cap { queue, concurrency }) => {
            workers::set_queue_cap(&pool, &out, &queue, concurrency).await
        }
        Command::Flow(FlowCommand::Pause { name, reason }) => {
            workers::pause_flow(&pool, &out, &name, reason.as_deref()).await
        }
        Command::Flow(FlowCommand::Resume { name }) => {
            workers::resume_flow(&pool, &out, &name).await
        }
        Command::Cancel {
            run_ids,
            filter,
            reason,
        } => control::cancel(&pool, &out, &run_ids, &filter, reason.as_deref()).await,
        Command::Schedules(SchedulesCommand::List) => schedules::list(&reads, &out).await,
        Command::Schedules(SchedulesCommand::Pause { name }) => {
            schedules::pause(&pool, &out, &name, true).await
        }
        Command::Schedules(SchedulesCommand::Resume { name }) => {
            schedules::pause(&pool, &out, &name, false).await
        }
        Command::Schedules(SchedulesCommand::Trigger { name }) => {
            schedules::trigger(&pool, &out, &name).await
        }
        Command::Schedules(SchedulesCommand::Delete { name }) => {
            schedules::delete(&pool, &out, &name).await
        }
        Command::DeleteFlow { flow, force } => {
            control::delete_flow(&pool, &out, &flow, force).await
        }
        Command::Retry { run_ids, filter } => control::retry(&pool, &out, &run_ids, &filter).await,
        Command::Resume {
            run_ids,
            from,
            status,
            filter,
        } => {
            let statuses: Vec<_> = status.iter().map(|s| s.status()).collect();
            control::resume(&pool, &out, &run_ids, &from, &statuses, &filter).await
        }
        Command::Prune {
            older_than,
            dry_run,
            batch,
        } => prune::prune(&pool, &out, older_than, batch, dry_run).await,
    }
}

/// Connects and checks that pgflow is installed and current.
async fn connect(url: &str, connections: u32) -> Result<pgflow::Db, Failure> {
    let pool = pgflow::connect::db(url, connections)
        .await
        .map_err(|error| match error {
            ConnectError::InvalidUrl { source } => {
                Failure::usage(format!("invalid database URL: {source}"))
            }
            ConnectError::Unreachable { target, source } => Failure::runtime(format!(
                "cannot connect to the database at {target}: {source}"
            )),
            other => Failure::runtime(other.to_string()),
        })?;
    let target = pgflow::schema::connection_target(&pool.pool().connect_options());
    match pgflow::schema::check_schema(pool.pool()).await {
        Ok(pgflow::schema::SchemaStatus::Current) => Ok(pool),
        Ok(pgflow::schema::SchemaStatus::NotInstalled) => Err(Failure::runtime(format!(
            "pgflow is not installed in {target}; run `pgflow install`"
        ))),
        Ok(pgflow::schema::SchemaStatus::Outdated { database, code }) => {
            Err(Failure::runtime(format!(
                "the pgflow schema in {target} is at version {database}, older than this binary's \
             {code}; run `pgflow install` to upgrade it"
            )))
        }
        Ok(pgflow::schema::SchemaStatus::Newer { database, code }) => {
            Err(Failure::runtime(format!(
                "the pgflow schema in {target} is at version {database}, newer than this binary's \
             {code}; use a newer pgflow"
            )))
        }
        Err(error) => Err(Failure::runtime(error.to_string())),
    }
}

/// A concrete flow or an alias the operator named; an unknown name fails saying where to
/// look.
async fn resolve_flow(pool: &pgflow::Db, name: &str) -> Result<FlowName, Failure> {
    inspect::resolve_flow_name(pool, name)
        .await?
        .ok_or_else(|| {
            Failure::runtime(format!(
                "`{name}` is neither a flow nor an alias in this database (`pgflow alias list` \
                 shows the aliases and their flows)"
            ))
        })
}

/// A note for text output when a name was an alias: `alias triage -> triage_v1`.
fn alias_note(name: &FlowName) -> Option<String> {
    match name {
        FlowName::Concrete(_) => None,
        FlowName::Alias { alias, flow_slug } => Some(format!(
            "alias `{alias}` -> `{flow_slug}` (its active flow)"
        )),
    }
}

/// The shortest run id prefix taken, as git takes short commit ids.
const SHORTEST_PREFIX: usize = 4;

/// The run `text` names: a whole run id, or a unique prefix of one (at least 4 hex digits).
async fn resolve_run_id(pool: &pgflow::Db, text: &str) -> Result<uuid::Uuid, Failure> {
    let text = text.trim();
    if let Ok(id) = text.parse() {
        return Ok(id);
    }
    let digits = text.chars().filter(|c| *c != '-').count();
    let hex = text.chars().all(|c| c == '-' || c.is_ascii_hexdigit());
    if !hex || digits < SHORTEST_PREFIX {
        return Err(Failure::usage(format!(
            "`{text}` is not a run id: give the whole id or its first {SHORTEST_PREFIX} or more \
             characters"
        )));
    }
    let found = inspect::runs_with_id_prefix(pool, text, 3).await?;
    match found.as_slice() {
        [id] => Ok(*id),
        [] => Err(Failure::runtime(format!("no run id starts with `{text}`"))),
        many => Err(Failure::runtime(format!(
            "`{text}` is the start of more than one run id ({}{}); give more of it",
            many.iter()
                .take(2)
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if many.len() > 2 { ", ..." } else { "" }
        ))),
    }
}

/// [`resolve_run_id`] for each of `texts`.
async fn resolve_run_ids(pool: &pgflow::Db, texts: &[String]) -> Result<Vec<uuid::Uuid>, Failure> {
    let mut ids = Vec::with_capacity(texts.len());
    for text in texts {
        ids.push(resolve_run_id(pool, text).await?);
    }
    Ok(ids)
}
