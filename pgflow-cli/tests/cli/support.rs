//! What the command's tests share: the two versions of the flow behind the alias `triage`, the
//! binary run against a database, and the cells of its output. `install`, `database_url` and
//! `claim` are `pgflow_testkit::db`'s, which the root package's integration tests use too.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

pub use pgflow_testkit::db::{claim, database_url, install};

/// Two versions of one flow behind the alias `triage`, with steps on two queues.
#[pgflow::flow(slug = "triage_v1", alias = "triage", version = 1)]
pub mod triage_v1 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(format!("v1:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v1"))
    }
}

/// The second version of `triage`.
#[pgflow::flow(slug = "triage_v2", alias = "triage", version = 2)]
pub mod triage_v2 {
    use super::*;

    #[step(queue = "classify_threads")]
    pub async fn classify(input: Value) -> Result<String, String> {
        Ok(format!("v2:{input}"))
    }

    #[step(depends_on = [classify], queue = "deliver_slack_alerts")]
    pub async fn alert(classify: String) -> Result<String, String> {
        Ok(format!("{classify}:alerted-by-v2"))
    }
}

pub fn pgflow(pool: &PgPool, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", &database_url(pool)])
        .output()
        .unwrap()
}

/// The entry of queue `queue` in `pgflow status --json`.
pub fn queue_in_status(pool: &PgPool, queue: &str) -> Value {
    let status: Value =
        serde_json::from_str(&stdout(&pgflow(pool, &["status", "--json"]))).unwrap();
    status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue_name"] == queue)
        .unwrap_or_else(|| panic!("no queue `{queue}` in {status}"))
        .clone()
}

/// The whitespace-separated cells of the first line of `text` whose first cell is `first`.
pub fn row_of<'a>(text: &'a str, first: &str) -> Vec<&'a str> {
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row starts with `{first}` in:\n{text}"))
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the binary with `url` as its database URL.
pub fn pgflow_at(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgflow"))
        .args(args)
        .args(["--database-url", url])
        .output()
        .unwrap()
}
