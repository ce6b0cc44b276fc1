//! The test kit (`pgflow::testing`) on flows that take days: a subscription renewal whose card
//! is declined twice (retries an hour, then two hours, later) and which sends its reminder a week
//! after the charge, and a daily report on a cron schedule, three days of it. Each runs in a
//! throwaway database under the test clock and takes under a second of wall time, which the
//! example prints beside the engine time that passed.
//!
//! ```sh
//! cargo run --example testing
//! ```
//!
//! Database: a throwaway one on the server at DATABASE_URL, or else on the local server
//! (`postgres://postgres@127.0.0.1:5432/postgres`); the role must be allowed to create
//! databases. It exits non-zero unless every check holds.

use std::time::{Duration, Instant};

use pgflow::testing::TestEnv;
use pgflow::{ProcessConfig, RunStatus, Schedule, sqlx};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A subscription renewal: charge the card (an hour's backoff, doubling), then remind the
/// customer a week later.
#[pgflow::flow(slug = "renewal_v1", input = String)]
pub mod renewal_v1 {
    /// Charges the customer's card.
    #[step(max_attempts = 5, base_delay = "1h")]
    pub async fn charge(input: String) -> Result<String, String> {
        Ok(format!("charged {input}"))
    }

    /// Reminds the customer, a week after the charge.
    #[step(depends_on = [charge], sleep = "7d")]
    pub async fn remind(charge: String) -> Result<String, String> {
        Ok(format!("reminded: {charge}"))
    }
}

/// A report made every morning at nine (UTC).
#[pgflow::flow(slug = "daily_report_v1", input = String)]
pub mod daily_report_v1 {
    /// Makes the day's report.
    #[step]
    pub async fn report(input: String) -> Result<String, String> {
        Ok(format!("report for {input}"))
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    renewal().await?;
    daily_reports().await?;
    println!("every check held");
    Ok(())
}

/// Two declined charges and a week's sleep, at once.
async fn renewal() -> Result<(), Error> {
    let wall = Instant::now();
    let env = TestEnv::new().await?;
    env.start_workers(renewal_v1::deployment()).await?;
    env.faults()
        .fail::<renewal_v1::Flow>("charge", "card declined", 2)?;

    let run = renewal_v1::start(env.client(), &"ada@example.com".to_owned()).await?;
    let finished = env.run_to_end(&run).await?;

    check(
        finished.status() == RunStatus::Completed,
        "the renewal completed",
    )?;
    check(
        finished.output()?.remind == "reminded: charged ada@example.com",
        "the reminder followed the charge",
    )?;
    let attempts = finished.step("charge").and_then(|step| step.max_attempt);
    check(attempts == Some(3), "two declined charges, then the third")?;
    let week_and_three_hours = Duration::from_secs(7 * 86_400 + 3 * 3_600);
    check(
        finished.time_skipped() + Duration::from_secs(60) >= week_and_three_hours,
        "a week and three hours of engine time passed",
    )?;
    env.close().await?;
    println!(
        "renewal: {} of engine time in {:.2} s of wall time",
        days_and_hours(finished.time_skipped()),
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Three mornings of a daily schedule.
async fn daily_reports() -> Result<(), Error> {
    let wall = Instant::now();
    let schedule = Schedule::new("daily_report", "daily_report_v1", "0 0 9 * * *").input(&"sales");
    let env = TestEnv::with_config(ProcessConfig::new().schedule(schedule)).await?;
    env.start_workers(daily_report_v1::deployment()).await?;
    let before = env.now().await?;
    env.advance(Duration::from_secs(3 * 86_400)).await?;
    let fired: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
        "select scheduled_for from pgflow.runs where flow_slug = 'daily_report_v1'
         order by scheduled_for",
    )
    .fetch_all(env.client().pool())
    .await?;
    check(fired.len() == 3, "one report a morning, three mornings")?;
    check(
        fired
            .iter()
            .all(|at| at.format("%H:%M:%S").to_string() == "09:00:00"),
        "each at nine",
    )?;
    let elapsed = env.now().await? - before;
    env.close().await?;
    println!(
        "daily reports: {} runs over {} of engine time in {:.2} s of wall time",
        fired.len(),
        days_and_hours(elapsed.to_std().unwrap_or_default()),
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}

fn check(holds: bool, what: &str) -> Result<(), Error> {
    if holds {
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}

/// `time` as days and hours, to the nearest hour.
fn days_and_hours(time: Duration) -> String {
    let hours = (time.as_secs() + 1_800) / 3_600;
    format!("{} d {} h", hours / 24, hours % 24)
}
