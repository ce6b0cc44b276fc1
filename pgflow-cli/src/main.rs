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

/// Whether `--json` is among the arguments (read before clap, for its own errors).
fn wants_json() -> bool {
    std::env::args_os().skip(1).any(|arg| arg == "--json")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = match args::Cli::try_parse() {
        Ok(args) => args,
        // With --json anywhere, a wrong command line is a JSON object too (clap's first line,
        // without its `error: ` prefix); help and --version print as clap prints them.
        Err(error) if error.use_stderr() && wants_json() => {
            let text = error.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            let failure = failure::Failure::usage(first.trim_start_matches("error: "));
            eprintln!("{}", failure.rendered(true));
            return ExitCode::from(failure.exit_code);
        }
        // clap's whole message (what is wrong, the usage, a "similar subcommand" tip), exit 2.
        Err(error) => error.exit(),
    };
    let json = args.json;
    match commands::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.rendered(json));
            ExitCode::from(failure.exit_code)
        }
    }
}
