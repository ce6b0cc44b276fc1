//! Application state: a flow declares the state its handlers take, its deployment carries the
//! value, every handler of the flow sees that one value; `Context::pool` runs SQL in the
//! flow's database.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pgflow::{Client, Worker};
use sqlx::PgPool;

use crate::support::{install, worker_config};

/// What the greeting flow's handlers share.
pub struct Greeter {
    pub greeting: String,
    pub calls: Arc<AtomicUsize>,
}

#[pgflow::flow(slug = "greet_state", input = String, state = Greeter)]
pub mod greet_state {
    use std::sync::atomic::Ordering;

    use pgflow::{Context, State};

    use super::Greeter;

    #[step(queue = "app_state_greet")]
    pub async fn greet(name: String, state: State<Greeter>) -> Result<String, String> {
        state.calls.fetch_add(1, Ordering::SeqCst);
        Ok(format!("{}, {name}", state.greeting))
    }

    #[step(queue = "app_state_greet", depends_on = [greet])]
    pub async fn record(greet: String, ctx: Context, state: State<Greeter>) -> Result<i64, String> {
        state.calls.fetch_add(1, Ordering::SeqCst);
        // The worker's own pool, on the flow's database: the handler's effect lands next to
        // the run.
        sqlx::query_scalar("insert into greetings (run_id, text) values ($1, $2) returning id")
            .bind(ctx.run_id())
            .bind(&greet)
            .fetch_one(ctx.pool())
            .await
            .map_err(|e| e.to_string())
    }
}

/// A second flow with a state type of its own, mapping over its input.
pub struct Scale {
    pub factor: i64,
}

#[pgflow::flow(slug = "scale_state", input = Vec<i64>, state = Scale)]
pub mod scale_state {
    use pgflow::State;

    use super::Scale;

    #[step(map)]
    pub async fn times(n: i64, state: State<Scale>) -> Result<i64, String> {
        Ok(n * state.factor)
    }
}

#[sqlx::test(migrations = false)]
async fn handlers_share_their_flows_state_and_reach_the_flows_database(pool: PgPool) {
    install(&pool).await;
    sqlx::query("create table greetings (id bigserial primary key, run_id uuid not null, text text not null)")
        .execute(&pool)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let state = Greeter {
        greeting: "Hello".to_owned(),
        calls: Arc::clone(&calls),
    };
    let worker = Worker::start_with(
        greet_state::deployment(state),
        worker_config(greet_state::Queue::AppStateGreet, &pool),
    )
    .await
    .unwrap();
    let client = Client::new(pool.clone());

    let run = greet_state::start(&client, &"Ada".to_owned())
        .await
        .unwrap();
    let output = run.wait(&client, Duration::from_secs(10)).await.unwrap();

    let (run_id, text): (uuid::Uuid, String) = sqlx::query_as("select run_id, text from greetings")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(text, "Hello, Ada", "the handler read the state's greeting");
    assert_eq!(
        run_id,
        run.run_id(),
        "the context's pool wrote into the flow's database"
    );
    let id: i64 = sqlx::query_scalar("select id from greetings")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(output.record, id);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "both handlers saw the one value the deployment carries"
    );
    worker.shutdown();
    worker.wait().await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn workers_in_one_process_carry_different_state_types_in_both_start_forms(pool: PgPool) {
    install(&pool).await;
    sqlx::query("create table greetings (id bigserial primary key, run_id uuid not null, text text not null)")
        .execute(&pool)
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let greeter = Worker::start_with(
        greet_state::deployment(Greeter {
            greeting: "Hi".to_owned(),
            calls: Arc::clone(&calls),
        }),
        worker_config(greet_state::Queue::AppStateGreet, &pool),
    )
    .await
    .unwrap();
    // The one-flow form, on the flow's default queue.
    let scaler = Worker::start_on(scale_state::deployment(Scale { factor: 10 }), pool.clone())
        .await
        .unwrap();
    let client = Client::new(pool.clone());

    let scaled = scale_state::start(&client, &vec![1, 2, 3]).await.unwrap();
    let greeted = greet_state::start(&client, &"Grace".to_owned())
        .await
        .unwrap();

    let scaled = scaled.wait(&client, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        scaled.times,
        [10, 20, 30],
        "each map task saw its flow's state"
    );
    greeted
        .wait(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let text: String = sqlx::query_scalar("select text from greetings")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(text, "Hi, Grace");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    greeter.shutdown();
    greeter.wait().await.unwrap();
    scaler.shutdown();
    scaler.wait().await.unwrap();
}
