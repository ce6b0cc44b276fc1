//! A concrete flow as data: its steps in topological order, their dependencies, types, options
//! and queue routes. This is what the `#[flow]` macro generates and what [`crate::engine`]
//! compiles into the SQL core.

use std::time::Duration;

use serde_json::{Value, json};

use crate::names::{FlowSlug, QueueName, StepSlug};

/// Whether a step runs once or once per element of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepType {
    /// One task per run.
    Single,
    /// One task per element of the flow input (no dependency) or of its one dependency's
    /// output; the step's output is the array of the tasks' outputs, in element order.
    Map,
}

impl StepType {
    /// The SQL core's name for the type.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Map => "map",
        }
    }
}

/// Flow-wide defaults for retries and timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowOptions {
    /// Attempts per task before the run fails (at least 1). Default 3.
    pub max_attempts: u32,
    /// Base of the exponential retry backoff: retry `n` waits `base_delay * 2^(n-1)`.
    /// Whole seconds. Default 1 s.
    pub base_delay: Duration,
    /// The longest a retry waits, however many attempts came before (whole seconds, at least
    /// 1). Default `None`: no cap.
    pub max_delay: Option<Duration>,
    /// Each retry delay is shortened by a random part of up to this percentage (0 to 100), so
    /// tasks that failed together do not come back together. Default 0.
    pub jitter_percent: u8,
    /// How long a handler may run before its attempt fails. Whole seconds. Default 60 s.
    pub timeout: Duration,
}

impl FlowOptions {
    /// The defaults: 3 attempts, 1 s base delay, no delay cap, no jitter, 60 s timeout.
    pub const DEFAULT: Self = Self {
        max_attempts: 3,
        base_delay: Duration::from_secs(1),
        max_delay: None,
        jitter_percent: 0,
        timeout: Duration::from_secs(60),
    };
}

impl Default for FlowOptions {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Per-step overrides of the flow's options; `None` inherits the flow's value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepOptions {
    /// Attempts per task of this step.
    pub max_attempts: Option<u32>,
    /// Retry backoff base for this step.
    pub base_delay: Option<Duration>,
    /// Retry delay cap for this step.
    pub max_delay: Option<Duration>,
    /// Retry delay jitter for this step, in percent (0 to 100).
    pub jitter_percent: Option<u8>,
    /// Handler timeout for this step.
    pub timeout: Option<Duration>,
    /// Delay between the step becoming ready and its tasks becoming visible.
    pub start_delay: Option<Duration>,
}

/// What a step does when its [condition](StepCondition) does not hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WhenUnmet {
    /// Skip the step; its dependents run and receive `None` for it. The default.
    #[default]
    Skip,
    /// Skip the step and every step downstream of it.
    SkipCascade,
    /// Fail the step and its run.
    Fail,
}

impl WhenUnmet {
    /// The SQL core's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::SkipCascade => "skip_cascade",
            Self::Fail => "fail",
        }
    }
}

/// What a step does when one of its tasks fails its last attempt (or fails permanently).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WhenExhausted {
    /// Fail the step and its run. The default.
    #[default]
    Fail,
    /// Skip the step (its other tasks are dropped); its dependents run and receive `None`.
    Skip,
    /// Skip the step and every step downstream of it.
    SkipCascade,
}

impl WhenExhausted {
    /// The SQL core's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Skip => "skip",
            Self::SkipCascade => "skip_cascade",
        }
    }

    /// Whether a step in this mode may end skipped.
    pub fn skips(self) -> bool {
        self != Self::Fail
    }
}

/// What a step that waits for a signal does when its wait times out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum WhenTimedOut {
    /// Fail the step and its run. The default.
    #[default]
    Fail,
    /// Skip the step (reason `timed_out`); its dependents run and receive `None`.
    Skip,
    /// Skip the step and every step downstream of it.
    SkipCascade,
}

impl WhenTimedOut {
    /// The SQL core's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Skip => "skip",
            Self::SkipCascade => "skip_cascade",
        }
    }
}

