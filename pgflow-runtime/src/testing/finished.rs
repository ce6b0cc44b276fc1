//! A run that [`TestEnv::run_to_end`](crate::testing::TestEnv::run_to_end) drove to its end.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::engine::{self, Run, RunStatus, StepState};
use crate::testing::{NoOutput, TestError};

/// An ended run: how it ended, its typed output when it completed, each step's state, and how
/// much engine time the kit skipped on the way.
#[derive(Debug)]
pub struct Finished<O> {
    run: Run,
    output: Result<O, NoOutput>,
    steps: Vec<StepState>,
    skipped: Duration,
}

impl<O: DeserializeOwned> Finished<O> {
    /// Reads the ended run's steps and decodes its output.
    pub(crate) async fn read(
        client: &Client,
        run: Run,
        skipped: Duration,
    ) -> Result<Self, TestError> {
        let steps = engine::run_step_states(client.db(), run.run_id).await?;
        let output = match run.status {
            RunStatus::Completed => serde_json::from_value(run.output.clone().unwrap_or_default())
                .map_err(|error| NoOutput::Decode {
                    run_id: run.run_id,
                    reason: error.to_string(),
                }),
            status => Err(NoOutput::NotCompleted {
                run_id: run.run_id,
                status: status.as_str().to_owned(),
                failure: if status == RunStatus::Failed {
                    engine::run_error(client.db(), run.run_id).await?
                } else {
                    None
                },
            }),
        };
        Ok(Self {
            run,
            output,
            steps,
            skipped,
        })
    }
}

impl<O> Finished<O> {
    /// How it ended: completed, failed or cancelled.
    pub fn status(&self) -> RunStatus {
        self.run.status
    }

    /// The run's row as it ended (times, input, output as JSON, attempts).
    pub fn run(&self) -> &Run {
        &self.run
    }

    /// Its typed output; for a run that failed or was cancelled, an error naming how it ended
    /// (and the failed step with its error).
    pub fn output(&self) -> Result<&O, NoOutput> {
        self.output.as_ref().map_err(Clone::clone)
    }

    /// Its typed output, taken.
    pub fn into_output(self) -> Result<O, NoOutput> {
        self.output
    }

    /// Each step's state, in the flow's step order.
    pub fn steps(&self) -> &[StepState] {
        &self.steps
    }

    /// The state of the step `step_slug`.
    pub fn step(&self, step_slug: &str) -> Option<&StepState> {
        self.steps.iter().find(|step| step.step_slug == step_slug)
    }

    /// How much engine time the kit skipped while driving the run (not counting the test's
    /// own [`advance`](crate::testing::TestEnv::advance) calls).
    pub fn time_skipped(&self) -> Duration {
        self.skipped
    }
}
