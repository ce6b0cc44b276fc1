//! The `pgflow` command line: installs, inspects and operates pgflow databases.
//!
//! `args` declares the commands (clap), `commands` runs them through the `pgflow` library's
//! typed calls (this crate writes no SQL), `graph` renders a flow's DAG and `failure` carries a
//! failed command's message and exit code.

mod args;
mod commands;
mod failure;
mod graph;

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
    let args = match args::Cli::try_parse() {
        Ok(args) => args,
        Err(error) if !error.use_stderr() => error.exit(), // --help, --version
        Err(error) => {
            // One line: clap's first line, without the usage block.
            let rendered = error.render().to_string();
            let first = rendered
                .lines()
                .next()
                .unwrap_or("error: invalid arguments");
            eprintln!("{first} (see `pgflow --help`)");
            return ExitCode::from(2);
        }
    };
    match commands::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {}", failure.message);
            ExitCode::from(failure.exit_code)
        }
    }
}