/// The signal a step waits for: once its dependencies are done, the step is `waiting` (no
/// task, no worker slot, no polling) until its run receives the signal, then runs with the
/// signal's payload as a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSignal {
    /// The signal's name, unique within the flow (slug rules: letters, digits and `_`).
    pub name: String,
    /// The Rust type the payload decodes into (`std::any::type_name`), when known.
    pub type_name: Option<String>,
    /// A JSON Schema of the payload: untyped signals that do not fit it are refused, naming
    /// the field. `None`: untyped payloads are not checked when sent.
    pub schema: Option<Value>,
    /// How long the step may wait, counted from when it began waiting; `None`: for ever.
    pub timeout: Option<Duration>,
    /// What passing the timeout does.
    pub when_timed_out: WhenTimedOut,
    /// Where the key an event reaches the step by is read when it begins to wait: `input`
    /// (the flow input) or one of its dependencies, then field names (`["input",
    /// "order_id"]`). `None`: the step is signalled by run id only.
    pub key_path: Option<Vec<String>>,
}

impl StepSignal {
    /// A wait for the signal `name`, without timeout, type or schema.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            type_name: None,
            schema: None,
            timeout: None,
            when_timed_out: WhenTimedOut::Fail,
            key_path: None,
        }
    }

    /// Gives up waiting after `timeout`, doing what `when_timed_out` says.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration, when_timed_out: WhenTimedOut) -> Self {
        self.timeout = Some(timeout);
        self.when_timed_out = when_timed_out;
        self
    }
}

/// How a step sleeps before it runs, once its dependencies are done: it is `waiting` (no task,
/// no worker slot, no polling) until its wake time on the database's clock, which it keeps
/// across restarts; cancelling its run ends the sleep. A wake time that has passed starts the
/// step at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepSleep {
    /// For this long (whole seconds, at least one) after its dependencies are done.
    For(Duration),
    /// Until the time at this path: `input` (the flow input) or one of its dependencies, then
    /// field names (`["input", "remind_at"]`). The value is an RFC 3339 time with its offset
    /// (`2026-12-09T09:00:00Z`, as chrono writes one); a missing or null value means no sleep,
    /// and anything else fails the step and its run.
    Until(Vec<String>),
}

/// The flow a step runs: its handler returns the child flow's input, and once the step's tasks
/// are done, a child run starts for each (a map step: one per element). The step completes with
/// the child's output (a map step: its children's outputs in order) when they complete, and
/// fails when one fails or is cancelled. Cancelling the parent cancels its children; retrying
/// it reuses the children that completed and retries those that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSubflow {
    /// The child flow: an alias (its children start on its active version) or a concrete slug.
    pub flow: String,
    /// The Rust type the handler returns (`std::any::type_name`), when known: a child whose
    /// flow records another input type is not started, and the step fails saying so.
    pub input_type: Option<String>,
    /// How long the step may wait for its children, counted from when they started; `None`:
    /// for ever. Passing it cancels the children still going.
    pub timeout: Option<Duration>,
    /// What passing the timeout does to the step.
    pub when_timed_out: WhenTimedOut,
}

impl StepSubflow {
    /// Runs flow `flow` (an alias or a concrete slug), without a recorded input type or a
    /// timeout.
    pub fn of(flow: impl Into<String>) -> Self {
        Self {
            flow: flow.into(),
            input_type: None,
            timeout: None,
            when_timed_out: WhenTimedOut::Fail,
        }
    }

    /// Gives up waiting for the children after `timeout`, doing what `when_timed_out` says.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration, when_timed_out: WhenTimedOut) -> Self {
        self.timeout = Some(timeout);
        self.when_timed_out = when_timed_out;
        self
    }
}

/// How many of a step's tasks may run at once, across every worker and process: its tasks wait,
/// held in Postgres with no message on the queue, until one of the cap's slots is free, and a
/// task keeps its slot until it ends (through its retries, and a requeue after its worker
/// died). With a key, the cap applies per key: the value read, as the step becomes ready, at a
/// path of the flow input or a dependency's output (a missing value is a key of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepConcurrency {
    /// The most tasks (per key, with one) that hold a slot at once; at least 1.
    pub limit: u32,
    /// Where the key is read: `input` (the flow input) or one of the step's dependencies, then
    /// field names (`["input", "tenant_id"]`); `None`: one cap for every task of the step.
    pub key_path: Option<Vec<String>>,
}

impl StepConcurrency {
    /// At most `limit` tasks of the step at once, whatever their run.
    pub fn at_most(limit: u32) -> Self {
        Self {
            limit,
            key_path: None,
        }
    }

