//! What an install logs: one line saying what it did, and none of the notices Postgres sends for
//! every `if exists` and `if not exists` it skipped.
//!
//! Its own binary: the test listens to tracing events through a scoped subscriber, which other
//! tests of a shared binary, hitting the same call sites at the same moment, can keep from
//! hearing them.

#![allow(clippy::unwrap_used)]

use sqlx::PgPool;

/// What a tracing subscriber was told: each event's target and message.
#[derive(Clone, Default)]
struct Heard(std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Heard {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    *self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = String::new();
        event.record(&mut Message(&mut message));
        self.0
            .lock()
            .unwrap()
            .push((event.metadata().target().to_owned(), message));
    }
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

    let heard = heard.0.lock().unwrap().clone();
    let notices: Vec<_> = heard
        .iter()
        .filter(|(target, _)| target.contains("notice"))
        .collect();
    assert!(
        notices.is_empty(),
        "Postgres notices were logged: {notices:?}"
    );
    let installed: Vec<_> = heard
        .iter()
        .filter(|(_, message)| message == "pgflow installed")
        .collect();
    assert_eq!(installed.len(), 1, "{heard:?}");

    one.close().await;
}
