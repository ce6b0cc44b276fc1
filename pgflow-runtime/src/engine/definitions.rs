//! Compiling a flow definition into the database, or verifying it against the stored one.

use sqlx::PgExecutor;

use crate::definition::FlowDefinition;
use crate::error::EngineError;

/// What compiling a definition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompileStatus {
    /// The flow did not exist and was created.
    Compiled,
    /// The flow existed with the same shape (its options were brought up to date).
    Verified,
}

/// Compiles `flow` (creating it and its queues) or verifies it against the stored definition.
pub async fn compile_flow(
    executor: impl PgExecutor<'_>,
    flow: &FlowDefinition,
) -> Result<CompileStatus, EngineError> {
    let status: String =
        sqlx::query_scalar("select pgflow.define_flow($1, $2, $3, $4, $5, $6, $7, $8)")
            .bind(flow.slug.as_str())
            .bind(flow.alias.as_str())
            .bind(i32::try_from(flow.version).unwrap_or(i32::MAX))
            .bind(flow.options_json())
            .bind(flow.steps_json())
            .bind(flow.types.as_ref().map(|t| t.input.as_str()))
            .bind(flow.types.as_ref().map(|t| t.output.as_str()))
            .bind(&flow.input_schema)
            .fetch_one(executor)
            .await?;
    Ok(if status == "compiled" {
        CompileStatus::Compiled
    } else {
        CompileStatus::Verified
    })
}
