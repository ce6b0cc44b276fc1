//! The commands' implementations: each calls the library's typed functions and prints a
//! human table by default or JSON with `--json`.

use std::collections::HashMap;
use std::time::Duration;

use pgflow::RunStatus;
use pgflow::engine::inspect::{self, WorkerFilter};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use crate::args::{AliasCommand, Cli, Command, RolloutCommand, WorkersCommand};
use crate::failure::Failure;
use crate::graph;

/// Runs one command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let url = cli.database_url.clone().ok_or_else(|| {
        Failure::usage("no database given: pass --database-url or set DATABASE_URL")
    })?;
    let out = Output { json: cli.json };
    match cli.command {
        Command::Install => install(&url, &out).await,
        command => {
            let pool = connect(&url).await?;
            match command {
                Command::Install => unreachable!("handled above"),
                Command::Alias(AliasCommand::Set { alias, flow }) => {
                    alias_set(&pool, &out, &alias, &flow).await
                }
                Command::Alias(AliasCommand::List) => alias_list(&pool, &out).await,
                Command::DrainStatus { flow, queue } => {
                    drain_status(&pool, &out, &flow, queue.as_deref()).await
                }
                Command::Rollout(RolloutCommand::Begin {
                    functions,
                    queues,
                    timeout,
                    no_wait,
                }) => rollout_begin(&pool, &out, functions, queues, timeout, no_wait).await,
                Command::Rollout(RolloutCommand::Finish { rollout_id }) => {
                    rollout_finish(&pool, &out, rollout_id).await
                }
                Command::Rollout(RolloutCommand::Status { all }) => {
                    rollout_status(&pool, &out, all).await
                }
                Command::Status => status(&pool, &out).await,
                Command::Runs {
                    flow,
                    status,
                    limit,
                } => runs(&pool, &out, flow.as_deref(), status.as_deref(), limit).await,
                Command::Run { run_id } => show_run(&pool, &out, &run_id).await,
                Command::Start { flow, input } => start(&pool, &out, &flow, &input).await,
                Command::Graph { flow, format, run } => {
                    graph(&pool, &out, &flow, &format, run.as_deref()).await
                }
                Command::Workers(WorkersCommand::List { all }) => workers(&pool, &out, all).await,
                Command::Workers(WorkersCommand::Deprecate { function }) => {
                    deprecate(&pool, &out, &function).await
                }
                Command::Prune { older_than, batch } => prune(&pool, &out, older_than, batch).await,
            }
        }
    }
}

/// How to print.
pub struct Output {
    /// JSON instead of human text.
    pub json: bool,
}

impl Output {
    fn print(&self, value: serde_json::Value, human: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            println!("{}", human());
        }
    }
}

/// Connects and checks that pgflow is installed and current.
async fn connect(url: &str) -> Result<PgPool, Failure> {
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| Failure::usage(format!("invalid database URL: {e}")))?;
    let target = pgflow::connection_target(&options);
    let probe = options.connect().await.map_err(|e| {
        Failure::runtime(format!("cannot connect to the database at {target}: {e}"))
    })?;
    let _ = sqlx::Connection::close(probe).await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(options);
    match pgflow::check_schema(&pool).await {
        Ok(pgflow::SchemaStatus::Current) => Ok(pool),
        Ok(pgflow::SchemaStatus::NotInstalled) => Err(Failure::usage(format!(
            "pgflow is not installed in {target}; run `pgflow install`"
        ))),
        Ok(pgflow::SchemaStatus::Outdated { database, code }) => Err(Failure::usage(format!(
            "the pgflow schema in {target} is at version {database}, older than this binary's \
             {code}; run `pgflow install` to upgrade it"
        ))),
        Ok(pgflow::SchemaStatus::Newer { database, code }) => Err(Failure::usage(format!(
            "the pgflow schema in {target} is at version {database}, newer than this binary's \
             {code}; use a newer pgflow"
        ))),
        Err(error) => Err(Failure::runtime(error.to_string())),
    }
}

