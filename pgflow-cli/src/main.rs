//! The `pgflow` command line: installs, inspects and operates pgflow databases.
//!
//! `args` declares the commands (clap), `commands` runs them through the `pgflow` library's
//! typed calls (this crate writes no SQL), `output` prints tables (ages and sizes through
//! `pgflow_runtime::admin::human`), `graph` renders a flow's DAG and `failure` carries a failed command's message and exit code.

mod args;
mod commands;
mod failure;
mod graph;
mod output;
mod payload;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PGFLOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // clap's whole message (what is wrong, the usage, a "similar subcommand" tip), exit code 2.
    let args = args::Cli::parse();
    match commands::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.exit_code)
        }
    }
}
