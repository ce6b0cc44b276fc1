//! The engine with a long history (issue 39, point 5): millions of ended runs in the history
//! tables, a day of them each. It measures the per-call and batch rows on that database against
//! the same rows on a database whose history is empty (alternated, medians of the repeats),
//! the dashboard's pages over that history, and what a prune of one day costs: dropping the
//! day's partitions, against deleting as many runs from the live tables, as every prune did
//! before the history existed.

use std::time::Instant;

use chrono::{DateTime, Utc};
use pgflow::FlowSpec;
use serde_json::json;
use sqlx::PgPool;

use crate::dashboard_pages::{PageTiming, batches, fill_runs, time_pages};
use crate::{
    Error, Row, bench_chain3, bench_fanout, bench_single, database, engine, engine_per_call,
};

/// What the history benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct History {
    pub runs: usize,
    pub days: usize,
    pub fill_seconds: f64,
    pub repeats: usize,
    /// Per row: the median on an empty history, and on the full one.
    pub rows: Vec<(Row, Row)>,
    pub pages: Vec<PageTiming>,
    pub dropped_day: Pruning,
    pub deleted_day: Pruning,
}

/// One prune: what it took away, how long it took, and how long dropping the days it
/// detached took after it (the files freed, in a transaction nobody waits for).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Pruning {
    pub runs: i64,
    pub step_states: i64,
    pub tasks: i64,
    pub seconds: f64,
    pub freeing_seconds: f64,
}

/// Fills a database's history with `runs` ended runs over `days` days, then measures (see the
/// module's documentation); `rows_scale` scales the runs of each measured row.
pub(crate) async fn history(
    runs: usize,
    days: usize,
    repeats: usize,
    rows_scale: f64,
) -> Result<History, Error> {
    let full = flows_installed("pgflow_bench_history").await?;
    let filling = Instant::now();
    let today = fill_history(&full, runs, days).await?;
    let fill_seconds = filling.elapsed().as_secs_f64();
    let empty = flows_installed("pgflow_bench_history_empty").await?;

    let scaled = |n: f64| ((n * rows_scale) as usize).max(4);
    let mut measured: Vec<Vec<(Row, Row)>> = Vec::new();
    for repeat in 0..repeats {
        // Alternated: the empty history first in even repeats, the full one in odd ones.
        let order = if repeat % 2 == 0 {
            [(&empty, false), (&full, true)]
        } else {
            [(&full, true), (&empty, false)]
        };
        let mut of_repeat: Vec<(Option<Row>, Option<Row>)> = vec![(None, None); 3];
        for (pool, is_full) in order {
            for (slot, row) in of_repeat.iter_mut().zip(measured_rows(pool, scaled).await?) {
                if is_full {
                    slot.1 = Some(row);
                } else {
                    slot.0 = Some(row);
                }
            }
        }
        measured.push(
            of_repeat
                .into_iter()
                .map(|(e, f)| (e.expect("measured"), f.expect("measured")))
                .collect(),
        );
    }
    let rows = (0..3)
        .map(|i| {
            let median = |pick: fn(&(Row, Row)) -> &Row| {
                let mut of_row: Vec<Row> = measured.iter().map(|r| pick(&r[i]).clone()).collect();
                of_row.sort_by(|a, b| a.tasks_per_s.total_cmp(&b.tasks_per_s));
                let mut chosen = of_row[of_row.len() / 2].clone();
                chosen.repeats = of_row.len();
                chosen
            };
            (median(|r| &r.0), median(|r| &r.1))
        })
        .collect();

    // A run page of an archived run: far below the rows' live runs.
    let pages = time_pages(&full, (runs / 10) as i64).await?;

    // The oldest day goes: a prune whose cutoff is its end.
    let oldest_day_end = today - chrono::Duration::days(days as i64 - 1);
    let dropped_day = timed_prune(&full, oldest_day_end, 1).await?;
    // As many runs in the live tables, ended before that cutoff (over the 30 days before the
    // oldest day), deleted by the same prune, in batches of 10,000 as a process's retention.
    fill_runs(
        &full,
        runs / days,
        today - chrono::Duration::days(days as i64),
    )
    .await?;
    sqlx::query("analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks")
        .execute(&full)
        .await?;
    let deleted_day = timed_prune(&full, oldest_day_end, 10_000).await?;
    Ok(History {
        runs,
        days,
        fill_seconds,
        repeats,
        rows,
        pages,
        dropped_day,
        deleted_day,
    })
}

/// A fresh database with pgflow and the benchmark's flows.
async fn flows_installed(name: &str) -> Result<PgPool, Error> {
    let pool = database(name).await?;
    for definition in [
        bench_single::Flow::definition(),
        bench_chain3::Flow::definition(),
        bench_fanout::Flow::definition(),
    ] {
        pgflow::engine::compile_flow(&pool, &definition).await?;
    }
    Ok(pool)
}