async fn install(url: &str, out: &Output) -> Result<(), Failure> {
    let report = pgflow::install_url(url)
        .await
        .map_err(|error| Failure::runtime_chain(&error))?;
    out.print(
        json!({
            "schema_version": report.schema_version,
            "applied_migrations": report.applied_migrations,
            "applied_functions": report.applied_functions,
            "pgmq": report.pgmq.as_str(),
        }),
        || {
            let applied = match (report.applied_migrations.len(), report.applied_functions) {
                (0, false) => "already up to date".to_owned(),
                (0, true) => "functions updated".to_owned(),
                (n, _) => format!("applied {n} migration(s) and the functions"),
            };
            format!(
                "pgflow installed: schema version {} ({applied}), queues by {}",
                report.schema_version,
                report.pgmq.describe()
            )
        },
    );
    Ok(())
}

async fn alias_set(pool: &PgPool, out: &Output, alias: &str, flow: &str) -> Result<(), Failure> {
    let previous = pgflow::engine::set_alias(pool, alias, flow).await?;
    out.print(
        json!({ "alias": alias, "flow_slug": flow, "previous_flow_slug": previous }),
        || match previous.as_deref() {
            Some(p) if p == flow => {
                format!("alias `{alias}` already points at `{flow}`; nothing changed")
            }
            Some(p) => format!(
                "alias `{alias}` now points at `{flow}` (was `{p}`); new runs start on `{flow}`"
            ),
            None => format!("alias `{alias}` now points at `{flow}` (it had no active version)"),
        },
    );
    Ok(())
}

async fn alias_list(pool: &PgPool, out: &Output) -> Result<(), Failure> {
    let rows = inspect::aliases(pool).await?;
    out.print(json!(rows), || {
        let mut text = format!(
            "{:<24} {:<24} {:>7}  activated at\n",
            "alias", "active flow", "version"
        );
        for row in &rows {
            text.push_str(&format!(
                "{:<24} {:<24} {:>7}  {}\n",
                row.alias, row.flow_slug, row.version, row.activated_at
            ));
        }
        text.trim_end().to_owned()
    });
    Ok(())
}

async fn drain_status(
    pool: &PgPool,
    out: &Output,
    flow: &str,
    queue: Option<&str>,
) -> Result<(), Failure> {
    let status = pgflow::engine::drain_status(pool, flow, queue).await?;
    let value = serde_json::to_value(&status).unwrap_or_default();
    out.print(value, || {
        let scope = queue.map_or_else(|| "every queue".to_owned(), |q| format!("queue `{q}`"));
        let verdict = if status.safe_to_remove {
            format!("safe to remove `{flow}` from the registries of {scope}")
        } else {
            format!("not yet safe to remove `{flow}` from the registries of {scope}")
        };
        let mut text = format!(
            "{verdict}\n  active alias target   {}\n  started runs          {}\n  queued tasks          {}\n  started tasks         {}",
            if status.active { "yes (new runs start on it)" } else { "no" },
            status.started_runs,
            status.queued_tasks,
            status.started_tasks,
        );
        if !status.pending_steps.is_empty() {
            text.push_str(&format!("\n  steps still to run    {}", status.pending_steps.join(", ")));
        }
        text
    });
    Ok(())
}

async fn rollout_begin(
    pool: &PgPool,
    out: &Output,
    functions: Vec<String>,
    queues: Vec<String>,
    timeout: u64,
    no_wait: bool,
) -> Result<(), Failure> {
    let mut functions = functions;
    if !queues.is_empty() {
        functions.extend(pgflow::engine::functions_serving_queues(pool, &queues).await?);
        functions.sort();
        functions.dedup();
    }
    if functions.is_empty() {
        return Err(Failure::usage(
            "name the worker functions to fence (or --queue q for every function serving q)",
        ));
    }
    let rollout_id = pgflow::rollout::begin(pool, &functions).await?;
    if !out.json {
        println!(
            "rollout {rollout_id} begun: {} disabled, their workers deprecated",
            functions.join(", ")
        );
    }
    if !no_wait {
        let json = out.json;
        let mut last = usize::MAX;
        pgflow::rollout::wait_for_workers(
            pool,
            rollout_id,
            Duration::from_secs(timeout),
            Duration::from_secs(60),
            |remaining| {
                if !json && remaining.len() != last {
                    last = remaining.len();
                    println!("  waiting for {} worker(s) to stop", remaining.len());
                }
            },
        )
        .await
        .map_err(|e| Failure::runtime(e.to_string()))?;
    }
    out.print(
        json!({ "rollout_id": rollout_id, "functions": functions, "workers_stopped": !no_wait }),
        || {
            format!(
                "all their workers have stopped{}; deploy the new workers now (they wait while \
                 disabled), then run `pgflow rollout finish {rollout_id}`",
                if no_wait { " (not waited for)" } else { "" }
            )
        },
    );
    Ok(())
}

