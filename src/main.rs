//! The `pgflow` command line: installs and (in later versions) operates pgflow databases.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// pgflow: Postgres-native durable workflows.
#[derive(Debug, Parser)]
#[command(name = "pgflow", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install or upgrade PGMQ and the pgflow schema (idempotent).
    Install {
        /// Postgres connection URL.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PGFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let cli = Cli::parse();
    match cli.command {
        Command::Install { database_url } => match pgflow::install_url(&database_url).await {
            Ok(report) => {
                let pgmq = match report.pgmq {
                    pgflow::PgmqSource::Extension => "the pgmq extension",
                    pgflow::PgmqSource::EmbeddedSql => "PGMQ's embedded SQL",
                };
                let applied = match report.applied_migrations.len() {
                    0 => "already up to date".to_owned(),
                    n => format!("applied {n} migration(s)"),
                };
                println!(
                    "pgflow installed: schema version {} ({applied}), queues by {pgmq}",
                    report.schema_version
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {}", one_line(&error));
                ExitCode::FAILURE
            }
        },
    }
}

/// The error and its causes on one line.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}
