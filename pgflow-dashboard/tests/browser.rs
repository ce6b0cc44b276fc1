//! The dashboard in a real browser: Debian's `chromium`, driven by Playwright
//! (`playwright-core` from npm, in `tests/browser/`). This test serves the dashboard over real
//! Postgres with a real worker, starts the runs to look at, and runs `tests/browser/dashboard.mjs`,
//! which checks that the overview lists the queue and its worker, that a running run's page
//! turns completed without a reload, that a failed step shows its error, that the filters
//! narrow the runs, that cancel refuses a wrong token and works with the right one, and that
//! the trend charts show a burst of failures this test causes.
//! Screenshots land in `target/dashboard-screenshots/`.
//!
//! Needs `chromium` (Debian: `apt install chromium`), Node.js and npm; `npm ci` runs here when
//! `tests/browser/node_modules` is missing.

#![allow(
    unreachable_pub,
    reason = "a test crate exports nothing; its flows and helpers are `pub`, as in a user's crate"
)]
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use pgflow::Client;
use pgflow::engine::RunStatus;
use pgflow_dashboard::{Access, ActionToken, DashboardConfig};
use sqlx::PgPool;

use support::{DECLINED, Order};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

fn chromium() -> PathBuf {
    let path =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        path.exists(),
        "the browser tests need Chromium at {} (Debian: `apt install chromium`; `.ci/run` installs \
         it; or set CHROMIUM to another Chromium binary)",
        path.display()
    );
    path
}

/// Installs playwright-core from the lock file when it is not there yet.
fn playwright_installed() {
    let dir = browser_dir();
    if dir.join("node_modules/playwright-core").exists() {
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .status()
        .expect("the browser tests need npm (Node.js) to install playwright-core");
    assert!(status.success(), "`npm ci` in {} failed", dir.display());
}

/// Failed runs started at once for the trend charts.
const BURST: usize = 6;

/// Takes a trend sample now, once a second has passed since the last one.
async fn sample_trends_now(pool: &PgPool) {
    let db = pgflow::Db::from(pool);
    for _ in 0..30 {
        let every = std::time::Duration::from_secs(1);
        let keep = std::time::Duration::from_secs(86_400);
        if pgflow::engine::sample_trends(&db, every, keep)
            .await
            .unwrap()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("no trend sample could be taken within 6 s");
}

#[sqlx::test(migrations = false)]
async fn the_dashboard_works_in_a_real_browser(pool: PgPool) {
    let chromium = chromium();
    playwright_installed();
    let _worker = support::installed_with_worker(&pool).await;
    let client = Client::new(pool.clone());

    let failed = support::start(&client, Order::failing()).await;
    assert_eq!(support::ended(&client, failed).await, RunStatus::Failed);
    // A burst of failures, and the trend sample that counts them (maintenance would take it
    // within the minute; the test takes it at once).
    let mut burst = Vec::new();
    for _ in 0..BURST {
        burst.push(support::start(&client, Order::failing()).await);
    }
    for run in burst {
        assert_eq!(support::ended(&client, run).await, RunStatus::Failed);
    }
    sample_trends_now(&pool).await;
    let to_cancel = support::start(&client, Order::waiting(120_000)).await;
    // Long enough for the browser to open its page while it runs.
    let running = support::start(&client, Order::waiting(6_000)).await;
    let (_approver, to_approve) = support::waiting_for_approval(&pool).await;

    let token = ActionToken::generate();
    let mut config = DashboardConfig::new(Access::Token(token.clone()));
    config.listen = "127.0.0.1:0".parse().unwrap();
    let dashboard = pgflow_dashboard::serve(config, pool.clone()).await.unwrap();

    let screenshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dashboard-screenshots");
    // Only this run's pictures (a failed check leaves one named after it).
    let _ = std::fs::remove_dir_all(&screenshots);
    let mut node = Command::new("node");
    node.arg("dashboard.mjs")
        .current_dir(browser_dir())
        .env("DASHBOARD_URL", dashboard.url())
        .env("QUEUE", "browsed")
        .env("RUN_RUNNING", running.to_string())
        .env("RUN_FAILED", failed.to_string())
        .env("RUN_TO_CANCEL", to_cancel.to_string())
        .env("RUN_TO_SIGNAL", to_approve.to_string())
        .env("FAILED_ERROR", DECLINED)
        .env("FLOW", "browsed_v1")
        .env("FAILED_RUNS", (BURST + 1).to_string())
        .env("ACTION_TOKEN", token.expose())
        .env("SCREENSHOT_DIR", &screenshots)
        .env("CHROMIUM", &chromium);
    // The worker and the dashboard keep running on this test's runtime meanwhile.
    let script = tokio::task::spawn_blocking(move || node.output())
        .await
        .unwrap()
        .expect("the browser tests need Node.js (`node`)");
    let stdout = String::from_utf8_lossy(&script.stdout);
    let stderr = String::from_utf8_lossy(&script.stderr);
    println!("{stdout}");
    assert!(
        script.status.success(),
        "browser checks failed (screenshots in {}):\n{stdout}\n{stderr}",
        screenshots.display()
    );
    // What the browser did, as the database has it.
    assert_eq!(support::ended(&client, running).await, RunStatus::Completed);
    let cancelled = pgflow::engine::run(&pool, to_cancel).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(
        cancelled.cancel_reason.as_deref(),
        Some("cancelled from the browser test")
    );
    assert_eq!(
        support::ended(&client, to_approve).await,
        RunStatus::Completed
    );
    let approved = pgflow::engine::run(&pool, to_approve).await.unwrap();
    assert_eq!(
        approved.output,
        Some(serde_json::json!({ "approve": "the browser" }))
    );
}
