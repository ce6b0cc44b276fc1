//! Typed starts through an alias: versions that declare the same `input` and `output` types
//! are started through the alias with typed outputs, whichever of them is active; a version
//! with other types is refused before anything starts.

use std::time::Duration;

use pgflow::{Client, EngineError, Worker};
use pgflow::{Start, StartOptions};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::support::{install, worker_config};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuoteInput {
    pub amount: u32,
    pub vip: bool,
}

/// What every version of `quote` produces.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Quote {
    pub price: u32,
    pub perk: Option<String>,
}

#[pgflow::flow(slug = "quote_v1", alias = "quote", version = 1,
               input = QuoteInput, output = super::Quote)]
pub mod quote_v1 {
    use super::QuoteInput;

    #[step(queue = "typed_alias_quote")]
    pub async fn price(input: QuoteInput) -> Result<u32, String> {
        Ok(input.amount)
    }

    #[step(queue = "typed_alias_quote", when = json!({"vip": true}))]
    pub async fn perk(input: QuoteInput) -> Result<String, String> {
        Ok(format!("v1 perk for {}", input.amount))
    }
}

/// Version 2 has another DAG but the same input and output types.
#[pgflow::flow(slug = "quote_v2", alias = "quote", version = 2,
               input = QuoteInput, output = super::Quote)]
pub mod quote_v2 {
    use super::QuoteInput;

    #[step(queue = "typed_alias_quote")]
    pub async fn base(input: QuoteInput) -> Result<u32, String> {
        Ok(input.amount)
    }

    #[step(queue = "typed_alias_quote", depends_on = [base])]
    pub async fn price(base: u32) -> Result<u32, String> {
        Ok(base * 2)
    }

    #[step(queue = "typed_alias_quote", when = json!({"vip": true}))]
    pub async fn perk(input: QuoteInput) -> Result<String, String> {
        Ok(format!("v2 perk for {}", input.amount))
    }
}

/// Version 3 keeps its generated output type: typed starts through the alias refuse it.
#[pgflow::flow(slug = "quote_v3", alias = "quote", version = 3, input = QuoteInput)]
pub mod quote_v3 {
    use super::QuoteInput;

    #[step(queue = "typed_alias_quote")]
    pub async fn price(input: QuoteInput) -> Result<u32, String> {
        Ok(input.amount * 3)
    }
}

async fn flow_of(pool: &PgPool, run_id: uuid::Uuid) -> String {
    sqlx::query_scalar("select flow_slug from pgflow.runs where run_id = $1")
        .bind(run_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = false)]
async fn versions_sharing_their_types_start_typed_through_the_alias_and_others_are_refused(
    pool: PgPool,
) {
    install(&pool).await;
    let client = Client::new(pool.clone());
    client.deploy(&quote_v1::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "quote_v1")
        .await
        .unwrap();

    // A caller built against v2 starts the alias while v1 is active.
    let input = QuoteInput {
        amount: 10,
        vip: true,
    };
    let on_v1 = quote_v2::start_alias(&client, &input).await.unwrap();
    assert_eq!(flow_of(&pool, on_v1.run_id()).await, "quote_v1");

    // A worker carrying both versions activates v2.
    let worker = Worker::start_with(
        (quote_v1::deployment(), quote_v2::deployment()),
        worker_config(quote_v2::Queue::TypedAliasQuote, &pool),
    )
    .await
    .unwrap();
    let on_v2 = client
        .start(
            Start::alias_of::<quote_v1::Flow>(),
            &QuoteInput {
                amount: 10,
                vip: false,
            },
            StartOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(flow_of(&pool, on_v2.run_id()).await, "quote_v2");

    let quote: Quote = on_v1.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        quote,
        Quote {
            price: 10,
            perk: Some("v1 perk for 10".into())
        }
    );
    let quote: Quote = on_v2.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        quote,
        Quote {
            price: 20,
            perk: None
        }
    );
    worker.shutdown();
    worker.wait().await.unwrap();

    // Version 3 produces its own output type: a typed start is refused and starts nothing.
    client.deploy(&quote_v3::deployment()).await.unwrap();
    pgflow::engine::activate_flow(&pool, "quote_v3")
        .await
        .unwrap();
    let runs_before: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    let error = quote_v2::start_alias(&client, &input).await.unwrap_err();
    let EngineError::AliasTypeMismatch(mismatch) = &error else {
        panic!("expected AliasTypeMismatch, got {error}");
    };
    assert_eq!(
        (mismatch.alias.as_str(), mismatch.flow_slug.as_str()),
        ("quote", "quote_v3")
    );
    assert!(
        mismatch
            .output_type
            .as_deref()
            .is_some_and(|t| t.ends_with("quote_v3::Output")),
        "{mismatch:?}"
    );
    assert!(
        mismatch
            .expected_output_type
            .ends_with("typed_alias::Quote"),
        "{mismatch:?}"
    );
    assert!(error.to_string().contains("output = U"), "{error}");
    let runs_after: i64 = sqlx::query_scalar("select count(*) from pgflow.runs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs_after, runs_before, "nothing was started");

    // The concrete typed start still works, and v3's own typed alias start too.
    let on_v3 = quote_v3::start_alias(&client, &input).await.unwrap();
    assert_eq!(flow_of(&pool, on_v3.run_id()).await, "quote_v3");
}
