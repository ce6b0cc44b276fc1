//! Errors of calls into the SQL core.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

/// A `(flow_slug, step_slug)` pair a worker met in a claim but does not carry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct UnsupportedPair {
    /// The concrete flow recorded on the tasks.
    pub flow_slug: String,
    /// The step recorded on the tasks.
    pub step_slug: String,
    /// The messages of the batch that carry this pair.
    pub message_ids: Vec<i64>,
}

/// The types a typed alias start expected, and those the alias's active version records.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, thiserror::Error)]
#[error(
    "alias `{alias}` is active at `{flow_slug}`, which takes `{}` and produces `{}`; this caller \
     expects `{expected_input_type}` and `{expected_output_type}`: give every version of the \
     alias the same `input` and `output` types (`#[flow(input = T, output = U)]`), or start \
     the concrete flow",
    input_type.as_deref().unwrap_or("(unrecorded)"),
    output_type.as_deref().unwrap_or("(unrecorded)")
)]
#[non_exhaustive]
pub struct AliasTypeMismatch {
    /// The alias started.
    pub alias: String,
    /// Its active version.
    pub flow_slug: String,
    /// The input type that version records.
    pub input_type: Option<String>,
    /// The output type that version records.
    pub output_type: Option<String>,
    /// The caller's input type.
    pub expected_input_type: String,
    /// The caller's output type.
    pub expected_output_type: String,
}

/// Where and how a start's input does not fit its flow's input schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct InputMisfit {
    /// The concrete flow.
    pub flow_slug: String,
    /// Which input of the call (1 for the first).
    pub input: usize,
    /// Where in the input, as a Rust path (`thread.subject`, `items[2]`); empty for the input
    /// as a whole.
    pub path: String,
    /// What the schema expected there and what was found (never the value itself).
    pub problem: String,
    /// The SQL core's description, naming the flow, its input type and the field.
    pub message: String,
}

/// Why a signal was refused (see [`SignalRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SignalRefusal {
    /// No step of the run's flow waits for a signal of this name.
    UnknownSignal,
    /// The run received this signal before, with another payload.
    AlreadySent,
    /// The run is completed, failed or cancelled.
    RunEnded,
    /// The step stopped waiting without it (its wait timed out, or it was skipped).
    TooLate,
    /// The payload does not fit the JSON Schema the step records for its signal.
    PayloadMisfit,
}

/// A signal the SQL core refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct SignalRefused {
    /// The run signalled.
    pub run_id: Uuid,
    /// The signal's name.
    pub signal_name: String,
    /// Why it was refused.
    pub reason: SignalRefusal,
    /// The SQL core's description, naming the run, the signal and what to do.
    pub message: String,
}

