//! Not public API. The code `#[pgflow::flow]` expands to calls into this module (as
//! `::pgflow::__private`); it may change in any release without notice.

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use serde;
pub use serde_json;

pub use crate::client::{Client, RunHandle};
use crate::client::{Start, StartOptions};
pub use crate::context::Context;
pub use crate::definition::FlowDefinition;
pub use crate::deployment::{Deployment, FlowQueue, FlowSpec};
pub use crate::error::EngineError;
pub use crate::handler::{HandlerFuture, StepFailure, StepHandler, TaskInput};
pub use crate::state::State;

use crate::definition::{
    FlowOptions, StepConcurrency, StepCondition, StepDefinition, StepOptions, StepRateLimit,
    StepSignal, StepSleep, StepSubflow, StepType,
};
pub use crate::definition::{WhenExhausted, WhenTimedOut, WhenUnmet};
pub use crate::engine::{EventDelivery, SignalOutcome};
use crate::names::{FlowSlug, QueueName, StepSlug};
pub use sqlx::PgExecutor;
pub use uuid::Uuid;

/// A flow as the macro writes it down: literals only, validated at compile time.
#[derive(Debug, Clone, Copy)]
pub struct FlowDecl {
    /// Concrete slug.
    pub slug: &'static str,
    /// Alias.
    pub alias: &'static str,
    /// Version within the alias.
    pub version: u32,
    /// Flow `max_attempts`, if set.
    pub max_attempts: Option<u32>,
    /// Flow `base_delay` in seconds, if set.
    pub base_delay: Option<u64>,
    /// Flow `max_delay` in seconds, if set.
    pub max_delay: Option<u64>,
    /// Flow `jitter_percent`, if set.
    pub jitter_percent: Option<u8>,
    /// Flow `timeout` in seconds, if set.
    pub timeout: Option<u64>,
    /// Steps in topological order.
    pub steps: &'static [StepDecl],
    /// The JSON Schema of the flow input, when starts are checked against it
    /// (`check_input`).
    pub input_schema: Option<fn() -> Value>,
}

impl FlowDecl {
    /// Every optional field unset.
    pub const DEFAULT: Self = Self {
        slug: "",
        alias: "",
        version: 1,
        max_attempts: None,
        base_delay: None,
        max_delay: None,
        jitter_percent: None,
        timeout: None,
        steps: &[],
        input_schema: None,
    };
}

/// A step as the macro writes it down.
#[derive(Debug, Clone, Copy)]
pub struct StepDecl {
    /// Step slug.
    pub slug: &'static str,
    /// Whether it is a map step.
    pub map: bool,
    /// Dependencies (for a map over a dependency: that one dependency).
    pub depends_on: &'static [&'static str],
    /// Queue route; `None` is the flow's default queue.
    pub queue: Option<&'static str>,
    /// `max_attempts`, if set.
    pub max_attempts: Option<u32>,
    /// `base_delay` in seconds, if set.
    pub base_delay: Option<u64>,
    /// `max_delay` in seconds, if set.
    pub max_delay: Option<u64>,
    /// `jitter_percent`, if set.
    pub jitter_percent: Option<u8>,
    /// `timeout` in seconds, if set.
    pub timeout: Option<u64>,
    /// `start_delay` in seconds, if set.
    pub start_delay: Option<u64>,
    /// `when`: the condition pattern as JSON text (checked at compile time), if set.
    pub when: Option<&'static str>,
    /// `unless`: the condition pattern as JSON text, if set.
    pub unless: Option<&'static str>,
    /// `when_unmet`.
    pub when_unmet: WhenUnmet,
    /// `when_exhausted`.
    pub when_exhausted: WhenExhausted,
    /// `signal`, with `wait_timeout` and `when_timed_out`, if set.
    pub signal: Option<SignalDecl>,
    /// `sleep` in seconds, if set.
    pub sleep: Option<u64>,
    /// `sleep_until`: where the wake time is read (`input` or a dependency, then fields).
    pub sleep_until: Option<&'static [&'static str]>,
    /// `subflow`: the flow the step runs, if set.
    pub subflow: Option<SubflowDecl>,
    /// `concurrency`: the most tasks of the step at once, if set.
    pub concurrency: Option<u32>,
    /// `concurrency_key`: where the cap's key is read (`input` or a dependency, then fields).
    pub concurrency_key: Option<&'static [&'static str]>,
    /// `rate_limit`: the most starts per period, and the period in milliseconds, if set.
    pub rate_limit: Option<(u32, u64)>,
    /// `rate_key`: where the rate limit's key is read (`input` or a dependency, then fields).
    pub rate_key: Option<&'static [&'static str]>,
}

