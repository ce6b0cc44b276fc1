//! The commands' implementations.

use std::time::Duration;

use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use super::Failure;

/// How to print.
pub struct Output {
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
pub async fn connect(url: &str) -> Result<PgPool, Failure> {
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| Failure::usage(format!("invalid database URL: {e}")))?;
    let target = format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("(default database)")
    );
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

pub async fn install(url: &str, out: &Output) -> Result<(), Failure> {
    let report = pgflow::install_url(url)
        .await
        .map_err(|error| Failure::runtime(one_line(&error)))?;
    let pgmq = match report.pgmq {
        pgflow::PgmqSource::Extension => "extension",
        pgflow::PgmqSource::EmbeddedSql => "embedded_sql",
    };
    out.print(
        json!({
            "schema_version": report.schema_version,
            "applied_migrations": report.applied_migrations,
            "applied_functions": report.applied_functions,
            "pgmq": pgmq,
        }),
        || {
            let applied = match (report.applied_migrations.len(), report.applied_functions) {
                (0, false) => "already up to date".to_owned(),
                (0, true) => "functions updated".to_owned(),
                (n, _) => format!("applied {n} migration(s) and the functions"),
            };
            let pgmq = match report.pgmq {
                pgflow::PgmqSource::Extension => "the pgmq extension",
                pgflow::PgmqSource::EmbeddedSql => "PGMQ's embedded SQL",
            };
            format!(
                "pgflow installed: schema version {} ({applied}), queues by {pgmq}",
                report.schema_version
            )
        },
    );
    Ok(())
}

