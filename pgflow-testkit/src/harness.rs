//! The `main` of a test binary with `harness = false`: one scenario, which may run copies of
//! the binary as worker processes. `cargo test <filter>` hands every binary the filter, so each
//! runs only when the filter names it.

use std::process::ExitCode;

/// The runtime such a binary runs its scenario or its worker process on: two worker threads,
/// as many as the machines CI runs on have cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Whether `cargo test <filter>` gave a filter that does not name the test `name` (said on
/// stdout when so).
pub fn filtered_out(name: &str) -> bool {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    match filter {
        Some(filter) if !name.contains(filter.as_str()) => {
            println!("{name}: filtered out by `{filter}`");
            true
        }
        _ => false,
    }
}

/// The scenario's outcome as the binary's exit code, said as `name: ok (summary)` on stdout or
/// `name: FAILED: error` on stderr.
pub fn outcome(name: &str, result: Result<String, String>) -> ExitCode {
    match result {
        Ok(summary) => {
            println!("{name}: ok ({summary})");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{name}: FAILED: {error}");
            ExitCode::FAILURE
        }
    }
}
