//! Browsing runs page by page (the dashboard's runs page): every filter, and keyset pages that
//! neither repeat nor skip a run even when many runs share a start time; payload previews.

use std::collections::HashSet;

use chrono::{Duration, Utc};
use pgflow::FlowSpec;
use pgflow::engine::{self, RunStatus};
use pgflow_runtime::admin::browse::{self, RunListing};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::install;

#[pgflow::flow(slug = "paged_v1", alias = "paged")]
pub mod paged_v1 {
    #[step]
    pub async fn only(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(0)
    }
}

#[pgflow::flow(slug = "paged_v2", alias = "paged", version = 2)]
pub mod paged_v2 {
    #[step]
    pub async fn only(input: serde_json::Value) -> Result<u8, String> {
        let _ = input;
        Ok(0)
    }
}

/// Every run `listing` selects, page after page (`limit` per page).
async fn all_pages(pool: &PgPool, mut listing: RunListing) -> Vec<Uuid> {
    let mut ids = Vec::new();
    loop {
        let page = browse::list_runs(pool, &listing).await.unwrap();
        let newest_first = page
            .runs
            .windows(2)
            .all(|w| (w[0].started_at, w[0].run_id) > (w[1].started_at, w[1].run_id));
        assert!(newest_first, "a page is not newest first");
        ids.extend(page.runs.iter().map(|r| r.run_id));
        match page.next {
            Some(cursor) => listing.after = Some(cursor),
            None => return ids,
        }
    }
}

async fn start(pool: &PgPool, flow: &str, count: usize) -> Vec<Uuid> {
    let inputs: Vec<Value> = (0..count).map(|i| json!({ "i": i })).collect();
    // One call: every run of it has the same start time (the transaction's).
    engine::start_flows(pool, flow, &inputs)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

#[sqlx::test(migrations = false)]
async fn pages_of_runs_neither_repeat_nor_skip_and_every_filter_narrows(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, &paged_v1::Flow::definition())
        .await
        .unwrap();
    engine::compile_flow(&pool, &paged_v2::Flow::definition())
        .await
        .unwrap();
    let v1 = start(&pool, "paged_v1", 120).await;
    let v2 = start(&pool, "paged_v2", 30).await;
    let every: HashSet<Uuid> = v1.iter().chain(&v2).copied().collect();
    let cancelled: Vec<Uuid> = every.iter().copied().step_by(10).collect();
    engine::cancel_runs(&pool, &cancelled, None).await.unwrap();

    let listing = |limit| RunListing {
        limit,
        ..RunListing::default()
    };
    for limit in [7, 50, 500] {
        let ids = all_pages(&pool, listing(limit)).await;
        assert_eq!(ids.len(), 150, "pages of {limit} listed {} runs", ids.len());
        assert_eq!(ids.iter().copied().collect::<HashSet<_>>(), every);
    }

    let of = |flow: &str| RunListing {
        flow: Some(flow.into()),
        ..listing(40)
    };
    assert_eq!(
        all_pages(&pool, of("paged")).await.len(),
        150,
        "an alias spans its versions"
    );
    let only_v2: HashSet<Uuid> = all_pages(&pool, of("paged_v2")).await.into_iter().collect();
    assert_eq!(only_v2, v2.iter().copied().collect());

    let in_status = |status| RunListing {
        status: Some(status),
        ..listing(4)
    };
    let listed: HashSet<Uuid> = all_pages(&pool, in_status(RunStatus::Cancelled))
        .await
        .into_iter()
        .collect();
    assert_eq!(listed, cancelled.iter().copied().collect());
    assert_eq!(
        all_pages(&pool, in_status(RunStatus::Started)).await.len(),
        150 - cancelled.len()
    );
    assert!(
        all_pages(&pool, in_status(RunStatus::Failed))
            .await
            .is_empty()
    );
    let v2_cancelled = RunListing {
        flow: Some("paged_v2".into()),
        ..in_status(RunStatus::Cancelled)
    };
    let expected = cancelled.iter().filter(|id| v2.contains(id)).count();
    assert_eq!(all_pages(&pool, v2_cancelled).await.len(), expected);

    let future = RunListing {
        started_from: Some(Utc::now() + Duration::hours(1)),
        ..listing(50)
    };
    assert!(all_pages(&pool, future).await.is_empty());
    let window = RunListing {
        started_from: Some(Utc::now() - Duration::hours(1)),
        started_before: Some(Utc::now() + Duration::hours(1)),
        ..listing(50)
    };
    assert_eq!(all_pages(&pool, window).await.len(), 150);
    let before = RunListing {
        started_before: Some(Utc::now() - Duration::hours(1)),
        ..listing(50)
    };
    assert!(all_pages(&pool, before).await.is_empty());
}

#[sqlx::test(migrations = false)]
async fn payload_previews_are_cut_and_sized(pool: PgPool) {
    install(&pool).await;
    engine::compile_flow(&pool, &paged_v1::Flow::definition())
        .await
        .unwrap();
    let long = "x".repeat(5_000);
    let run = engine::start_flow(&pool, "paged_v1", &json!({ "note": long }))
        .await
        .unwrap();
    let payloads = browse::run_payloads(&pool, run.run_id, 100).await.unwrap();
    let input = payloads.input.unwrap();
    assert!(input.truncated);
    assert_eq!(input.text.chars().count(), 100);
    assert!(input.text.starts_with("{\"note\": \"xxx"), "{}", input.text);
    assert_eq!(
        input.bytes as usize,
        json!({ "note": long }).to_string().len() + 1
    );
    assert_eq!(payloads.output, None);
    assert!(payloads.steps.is_empty());
    let whole = browse::run_payloads(&pool, run.run_id, 10_000)
        .await
        .unwrap();
    assert!(!whole.input.unwrap().truncated);
    let nothing = browse::run_payloads(&pool, Uuid::nil(), 100).await.unwrap();
    assert_eq!(nothing, browse::RunPayloads::default());
}