/// The flow a step runs, as the macro writes it down.
#[derive(Debug, Clone, Copy)]
pub struct SubflowDecl {
    /// The child flow's alias.
    pub alias: &'static str,
    /// The type the handler returns (`std::any::type_name`): the child's input type.
    pub input_type: fn() -> &'static str,
    /// `wait_timeout` in seconds, if set.
    pub timeout: Option<u64>,
    /// `when_timed_out`.
    pub when_timed_out: WhenTimedOut,
}

/// The signal a step waits for, as the macro writes it down.
#[derive(Debug, Clone, Copy)]
pub struct SignalDecl {
    /// The signal's name.
    pub name: &'static str,
    /// The payload type's name (`std::any::type_name` of the handler's parameter).
    pub type_name: fn() -> &'static str,
    /// The payload type's JSON Schema, when the flow checks what comes in (`check_input`).
    pub schema: Option<fn() -> Value>,
    /// `wait_timeout` in seconds, if set.
    pub timeout: Option<u64>,
    /// `when_timed_out`.
    pub when_timed_out: WhenTimedOut,
    /// `key`: where the step's event key is read (`input` or a dependency, then fields).
    pub key: Option<&'static [&'static str]>,
}

impl StepDecl {
    /// Every optional field unset.
    pub const DEFAULT: Self = Self {
        slug: "",
        map: false,
        depends_on: &[],
        queue: None,
        max_attempts: None,
        base_delay: None,
        max_delay: None,
        jitter_percent: None,
        timeout: None,
        start_delay: None,
        when: None,
        unless: None,
        when_unmet: WhenUnmet::Skip,
        when_exhausted: WhenExhausted::Fail,
        signal: None,
        sleep: None,
        sleep_until: None,
        subflow: None,
        concurrency: None,
        concurrency_key: None,
        rate_limit: None,
        rate_key: None,
    };
}

/// A field path the macro wrote down (`["input", "order_id"]`), owned.
fn owned_path(path: &'static [&'static str]) -> Vec<String> {
    path.iter().map(|part| (*part).to_owned()).collect()
}

/// A condition pattern the macro wrote down as JSON text.
fn pattern(text: &'static str) -> Value {
    serde_json::from_str(text).expect("condition pattern checked by #[pgflow::flow]")
}