pub async fn alias_set(
    pool: &PgPool,
    out: &Output,
    alias: &str,
    flow: &str,
) -> Result<(), Failure> {
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

pub async fn alias_list(pool: &PgPool, out: &Output) -> Result<(), Failure> {
    let rows: Vec<(String, String, i32, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "select a.alias, a.flow_slug, f.version, a.activated_at
         from pgflow.aliases a join pgflow.flows f on f.flow_slug = a.flow_slug order by a.alias",
    )
    .fetch_all(pool)
    .await
    .map_err(|e| Failure::from(pgflow::EngineError::from(e)))?;
    out.print(
        json!(
            rows.iter()
                .map(|(alias, flow, version, at)| json!({
                    "alias": alias, "flow_slug": flow, "version": version, "activated_at": at
                }))
                .collect::<Vec<_>>()
        ),
        || {
            let mut text = format!(
                "{:<24} {:<24} {:>7}  activated at\n",
                "alias", "active flow", "version"
            );
            for (alias, flow, version, at) in &rows {
                text.push_str(&format!("{alias:<24} {flow:<24} {version:>7}  {at}\n"));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

pub async fn drain_status(
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

pub async fn rollout_begin(
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

pub async fn rollout_finish(pool: &PgPool, out: &Output, rollout_id: i64) -> Result<(), Failure> {
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

pub async fn rollout_status(pool: &PgPool, out: &Output, all: bool) -> Result<(), Failure> {
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

/// One step of a run, as `pgflow run` shows it.
#[derive(sqlx::FromRow)]
struct StepRow {
    step_slug: String,
    status: String,
    queue_name: String,
    tasks: Option<i32>,
    max_attempt: Option<i32>,
    error: Option<String>,
}

/// One worker, as `pgflow workers` shows it.
#[derive(sqlx::FromRow)]
struct WorkerRow {
    worker_id: uuid::Uuid,
    queue_name: String,
    function_name: String,
    flow_slugs: Vec<String>,
    last_heartbeat_at: chrono::DateTime<chrono::Utc>,
    deprecated: bool,
    stopped: bool,
}

fn db(error: sqlx::Error) -> Failure {
    Failure::from(pgflow::EngineError::from(error))
}

fn parse_run_id(text: &str) -> Result<uuid::Uuid, Failure> {
    text.parse()
        .map_err(|_| Failure::usage(format!("`{text}` is not a run id (a UUID)")))
}

pub async fn status(pool: &PgPool, out: &Output) -> Result<(), Failure> {
    let queues: Vec<(String, i64, Option<i32>, i64)> = sqlx::query_as(
        "select m.queue_name, m.queue_length, m.oldest_msg_age_sec,
                (select count(*) from pgflow.step_tasks t
                 where t.queue_name = m.queue_name and t.status = 'started')
         from pgmq.metrics_all() m order by m.queue_name",
    )
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let workers: Vec<(String, String, Vec<String>, bool)> = sqlx::query_as(
        "select queue_name, function_name, flow_slugs, deprecated_at is not null
         from pgflow.workers
         where stopped_at is null and last_heartbeat_at > now() - interval '1 minute'
         order by queue_name, function_name",
    )
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let aliases: Vec<(String, String, i32)> = sqlx::query_as(
        "select a.alias, a.flow_slug, f.version from pgflow.aliases a
         join pgflow.flows f on f.flow_slug = a.flow_slug order by a.alias",
    )
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let rollouts = pgflow::engine::rollouts(pool, true).await?;
    // The engine's plans rely on current statistics (docs/operations.md).
    let autovacuum: bool = sqlx::query_scalar("select current_setting('autovacuum')::boolean")
        .fetch_one(pool)
        .await
        .map_err(db)?;
    out.print(
        json!({
            "queues": queues.iter().map(|(q, depth, age, in_flight)| json!({
                "queue_name": q, "depth": depth, "oldest_message_age_seconds": age,
                "in_flight_tasks": in_flight,
                "workers": workers.iter().filter(|w| &w.0 == q).map(|(_, f, flows, deprecated)| json!({
                    "function_name": f, "flow_slugs": flows, "deprecated": deprecated
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "aliases": aliases.iter().map(|(a, f, v)| json!({"alias": a, "flow_slug": f, "version": v})).collect::<Vec<_>>(),
            "open_rollouts": rollouts,
            "autovacuum": autovacuum,
        }),
        || {
            let mut text = format!(
                "{:<24} {:>7} {:>10} {:>9}  workers\n",
                "queue", "depth", "oldest (s)", "in flight"
            );
            for (queue, depth, age, in_flight) in &queues {
                let here: Vec<String> = workers
                    .iter()
                    .filter(|w| &w.0 == queue)
                    .map(|(_, f, flows, deprecated)| {
                        format!("{f}[{}]{}", flows.join(","), if *deprecated { " (deprecated)" } else { "" })
                    })
                    .collect();
                let alive = workers.iter().filter(|w| &w.0 == queue && !w.3).count();
                text.push_str(&format!(
                    "{queue:<24} {depth:>7} {:>10} {in_flight:>9}  {alive} alive: {}\n",
                    age.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                    if here.is_empty() { "none".to_owned() } else { here.join("; ") }
                ));
            }
            text.push_str("\naliases\n");
            if aliases.is_empty() {
                text.push_str("  none\n");
            }
            for (alias, flow, version) in &aliases {
                text.push_str(&format!("  {alias:<22} -> {flow} (v{version})\n"));
            }
            text.push_str(&format!("\nopen rollouts: {}", if rollouts.is_empty() {
                "none".to_owned()
            } else {
                rollouts.iter().map(|r| format!("{} ({})", r.rollout_id, r.function_names.join(","))).collect::<Vec<_>>().join(", ")
            }));
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

pub async fn runs(
    pool: &PgPool,
    out: &Output,
    flow: Option<&str>,
    status: Option<&str>,
    limit: i64,
) -> Result<(), Failure> {
    if let Some(status) = status
        && !["started", "completed", "failed"].contains(&status)
    {
        return Err(Failure::usage(format!(
            "unknown status `{status}`; use started, completed or failed"
        )));
    }
    let rows: Vec<pgflow::Run> = sqlx::query_as(
        "select * from pgflow.runs
         where ($1::text is null or flow_slug = $1) and ($2::text is null or status = $2)
         order by started_at desc limit $3",
    )
    .bind(flow)
    .bind(status)
    .bind(limit.max(1))
    .fetch_all(pool)
    .await
    .map_err(db)?;
    out.print(
        json!(rows.iter().map(|r| json!({
            "run_id": r.run_id, "flow_slug": r.flow_slug, "status": format!("{:?}", r.status).to_lowercase(),
            "started_at": r.started_at, "completed_at": r.completed_at, "failed_at": r.failed_at,
        })).collect::<Vec<_>>()),
        || {
            let mut text = format!("{:<36}  {:<20} {:<9}  started at\n", "run", "flow", "status");
            for r in &rows {
                text.push_str(&format!(
                    "{}  {:<20} {:<9}  {}\n",
                    r.run_id,
                    r.flow_slug,
                    format!("{:?}", r.status).to_lowercase(),
                    r.started_at
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

pub async fn run(pool: &PgPool, out: &Output, run_id: &str) -> Result<(), Failure> {
    let run_id = parse_run_id(run_id)?;
    let run = pgflow::engine::run(pool, run_id).await?;
    let steps: Vec<StepRow> = sqlx::query_as(
        "select ss.step_slug, ss.status, s.queue_name, ss.initial_tasks as tasks,
                    (select max(t.attempts_count) from pgflow.step_tasks t
                     where t.run_id = ss.run_id and t.step_slug = ss.step_slug) as max_attempt,
                    coalesce(ss.error_message,
                             (select t.error_message from pgflow.step_tasks t
                              where t.run_id = ss.run_id and t.step_slug = ss.step_slug
                                and t.error_message is not null
                              order by t.task_index limit 1)) as error
             from pgflow.step_states ss
             join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
             where ss.run_id = $1 order by s.step_index",
    )
    .bind(run_id)
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let status = format!("{:?}", run.status).to_lowercase();
    out.print(
        json!({
            "run_id": run.run_id, "flow_slug": run.flow_slug, "status": status,
            "started_at": run.started_at, "completed_at": run.completed_at, "failed_at": run.failed_at,
            "steps": steps.iter().map(|s| json!({
                "step_slug": s.step_slug, "status": s.status, "queue_name": s.queue_name,
                "tasks": s.tasks, "max_attempt": s.max_attempt, "error": s.error,
            })).collect::<Vec<_>>(),
        }),
        || {
            let mut text = format!(
                "run {} of `{}`: {status} (started {})\n{:<20} {:<10} {:<22} {:>5} {:>8}  error\n",
                run.run_id, run.flow_slug, run.started_at, "step", "status", "queue", "tasks", "attempts"
            );
            for StepRow {
                step_slug: slug,
                status: st,
                queue_name: q,
                tasks,
                max_attempt: attempts,
                error,
            } in &steps
            {
                text.push_str(&format!(
                    "{slug:<20} {st:<10} {q:<22} {:>5} {:>8}  {}\n",
                    tasks.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                    attempts.map_or_else(|| "-".to_owned(), |a| a.to_string()),
                    error.as_deref().unwrap_or("")
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

pub async fn start(pool: &PgPool, out: &Output, flow: &str, input: &str) -> Result<(), Failure> {
    let input: serde_json::Value = serde_json::from_str(input)
        .map_err(|e| Failure::usage(format!("--input is not valid JSON: {e}")))?;
    let run = pgflow::engine::start_flow(pool, flow, &input).await?;
    out.print(
        json!({ "run_id": run.run_id, "flow_slug": run.flow_slug }),
        || format!("started run {} of `{}`", run.run_id, run.flow_slug),
    );
    Ok(())
}

pub async fn graph(
    pool: &PgPool,
    out: &Output,
    flow: &str,
    format: &str,
    run: Option<&str>,
) -> Result<(), Failure> {
    if format != "mermaid" && format != "dot" {
        return Err(Failure::usage(format!(
            "unknown format `{format}`; use mermaid or dot"
        )));
    }
    let steps: Vec<(String, String, String)> = sqlx::query_as(
        "select step_slug, step_type, queue_name from pgflow.steps where flow_slug = $1 order by step_index",
    )
    .bind(flow)
    .fetch_all(pool)
    .await
    .map_err(db)?;
    if steps.is_empty() {
        return Err(Failure::usage(format!(
            "flow `{flow}` is not defined in this database"
        )));
    }
    let edges: Vec<(String, String)> = sqlx::query_as(
        "select dep_slug, step_slug from pgflow.deps where flow_slug = $1 order by dep_slug, step_slug",
    )
    .bind(flow)
    .fetch_all(pool)
    .await
    .map_err(db)?;
    let states: std::collections::HashMap<String, String> = match run {
        None => Default::default(),
        Some(run) => {
            let run_id = parse_run_id(run)?;
            let run = pgflow::engine::run(pool, run_id).await?;
            if run.flow_slug != flow {
                return Err(Failure::usage(format!(
                    "run {run_id} is of flow `{}`, not `{flow}`",
                    run.flow_slug
                )));
            }
            sqlx::query_as("select step_slug, status from pgflow.step_states where run_id = $1")
                .bind(run_id)
                .fetch_all(pool)
                .await
                .map_err(db)?
                .into_iter()
                .collect()
        }
    };
    let text = if format == "mermaid" {
        mermaid(&steps, &edges, &states)
    } else {
        dot(flow, &steps, &edges, &states)
    };
    out.print(json!({ "format": format, "graph": text }), || text.clone());
    Ok(())
}

fn state_colour(state: &str) -> &'static str {
    match state {
        "completed" => "#b7e4c7",
        "started" => "#ffe8a3",
        "failed" => "#f4a3a3",
        _ => "#e9ecef",
    }
}

fn mermaid(
    steps: &[(String, String, String)],
    edges: &[(String, String)],
    states: &std::collections::HashMap<String, String>,
) -> String {
    let mut text = "flowchart TD\n".to_owned();
    for (slug, kind, queue) in steps {
        let shape = if kind == "map" {
            format!("{slug}[[\"{slug} (map)<br/>queue: {queue}\"]]")
        } else {
            format!("{slug}[\"{slug}<br/>queue: {queue}\"]")
        };
        text.push_str(&format!("  {shape}\n"));
    }
    for (from, to) in edges {
        text.push_str(&format!("  {from} --> {to}\n"));
    }
    for (slug, _, _) in steps {
        if let Some(state) = states.get(slug) {
            text.push_str(&format!("  style {slug} fill:{}\n", state_colour(state)));
        }
    }
    text.trim_end().to_owned()
}

fn dot(
    flow: &str,
    steps: &[(String, String, String)],
    edges: &[(String, String)],
    states: &std::collections::HashMap<String, String>,
) -> String {
    let mut text = format!("digraph \"{flow}\" {{\n  rankdir=TB;\n");
    for (slug, kind, queue) in steps {
        let shape = if kind == "map" { "box3d" } else { "box" };
        let fill = states
            .get(slug)
            .map(|s| format!(", style=filled, fillcolor=\"{}\"", state_colour(s)))
            .unwrap_or_default();
        text.push_str(&format!(
            "  \"{slug}\" [shape={shape}, label=\"{slug}\\nqueue: {queue}\"{fill}];\n"
        ));
    }
    for (from, to) in edges {
        text.push_str(&format!("  \"{from}\" -> \"{to}\";\n"));
    }
    text.push('}');
    text
}

pub async fn workers(pool: &PgPool, out: &Output, all: bool) -> Result<(), Failure> {
    let rows: Vec<WorkerRow> = sqlx::query_as(
        "select worker_id, queue_name, function_name, flow_slugs, last_heartbeat_at,
                    deprecated_at is not null as deprecated, stopped_at is not null as stopped
             from pgflow.workers where $1 or stopped_at is null
             order by queue_name, started_at",
    )
    .bind(all)
    .fetch_all(pool)
    .await
    .map_err(db)?;
    out.print(
        json!(
            rows.iter()
                .map(|w| json!({
                    "worker_id": w.worker_id, "queue_name": w.queue_name,
                    "function_name": w.function_name, "flow_slugs": w.flow_slugs,
                    "last_heartbeat_at": w.last_heartbeat_at, "deprecated": w.deprecated,
                    "stopped": w.stopped,
                }))
                .collect::<Vec<_>>()
        ),
        || {
            let mut text = format!(
                "{:<36}  {:<22} {:<20} {:<11} flows\n",
                "worker", "queue", "function", "state"
            );
            for w in &rows {
                let (id, q, f, flows) =
                    (&w.worker_id, &w.queue_name, &w.function_name, &w.flow_slugs);
                let state = if w.stopped {
                    "stopped"
                } else if w.deprecated {
                    "deprecated"
                } else {
                    "alive"
                };
                text.push_str(&format!(
                    "{id}  {q:<22} {f:<20} {state:<11} {}\n",
                    flows.join(",")
                ));
            }
            text.trim_end().to_owned()
        },
    );
    Ok(())
}

pub async fn deprecate(pool: &PgPool, out: &Output, function: &str) -> Result<(), Failure> {
    let count = pgflow::engine::deprecate_workers(pool, function).await?;
    out.print(
        json!({ "function_name": function, "deprecated": count }),
        || format!("{count} live worker(s) of `{function}` asked to drain and stop"),
    );
    Ok(())
}

pub async fn prune(
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

/// The error and its causes on one line.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}
