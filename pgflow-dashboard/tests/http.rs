//! The dashboard over HTTP against real Postgres and a real worker: every page answers, a
//! failed step's error shows, payloads can be hidden, and cancel is refused without the token,
//! from another site, with a stale form or on a read-only dashboard, and works with all three.

#![allow(
    unreachable_pub,
    reason = "a test crate exports nothing; its flows and helpers are `pub`, as in a user's crate"
)]
#![allow(clippy::unwrap_used)]

mod support;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use pgflow::Client;
use pgflow::engine::RunStatus;
use pgflow_dashboard::{Access, ActionToken, DashboardConfig};
use sqlx::PgPool;
use tower::ServiceExt;
use uuid::Uuid;

use support::{DECLINED, Order};

const TOKEN: &str = "a-test-token-of-some-length";

fn dashboard(pool: &PgPool, access: Access, hide_payloads: bool) -> Router {
    let mut config = DashboardConfig::new(access);
    config.hide_payloads = hide_payloads;
    pgflow_dashboard::router(config, pool.clone())
}

fn with_token() -> Access {
    Access::Token(ActionToken::new(TOKEN).unwrap())
}

async fn get(app: &Router, path: &str) -> (StatusCode, String, Option<String>) {
    let response = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let cookie = response
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = to_bytes(response.into_body(), 4 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap(), cookie)
}

