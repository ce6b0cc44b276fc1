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
            "pgmq": pgmq,
        }),
        || {
            let applied = match report.applied_migrations.len() {
                0 => "already up to date".to_owned(),
                n => format!("applied {n} migration(s)"),
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
