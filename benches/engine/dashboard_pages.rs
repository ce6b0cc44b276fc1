//! The dashboard's pages against a database holding many ended runs: each page is rendered by
//! the dashboard's router (its typed queries, the DAG layout and the HTML) and timed from
//! request to the whole body; medians and p95 of repeated requests per page.

use std::time::Instant;

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use pgflow::FlowSpec;
use pgflow_dashboard::{Access, DashboardConfig};
use tower::ServiceExt;

use crate::{Error, bench_chain3, bench_fanout, bench_single, database};

/// One page's latencies.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PageTiming {
    pub page: String,
    pub path: String,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub bytes: usize,
}

/// The pages' latencies with `runs` ended runs in the tables.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct DashboardPages {
    pub runs: usize,
    pub fill_seconds: f64,
    pub requests_per_page: usize,
    pub pages: Vec<PageTiming>,
    /// The median of a few passes of the trend sampler (`pgflow.sample_trends`) on these tables.
    pub sampler_pass_ms: f64,
}

const REQUESTS: usize = 30;

/// Fills a fresh database with `runs` ended runs over three flows (97% completed, 2% failed, 1%
/// cancelled, started over the last 30 days, each with its steps' states and tasks) and times
/// every page.
pub(crate) async fn dashboard_pages(runs: usize) -> Result<DashboardPages, Error> {
    let pool = database("pgflow_bench_dashboard").await?;
    for definition in [
        bench_single::Flow::definition(),
        bench_chain3::Flow::definition(),
        bench_fanout::Flow::definition(),
    ] {
        pgflow::engine::compile_flow(&pool, &definition).await?;
    }
    let filling = Instant::now();
    fill(&pool, runs).await?;
    let fill_seconds = filling.elapsed().as_secs_f64();
    let pages = time_pages(&pool, 1000).await?;
    let sampler_pass_ms = sampler_pass(&pool).await?;
    Ok(DashboardPages {
        runs,
        fill_seconds,
        requests_per_page: REQUESTS,
        pages,
        sampler_pass_ms,
    })
}

/// Times every page of the dashboard on `pool`'s database: [`REQUESTS`] requests each, after
/// one to warm its plans. The run pages show the completed chain3 run `newer` runs below the
/// newest (live or archived) and the oldest failed run.
pub(crate) async fn time_pages(pool: &sqlx::PgPool, newer: i64) -> Result<Vec<PageTiming>, Error> {
    let sample: (uuid::Uuid, String) = sqlx::query_as(
        "select run_id, to_char(started_at, 'YYYY-MM-DD\"T\"HH24:MI') from pgflow.all_runs
         where flow_slug = 'bench_chain3' and status = 'completed'
         order by started_at desc offset $1 limit 1",
    )
    .bind(newer)
    .fetch_one(pool)
    .await?;
    let failed: uuid::Uuid = sqlx::query_scalar(
        "select run_id from pgflow.all_runs where status = 'failed' order by started_at limit 1",
    )
    .fetch_one(pool)
    .await?;
    let (run, day) = sample;
    let app = pgflow_dashboard::router(DashboardConfig::new(Access::ReadOnly), pool.clone());
    // A deep page: ten pages into the unfiltered listing.
    let mut deep = "/runs".to_owned();
    for _ in 0..10 {
        let (_, body) = get(&app, &deep).await?;
        let start = body
            .find("id=\"next-page\" href=\"")
            .ok_or("no next page")?
            + 21;
        let end = start + body[start..].find('"').ok_or("unterminated link")?;
        deep = body[start..end].replace("&amp;", "&");
    }
    let pages = [
        ("overview", "/".to_owned()),
        ("overview, trends of a day", "/?trends=day".to_owned()),
        ("runs, newest", "/runs".to_owned()),
        ("runs, 11th page", deep),
        ("runs of a flow", "/runs?flow=bench_chain3".to_owned()),
        ("runs, failed", "/runs?status=failed".to_owned()),
        (
            "runs of a flow, cancelled",
            "/runs?flow=bench_single&status=cancelled".to_owned(),
        ),
        (
            "runs, started in a range",
            format!("/runs?from={day}&before={}", next_hour(&day)),
        ),
        ("run (completed, 3 steps)", format!("/runs/{run}")),
        ("run (failed)", format!("/runs/{failed}")),
        ("flow", "/flows/bench_chain3".to_owned()),
    ];
    let mut timings = Vec::new();
    for (page, path) in pages {
        get(&app, &path).await?; // warm: plans and caches, as a dashboard in use has them
        let mut ms = Vec::with_capacity(REQUESTS);
        let mut bytes = 0;
        for _ in 0..REQUESTS {
            let started = Instant::now();
            let (_, body) = get(&app, &path).await?;
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
            bytes = body.len();
        }
        ms.sort_by(f64::total_cmp);
        timings.push(PageTiming {
            page: page.to_owned(),
            path,
            p50_ms: ms[ms.len() / 2],
            p95_ms: ms[(ms.len() * 95 / 100).min(ms.len() - 1)],
            bytes,
        });
    }
    Ok(timings)
}