/// Turns a declaration into a [`FlowDefinition`].
///
/// # Panics
/// Only on names the macro did not validate, which it always does at compile time.
pub fn definition(decl: &FlowDecl) -> FlowDefinition {
    const CHECKED: &str = "name validated by #[pgflow::flow] at compile time";
    let defaults = FlowOptions::DEFAULT;
    let mut flow = FlowDefinition::new(FlowSlug::new(decl.slug).expect(CHECKED))
        .alias(FlowSlug::new(decl.alias).expect(CHECKED), decl.version)
        .options(FlowOptions {
            max_attempts: decl.max_attempts.unwrap_or(defaults.max_attempts),
            base_delay: decl
                .base_delay
                .map_or(defaults.base_delay, Duration::from_secs),
            max_delay: decl.max_delay.map(Duration::from_secs),
            jitter_percent: decl.jitter_percent.unwrap_or(defaults.jitter_percent),
            timeout: decl.timeout.map_or(defaults.timeout, Duration::from_secs),
        });
    for step in decl.steps {
        flow = flow.step(StepDefinition {
            slug: StepSlug::new(step.slug).expect(CHECKED),
            step_type: if step.map {
                StepType::Map
            } else {
                StepType::Single
            },
            depends_on: step
                .depends_on
                .iter()
                .map(|d| StepSlug::new(*d).expect(CHECKED))
                .collect(),
            queue: step.queue.map(|q| QueueName::new(q).expect(CHECKED)),
            options: StepOptions {
                max_attempts: step.max_attempts,
                base_delay: step.base_delay.map(Duration::from_secs),
                max_delay: step.max_delay.map(Duration::from_secs),
                jitter_percent: step.jitter_percent,
                timeout: step.timeout.map(Duration::from_secs),
                start_delay: step.start_delay.map(Duration::from_secs),
            },
            condition: (step.when.is_some() || step.unless.is_some()).then(|| StepCondition {
                when: step.when.map(pattern),
                unless: step.unless.map(pattern),
                when_unmet: step.when_unmet,
            }),
            when_exhausted: step.when_exhausted,
            signal: step.signal.map(|signal| StepSignal {
                name: signal.name.to_owned(),
                type_name: Some((signal.type_name)().to_owned()),
                schema: signal.schema.map(|schema| schema()),
                timeout: signal.timeout.map(Duration::from_secs),
                when_timed_out: signal.when_timed_out,
                key_path: signal.key.map(owned_path),
            }),
            sleep: match (step.sleep, step.sleep_until) {
                (Some(seconds), _) => Some(StepSleep::For(Duration::from_secs(seconds))),
                (None, Some(path)) => Some(StepSleep::Until(owned_path(path))),
                (None, None) => None,
            },
            subflow: step.subflow.map(|subflow| StepSubflow {
                flow: subflow.alias.to_owned(),
                input_type: Some((subflow.input_type)().to_owned()),
                timeout: subflow.timeout.map(Duration::from_secs),
                when_timed_out: subflow.when_timed_out,
            }),
            concurrency: step.concurrency.map(|limit| StepConcurrency {
                limit,
                key_path: step.concurrency_key.map(owned_path),
            }),
            rate_limit: step.rate_limit.map(|(limit, period_ms)| StepRateLimit {
                limit,
                period: Duration::from_millis(period_ms),
                key_path: step.rate_key.map(owned_path),
            }),
        });
    }
    if let Some(schema) = decl.input_schema {
        flow = flow.check_input(schema());
    }
    flow
}

/// A flow input type whose JSON Schema starts are checked against (`#[flow(check_input)]`):
/// every type with schemars' `JsonSchema`.
#[diagnostic::on_unimplemented(
    message = "`check_input` needs the flow input `{Self}` to implement `schemars::JsonSchema`",
    label = "this input type has no JSON Schema",
    note = "add `#[derive(schemars::JsonSchema)]` to it (schemars 1.x), or drop `check_input`"
)]
pub trait InputSchema {
    /// The type's JSON Schema, as the flow records it.
    fn input_schema() -> Value;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema> InputSchema for T {
    fn input_schema() -> Value {
        schemars::SchemaGenerator::default()
            .into_root_schema_for::<T>()
            .to_value()
    }
}

/// A signal payload type whose JSON Schema untyped signals are checked against (flows with
/// `check_input`): every type with schemars' `JsonSchema`.
#[diagnostic::on_unimplemented(
    message = "`check_input` needs the signal payload `{Self}` to implement `schemars::JsonSchema`",
    label = "this payload type has no JSON Schema",
    note = "add `#[derive(schemars::JsonSchema)]` to it (schemars 1.x), or drop the flow's `check_input`"
)]
pub trait SignalSchema {
    /// The type's JSON Schema, as the step records it.
    fn signal_schema() -> Value;
}

#[diagnostic::do_not_recommend]
impl<T: schemars::JsonSchema> SignalSchema for T {
    fn signal_schema() -> Value {
        <T as InputSchema>::input_schema()
    }
}

/// Sends signal `name` with `payload` (encoded by [`SignalPayload::to_json`]) to run `run_id`
/// through `executor` (the generated `signal_<name>` and `signal_<name>_in` of a flow module).
pub async fn send_signal<'c>(
    executor: impl PgExecutor<'c>,
    run_id: Uuid,
    name: &str,
    payload: Result<Value, EngineError>,
) -> Result<SignalOutcome, EngineError> {
    crate::engine::send_signal_value(executor, run_id, name, &payload?).await
}