    /// The cap applies per value at `path` (`["input", "tenant_id"]`).
    #[must_use]
    pub fn per_key<I, S>(mut self, path: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key_path = Some(field_path(path));
        self
    }
}

/// A field path (`["input", "tenant_id"]`) as owned strings.
fn field_path<I, S>(path: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    path.into_iter().map(Into::into).collect()
}

/// How many tasks of a step may start per period, across every worker and process: each
/// attempt counts (a first start, a retry, a requeue after its worker died). A task over the
/// limit waits, with no attempt spent, and starts when its key has a token again. With a key,
/// the limit applies per key: the value read, as a task is claimed, at a path of the flow input
/// or a dependency's output (a missing value is a key of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRateLimit {
    /// The most starts (per key, with one) in any period; at least 1.
    pub limit: u32,
    /// The period, at least a millisecond (counted in whole milliseconds).
    pub period: Duration,
    /// Where the key is read: `input` (the flow input) or one of the step's dependencies, then
    /// field names (`["input", "account"]`); `None`: one limit for every task of the step.
    pub key_path: Option<Vec<String>>,
}

impl StepRateLimit {
    /// At most `limit` starts of the step's tasks in any `period`, whatever their run.
    pub fn per(limit: u32, period: Duration) -> Self {
        Self {
            limit,
            period,
            key_path: None,
        }
    }

    /// The limit applies per value at `path` (`["input", "account"]`).
    #[must_use]
    pub fn per_key<I, S>(mut self, path: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key_path = Some(field_path(path));
        self
    }

    /// The period in whole milliseconds, as the SQL core stores it (at most `u32::MAX`).
    pub(crate) fn period_ms(&self) -> u64 {
        u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX)
    }
}

/// When a step runs: JSON containment patterns matched, when the step is ready, against its
/// input: the flow input for a root step, otherwise the object of its dependencies' outputs
/// keyed by step slug (a skipped dependency is `null` there). The step runs when the input
/// contains `when` (if set) and does not contain `unless` (if set), as Postgres' jsonb `@>`
/// decides: an object contains the keys of the pattern with contained values, an array
/// contains the pattern's elements, a scalar equals it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepCondition {
    /// The pattern the input must contain.
    pub when: Option<Value>,
    /// The pattern the input must not contain.
    pub unless: Option<Value>,
    /// What happens when the condition does not hold.
    pub when_unmet: WhenUnmet,
}

/// One step of a flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDefinition {
    /// The step's slug, unique within the flow.
    pub slug: StepSlug,
    /// Single or map.
    pub step_type: StepType,
    /// The steps whose outputs this step needs; all listed before it in the flow.
    pub depends_on: Vec<StepSlug>,
    /// The queue its tasks are sent to; `None` routes to the flow's default queue.
    pub queue: Option<QueueName>,
    /// Option overrides.
    pub options: StepOptions,
    /// When the step runs; `None` runs it whenever its dependencies are done.
    pub condition: Option<StepCondition>,
    /// What a task out of attempts does to the step and its run.
    pub when_exhausted: WhenExhausted,
    /// The signal the step waits for before it runs; `None` runs it as soon as it is ready.
    pub signal: Option<StepSignal>,
    /// How the step sleeps before it runs (a step sleeps or waits for a signal, not both).
    pub sleep: Option<StepSleep>,
    /// The flow the step runs once its tasks are done (a step that runs a flow neither sleeps
    /// nor waits for a signal).
    pub subflow: Option<StepSubflow>,
    /// How many of its tasks may run at once; `None`: as many as workers take.
    pub concurrency: Option<StepConcurrency>,
    /// How many of its tasks may start per period; `None`: no limit.
    pub rate_limit: Option<StepRateLimit>,
}

impl StepDefinition {
    /// A single step with no dependencies on the default queue.
    pub fn single(slug: StepSlug) -> Self {
        Self {
            slug,
            step_type: StepType::Single,
            depends_on: Vec::new(),
            queue: None,
            options: StepOptions::default(),
            condition: None,
            when_exhausted: WhenExhausted::Fail,
            signal: None,
            sleep: None,
            subflow: None,
            concurrency: None,
            rate_limit: None,
        }
    }

    /// A map step (over the flow input until a dependency is added) on the default queue.
    pub fn map(slug: StepSlug) -> Self {
        Self {
            step_type: StepType::Map,
            ..Self::single(slug)
        }
    }