/// The median time of five passes of the trend sampler, each made due by forgetting the pass
/// before it: it samples every queue and counts the runs of the last three minutes again,
/// through `runs_ended_idx`.
async fn sampler_pass(pool: &sqlx::PgPool) -> Result<f64, Error> {
    let db = pgflow::Db::from(pool);
    let mut ms = Vec::new();
    for _ in 0..5 {
        sqlx::query(
            "delete from pgflow.trend_passes where sampled_at > now() - interval '2 minutes'",
        )
        .execute(pool)
        .await?;
        let started = Instant::now();
        let sampled = pgflow::engine::sample_trends(
            &db,
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(86_400),
        )
        .await?;
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if !sampled {
            return Err("the trend sampler did not take its pass".into());
        }
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

fn next_hour(minute: &str) -> String {
    chrono::NaiveDateTime::parse_from_str(minute, "%Y-%m-%dT%H:%M")
        .map(|t| {
            (t + chrono::Duration::hours(1))
                .format("%Y-%m-%dT%H:%M")
                .to_string()
        })
        .unwrap_or_else(|_| minute.to_owned())
}

async fn get(app: &axum::Router, path: &str) -> Result<(StatusCode, String), Error> {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty())?)
        .await?;
    let status = response.status();
    let body = String::from_utf8(to_bytes(response.into_body(), 16 << 20).await?.to_vec())?;
    if status != StatusCode::OK {
        return Err(format!("{path} answered {status}: {body}").into());
    }
    Ok((status, body))
}