async fn post(
    app: &Router,
    path: &str,
    headers: &[(&str, &str)],
    form: &str,
) -> (StatusCode, String) {
    let mut request = Request::post(path)
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(form.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 4 << 20).await.unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The CSRF token in a confirmation form, and its cookie.
fn csrf_of(page: &str, set_cookie: &str) -> (String, String) {
    let start = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    let csrf = page[start..start + 64].to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    assert_eq!(cookie, format!("pgflow_csrf={csrf}"));
    (csrf, cookie)
}

async fn status_of(pool: &PgPool, run_id: Uuid) -> RunStatus {
    pgflow::engine::run(pool, run_id).await.unwrap().status
}

#[sqlx::test(migrations = false)]
async fn every_page_answers_and_a_failed_step_shows_its_error(pool: PgPool) {
    let _worker = support::installed_with_worker(&pool).await;
    let client = Client::new(pool.clone());
    let done = support::start(&client, Order::quick()).await;
    let failed = support::start(&client, Order::failing()).await;
    assert_eq!(support::ended(&client, done).await, RunStatus::Completed);
    assert_eq!(support::ended(&client, failed).await, RunStatus::Failed);
    let app = dashboard(&pool, with_token(), false);

    let (status, overview, _) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview.contains(r#"data-queue="browsed""#), "{overview}");
    assert!(
        overview.contains(r#"data-queue="browsed" data-paused="false""#),
        "{overview}"
    );
    pgflow::engine::pause_queue(&pool, "browsed", None)
        .await
        .unwrap();
    let (_, overview, _) = get(&app, "/").await;
    assert!(
        overview.contains(r#"data-queue="browsed" data-paused="true""#)
            && overview.contains(r#"data-status="paused""#),
        "a paused queue says so: {overview}"
    );
    pgflow::engine::resume_queue(&pool, "browsed")
        .await
        .unwrap();
    pgflow::engine::set_queue_concurrency(&pool, "browsed", Some(4))
        .await
        .unwrap();
    let (_, overview, _) = get(&app, "/").await;
    assert!(
        overview.contains(r#"<span class="cap" data-cap="4">(cap 4)</span>"#),
        "a capped queue shows its cap: {overview}"
    );
    assert!(
        overview.contains("dashboard_tests"),
        "the worker's function is missing"
    );

    let (status, runs, _) = get(&app, "/runs?flow=browsed&status=failed").await;
    assert_eq!(status, StatusCode::OK);
    assert!(runs.contains(&failed.to_string()) && !runs.contains(&done.to_string()));

    let (status, page, _) = get(&app, &format!("/runs/{done}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("3 of 3 done"),
        "the map step's elements are not counted: {page}"
    );

    let (status, page, _) = get(&app, &format!("/runs/{failed}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(DECLINED),
        "the step's error is missing: {page}"
    );
    assert!(page.contains("<svg"), "the DAG is missing");
    assert!(page.contains(r#"id="retry""#), "a failed run offers retry");
    assert!(
        page.contains("&quot;quick&quot;") || page.contains("\"quick\""),
        "the input preview is missing"
    );

    let (status, flow, _) = get(&app, "/flows/browsed_v1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(flow.contains(r#"data-step="settle""#) && flow.contains("<svg"));

    let (status, _, _) = get(&app, &format!("/runs/{}", Uuid::nil())).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A path that is no run id gets the dashboard's own 404 page, not a bare rejection.
    for path in ["/runs/not-a-run", "/runs/1234/body", "/runs/1234/cancel"] {
        let (status, body, _) = get(&app, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            body.contains("is not a run id") && body.contains("Back to the overview"),
            "{path}: {body}"
        );
    }
    // A run started for later is shown as scheduled, without a duration, on both pages.
    let later = client
        .start(
            pgflow::Start::flow::<support::browsed_v1::Flow>(),
            &Order::quick(),
            pgflow::StartOptions::new().start_after(std::time::Duration::from_secs(3600)),
        )
        .await
        .unwrap()
        .run_id();
    let (_, runs, _) = get(&app, "/runs").await;
    let row = runs
        .split("<tr ")
        .find(|row| row.contains(&later.to_string()))
        .expect("the scheduled run is listed");
    assert!(row.contains(r#"data-status="scheduled""#), "{row}");
    assert!(
        row.contains("<td class=\"num\">–</td>"),
        "no duration yet: {row}"
    );
    let (_, page, _) = get(&app, &format!("/runs/{later}")).await;
    assert!(page.contains(r#"data-status="scheduled""#), "{page}");

    let (status, body, _) = get(&app, "/runs?status=done").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("`status` is `done`"), "{body}");
    let (status, body, _) = get(&app, "/runs?flow=nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no flow or alias named `nope`"), "{body}");
}

#[sqlx::test(migrations = false)]
async fn hidden_payloads_never_reach_the_page(pool: PgPool) {
    let _worker = support::installed_with_worker(&pool).await;
    let client = Client::new(pool.clone());
    let secret = "card-4111-1111";
    let run = support::start(
        &client,
        Order {
            note: secret.into(),
            ..Order::quick()
        },
    )
    .await;
    support::ended(&client, run).await;

    let shown = dashboard(&pool, with_token(), false);
    let (_, page, _) = get(&shown, &format!("/runs/{run}")).await;
    assert!(page.contains(secret), "payloads are shown by default");

    let hidden = dashboard(&pool, with_token(), true);
    let (_, page, _) = get(&hidden, &format!("/runs/{run}")).await;
    assert!(!page.contains(secret), "a hidden payload leaked: {page}");
    assert!(page.contains("--hide-payloads"));
}

#[sqlx::test(migrations = false)]
async fn cancel_needs_the_token_a_same_site_form_and_its_csrf_cookie(pool: PgPool) {
    let _worker = support::installed_with_worker(&pool).await;
    let client = Client::new(pool.clone());
    let run = support::start(&client, Order::waiting(60_000)).await;
    let app = dashboard(&pool, with_token(), false);
    let path = format!("/runs/{run}/cancel");

    let (status, form, set_cookie) = get(&app, &path).await;
    assert_eq!(status, StatusCode::OK);
    let (csrf, cookie) = csrf_of(&form, &set_cookie.expect("the form sets its CSRF cookie"));
    let same_site = [
        ("cookie", cookie.as_str()),
        ("origin", "http://127.0.0.1:8080"),
    ];

    let wrong_token = format!("csrf={csrf}&token=not-the-right-token");
    let (status, body) = post(&app, &path, &same_site, &wrong_token).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("wrong action token"), "{body}");

    let right = format!("csrf={csrf}&token={TOKEN}&reason=test");
    let cross_site = [
        ("cookie", cookie.as_str()),
        ("origin", "http://evil.example"),
    ];
    let (status, body) = post(&app, &path, &cross_site, &right).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("another site"), "{body}");

    let (status, body) = post(&app, &path, &[("origin", "http://127.0.0.1:8080")], &right).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no CSRF cookie");
    assert!(body.contains("CSRF"), "{body}");

    let read_only = dashboard(&pool, Access::ReadOnly, false);
    let (status, body) = post(&read_only, &path, &same_site, &right).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body.contains("read-only"), "{body}");
    let (_, page, _) = get(&read_only, &format!("/runs/{run}")).await;
    assert!(
        !page.contains(r#"id="cancel""#),
        "a read-only dashboard offers cancel"
    );

    assert_eq!(
        status_of(&pool, run).await,
        RunStatus::Started,
        "a refused cancel changed the run"
    );

    let (status, _) = post(&app, &path, &same_site, &right).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(status_of(&pool, run).await, RunStatus::Cancelled);
    let run_row = pgflow::engine::run(&pool, run).await.unwrap();
    assert_eq!(run_row.cancel_reason.as_deref(), Some("test"));
}

/// `POST /signals/{token}` with a JSON body, as an external system calls a callback link.
async fn post_json(app: &Router, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[sqlx::test(migrations = false)]
async fn a_callback_link_sends_its_signal_once_with_no_other_credential(pool: PgPool) {
    let _worker = support::installed_with_worker(&pool).await;
    let (_approver, run) = support::waiting_for_approval(&pool).await;
    let token = pgflow::engine::signal_token(&pool, run, "approval")
        .await
        .unwrap();
    let app = dashboard(&pool, with_token(), false);
    let path = format!("/signals/{token}");

    let (status, body) = post_json(&app, "/signals/not-a-token", "{}").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = post_json(&app, &path, "{not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let read_only = dashboard(&pool, Access::ReadOnly, false);
    let (status, _, _) = get(&read_only, &path).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a read-only dashboard takes no callbacks"
    );

    // No cookie, no action token, no same-site header: the token is the credential.
    let (status, body) = post_json(&app, &path, r#"{"by": "a link"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "delivered");
    assert_eq!(
        support::ended(&Client::new(pool.clone()), run).await,
        RunStatus::Completed
    );
    let (status, body) = post_json(&app, &path, r#"{"by": "a link"}"#).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    let (status, body) = post_json(&app, &path, r#"{"by": "someone else"}"#).await;
    assert_eq!(status, StatusCode::GONE, "{body}");

    // The same route, mounted in an application's own server.
    let own = pgflow_dashboard::callback_router(pool.clone());
    let (status, _) = post_json(&own, &path, r#"{"by": "a link"}"#).await;
    assert_eq!(status, StatusCode::GONE);
}

#[sqlx::test(migrations = false)]
async fn a_parent_and_its_child_link_each_other_and_list_as_waiting(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let (_worker, parent, child) = support::waiting_child(&pool).await;
    let app = dashboard(&pool, Access::ReadOnly, false);

    let (status, page, _) = get(&app, &format!("/runs/{parent}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"children\""), "{page}");
    assert!(page.contains(&format!("href=\"/runs/{child}\"")), "{page}");
    assert!(
        page.contains("data-reason=\"subflow\""),
        "the step waits for its child: {page}"
    );

    let (status, page, _) = get(&app, &format!("/runs/{child}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&format!("id=\"parent\" href=\"/runs/{parent}\"")),
        "{page}"
    );

    // Both only wait (the child for its signal, the parent for its child).
    let (status, page, _) = get(&app, "/runs?status=waiting").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&parent.to_string()) && page.contains(&child.to_string()),
        "{page}"
    );
    assert!(page.contains("data-status=\"waiting\""), "{page}");
}

/// One task at a time per tenant (no worker runs it in the test: the second run's task waits).
#[pgflow::flow(slug = "per_tenant")]
pub mod per_tenant {
    /// Echoes its input.
    #[step(queue = "per_tenant", concurrency = 1, concurrency_key = input.tenant)]
    pub async fn call(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn the_overview_and_a_run_show_what_a_cap_holds_back(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    client.deploy(&per_tenant::deployment()).await.unwrap();
    let mut runs = Vec::new();
    for n in 0..2 {
        let input = serde_json::json!({"tenant": "acme", "n": n});
        runs.push(per_tenant::start(&client, &input).await.unwrap().run_id());
    }
    let app = dashboard(&pool, Access::ReadOnly, false);

    let (status, page, _) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"caps\""), "{page}");
    assert!(
        page.contains("data-step=\"per_tenant/call\" data-key=\"acme\""),
        "{page}"
    );

    let (status, page, _) = get(&app, &format!("/runs/{}", runs[1])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"held\""), "{page}");
    assert!(
        page.contains("held: key `acme` is at its cap of 1 (1 running)"),
        "{page}"
    );
    let (_, page, _) = get(&app, &format!("/runs/{}", runs[0])).await;
    assert!(
        !page.contains("id=\"held\""),
        "the first run's task has the slot"
    );
}

/// One start a minute per tenant (a claim in the test meets both runs' tasks: one waits).
#[pgflow::flow(slug = "rated_per_tenant")]
pub mod rated_per_tenant {
    /// Echoes its input.
    #[step(queue = "rated_per_tenant", rate_limit = "1/m", rate_key = input.tenant)]
    pub async fn call(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }
}

#[sqlx::test(migrations = false)]
async fn the_overview_and_a_run_show_what_a_rate_limit_holds_back(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    let deployment = rated_per_tenant::deployment();
    client.deploy(&deployment).await.unwrap();
    let mut runs = Vec::new();
    for n in 0..2 {
        let input = serde_json::json!({"tenant": "acme", "n": n});
        runs.push(
            rated_per_tenant::start(&client, &input)
                .await
                .unwrap()
                .run_id(),
        );
    }
    let queue = pgflow::names::QueueName::new("rated_per_tenant").unwrap();
    let pairs = pgflow::engine::SupportedPairs::routed_to(deployment.definition(), &queue);
    let claimed = pgflow::engine::read_and_start_tasks(&pool, &queue, Uuid::new_v4(), &pairs, 10)
        .await
        .unwrap();
    assert_eq!(claimed.tasks.len(), 1, "one token for the tenant");
    let app = dashboard(&pool, Access::ReadOnly, false);

    let (status, page, _) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"rates\""), "{page}");
    assert!(
        page.contains("data-step=\"rated_per_tenant/call\" data-key=\"acme\""),
        "{page}"
    );
    assert!(page.contains("1 per 1m"), "{page}");

    let (status, page, _) = get(&app, &format!("/runs/{}", runs[1])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("data-reason=\"rate\""), "{page}");
    assert!(
        page.contains("held: key `acme` is at its rate limit of 1 per 1m"),
        "{page}"
    );
    let (_, page, _) = get(&app, &format!("/runs/{}", runs[0])).await;
    assert!(
        !page.contains("id=\"held\""),
        "the first run's task took the token"
    );
}

#[sqlx::test(migrations = false)]
async fn a_run_waiting_its_turn_shows_its_key_place_and_the_run_before_it(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    client
        .deploy(&rated_per_tenant::deployment())
        .await
        .unwrap();
    let mut runs = Vec::new();
    for n in 0..3 {
        let input = serde_json::json!({"tenant": "acme", "n": n});
        let options = pgflow::StartOptions::new().singleton_in_turn("nightly");
        runs.push(
            client
                .start(
                    pgflow::Start::<serde_json::Value, serde_json::Value>::named(
                        "rated_per_tenant",
                    ),
                    &input,
                    options,
                )
                .await
                .unwrap()
                .run_id(),
        );
    }
    let app = dashboard(&pool, Access::ReadOnly, false);
    let (status, page, _) = get(&app, &format!("/runs/{}", runs[2])).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"turn\""), "{page}");
    assert!(
        page.contains(&format!(
            "In line for singleton key <code>nightly</code>, place 2, behind run <a \
             href=\"/runs/{0}\">{0}</a>",
            runs[0]
        )),
        "{page}"
    );
    let (_, page, _) = get(&app, &format!("/runs/{}", runs[0])).await;
    assert!(!page.contains("id=\"turn\""), "the first run holds the key");
    // The overview lists the key's line.
    let (_, overview, _) = get(&app, "/").await;
    assert!(overview.contains("id=\"turns\""), "{overview}");
    assert!(
        overview.contains("data-scope=\"rated_per_tenant\" data-key=\"nightly\""),
        "{overview}"
    );
    assert!(
        overview.contains(&format!("href=\"/runs/{0}\">{0}</a>", runs[0])),
        "the run that holds the key: {overview}"
    );
}

/// Posts the confirmation form at `path` (fetched first for its CSRF token) with the token and
/// `extra` fields, as a same-site browser would.
async fn confirm_and_post(app: &Router, path: &str, extra: &str) -> StatusCode {
    let (status, form, set_cookie) = get(app, path).await;
    assert_eq!(status, StatusCode::OK, "{form}");
    let (csrf, cookie) = csrf_of(&form, &set_cookie.expect("the form sets its CSRF cookie"));
    let same_site = [
        ("cookie", cookie.as_str()),
        ("origin", "http://127.0.0.1:8080"),
    ];
    let (status, _) = post(
        app,
        path,
        &same_site,
        &format!("csrf={csrf}&token={TOKEN}{extra}"),
    )
    .await;
    status
}

#[sqlx::test(migrations = false)]
async fn the_overview_pauses_and_resumes_a_queue_and_a_flow_with_the_token(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    client.deploy(&per_tenant::deployment()).await.unwrap();
    let app = dashboard(&pool, with_token(), false);

    let (_, page, _) = get(&app, "/").await;
    assert!(page.contains("href=\"/queues/per_tenant/pause\""), "{page}");
    assert!(page.contains("href=\"/flows/per_tenant/pause\""), "{page}");
    let read_only = dashboard(&pool, Access::ReadOnly, false);
    let (_, page, _) = get(&read_only, "/").await;
    assert!(
        !page.contains("/pause\""),
        "a read-only dashboard offers a pause: {page}"
    );
    let (status, _, _) = get(&read_only, "/flows/per_tenant/pause").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The queue.
    let status = confirm_and_post(&app, "/queues/per_tenant/pause", "&reason=upgrade").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let queues = pgflow_runtime::admin::inspect::queues(&pool).await.unwrap();
    assert!(
        queues
            .iter()
            .any(|q| q.queue_name == "per_tenant" && q.paused)
    );
    let (_, page, _) = get(&app, "/").await;
    assert!(
        page.contains("href=\"/queues/per_tenant/resume\""),
        "{page}"
    );
    let status = confirm_and_post(&app, "/queues/per_tenant/resume", "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let queues = pgflow_runtime::admin::inspect::queues(&pool).await.unwrap();
    assert!(queues.iter().all(|q| !q.paused));

    // The flow.
    let status = confirm_and_post(&app, "/flows/per_tenant/pause", "&reason=supplier+down").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let paused = pgflow_runtime::admin::inspect::paused_flows(&pool)
        .await
        .unwrap();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].reason.as_deref(), Some("supplier down"));
    let (_, page, _) = get(&app, "/").await;
    assert!(
        page.contains("data-flow=\"per_tenant\" data-paused=\"true\""),
        "{page}"
    );
    let status = confirm_and_post(&app, "/flows/per_tenant/resume", "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        pgflow_runtime::admin::inspect::paused_flows(&pool)
            .await
            .unwrap()
            .is_empty()
    );
}

#[sqlx::test(migrations = false)]
async fn a_run_page_shows_a_priority_other_than_normal(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let client = Client::new(pool.clone());
    client.deploy(&per_tenant::deployment()).await.unwrap();
    let input = serde_json::json!({"tenant": "acme"});
    let urgent = client
        .start(
            pgflow::Start::flow::<per_tenant::Flow>(),
            &input,
            pgflow::StartOptions::new().priority(pgflow::Priority::Highest),
        )
        .await
        .unwrap()
        .run_id();
    let plain = per_tenant::start(&client, &input).await.unwrap().run_id();
    let app = dashboard(&pool, Access::ReadOnly, false);

    let (status, page, _) = get(&app, &format!("/runs/{urgent}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<dd id=\"priority\">highest</dd>"), "{page}");
    let (_, page, _) = get(&app, &format!("/runs/{plain}")).await;
    assert!(!page.contains("id=\"priority\""), "normal is not shown");
}

#[sqlx::test(migrations = false)]
async fn the_overview_charts_each_queue_over_the_last_hour_from_its_samples(pool: PgPool) {
    pgflow::install(&pool).await.unwrap();
    let app = dashboard(&pool, Access::ReadOnly, false);
    let (_, page, _) = get(&app, "/").await;
    assert!(!page.contains("id=\"trends\""), "no samples, no trends");
    assert!(page.contains("Queues"), "{page}");

    // Three samples of a queue filling up within the hour, one from two hours ago (not shown).
    sqlx::query(
        "insert into pgflow.queue_samples
           (sampled_at, queue_name, depth, oldest_message_age_seconds, in_flight)
         values (now() - interval '2 hours', 'orders', 99, 9, 0),
                (now() - interval '40 minutes', 'orders', 0, null, 0),
                (now() - interval '20 minutes', 'orders', 12, 30, 2),
                (now() - interval '1 minute', 'orders', 40, 95, 4)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (status, page, _) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"trends\""), "{page}");
    assert!(
        page.contains("data-chart=\"queue-depth\" data-points=\"3\" data-max=\"40\""),
        "{page}"
    );
    assert!(
        page.contains("data-chart=\"queue-oldest\" data-points=\"3\" data-max=\"95\""),
        "{page}"
    );
    assert!(page.contains("max 40, now 40"), "{page}");
}

#[sqlx::test(migrations = false)]
async fn the_overview_charts_runs_per_flow_and_task_durations_per_step_over_an_hour_or_a_day(
    pool: PgPool,
) {
    pgflow::install(&pool).await.unwrap();
    let app = dashboard(&pool, Access::ReadOnly, false);
    // Counted from 30 minutes ago: a burst of failures 10 minutes ago, completions around it,
    // and a step's durations; one minute a day and a half ago is past even the day's span.
    sqlx::raw_sql(
        "insert into pgflow.trend_passes (sampled_at, counted_from)
           values (now(), date_trunc('minute', now()) - interval '30 minutes');
         insert into pgflow.run_samples (minute, flow_slug, completed, failed)
         values (date_trunc('minute', now()) - interval '36 hours', 'orders', 500, 500),
                (date_trunc('minute', now()) - interval '12 minutes', 'orders', 6, 0),
                (date_trunc('minute', now()) - interval '10 minutes', 'orders', 1, 7),
                (date_trunc('minute', now()) - interval '9 minutes', 'orders', 2, 0);
         insert into pgflow.task_samples
           (period_seconds, period_start, flow_slug, step_slug, completed, buckets)
         values (60, date_trunc('minute', now()) - interval '10 minutes', 'orders', 'charge', 8,
                 (select array_agg(case i when 41 then 7 when 53 then 1 else 0 end order by i)
                  from generate_series(0, 53) i)),
                (60, date_trunc('minute', now()) - interval '9 minutes', 'orders', 'charge', 2,
                 (select array_agg(case i when 41 then 2 else 0 end order by i)
                  from generate_series(0, 41) i)),
                (600, date_bin('10 minutes', now() - interval '10 minutes', timestamptz 'epoch'),
                 'orders', 'charge', 20,
                 (select array_agg(case i when 41 then 2 when 53 then 18 else 0 end order by i)
                  from generate_series(0, 53) i))",
    )
    .execute(&pool)
    .await
    .unwrap();

    let (status, page, _) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    let runs = section(&page, "id=\"run-trends\"");
    // From the first minute counted to now: 31 or 32 minutes, each a point, zero where none
    // ended.
    let points = attribute(runs, "data-chart=\"runs-failed\"", "data-points");
    assert!(points == "31" || points == "32", "{runs}");
    assert!(
        runs.contains("data-series=\"\" data-max=\"7\""),
        "the burst of 7 failures is the failed chart's peak: {runs}"
    );
    assert!(runs.contains("max 7/min, now 0/min"), "{runs}");
    let tasks = section(&page, "id=\"task-trends\"");
    assert!(tasks.contains("data-step=\"orders/charge\""), "{tasks}");
    // Seven handlers in the bucket of 106-116 ms and one in that of 867-920 ms: the p95 is the
    // slow one, the p50 one of the seven, each at its bucket's middle.
    let p95: f64 = attribute(tasks, "data-series=\"p95\"", "data-max")
        .parse()
        .unwrap();
    let p50: f64 = attribute(tasks, "data-series=\"p50\"", "data-max")
        .parse()
        .unwrap();
    assert!((867.0..920.0).contains(&p95), "{tasks}");
    assert!((106.0..116.0).contains(&p50), "{tasks}");
    assert!(tasks.contains("<td class=\"num\">10</td>"), "{tasks}");

    // The day: ten-minute points, runs per minute on average; the 36-hour-old minute is out.
    let (status, page, _) = get(&app, "/?trends=day").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("data-span=\"day\""), "{page}");
    let runs = section(&page, "id=\"run-trends\"");
    let failed_max: f64 = attribute(runs, "data-chart=\"runs-failed\"", "data-max")
        .parse()
        .unwrap();
    assert!(
        (0.7..=0.71).contains(&failed_max) || failed_max == 1.0,
        "7 failures in ten minutes are 0.7 a minute (the chart's scale is at least 1): {runs}"
    );
    assert!(runs.contains("data-series=\"\" data-max=\"0.7\""), "{runs}");
    // The day's durations come from the ten-minute rows (their median is a slow handler's),
    // not from the minutes (whose median is a fast one's).
    let tasks = section(&page, "id=\"task-trends\"");
    let p50: f64 = attribute(tasks, "data-series=\"p50\"", "data-max")
        .parse()
        .unwrap();
    assert!((867.0..920.0).contains(&p50), "{tasks}");

    let (status, page, _) = get(&app, "/?trends=week").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("`week`") && page.contains("`day`"), "{page}");
}

/// The markup from `marker` to the end of its table.
fn section<'a>(page: &'a str, marker: &str) -> &'a str {
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker}: {page}"));
    let end = page[start..]
        .find("</table>")
        .map_or(page.len(), |e| start + e);
    &page[start..end]
}

