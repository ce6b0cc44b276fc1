//! Trace propagation: a run started inside a traced span is one trace. A 3-step run over two
//! queues, served by two workers, must produce three task spans that share the starter's trace
//! id and have the starter's span as their parent. Spans go to an in-memory OpenTelemetry
//! exporter through tracing-opentelemetry, on a private cluster.
//!
//! Its own binary (`harness = false`): it installs the process's tracing subscriber.

use std::process::ExitCode;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use pgflow::{Client, Worker, WorkerConfig};
use sqlx::postgres::PgPoolOptions;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// a (queue `traced_a`) → b (queue `traced_b`) → c (queue `traced_a`).
#[pgflow::flow(slug = "traced_v1", input = u32)]
pub mod traced_v1 {
    #[step(queue = "traced_a")]
    /// Adds one.
    pub async fn a(input: u32) -> Result<u32, String> {
        Ok(input + 1)
    }

    #[step(depends_on = [a], queue = "traced_b")]
    /// Doubles.
    pub async fn b(a: u32) -> Result<u32, String> {
        Ok(a * 2)
    }

    #[step(depends_on = [b], queue = "traced_a")]
    /// Adds three.
    pub async fn c(b: u32) -> Result<u32, String> {
        Ok(b + 3)
    }
}

fn main() -> ExitCode {
    if pgflow_testkit::harness::filtered_out("trace_propagation") {
        return ExitCode::SUCCESS;
    }
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("pgflow-tests")));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let runtime = pgflow_testkit::harness::runtime();
    match runtime.block_on(scenario(&exporter, &provider)) {
        Ok(summary) => {
            println!("trace_propagation: ok ({summary})");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("trace_propagation: FAILED: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn scenario(
    exporter: &InMemorySpanExporter,
    provider: &SdkTracerProvider,
) -> Result<String, String> {
    let cluster = pgflow_testkit::Cluster::start().map_err(|e| e.to_string())?;
    let url = cluster.url();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    pgflow::install(&pool).await.map_err(|e| e.to_string())?;
    let client = Client::new(pool.clone());
    let config = |queue| {
        WorkerConfig::new(queue)
            .connection(url.as_str())
            .poll_interval(Duration::from_millis(100))
            .function_name("traced")
    };
    let on_a = Worker::start_with(traced_v1::deployment(), config(traced_v1::Queue::TracedA))
        .await
        .map_err(|e| e.to_string())?;
    let on_b = Worker::start_with(traced_v1::deployment(), config(traced_v1::Queue::TracedB))
        .await
        .map_err(|e| e.to_string())?;

    let starter = tracing::info_span!("starter");
    let run = traced_v1::start(&client, &1)
        .instrument(starter.clone())
        .await
        .map_err(|e| e.to_string())?;
    drop(starter);
    let output = run
        .wait(&client, Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    if output.c != 7 {
        return Err(format!("wrong output {}", output.c));
    }
    on_a.shutdown();
    on_b.shutdown();
    on_a.wait().await.map_err(|e| e.to_string())?;
    on_b.wait().await.map_err(|e| e.to_string())?;
    provider.force_flush().map_err(|e| e.to_string())?;

    let spans = exporter.get_finished_spans().map_err(|e| e.to_string())?;
    let starter = spans
        .iter()
        .find(|s| s.name == "starter")
        .ok_or("no starter span was exported")?;
    let trace_id = starter.span_context.trace_id();
    let tasks: Vec<_> = spans.iter().filter(|s| s.name == "task").collect();
    if tasks.len() != 3 {
        return Err(format!("{} task spans, not 3", tasks.len()));
    }
    for task in &tasks {
        if task.span_context.trace_id() != trace_id {
            return Err(format!(
                "a task span is in trace {}, not the starter's {trace_id}",
                task.span_context.trace_id()
            ));
        }
        if task.parent_span_id != starter.span_context.span_id() {
            return Err("a task span's parent is not the starter's span".to_owned());
        }
    }
    Ok(format!("3 task spans on 2 queues in trace {trace_id}"))
}