/// Writes `runs` ended runs straight into the tables (see [`fill_runs`]), started over the 30
/// days up to now, and a day of samples of every queue, then analyzes, as autovacuum would
/// after such a load.
async fn fill(pool: &sqlx::PgPool, runs: usize) -> Result<(), Error> {
    fill_runs(pool, runs, chrono::Utc::now()).await?;
    let mut conn = pool.acquire().await?;
    // A day of trend samples, one a minute, as the workers' maintenance keeps them: what the
    // overview's trends draw the last hour or day of.
    sqlx::raw_sql(TREND_SAMPLES).execute(&mut *conn).await?;
    sqlx::query(
        "analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.queue_samples,
                 pgflow.trend_passes, pgflow.run_samples, pgflow.task_samples",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes `runs` ended runs straight into the live tables, started evenly over the 30 days up
/// to `until`, 100,000 per statement, with triggers off (no notifications, no integrity checks:
/// the rows are consistent by construction).
pub(crate) async fn fill_runs(
    pool: &sqlx::PgPool,
    runs: usize,
    until: chrono::DateTime<chrono::Utc>,
) -> Result<(), Error> {
    let mut conn = pool.acquire().await?;
    sqlx::query("set session_replication_role = replica")
        .execute(&mut *conn)
        .await?;
    for (first, n) in batches(runs) {
        sqlx::query(FILL)
            .bind(first)
            .bind(n)
            .bind(runs as i64)
            .bind(until)
            .execute(&mut *conn)
            .await?;
    }
    sqlx::query("set session_replication_role = origin")
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// `total` rows written 100,000 per statement: each statement's first row and row count.
pub(crate) fn batches(total: usize) -> impl Iterator<Item = (i64, i64)> {
    (0..total)
        .step_by(100_000)
        .map(move |first| (first as i64, (total - first).min(100_000) as i64))
}

/// A day of passes of the trend sampler, a minute apart: every queue's samples and every flow's
/// runs that ended; and a day of every step's handler durations, 40 a minute.
const TREND_SAMPLES: &str = "
insert into pgflow.trend_passes (sampled_at, counted_from)
select date_trunc('minute', now()) - make_interval(mins => m),
       date_trunc('minute', now()) - make_interval(mins => m + 3)
from generate_series(0, 1439) m;
insert into pgflow.queue_samples (sampled_at, queue_name, depth, oldest_message_age_seconds,
                                  in_flight)
select date_trunc('minute', now()) - make_interval(mins => m), q.queue_name,
       (m * 37) % 500, (m * 13) % 300, m % 10
from (select distinct queue_name from pgflow.steps) q, generate_series(0, 1439) m;
insert into pgflow.run_samples (minute, flow_slug, completed, failed)
select date_trunc('minute', now()) - make_interval(mins => m), f.flow_slug,
       20 + (m * 7) % 30, (m * 3) % 5
from pgflow.flows f, generate_series(0, 1439) m;
insert into pgflow.task_samples (period_seconds, period_start, flow_slug, step_slug, completed,
                                 buckets)
select 60, date_trunc('minute', now()) - make_interval(mins => m), s.flow_slug, s.step_slug, 40,
       (select array_agg(case i when 30 + m % 8 then 30 when 45 + m % 5 then 10 else 0 end
                         order by i)
        from generate_series(0, 50) i)
from pgflow.steps s, generate_series(0, 1439) m;
insert into pgflow.task_samples (period_seconds, period_start, flow_slug, step_slug, completed,
                                 buckets)
select 600, date_bin('10 minutes', now(), timestamptz 'epoch') - make_interval(mins => 10 * p),
       s.flow_slug, s.step_slug, 400,
       (select array_agg(case when i between 30 and 37 then 38 when i between 45 and 49 then 20
                              else 0 end order by i)
        from generate_series(0, 50) i)
from pgflow.steps s, generate_series(0, 143) p;
";

/// Runs `$1 .. $1 + $2` of `$3`: flow by position (30% single, 60% chain3, 10% fanout), status
/// by a hash (97% completed, 2% failed, 1% cancelled), start times spread evenly over 30 days
/// up to `$4`; one state and one task per step (a fanout's map step with 3 tasks).
const FILL: &str = "
with numbered as (
  select i,
         case when i % 10 < 3 then 'bench_single' when i % 10 < 9 then 'bench_chain3'
              else 'bench_fanout' end as flow_slug,
         case when hashint4(i::int) % 100 in (0, 1) then 'failed'
              when hashint4(i::int) % 100 = 2 then 'cancelled' else 'completed' end as status,
         $4::timestamptz - interval '30 days' * (1 - i::float8 / $3) as started_at,
         gen_random_uuid() as run_id
  from generate_series($1, $1 + $2 - 1) as i
), runs as (
  insert into pgflow.runs (run_id, flow_slug, status, input, output, remaining_steps,
                           started_at, completed_at, failed_at, cancelled_at)
  select run_id, flow_slug, status, jsonb_build_object('order', i, 'note', 'generated'),
         case when status = 'completed' then '{\"done\": true}'::jsonb end,
         case when status = 'completed' then 0 else 1 end,
         started_at,
         case when status = 'completed' then started_at + interval '40 ms' end,
         case when status = 'failed' then started_at + interval '40 ms' end,
         case when status = 'cancelled' then started_at + interval '40 ms' end
  from numbered
  returning run_id, flow_slug, status, started_at
), steps as (
  insert into pgflow.step_states (run_id, step_slug, flow_slug, status, remaining_deps,
                                  initial_tasks, remaining_tasks, output, error_message,
                                  created_at, started_at, completed_at, failed_at, cancelled_at)
  select r.run_id, s.step_slug, r.flow_slug, st.status, 0, 1,
         case when st.status = 'completed' then 0 when st.status = 'failed' then 1 end,
         case when st.status = 'completed' then '1'::jsonb end,
         case when st.status = 'failed' then 'generated failure' end,
         r.started_at, r.started_at,
         case when st.status = 'completed' then r.started_at + interval '10 ms' end,
         case when st.status = 'failed' then r.started_at + interval '10 ms' end,
         case when st.status = 'cancelled' then r.started_at + interval '10 ms' end
  from runs r
  join pgflow.steps s on s.flow_slug = r.flow_slug
  cross join lateral (
    select case when r.status = 'completed' or s.step_index = 0 then 'completed'
                when r.status = 'failed' then 'failed' else 'cancelled' end as status
  ) st
  returning run_id, step_slug, flow_slug, status, started_at
)
insert into pgflow.step_tasks (run_id, step_slug, task_index, flow_slug, queue_name, message_id,
                               status, attempts_count, output, error_message, queued_at,
                               started_at, completed_at, failed_at, cancelled_at)
select st.run_id, st.step_slug, t.index, st.flow_slug, s.queue_name, t.index + 1, st.status,
       1, case when st.status = 'completed' then '1'::jsonb end,
       case when st.status = 'failed' then 'generated failure' end,
       st.started_at, st.started_at,
       case when st.status = 'completed' then st.started_at + interval '10 ms' end,
       case when st.status = 'failed' then st.started_at + interval '10 ms' end,
       case when st.status = 'cancelled' then st.started_at + interval '10 ms' end
from steps st
join pgflow.steps s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
cross join lateral generate_series(0, case when s.step_type = 'map' then 2 else 0 end) as t(index)
";

/// Prints the pages' latencies.
pub(crate) fn print_pages(pages: &DashboardPages) {
    println!(
        "\ndashboard pages with {} ended runs in the tables (filled in {:.0} s): {} requests each, \
         rendered by the dashboard's router (queries, DAG layout, HTML)",
        pages.runs, pages.fill_seconds, pages.requests_per_page
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9}  path",
        "page", "p50 ms", "p95 ms", "KiB"
    );
    for page in &pages.pages {
        println!(
            "{:<28} {:>9.1} {:>9.1} {:>9.1}  {}",
            page.page,
            page.p50_ms,
            page.p95_ms,
            page.bytes as f64 / 1024.0,
            page.path
        );
    }
    println!(
        "a pass of the trend sampler (pgflow.sample_trends): {:.1} ms (median of 5)",
        pages.sampler_pass_ms
    );
}