/// Why a call into the SQL core failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The definition breaks a rule (slug, queue, dependency order, map arity, option range).
    #[error("{message}")]
    InvalidDefinition {
        /// The SQL core's description of the problem, naming the flow and step.
        message: String,
    },

    /// The flow slug is already compiled with a different shape.
    #[error(
        "flow `{flow_slug}` is already defined with a different shape: {}; a changed flow needs \
         a new concrete slug (for example a new version under the same alias)",
        differences.join("; ")
    )]
    ShapeMismatch {
        /// The concrete flow.
        flow_slug: String,
        /// Each difference between the stored flow and the definition.
        differences: Vec<String>,
    },

    /// A claim met tasks whose `(flow_slug, step_slug)` the worker does not support. Nothing
    /// was changed: no task started, no attempt consumed.
    #[error(
        "queue `{queue_name}`: the claimed batch (message ids {message_ids:?}) has tasks this \
         worker does not support: {}; every worker of a queue must carry every concrete flow \
         routed to it",
        unsupported.iter().map(|p| format!("{}.{} (message ids {:?})", p.flow_slug, p.step_slug, p.message_ids)).collect::<Vec<_>>().join(", ")
    )]
    UnsupportedTasks {
        /// The queue the batch was read from.
        queue_name: String,
        /// Every message id of the batch.
        message_ids: Vec<i64>,
        /// The unsupported pairs and their messages.
        unsupported: Vec<UnsupportedPair>,
    },

    /// The flow is not compiled in this database.
    #[error(
        "no concrete flow or active alias is named `{flow_slug}` in this database; compile the \
         flow first (a worker carrying it does so at startup, and activates its alias)"
    )]
    UnknownFlow {
        /// The slug that was asked for.
        flow_slug: String,
    },

    /// A typed start through an alias found its active version taking or producing other
    /// types than the caller's (or types never recorded). Nothing was started.
    #[error("{0}")]
    AliasTypeMismatch(Box<AliasTypeMismatch>),

    /// A flow was asked to join an alias it does not belong to.
    #[error("{0}")]
    AliasMismatch(String),

    /// A rollout cannot be finished (unknown or finished already).
    #[error("{0}")]
    Rollout(String),

    /// No run has this id.
    #[error("run {run_id} does not exist")]
    UnknownRun {
        /// The id asked for.
        run_id: Uuid,
    },

    /// The arguments of a call do not fit together (array lengths, SQL NULL inputs).
    #[error("{0}")]
    InvalidArguments(String),

    /// The database has no pgflow schema (or an incomplete one).
    #[error("pgflow is not installed in this database ({0}); run `pgflow install`")]
    NotInstalled(String),

    /// A value could not be encoded for the database.
    #[error("cannot encode {what} as JSON: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },

    /// A client could not connect (see [`Client::connect`](crate::Client::connect)).
    #[error(transparent)]
    Connect(#[from] crate::connect::ConnectError),

    /// The connected role may not do this: it lacks the pgflow role the call needs.
    #[error("permission denied: {message}; {advice}")]
    PermissionDenied {
        /// Postgres's message (`permission denied for function set_alias`).
        message: String,
        /// Which pgflow role the call needs, and how to get it.
        advice: String,
    },

    /// A run-control request the run's state or its flow does not allow: resuming a run that
    /// is still going, or from a step its flow does not have.
    #[error("{0}")]
    RunControl(String),

    /// No schedule has this name.
    #[error("no schedule `{schedule_name}` exists; `pgflow schedules list` lists them")]
    UnknownSchedule {
        /// The name asked for.
        schedule_name: String,
    },

    /// A flow cannot be deleted now: its alias points at it (move the alias first), or, unless
    /// forced, live workers carry it or runs of it are going. The message says which.
    #[error("{0}")]
    FlowInUse(String),

    /// An idempotency key already belongs to a run that cannot be this start's: it was
    /// started with another input, or the start names a concrete version and the run is of
    /// another version of the alias. Nothing was started.
    #[error("{message}")]
    IdempotencyConflict {
        /// The key.
        key: String,
        /// The alias whose keys it is one of (the alias of the flow started).
        scope: String,
        /// The run that holds it.
        run_id: Uuid,
        /// The SQL core's description, naming the key, the run and what to do.
        message: String,
    },

    /// A start's throttle key had an open window (PF017), and the start asked to be refused
    /// rather than dropped ([`crate::engine::Excess::Refuse`]). Nothing was started.
    #[error("{message}")]
    Throttled {
        /// The key.
        key: String,
        /// The run that opened the window.
        run_id: Uuid,
        /// When the window ends: a start with the key after that starts a run.
        until: DateTime<Utc>,
        /// The SQL core's description.
        message: String,
    },

    /// A start's singleton key is held by a run that is still going (PF018). Nothing was
    /// started.
    #[error("{message}")]
    SingletonBusy {
        /// The key.
        key: String,
        /// The run that holds it.
        run_id: Uuid,
        /// The SQL core's description.
        message: String,
    },

    /// No flow routes to the queue named (pausing it, for one). Nothing was changed.
    #[error("no flow routes to a queue `{queue_name}`; `pgflow status` lists the queues")]
    UnknownQueue {
        /// The name asked for.
        queue_name: String,
    },

    /// A flow input does not fit the JSON Schema its flow records (`#[flow(check_input)]`).
    /// Nothing was started.
    #[error("{0}")]
    InputMismatch(Box<InputMisfit>),

    /// A signal was refused (PF016): no step waits for it, the run already received it with
    /// another payload, the run ended, the step stopped waiting, or the payload does not fit.
    /// Nothing was changed.
    #[error("{0}")]
    SignalRefused(Box<SignalRefused>),

    /// A named prepared statement was missing or already there: the signature of a
    /// transaction-mode pooler that pgflow was not told about.
    #[error(
        "{message}: the connection seems to go through a transaction-mode pooler (PgBouncer \
         `pool_mode = transaction`, Supavisor's transaction port); add `pgbouncer=true` to the \
         URL (or build the pool with `Db::new(pool, Pooling::Transaction)`)"
    )]
    UndeclaredPooler {
        /// Postgres's message (`prepared statement "sqlx_s_1" already exists`).
        message: String,
    },

    /// Any other database error.
    #[error(transparent)]
    Database(sqlx::Error),
}