/// The rows measured on each history: a batch row and two per-call rows, each on live tables
/// emptied first (the rows of the row before, and of the last repeat, go).
async fn measured_rows(pool: &PgPool, scaled: impl Fn(f64) -> usize) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    empty_live_tables(pool).await?;
    rows.push(
        engine::<bench_single::Flow, _>(
            pool.clone(),
            "single",
            bench_single::deployment(),
            bench_single::Queue::BenchSingle,
            scaled(5_000.0),
            10,
            100,
            json!(null),
            1,
        )
        .await?,
    );
    empty_live_tables(pool).await?;
    rows.push(
        engine_per_call::<bench_single::Flow, _>(
            pool.clone(),
            "single, 1 run/call",
            bench_single::deployment(),
            bench_single::Queue::BenchSingle,
            scaled(2_000.0),
            (10, 100),
            json!(null),
            1,
        )
        .await?,
    );
    empty_live_tables(pool).await?;
    rows.push(
        engine_per_call::<bench_chain3::Flow, _>(
            pool.clone(),
            "chain3, 1 run/call",
            bench_chain3::deployment(),
            bench_chain3::Queue::BenchChain3,
            scaled(1_000.0),
            (10, 100),
            json!(null),
            3,
        )
        .await?,
    );
    Ok(rows)
}

/// Empties the live tables (the history stays), so that each row starts as the first did.
async fn empty_live_tables(pool: &PgPool) -> Result<(), Error> {
    sqlx::query(
        "truncate pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.task_attempts,
                  pgflow.workers cascade",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Writes `runs` ended runs straight into the history, the same number ending on each of the
/// `days` days before today (UTC), whose partitions it makes first; 100,000 per statement;
/// then counts each day (`pgflow.history_days`) and analyzes. Returns the start of today.
async fn fill_history(pool: &PgPool, runs: usize, days: usize) -> Result<DateTime<Utc>, Error> {
    let today: DateTime<Utc> =
        sqlx::query_scalar("select date_trunc('day', now() at time zone 'UTC') at time zone 'UTC'")
            .fetch_one(pool)
            .await?;
    sqlx::query(
        "select pgflow.ensure_history_days(array(
           select (now() at time zone 'UTC')::date - d from generate_series(1, $1) d))",
    )
    .bind(days as i32)
    .execute(pool)
    .await?;
    for (first, n) in batches(runs) {
        sqlx::query(FILL_HISTORY)
            .bind(first)
            .bind(n)
            .bind(runs as i64)
            .bind(today)
            .bind(days as i32)
            .execute(pool)
            .await?;
    }
    sqlx::query(
        "insert into pgflow.history_days (day, runs, step_states, tasks)
         select r.day, r.runs, s.step_states, t.tasks
         from (select pgflow.history_day(run_ended_at) as day, count(*) as runs
               from pgflow.runs_history group by 1) r
         join (select pgflow.history_day(run_ended_at) as day, count(*) as step_states
               from pgflow.step_states_history group by 1) s using (day)
         join (select pgflow.history_day(run_ended_at) as day, count(*) as tasks
               from pgflow.step_tasks_history group by 1) t using (day)",
    )
    .execute(pool)
    .await?;
    // As autovacuum does after a load (a statement of its own: VACUUM takes no transaction).
    sqlx::query(
        "vacuum analyze pgflow.runs_history, pgflow.step_states_history,
                        pgflow.step_tasks_history, pgflow.task_attempts_history",
    )
    .execute(pool)
    .await?;
    Ok(today)
}