/// Delivers event `name` by `key` with `payload` (encoded by [`SignalPayload::to_json`])
/// through `executor` (the generated `emit_<name>` and `emit_<name>_in` of a flow module).
pub async fn emit_event<'c, K: Serialize + ?Sized>(
    executor: impl PgExecutor<'c>,
    name: &str,
    key: &K,
    payload: Result<Value, EngineError>,
) -> Result<Vec<EventDelivery>, EngineError> {
    let events = [(crate::engine::event_key(key)?, payload?)];
    crate::engine::emit_events(executor, name, &events).await
}

/// What a step handler returns: `Result<T, E>` with a JSON-able `T` and a displayable `E`.
#[diagnostic::on_unimplemented(
    message = "a step handler must return `Result<T, E>`, not `{Self}`",
    label = "return `Result<T, E>` with `T: Serialize + DeserializeOwned` and `E: Display`"
)]
pub trait StepResult {
    /// The step's output type.
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// The handler's error type.
    type Error: Display + 'static;
    /// The result.
    fn into_result(self) -> Result<Self::Output, Self::Error>;
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}

impl<T, E> StepResult for Result<T, E>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    E: Display + 'static,
{
    type Output = T;
    type Error = E;
    fn into_result(self) -> Result<T, E> {
        self
    }
}

/// `Self` is the output type of the dependency a parameter names.
#[diagnostic::on_unimplemented(
    message = "this parameter's type `{Self}` is not the output type `{Expected}` of the step it names",
    label = "expected `{Expected}`, the dependency's output type"
)]
pub trait DependencyType<Expected> {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}
#[diagnostic::do_not_recommend]
impl<T> DependencyType<T> for T {}

/// `Self` is a time a step can sleep until (`sleep_until = input.remind_at`): a chrono
/// `DateTime`, which JSON holds as an RFC 3339 time with its offset, or an `Option` of one
/// (`None`: no sleep).
#[diagnostic::on_unimplemented(
    message = "`sleep_until` needs a time, and `{Self}` is not one",
    label = "the field the step sleeps until",
    note = "make it a `chrono::DateTime<chrono::Utc>` (or another `chrono::DateTime`), or an `Option` of one for a sleep that may not happen"
)]
pub trait WakeTime {
    /// Named by the code `#[flow]` generates for the field of `sleep_until`
    /// (`WakeTime::holds(&input.remind_at)`): compiles only where the rule holds, and a
    /// failure names no helper function.
    fn holds(&self) {}
}
impl<Tz: chrono::TimeZone> WakeTime for chrono::DateTime<Tz> {}
impl<T: WakeTime> WakeTime for Option<T> {}

/// `Self`, what a step's handler returns, is the input type `Expected` of the flow the step runs
/// (`subflow = child`).
#[diagnostic::on_unimplemented(
    message = "this step runs a flow whose input is `{Expected}`, but its handler returns `{Self}`",
    label = "expected `{Expected}`, the input of the flow this step runs",
    note = "a step that runs a flow returns that flow's input; its output is the flow's output"
)]
pub trait SubflowInput<Expected> {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}
#[diagnostic::do_not_recommend]
impl<T> SubflowInput<T> for T {}

/// `Self` can be a signal's payload: sent as JSON and decoded by the step that waits for it.
#[diagnostic::on_unimplemented(
    message = "a signal's payload type must implement `Serialize` and `DeserializeOwned`, and `{Self}` does not",
    label = "the signal's payload type",
    note = "derive `serde::Serialize` and `serde::Deserialize` for it"
)]
pub trait SignalPayload: Sized {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
    /// The payload as JSON, for sending.
    fn to_json(&self) -> Result<Value, EngineError>;
    /// The payload of signal `signal`, which the task's step waited for, read for its
    /// handler.
    fn read(
        task: &TaskInput,
        signal: &'static str,
    ) -> impl Future<Output = Result<Self, StepFailure>> + Send;
}
#[diagnostic::do_not_recommend]
impl<T: Serialize + DeserializeOwned + Send> SignalPayload for T {
    fn to_json(&self) -> Result<Value, EngineError> {
        serde_json::to_value(self).map_err(|source| EngineError::Encode {
            what: "signal payload",
            source,
        })
    }