/// Which pgflow role a denied call needs, from Postgres's message.
fn privilege_advice(message: &str) -> String {
    let grant = "grant it to this login with `pgflow grant <login> --as worker|client|operator`, \
                 run as the installer";
    if let Some(function) = message.strip_prefix("permission denied for function ") {
        if let Some(roles) = pgflow_sql::roles_of(function) {
            let roles = roles.join(" or ");
            return format!("`pgflow.{function}` needs the role {roles}: {grant}");
        }
        return format!("`{function}` is for pgflow's own functions only, not for any role");
    }
    if let Some(table) = message.strip_prefix("permission denied for table ") {
        return format!(
            "no role writes `{table}` directly (pgflow's functions do); reading runs needs \
             pgflow_client, reading workers and rollouts pgflow_operator: {grant}"
        );
    }
    if message.starts_with("permission denied for schema") {
        return format!("this login holds none of pgflow's roles: {grant}");
    }
    format!("pgflow's roles are pgflow_worker, pgflow_client and pgflow_operator: {grant}")
}

#[derive(Deserialize)]
struct ShapeDetail {
    flow_slug: String,
    differences: Vec<String>,
}

#[derive(Deserialize)]
struct UnsupportedDetail {
    queue_name: String,
    message_ids: Vec<i64>,
    unsupported: Vec<UnsupportedPair>,
}

#[derive(Deserialize)]
struct FlowDetail {
    flow_slug: String,
}

/// The detail of PF013.
#[derive(Deserialize)]
struct ScheduleDetail {
    schedule_name: String,
}

/// The detail of PF011.
#[derive(Deserialize)]
struct RunDetail {
    run_id: Uuid,
}

/// The detail of PF015.
#[derive(Deserialize)]
struct QueueDetail {
    queue_name: String,
}

/// The detail of PF016.
#[derive(Deserialize)]
struct SignalDetail {
    run_id: Uuid,
    signal_name: String,
    reason: SignalRefusal,
}

/// The detail of PF014.
#[derive(Deserialize)]
struct MisfitDetail {
    flow_slug: String,
    input: usize,
    path: String,
    problem: String,
}

/// The detail of PF017 and PF018.
#[derive(Deserialize)]
struct GuardDetail {
    key: String,
    run_id: Uuid,
    until: Option<DateTime<Utc>>,
}

/// The detail of PF009.
#[derive(Deserialize)]
struct KeyDetail {
    key: String,
    scope: String,
    run_id: Option<Uuid>,
}