async fn rollout_finish(pool: &PgPool, out: &Output, rollout_id: i64) -> Result<(), Failure> {
    let enabled = pgflow::rollout::finish(pool, rollout_id).await?;
    out.print(json!({ "rollout_id": rollout_id, "enabled": enabled }), || {
        if enabled.is_empty() {
            format!("rollout {rollout_id} finished; no function was enabled before it, none enabled now")
        } else {
            format!("rollout {rollout_id} finished; enabled again: {}", enabled.join(", "))
        }
    });
    Ok(())
}

async fn rollout_status(pool: &PgPool, out: &Output, all: bool) -> Result<(), Failure> {
    let rollouts = pgflow::engine::rollouts(pool, !all).await?;
    let mut rows = Vec::new();
    for rollout in &rollouts {
        let remaining = if rollout.status == "open" {
            pgflow::engine::rollout_progress(pool, rollout.rollout_id, 60.0)
                .await?
                .len()
        } else {
            0
        };
        rows.push((rollout, remaining));
    }
    out.print(
        json!(
            rows.iter()
                .map(|(r, remaining)| json!({ "rollout": r, "workers_running": remaining }))
                .collect::<Vec<_>>()
        ),
        || {
            if rows.is_empty() {
                return if all {
                    "no rollouts".to_owned()
                } else {
                    "no open rollouts".to_owned()
                };
            }
            let mut text = format!(
                "{:>4}  {:<9} {:<32} {:<32} {:>7}\n",
                "id", "status", "functions", "enabled before", "running"
            );
            for (r, remaining) in &rows {
                text.push_str(&format!(
                    "{:>4}  {:<9} {:<32} {:<32} {:>7}\n",
                    r.rollout_id,
                    r.status,
                    r.function_names.join(","),
                    r.enabled_before.join(","),
                    remaining
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

fn parse_run_id(text: &str) -> Result<uuid::Uuid, Failure> {
    text.parse()
        .map_err(|_| Failure::usage(format!("`{text}` is not a run id (a UUID)")))
}

/// The workers of `queue` among `workers`.
fn on_queue<'a>(
    workers: &'a [inspect::WorkerEntry],
    queue: &'a str,
) -> impl Iterator<Item = &'a inspect::WorkerEntry> {
    workers.iter().filter(move |w| w.queue_name == queue)
}

async fn status(pool: &PgPool, out: &Output) -> Result<(), Failure> {
    let queues = inspect::queues(pool).await?;
    let workers = inspect::workers(pool, WorkerFilter::HeardWithin(60)).await?;
    let aliases = inspect::aliases(pool).await?;
    let rollouts = pgflow::engine::rollouts(pool, true).await?;
    // The engine's plans rely on current statistics (docs/operations.md).
    let autovacuum = inspect::autovacuum_enabled(pool).await?;
    out.print(
        json!({
            "queues": queues.iter().map(|q| json!({
                "queue_name": q.queue_name, "depth": q.depth,
                "oldest_message_age_seconds": q.oldest_message_age_seconds,
                "in_flight_tasks": q.in_flight_tasks,
                "workers": on_queue(&workers, &q.queue_name).map(|w| json!({
                    "function_name": w.function_name, "flow_slugs": w.flow_slugs,
                    "deprecated": w.deprecated
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "aliases": aliases.iter().map(|a| json!({
                "alias": a.alias, "flow_slug": a.flow_slug, "version": a.version
            })).collect::<Vec<_>>(),
            "open_rollouts": rollouts,
            "autovacuum": autovacuum,
        }),
        || {
            let mut text = format!(
                "{:<24} {:>7} {:>10} {:>9}  workers\n",
                "queue", "depth", "oldest (s)", "in flight"
            );
            for q in &queues {
                let here: Vec<String> = on_queue(&workers, &q.queue_name)
                    .map(|w| {
                        format!(
                            "{}[{}]{}",
                            w.function_name,
                            w.flow_slugs.join(","),
                            if w.deprecated { " (deprecated)" } else { "" }
                        )
                    })
                    .collect();
                let alive = on_queue(&workers, &q.queue_name)
                    .filter(|w| !w.deprecated)
                    .count();
                text.push_str(&format!(
                    "{:<24} {:>7} {:>10} {:>9}  {alive} alive: {}\n",
                    q.queue_name,
                    q.depth,
                    q.oldest_message_age_seconds
                        .map_or_else(|| "-".to_owned(), |a| a.to_string()),
                    q.in_flight_tasks,
                    if here.is_empty() {
                        "none".to_owned()
                    } else {
                        here.join("; ")
                    }
                ));
            }
            text.push_str("\naliases\n");
            if aliases.is_empty() {
                text.push_str("  none\n");
            }
            for a in &aliases {
                text.push_str(&format!(
                    "  {:<22} -> {} (v{})\n",
                    a.alias, a.flow_slug, a.version
                ));
            }
            text.push_str(&format!(
                "\nopen rollouts: {}",
                if rollouts.is_empty() {
                    "none".to_owned()
                } else {
                    rollouts
                        .iter()
                        .map(|r| format!("{} ({})", r.rollout_id, r.function_names.join(",")))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
            if !autovacuum {
                text.push_str(
                    "\n\nwarning: autovacuum is off on this server: running workers analyze \
                     and vacuum pgflow's tables and queues themselves; other tables get nothing \
                     (see docs/operations.md, Statistics and vacuum)",
                );
            }
            text
        },
    );
    Ok(())
}

async fn runs(
    pool: &PgPool,
    out: &Output,
    flow: Option<&str>,
    status: Option<&str>,
    limit: i64,
) -> Result<(), Failure> {
    let status = match status {
        None => None,
        Some(text) => Some(RunStatus::parse(text).ok_or_else(|| {
            Failure::usage(format!(
                "unknown status `{text}`; use started, completed or failed"
            ))
        })?),
    };
    let rows = inspect::recent_runs(pool, flow, status, limit).await?;
    out.print(
        json!(rows.iter().map(|r| json!({
            "run_id": r.run_id, "flow_slug": r.flow_slug, "status": r.status.as_str(),
            "started_at": r.started_at, "completed_at": r.completed_at, "failed_at": r.failed_at,
        })).collect::<Vec<_>>()),
        || {
            let mut text = format!(
                "{:<36}  {:<20} {:<9}  started at\n",
                "run", "flow", "status"
            );
            for r in &rows {
                text.push_str(&format!(
                    "{}  {:<20} {:<9}  {}\n",
                    r.run_id,
                    r.flow_slug,
                    r.status.as_str(),
                    r.started_at
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

async fn show_run(pool: &PgPool, out: &Output, run_id: &str) -> Result<(), Failure> {
    let run_id = parse_run_id(run_id)?;
    let run = pgflow::engine::run(pool, run_id).await?;
    let steps = inspect::run_steps(pool, run_id).await?;
    let status = run.status.as_str();
    out.print(
        json!({
            "run_id": run.run_id, "flow_slug": run.flow_slug, "status": status,
            "started_at": run.started_at, "completed_at": run.completed_at, "failed_at": run.failed_at,
            "steps": steps,
        }),
        || {
            let mut text = format!(
                "run {} of `{}`: {status} (started {})\n{:<20} {:<10} {:<22} {:>5} {:>8}  error\n",
                run.run_id, run.flow_slug, run.started_at, "step", "status", "queue", "tasks", "attempts"
            );
            for s in &steps {
                text.push_str(&format!(
                    "{:<20} {:<10} {:<22} {:>5} {:>8}  {}\n",
                    s.step_slug,
                    s.status,
                    s.queue_name,
                    s.tasks.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                    s.max_attempt.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                    s.error.as_deref().unwrap_or("")
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

async fn start(pool: &PgPool, out: &Output, flow: &str, input: &str) -> Result<(), Failure> {
    let input: serde_json::Value = serde_json::from_str(input)
        .map_err(|e| Failure::usage(format!("--input is not valid JSON: {e}")))?;
    let run = pgflow::engine::start_flow(pool, flow, &input).await?;
    out.print(
        json!({ "run_id": run.run_id, "flow_slug": run.flow_slug }),
        || format!("started run {} of `{}`", run.run_id, run.flow_slug),
    );
    Ok(())
}

async fn graph(
    pool: &PgPool,
    out: &Output,
    flow: &str,
    format: &str,
    run: Option<&str>,
) -> Result<(), Failure> {
    let format_kind = graph::Format::parse(format)
        .ok_or_else(|| Failure::usage(format!("unknown format `{format}`; use mermaid or dot")))?;
    let dag = inspect::flow_graph(pool, flow).await?;
    if dag.steps.is_empty() {
        return Err(Failure::usage(format!(
            "flow `{flow}` is not defined in this database"
        )));
    }
    let states: HashMap<String, String> = match run {
        None => HashMap::new(),
        Some(run) => {
            let run_id = parse_run_id(run)?;
            let run = pgflow::engine::run(pool, run_id).await?;
            if run.flow_slug != flow {
                return Err(Failure::usage(format!(
                    "run {run_id} is of flow `{}`, not `{flow}`",
                    run.flow_slug
                )));
            }
            inspect::step_states(pool, run_id)
                .await?
                .into_iter()
                .collect()
        }
    };
    let text = graph::render(format_kind, flow, &dag, &states);
    out.print(json!({ "format": format, "graph": text }), || text.clone());
    Ok(())
}

async fn workers(pool: &PgPool, out: &Output, all: bool) -> Result<(), Failure> {
    let filter = if all {
        WorkerFilter::All
    } else {
        WorkerFilter::NotStopped
    };
    let rows = inspect::workers(pool, filter).await?;
    out.print(json!(rows), || {
        let mut text = format!(
            "{:<36}  {:<22} {:<20} {:<11} flows\n",
            "worker", "queue", "function", "state"
        );
        for w in &rows {
            let state = if w.stopped {
                "stopped"
            } else if w.deprecated {
                "deprecated"
            } else {
                "alive"
            };
            text.push_str(&format!(
                "{}  {:<22} {:<20} {state:<11} {}\n",
                w.worker_id,
                w.queue_name,
                w.function_name,
                w.flow_slugs.join(",")
            ));
        }
        text.trim_end().to_owned()
    });
    Ok(())
}

async fn deprecate(pool: &PgPool, out: &Output, function: &str) -> Result<(), Failure> {
    let count = pgflow::engine::deprecate_workers(pool, function).await?;
    out.print(
        json!({ "function_name": function, "deprecated": count }),
        || format!("{count} live worker(s) of `{function}` asked to drain and stop"),
    );
    Ok(())
}

async fn prune(
    pool: &PgPool,
    out: &Output,
    older_than: Duration,
    batch: i32,
) -> Result<(), Failure> {
    let pruned = pgflow::engine::prune_all(pool, older_than, batch).await?;
    out.print(
        json!({
            "busy": pruned.busy, "runs": pruned.runs, "step_states": pruned.step_states,
            "tasks": pruned.tasks, "archived_messages": pruned.archived_messages,
            "workers": pruned.workers,
        }),
        || {
            let summary = format!(
                "pruned {} run(s) ({} step state(s), {} task(s)), {} archived message(s) and {} \
                 stopped worker(s) older than {}s",
                pruned.runs,
                pruned.step_states,
                pruned.tasks,
                pruned.archived_messages,
                pruned.workers,
                older_than.as_secs()
            );
            if pruned.busy {
                format!("{summary}; another prune was running, so some may be left")
            } else {
                summary
            }
        },
    );
    Ok(())
}