    /// Adds a dependency.
    #[must_use]
    pub fn depends_on(mut self, dep: StepSlug) -> Self {
        self.depends_on.push(dep);
        self
    }

    /// Routes the step to `queue`.
    #[must_use]
    pub fn queue(mut self, queue: QueueName) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Sets the step's option overrides.
    #[must_use]
    pub fn options(mut self, options: StepOptions) -> Self {
        self.options = options;
        self
    }

    /// Sets when the step runs.
    #[must_use]
    pub fn condition(mut self, condition: StepCondition) -> Self {
        self.condition = Some(condition);
        self
    }

    /// Sets what a task out of attempts does.
    #[must_use]
    pub fn when_exhausted(mut self, mode: WhenExhausted) -> Self {
        self.when_exhausted = mode;
        self
    }

    /// Makes the step wait for `signal` once its dependencies are done.
    #[must_use]
    pub fn waits_for(mut self, signal: StepSignal) -> Self {
        self.signal = Some(signal);
        self
    }

    /// Makes the step sleep once its dependencies are done.
    #[must_use]
    pub fn sleeps(mut self, sleep: StepSleep) -> Self {
        self.sleep = Some(sleep);
        self
    }

    /// Makes the step run `subflow` with what its handler returns.
    #[must_use]
    pub fn runs(mut self, subflow: StepSubflow) -> Self {
        self.subflow = Some(subflow);
        self
    }

    /// Caps how many of the step's tasks run at once.
    #[must_use]
    pub fn concurrency(mut self, concurrency: StepConcurrency) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// Limits how many of the step's tasks start per period.
    #[must_use]
    pub fn rate_limit(mut self, rate_limit: StepRateLimit) -> Self {
        self.rate_limit = Some(rate_limit);
        self
    }
}

/// The Rust types a flow takes and produces, by name (`std::any::type_name`), as the SQL core
/// records them for typed starts through an alias.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlowTypes {
    /// The flow input type.
    pub input: String,
    /// The run output type.
    pub output: String,
}

impl FlowTypes {
    /// The names of `I` and `O`.
    pub fn of<I: ?Sized, O: ?Sized>() -> Self {
        Self {
            input: std::any::type_name::<I>().to_owned(),
            output: std::any::type_name::<O>().to_owned(),
        }
    }
}

/// A concrete flow: an immutable DAG under a slug, with its alias and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowDefinition {
    /// The concrete slug (`triage_v2`).
    pub slug: FlowSlug,
    /// The alias callers start (`triage`); a plain flow is its own alias.
    pub alias: FlowSlug,
    /// The version within the alias (at least 1).
    pub version: u32,
    /// Flow-wide options.
    pub options: FlowOptions,
    /// The steps in topological order.
    pub steps: Vec<StepDefinition>,
    /// The Rust input and output types, when the definition comes from a typed flow (a
    /// [`Deployment`](crate::Deployment) sets them).
    pub types: Option<FlowTypes>,
    /// A JSON Schema of the flow input (`#[flow(check_input)]` derives it with schemars): the
    /// SQL core refuses a start whose input does not fit it, naming the field, unless the
    /// input comes from the flow's own input type. `None`: inputs are not checked at start.
    pub input_schema: Option<Value>,
}

impl FlowDefinition {
    /// A plain flow: its own alias, version 1, default options, no steps yet.
    pub fn new(slug: FlowSlug) -> Self {
        Self {
            alias: slug.clone(),
            slug,
            version: 1,
            options: FlowOptions::DEFAULT,
            steps: Vec::new(),
            types: None,
            input_schema: None,
        }
    }

    /// Records the flow's Rust input and output types.
    #[must_use]
    pub fn types(mut self, types: FlowTypes) -> Self {
        self.types = Some(types);
        self
    }

    /// Sets the alias and version.
    #[must_use]
    pub fn alias(mut self, alias: FlowSlug, version: u32) -> Self {
        self.alias = alias;
        self.version = version;
        self
    }