    fn read(
        task: &TaskInput,
        signal: &'static str,
    ) -> impl Future<Output = Result<Self, StepFailure>> + Send {
        task.signal(signal)
    }
}

/// `Self` is the flow's input type.
#[diagnostic::on_unimplemented(
    message = "this parameter's type `{Self}` is not the flow input type `{Expected}`",
    label = "expected `{Expected}`, the flow's `input` type"
)]
pub trait FlowInputType<Expected> {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}
#[diagnostic::do_not_recommend]
impl<T> FlowInputType<T> for T {}

/// `Self` (a handler's `State<T>` parameter) is the state its flow's workers carry.
#[diagnostic::on_unimplemented(
    message = "this handler takes `{Self}`, but its flow's workers carry state of type `{Expected}`",
    label = "not the flow's state type",
    note = "declare the type on the flow, `#[flow(state = T)]`, and pass the value to the worker: the flow's `deployment(state)` then takes it"
)]
pub trait StateType<Expected> {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}
#[diagnostic::do_not_recommend]
impl<T> StateType<T> for State<T> {}

/// `Self` (a map step's element parameter) is the element type of `Source`, the `Vec<T>` the
/// step maps over: one rule for both halves, so that a source that is no `Vec` gives one error.
#[diagnostic::on_unimplemented(
    message = "a map step takes one element `T` of the `Vec<T>` it maps over: its element parameter has type `{Self}`, and its source gives `{Source}`",
    label = "not an element of what this step maps over",
    note = "map over a step whose output is a `Vec<T>` (or over the flow input, when it is one), and take `T`"
)]
pub trait MapElement<Source> {
    /// Named by the code `#[flow]` generates: `const _: () = <P as Rule>::HOLDS;` compiles
    /// only where the rule holds, and a failure names no helper function.
    const HOLDS: () = ();
}
#[diagnostic::do_not_recommend]
impl<T> MapElement<Vec<T>> for T {}

/// `Self` (a field of a flow's declared `output` type) has the output type of the step it is
/// named after.
#[diagnostic::on_unimplemented(
    message = "this field of the flow's `output` type has type `{Self}`, but the step it is named after produces `{Expected}`",
    label = "expected `{Expected}`",
    note = "the `output` type has one field per step nothing depends on, of that step's output type (an `Option` for a step a run may skip)"
)]
pub trait OutputField<Expected> {}
#[diagnostic::do_not_recommend]
impl<T> OutputField<T> for T {}

/// Type check: a field of a declared `output` type has its step's output type.
pub fn assert_output_field<Expected, Field: OutputField<Expected>>(_field: &Field) {}

/// A value of any type, for code that is type-checked and never run (the generated check of a
/// declared `output` type's field names).
///
/// # Panics
/// Always: nothing calls it.
pub fn type_checked_only<T>() -> T {
    unreachable!("generated for type checking only, never called")
}

/// Encodes a handler's result for the SQL core.
pub fn output<R: StepResult>(step_slug: &str, result: R) -> Result<Value, StepFailure> {
    match result.into_result() {
        Ok(value) => crate::failure::encode(step_slug, &value),
        Err(error) => Err(StepFailure::of_handler(error)),
    }
}

/// A flow module's `start`: one run of exactly `F`.
pub async fn start<F: FlowSpec>(
    client: &Client,
    input: &F::Input,
) -> Result<RunHandle<F::Output>, EngineError> {
    client
        .start(Start::flow::<F>(), input, StartOptions::new())
        .await
}

/// A flow module's `start_alias`: one run of `F`'s alias, typed.
pub async fn start_alias<F: FlowSpec>(
    client: &Client,
    input: &F::Input,
) -> Result<RunHandle<F::Output>, EngineError> {
    client
        .start(Start::alias_of::<F>(), input, StartOptions::new())
        .await
}
