//! Sleeps that compile: for a time after the dependencies, and until a time read from the flow
//! input or a dependency's output (a chrono `DateTime` of any zone, or an `Option` of one).

use chrono::{DateTime, FixedOffset, Utc};

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Trial {
    pub user: String,
    pub ends_at: DateTime<Utc>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub remind_at: Option<DateTime<FixedOffset>>,
}

#[pgflow::flow(slug = "trial", input = Trial)]
pub mod trial {
    use super::*;

    #[step(sleep_until = input.ends_at)]
    pub async fn expire(input: Trial) -> Result<Plan, String> {
        let _ = input.user;
        Ok(Plan { remind_at: None })
    }

    #[step(depends_on = [expire], sleep = "3d")]
    pub async fn nudge(expire: Plan) -> Result<bool, String> {
        Ok(expire.remind_at.is_some())
    }

    #[step(depends_on = [expire], sleep_until = expire.remind_at)]
    pub async fn remind(expire: Plan) -> Result<bool, String> {
        Ok(expire.remind_at.is_some())
    }
}

fn main() {
    let deployment = trial::deployment();
    let definition = deployment.definition();
    assert!(definition.steps.iter().all(|step| step.sleep.is_some()));
}