    /// Checks every start's input against this JSON Schema (see
    /// [`input_schema`](Self::input_schema)).
    #[must_use]
    pub fn check_input(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Sets the flow-wide options.
    #[must_use]
    pub fn options(mut self, options: FlowOptions) -> Self {
        self.options = options;
        self
    }

    /// Appends a step (steps must come after their dependencies).
    #[must_use]
    pub fn step(mut self, step: StepDefinition) -> Self {
        self.steps.push(step);
        self
    }

    /// The queue a step routes to: its own, or the flow's default queue.
    pub fn queue_of(&self, step: &StepDefinition) -> QueueName {
        step.queue
            .clone()
            .unwrap_or_else(|| self.slug.default_queue())
    }

    /// The steps that route to `queue`, in step order.
    pub fn steps_routed_to<'a>(
        &'a self,
        queue: &'a QueueName,
    ) -> impl Iterator<Item = &'a StepDefinition> + 'a {
        self.steps
            .iter()
            .filter(move |s| &self.queue_of(s) == queue)
    }

    /// The flow options as the SQL core's `define_flow` takes them.
    pub fn options_json(&self) -> Value {
        json!({
            "max_attempts": self.options.max_attempts,
            "base_delay": self.options.base_delay.as_secs(),
            "max_delay": self.options.max_delay.map(|d| d.as_secs()),
            "jitter": self.options.jitter_percent,
            "timeout": self.options.timeout.as_secs(),
        })
    }

    /// The steps as the SQL core's `define_flow` takes them, queues resolved.
    pub fn steps_json(&self) -> Value {
        Value::Array(
            self.steps
                .iter()
                .map(|step| {
                    json!({
                        "slug": step.slug.as_str(),
                        "type": step.step_type.as_str(),
                        "deps": step.depends_on.iter().map(StepSlug::as_str).collect::<Vec<_>>(),
                        "queue": self.queue_of(step).as_str(),
                        "max_attempts": step.options.max_attempts,
                        "base_delay": step.options.base_delay.map(|d| d.as_secs()),
                        "max_delay": step.options.max_delay.map(|d| d.as_secs()),
                        "jitter": step.options.jitter_percent,
                        "timeout": step.options.timeout.map(|d| d.as_secs()),
                        "start_delay": step.options.start_delay.map(|d| d.as_secs()),
                        "when": step.condition.as_ref().and_then(|c| c.when.clone()),
                        "unless": step.condition.as_ref().and_then(|c| c.unless.clone()),
                        "when_unmet": step.condition.as_ref().map(|c| c.when_unmet.as_str()),
                        "when_exhausted": step.when_exhausted.as_str(),
                        "signal": step.signal.as_ref().map(|s| s.name.as_str()),
                        "signal_type": step.signal.as_ref().and_then(|s| s.type_name.as_deref()),
                        "signal_schema": step.signal.as_ref().and_then(|s| s.schema.clone()),
                        "wait_timeout": step.signal.as_ref().and_then(|s| s.timeout)
                            .or_else(|| step.subflow.as_ref().and_then(|s| s.timeout))
                            .map(|d| d.as_secs().max(1)),
                        "when_timed_out": step.signal.as_ref().map(|s| s.when_timed_out)
                            .or_else(|| step.subflow.as_ref().map(|s| s.when_timed_out))
                            .map(WhenTimedOut::as_str),
                        "signal_key": step.signal.as_ref().and_then(|s| s.key_path.clone()),
                        "sleep": match &step.sleep {
                            // Whole seconds, rounded up: only a zero sleep is refused.
                            Some(StepSleep::For(d)) => {
                                Some(d.as_secs() + u64::from(d.subsec_nanos() > 0))
                            }
                            _ => None,
                        },
                        "sleep_until": match &step.sleep {
                            Some(StepSleep::Until(path)) => Some(path.clone()),
                            _ => None,
                        },
                        "subflow": step.subflow.as_ref().map(|s| s.flow.as_str()),
                        "subflow_input_type": step.subflow.as_ref()
                            .and_then(|s| s.input_type.as_deref()),
                        "concurrency": step.concurrency.as_ref().map(|c| c.limit),
                        "concurrency_key": step.concurrency.as_ref()
                            .and_then(|c| c.key_path.clone()),
                        "rate_limit": step.rate_limit.as_ref().map(|r| r.limit),
                        "rate_period_ms": step.rate_limit.as_ref().map(StepRateLimit::period_ms),
                        "rate_key": step.rate_limit.as_ref().and_then(|r| r.key_path.clone()),
                    })
                })
                .collect(),
        )
    }
}