/// The value of `name` on the element that has `marker`.
fn attribute<'a>(markup: &'a str, marker: &str, name: &str) -> &'a str {
    let at = markup
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker}: {markup}"));
    let element = &markup[markup[..at].rfind('<').unwrap_or(0)..];
    let element = &element[..element.find('>').unwrap_or(element.len())];
    let value = element
        .split(&format!("{name}=\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no {name} in {element}"));
    &value[..value.find('"').unwrap_or(value.len())]
}

/// Runs blocking cluster work off the runtime's threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap()
}

/// Statements the primary ran since its counters were reset, other than reading them.
async fn statements_run(primary: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select coalesce(sum(calls), 0)::bigint from pg_stat_statements
         where query not ilike '%pg_stat_statements%'",
    )
    .fetch_one(primary)
    .await
    .unwrap()
}

/// Loads the overview until the replica note says `state`, for up to 10 s.
async fn replica_note_reads(app: &Router, state: &str) -> String {
    let marker = format!("data-replica=\"{state}\"");
    for _ in 0..50 {
        let (_, page, _) = get(app, "/").await;
        if page.contains(&marker) {
            return page;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the pages never said the replica is {state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_the_pages_read_from_it_say_its_lag_and_actions_go_to_the_primary() {
    // A primary that counts every statement it runs, and its streaming replica.
    let (primary, replica) = blocking(|| {
        let primary = pgflow_testkit::Cluster::init()
            .unwrap()
            .start_with(&["shared_preload_libraries=pg_stat_statements".to_owned()])
            .unwrap();
        let replica = pgflow_testkit::Cluster::standby_of(&primary, &[]).unwrap();
        (primary, replica)
    })
    .await;
    pgflow::install_url(&primary.url()).await.unwrap();
    let primary_pool = PgPool::connect(&primary.url()).await.unwrap();
    let replica_pool = PgPool::connect(&replica.url()).await.unwrap();
    sqlx::query("create extension pg_stat_statements")
        .execute(&primary_pool)
        .await
        .unwrap();
    // A run of a deployed flow, and no worker: it waits in its queue.
    let client = Client::new(primary_pool.clone());
    client
        .deploy(&support::browsed_v1::deployment())
        .await
        .unwrap();
    let run = support::start(&client, Order::quick()).await;
    let app = pgflow_dashboard::router_with_replica(
        DashboardConfig::new(with_token()),
        primary_pool.clone(),
        replica_pool.clone(),
    );
    let page = replica_note_reads(&app, "caught-up").await;
    assert!(page.contains(r#"data-queue="browsed""#), "{page}");

    // Every page, and not one statement on the primary.
    sqlx::query("select pg_stat_statements_reset()")
        .execute(&primary_pool)
        .await
        .unwrap();
    for path in [
        "/".to_owned(),
        "/?trends=day".to_owned(),
        "/runs".to_owned(),
        format!("/runs/{run}"),
        "/flows/browsed_v1".to_owned(),
    ] {
        let (status, page, _) = get(&app, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        assert!(page.contains("read from a replica"), "{path}: {page}");
    }
    assert_eq!(
        statements_run(&primary_pool).await,
        0,
        "the pages ran statements on the primary"
    );

    // The replica stops replaying: a run started now is on the primary only, the pages do
    // not list it, and they say how far behind the replica is.
    sqlx::query("select pg_wal_replay_pause()")
        .execute(&replica_pool)
        .await
        .unwrap();
    let later = support::start(&client, Order::quick()).await;
    let page = replica_note_reads(&app, "behind").await;
    assert!(page.contains("s behind"), "{page}");
    let (_, runs, _) = get(&app, "/runs").await;
    assert!(runs.contains(&run.to_string()), "{runs}");
    assert!(
        !runs.contains(&later.to_string()),
        "a run the replica has not replayed is listed: the page read the primary"
    );

    // Cancel goes to the primary, whatever the replica has.
    let path = format!("/runs/{later}/cancel");
    let (status, form, set_cookie) = get(&app, &path).await;
    assert_eq!(status, StatusCode::OK, "{form}");
    let (csrf, cookie) = csrf_of(&form, &set_cookie.unwrap());
    let same_site = [
        ("cookie", cookie.as_str()),
        ("origin", "http://127.0.0.1:8080"),
    ];
    let form = format!("csrf={csrf}&token={TOKEN}&reason=replica");
    let (status, body) = post(&app, &path, &same_site, &form).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(status_of(&primary_pool, later).await, RunStatus::Cancelled);

    sqlx::query("select pg_wal_replay_resume()")
        .execute(&replica_pool)
        .await
        .unwrap();
    replica_note_reads(&app, "caught-up").await;
    drop((primary, replica));
}
