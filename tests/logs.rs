//! What the engine logs where people and alerting read it: an install's one line saying what
//! it did (and none of the notices Postgres sends for every `if exists` it skipped), and the
//! ERROR line of a run that failed for good, which carries the error.
//!
//! Its own binary: the tests listen to tracing events, through a scoped subscriber (the install)
//! or the process's global one (a worker's tasks run on tasks of their own), which other tests
//! of a shared binary, hitting the same call sites at the same moment, would disturb.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sqlx::PgPool;

/// One event as a subscriber was told it.
#[derive(Clone, Debug)]
struct Event {
    target: String,
    level: tracing::Level,
    message: String,
    fields: BTreeMap<String, String>,
}

/// What a tracing subscriber was told.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<Event>>>);

impl Heard {
    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Heard {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields<'a>(&'a mut BTreeMap<String, String>);
        impl tracing::field::Visit for Fields<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.insert(field.name().to_owned(), format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0.insert(field.name().to_owned(), value.to_owned());
            }
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Event {
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            message: fields.remove("message").unwrap_or_default(),
            fields,
        });
    }
}

/// The process's global subscriber, installed once: it hears every thread and task.
fn global() -> &'static Heard {
    static HEARD: OnceLock<Heard> = OnceLock::new();
    HEARD.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        let heard = Heard::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(heard.clone()))
            .unwrap();
        heard
    })
}

#[sqlx::test(migrations = false)]
async fn an_install_says_what_it_did_in_one_line_without_postgres_notices(pool: PgPool) {
    use tracing::instrument::WithSubscriber;
    use tracing_subscriber::layer::SubscriberExt;

    let one = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let heard = Heard::default();
    let subscriber = tracing_subscriber::registry().with(heard.clone());
    pgflow::install(&one)
        .with_subscriber(subscriber)
        .await
        .unwrap();

    let heard = heard.events();
    let notices: Vec<_> = heard
        .iter()
        .filter(|event| event.target.contains("notice"))
        .collect();
    assert!(
        notices.is_empty(),
        "Postgres notices were logged: {notices:?}"
    );
    let installed: Vec<_> = heard
        .iter()
        .filter(|event| event.message == "pgflow installed")
        .collect();
    assert_eq!(installed.len(), 1, "{heard:?}");

    one.close().await;
}

#[pgflow::flow(slug = "doomed_v1", alias = "doomed", input = String, max_attempts = 2, base_delay = 0)]
mod doomed_v1 {
    #[step(queue = "logs_doomed")]
    async fn charge(input: String) -> Result<u32, String> {
        Err(format!(
            "the card was declined ({} characters of reference)",
            input.len()
        ))
    }
}

#[sqlx::test(migrations = false)]
async fn the_error_line_of_a_run_that_failed_for_good_carries_the_error(pool: PgPool) {
    let heard = global();
    pgflow_testkit::db::install(&pool).await;
    let client = pgflow::Client::new(pool.clone());
    let worker = pgflow::Worker::start_with(
        doomed_v1::deployment(),
        pgflow::WorkerConfig::new(doomed_v1::Queue::LogsDoomed)
            .pool(pool.clone())
            .poll_interval(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let run = doomed_v1::start(&client, &"ref-1".to_owned())
        .await
        .unwrap();
    assert!(run.wait(&client, Duration::from_secs(20)).await.is_err());
    worker.shutdown();
    worker.wait().await.unwrap();

    let run_id = run.run_id().to_string();
    let errors: Vec<Event> = heard
        .events()
        .into_iter()
        .filter(|e| e.level == tracing::Level::ERROR)
        .filter(|e| e.fields.get("run_id") == Some(&run_id))
        .collect();
    assert_eq!(errors.len(), 1, "one ERROR line for the run: {errors:?}");
    let line = &errors[0];
    assert!(line.message.contains("its run failed"), "{line:?}");
    assert_eq!(
        line.fields.get("error").map(String::as_str),
        Some("the card was declined (5 characters of reference)"),
        "{line:?}"
    );
    assert_eq!(
        line.fields.get("flow").map(String::as_str),
        Some("doomed_v1")
    );
    assert_eq!(line.fields.get("step").map(String::as_str), Some("charge"));
}