/// Prunes what ended before `cutoff` (with `batch_size` live runs per transaction, calling again
/// while a batch is full) and times it.
async fn timed_prune(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    batch_size: i32,
) -> Result<Pruning, Error> {
    let now: DateTime<Utc> = sqlx::query_scalar("select now()").fetch_one(pool).await?;
    let older_than = (now - cutoff).to_std()?;
    let started = Instant::now();
    let mut pruned = pgflow::engine::Pruned::default();
    loop {
        let call = pgflow::engine::prune(pool, older_than, batch_size).await?;
        pruned.add(call);
        if call.busy || !call.is_full(batch_size) {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let freeing = Instant::now();
    pgflow::engine::drop_pruned_history(pool).await?;
    Ok(Pruning {
        runs: pruned.runs,
        step_states: pruned.step_states,
        tasks: pruned.tasks,
        seconds,
        freeing_seconds: freeing.elapsed().as_secs_f64(),
    })
}

/// Runs `$1 .. $1 + $2` of `$3` into the history: flow by position (70% single, 25% chain3, 5%
/// fanout), status by a hash (97% completed, 2% failed, 1% cancelled), ends spread evenly over
/// the `$5` days before `$4` (each run 40 ms long); one state and one task per step (a
/// fanout's map step with 3 tasks).
const FILL_HISTORY: &str = "
with numbered as (
  select i,
         case when i % 20 < 14 then 'bench_single' when i % 20 < 19 then 'bench_chain3'
              else 'bench_fanout' end as flow_slug,
         case when hashint4(i::int) % 100 in (0, 1) then 'failed'
              when hashint4(i::int) % 100 = 2 then 'cancelled' else 'completed' end as status,
         $4::timestamptz - make_interval(days => $5) * (1 - i::float8 / $3) as ended_at,
         gen_random_uuid() as run_id
  from generate_series($1, $1 + $2 - 1) as i
), runs as (
  insert into pgflow.runs_history (run_id, flow_slug, status, input, output, remaining_steps,
                                   started_at, completed_at, failed_at, cancelled_at, retry_count,
                                   run_ended_at)
  select run_id, flow_slug, status, jsonb_build_object('order', i, 'note', 'generated'),
         case when status = 'completed' then '{\"done\": true}'::jsonb end,
         case when status = 'completed' then 0 else 1 end,
         ended_at - interval '40 ms',
         case when status = 'completed' then ended_at end,
         case when status = 'failed' then ended_at end,
         case when status = 'cancelled' then ended_at end,
         0, ended_at
  from numbered
  returning run_id, flow_slug, status, started_at, run_ended_at
), steps as (
  insert into pgflow.step_states_history (run_id, step_slug, flow_slug, status, remaining_deps,
                                          initial_tasks, remaining_tasks, output, error_message,
                                          created_at, started_at, completed_at, failed_at,
                                          cancelled_at, run_ended_at)
  select r.run_id, s.step_slug, r.flow_slug, st.status, 0, 1,
         case when st.status = 'completed' then 0 when st.status = 'failed' then 1 end,
         case when st.status = 'completed' then '1'::jsonb end,
         case when st.status = 'failed' then 'generated failure' end,
         r.started_at, r.started_at,
         case when st.status = 'completed' then r.started_at + interval '10 ms' end,
         case when st.status = 'failed' then r.started_at + interval '10 ms' end,
         case when st.status = 'cancelled' then r.started_at + interval '10 ms' end,
         r.run_ended_at
  from runs r
  join pgflow.steps s on s.flow_slug = r.flow_slug
  cross join lateral (
    select case when r.status = 'completed' or s.step_index = 0 then 'completed'
                when r.status = 'failed' then 'failed' else 'cancelled' end as status
  ) st
  returning run_id, step_slug, flow_slug, status, started_at, run_ended_at
)
insert into pgflow.step_tasks_history (run_id, step_slug, task_index, flow_slug, queue_name,
                                       message_id, status, attempts_count, requeue_count,
                                       output, error_message, queued_at, started_at,
                                       completed_at, failed_at, cancelled_at, attempts_base,
                                       priority, run_ended_at)
select st.run_id, st.step_slug, t.index, st.flow_slug, s.queue_name, t.index + 1, st.status,
       1, 0, case when st.status = 'completed' then '1'::jsonb end,
       case when st.status = 'failed' then 'generated failure' end,
       st.started_at, st.started_at,
       case when st.status = 'completed' then st.started_at + interval '10 ms' end,
       case when st.status = 'failed' then st.started_at + interval '10 ms' end,
       case when st.status = 'cancelled' then st.started_at + interval '10 ms' end,
       0, 3, st.run_ended_at
from steps st
join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
cross join lateral generate_series(0, case when s.step_type = 'map' then 2 else 0 end) as t(index)
";

/// Prints what the history benchmark measured.
pub(crate) fn print_history(history: &History) {
    println!(
        "\nwith {} ended runs in the history ({} days, a day's partitions each; filled in {:.0} s), \
         against an empty history: medians of {} alternated repeats, 10 workers, batch 100",
        history.runs, history.days, history.fill_seconds, history.repeats
    );
    println!(
        "{:<22} {:>12} {:>12} {:>8} {:>10} {:>10} {:>8}",
        "row", "empty t/s", "full t/s", "ratio", "empty p50", "full p50", "ratio"
    );
    for (empty, full) in &history.rows {
        println!(
            "{:<22} {:>12.0} {:>12.0} {:>8.3} {:>10.1} {:>10.1} {:>8.3}",
            empty.scenario,
            empty.tasks_per_s,
            full.tasks_per_s,
            full.tasks_per_s / empty.tasks_per_s,
            empty.run_p50_ms,
            full.run_p50_ms,
            full.run_p50_ms / empty.run_p50_ms
        );
    }
    println!("dashboard pages over that history:");
    println!("{:<28} {:>9} {:>9}  path", "page", "p50 ms", "p95 ms");
    for page in &history.pages {
        println!(
            "{:<28} {:>9.1} {:>9.1}  {}",
            page.page, page.p50_ms, page.p95_ms, page.path
        );
    }
    for (what, pruning) in [
        ("detaching a day's partitions", &history.dropped_day),
        ("deleting as many live runs", &history.deleted_day),
    ] {
        println!(
            "prune, {what}: {} runs, {} step states, {} tasks in {:.3} s \
             (then {:.3} s to drop the detached days, freeing their files)",
            pruning.runs,
            pruning.step_states,
            pruning.tasks,
            pruning.seconds,
            pruning.freeing_seconds
        );
    }
}