impl From<sqlx::Error> for EngineError {
    fn from(error: sqlx::Error) -> Self {
        let Some(db) = error.as_database_error() else {
            return Self::Database(error);
        };
        let message = db.message().to_owned();
        let detail = db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .and_then(|pg| pg.detail())
            .unwrap_or_default()
            .to_owned();
        match db.code().as_deref() {
            Some("42501") => Self::PermissionDenied {
                advice: privilege_advice(&message),
                message,
            },
            // duplicate_prepared_statement, invalid_sql_statement_name
            Some("42P05" | "26000") => Self::UndeclaredPooler { message },
            Some("PF001") => Self::InvalidDefinition { message },
            Some("PF002") => match serde_json::from_str::<ShapeDetail>(&detail) {
                Ok(d) => Self::ShapeMismatch {
                    flow_slug: d.flow_slug,
                    differences: d.differences,
                },
                Err(_) => Self::Database(error),
            },
            Some("PF003") => match serde_json::from_str::<UnsupportedDetail>(&detail) {
                Ok(d) => Self::UnsupportedTasks {
                    queue_name: d.queue_name,
                    message_ids: d.message_ids,
                    unsupported: d.unsupported,
                },
                Err(_) => Self::Database(error),
            },
            Some("PF004") => match serde_json::from_str::<FlowDetail>(&detail) {
                Ok(d) => Self::UnknownFlow {
                    flow_slug: d.flow_slug,
                },
                Err(_) => Self::Database(error),
            },
            Some("PF005") => Self::InvalidArguments(message),
            Some("PF006") => Self::AliasMismatch(message),
            Some("PF007") => Self::Rollout(message),
            Some("PF010") => Self::RunControl(message),
            Some("PF012") => Self::FlowInUse(message),
            Some("PF013") => match serde_json::from_str::<ScheduleDetail>(&detail) {
                Ok(ScheduleDetail { schedule_name }) => Self::UnknownSchedule { schedule_name },
                Err(_) => Self::Database(error),
            },
            Some("PF011") => match serde_json::from_str::<RunDetail>(&detail) {
                Ok(RunDetail { run_id }) => Self::UnknownRun { run_id },
                Err(_) => Self::Database(error),
            },
            Some("PF009") => match serde_json::from_str::<KeyDetail>(&detail) {
                Ok(KeyDetail {
                    key,
                    scope,
                    run_id: Some(run_id),
                }) => Self::IdempotencyConflict {
                    key,
                    scope,
                    run_id,
                    message,
                },
                _ => Self::Database(error),
            },
            Some("PF017") => match serde_json::from_str::<GuardDetail>(&detail) {
                Ok(GuardDetail {
                    key,
                    run_id,
                    until: Some(until),
                }) => Self::Throttled {
                    key,
                    run_id,
                    until,
                    message,
                },
                _ => Self::Database(error),
            },
            Some("PF018") => match serde_json::from_str::<GuardDetail>(&detail) {
                Ok(GuardDetail { key, run_id, .. }) => Self::SingletonBusy {
                    key,
                    run_id,
                    message,
                },
                Err(_) => Self::Database(error),
            },
            Some("PF014") => match serde_json::from_str::<MisfitDetail>(&detail) {
                Ok(d) => Self::InputMismatch(Box::new(InputMisfit {
                    flow_slug: d.flow_slug,
                    input: d.input,
                    path: d.path,
                    problem: d.problem,
                    message,
                })),
                Err(_) => Self::Database(error),
            },
            Some("PF016") => match serde_json::from_str::<SignalDetail>(&detail) {
                Ok(d) => Self::SignalRefused(Box::new(SignalRefused {
                    run_id: d.run_id,
                    signal_name: d.signal_name,
                    reason: d.reason,
                    message,
                })),
                Err(_) => Self::Database(error),
            },
            Some("PF015") => match serde_json::from_str::<QueueDetail>(&detail) {
                Ok(QueueDetail { queue_name }) => Self::UnknownQueue { queue_name },
                Err(_) => Self::Database(error),
            },
            Some("PF008") => match serde_json::from_str::<AliasTypeMismatch>(&detail) {
                Ok(mismatch) => Self::AliasTypeMismatch(Box::new(mismatch)),
                Err(_) => Self::Database(error),
            },
            // undefined function / schema / table: the schema is missing or incomplete
            Some("42883" | "3F000" | "42P01") if message.contains("pgflow") => {
                Self::NotInstalled(message)
            }
            _ => Self::Database(error),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The codes this module maps to errors: each `Some("PFnnn")` arm of `From<sqlx::Error>`.
    fn mapped_codes() -> Vec<String> {
        let mut codes: Vec<String> = include_str!("error.rs")
            .split("Some(\"PF")
            .skip(1)
            .filter_map(|rest| rest.get(..3))
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
            .map(|digits| format!("PF{digits}"))
            .collect();
        codes.sort_unstable();
        codes
    }

    #[test]
    fn error_codes_agree() {
        let mapped = mapped_codes();
        let mut deduped = mapped.clone();
        deduped.dedup();
        assert_eq!(deduped, mapped, "a PF code has two arms");
        let mut documented: Vec<String> = pgflow_sql::documented_error_codes()
            .into_iter()
            .map(str::to_owned)
            .collect();
        documented.sort_unstable();
        assert_eq!(
            mapped, documented,
            "the PF codes mapped in `From<sqlx::Error> for EngineError` differ from the table \
             \"Error codes\" in pgflow-sql/functions/README.md"
        );
    }

    #[test]
    fn a_denied_call_names_the_roles_of_the_readme_table() {
        let advice = super::privilege_advice("permission denied for function define_flow");
        assert!(
            advice.contains("`pgflow.define_flow` needs the role pgflow_worker or pgflow_operator"),
            "{advice}"
        );
        let advice = super::privilege_advice("permission denied for function lock_runs");
        assert!(advice.contains("pgflow's own functions only"), "{advice}");
    }
}
