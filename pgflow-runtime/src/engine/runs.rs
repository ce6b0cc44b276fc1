//! Starting runs and reading them back.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{FromRow, PgExecutor};
use uuid::Uuid;

use crate::definition::FlowTypes;
use crate::error::EngineError;

/// The state of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize, serde::Deserialize)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunStatus {
    /// Some steps are still to run.
    Started,
    /// Every step completed; the run has its output.
    Completed,
    /// A step ran out of attempts (or could not start); the run stopped.
    Failed,
    /// Cancelled from outside; no step starts and no result counts any more.
    Cancelled,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 4] = [
        Self::Started,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// `started`, `completed`, `failed` or `cancelled`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run has ended (any status but `started`).
    pub fn is_ended(self) -> bool {
        self != Self::Started
    }

    /// The status stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// How urgent a run is: on each queue, its ready tasks are claimed before those of runs of
/// lower priority (including tasks that were waiting before it started), and after those of
/// higher priority. Tasks that have waited, ready, longer than their queue's aging limit (60 s
/// by default; [`set_priority_aging`](crate::engine::set_priority_aging)) get up to a quarter
/// of each claim, oldest first, so no priority starves another. Child runs (subflows) take
/// their parent's priority.
///
/// Stored as 1 (`Highest`) to 5 (`Lowest`); `Normal`, 3, is the default.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Before everything else (1).
    Highest,
    /// Before normal runs (2).
    High,
    /// The default (3).
    #[default]
    Normal,
    /// After normal runs (4).
    Low,
    /// After everything else (5), e.g. a backfill.
    Lowest,
}

impl Priority {
    /// Every priority, highest first.
    pub const ALL: [Priority; 5] = [
        Self::Highest,
        Self::High,
        Self::Normal,
        Self::Low,
        Self::Lowest,
    ];

    /// Its level as stored: 1 (highest) to 5 (lowest).
    pub fn level(self) -> i16 {
        match self {
            Self::Highest => 1,
            Self::High => 2,
            Self::Normal => 3,
            Self::Low => 4,
            Self::Lowest => 5,
        }
    }

    /// The priority of a stored level (`None`, as a run of the default stores it, is
    /// `Normal`); `None` for a level outside 1 to 5.
    pub fn from_level(level: Option<i16>) -> Option<Self> {
        match level {
            None => Some(Self::Normal),
            Some(level) => Self::ALL.into_iter().find(|p| p.level() == level),
        }
    }

    /// `highest`, `high`, `normal`, `low` or `lowest`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Highest => "highest",
            Self::High => "high",
            Self::Normal => "normal",
            Self::Low => "low",
            Self::Lowest => "lowest",
        }
    }

    /// The priority named `text` (as [`as_str`](Self::as_str) writes it, or its level `1` to
    /// `5`), if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == text || p.level().to_string() == text)
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq, FromRow)]
#[non_exhaustive]
pub struct Run {
    /// The run's id.
    pub run_id: Uuid,
    /// The concrete flow it runs (fixed for its lifetime).
    pub flow_slug: String,
    /// Its state.
    pub status: RunStatus,
    /// The flow input it was started with.
    pub input: Value,
    /// For a completed run: an object of the leaf steps' outputs keyed by step slug.
    pub output: Option<Value>,
    /// Steps not yet completed.
    pub remaining_steps: i32,
    /// When it was started.
    pub started_at: DateTime<Utc>,
    /// When it completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// When it failed.
    pub failed_at: Option<DateTime<Utc>>,
    /// When it was cancelled.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why, as the canceller said.
    pub cancel_reason: Option<String>,
    /// How often it was retried after failing.
    pub retry_count: i32,
    /// The run this one resumed, if it was started by resuming one (which may since have been
    /// pruned).
    pub resumed_from: Option<Uuid>,
    /// The step it resumed from.
    pub resumed_at_step: Option<String>,
    /// The W3C trace context of the span that started it, if one was recorded.
    pub trace_context: Option<String>,
    /// The time it was started for, when that was later than its start (or the tick of the
    /// schedule that started it).
    pub scheduled_for: Option<DateTime<Utc>>,
    /// The caller's idempotency key it was started with, if any.
    pub idempotency_key: Option<String>,
    /// The alias or flow the key was given with (its scope), when it has a key.
    pub idempotency_scope: Option<String>,
    /// The run whose step started this one, when it is a child run (a subflow).
    pub parent_run_id: Option<Uuid>,
    /// That step.
    pub parent_step_slug: Option<String>,
    /// That step's task (a map step starts a child per element).
    pub parent_task_index: Option<i32>,
    /// Its priority's level (1 highest to 5 lowest), `None` for the default (3); see
    /// [`Run::priority`].
    #[sqlx(rename = "priority", default)]
    pub priority_level: Option<i16>,
    /// Whether it waits: `started`, with a step waiting (for a signal, an event or the end of
    /// a sleep) or in a singleton key's line, and no step started (running or queued). Read by
    /// [`run`] and the listings that show runs to people ([`crate::admin`]), and by a start
    /// that may put runs in line; `false` from other calls that start or change runs.
    #[sqlx(default)]
    pub waiting: bool,
}

impl Run {
    /// Its priority.
    pub fn priority(&self) -> Priority {
        Priority::from_level(self.priority_level).unwrap_or_default()
    }

    /// When the run ended (completed, failed or cancelled), if it has.
    pub fn ended_at(&self) -> Option<DateTime<Utc>> {
        self.completed_at.or(self.failed_at).or(self.cancelled_at)
    }

    /// Its state as people are shown it (see [`shown_status`]): `scheduled` while it waits for
    /// the time it was started for, `waiting` while it [waits](Self::waiting), else its status.
    pub fn shown_status(&self) -> &'static str {
        shown_status(self.status, self.scheduled_for, self.waiting, Utc::now())
    }

    /// How long it took, from when it began (its start, or the later time it was started for)
    /// to its end; `None` while it is going, and for a run that ended before it began (one
    /// cancelled while it waited for its time).
    pub fn took(&self) -> Option<chrono::Duration> {
        let began = self
            .scheduled_for
            .map_or(self.started_at, |at| at.max(self.started_at));
        self.ended_at()
            .filter(|end| *end >= began)
            .map(|end| end - began)
    }
}

/// A run's state as people are shown it, the one rule for the CLI and the dashboard: its
/// status, except `scheduled` for a run that is `started` but was started for a time after
/// `now` (its first tasks are not visible before then), and `waiting` for one that is
/// `started` and `waiting` (see [`Run::waiting`]: a step waits, none runs or is queued).
pub fn shown_status(
    status: RunStatus,
    scheduled_for: Option<DateTime<Utc>>,
    waiting: bool,
    now: DateTime<Utc>,
) -> &'static str {
    match scheduled_for {
        Some(at) if status == RunStatus::Started && at > now => "scheduled",
        _ if status == RunStatus::Started && waiting => "waiting",
        _ => status.as_str(),
    }
}

/// Whether run `r` (a row of `pgflow.runs` or `pgflow.all_runs` under that name) waits, as SQL: it is `started`, a
/// step of it waits (for a signal, an event or the end of a sleep) or it waits its turn in a
/// singleton key's line, and no step is `started` (a step with tasks running or queued). The one rule behind [`Run::waiting`] and the listings'
/// `waiting` state.
pub(crate) const RUN_WAITING: &str = "(r.status = 'started' \
     and (exists (select 1 from pgflow.waits w where w.run_id = r.run_id) \
          or exists (select 1 from pgflow.singleton_waits l where l.run_id = r.run_id)) \
     and not exists (select 1 from pgflow.step_states ss \
                     where ss.run_id = r.run_id and ss.status = 'started'))";

/// A step's state as people are shown it: its status, except `queued` for a step that has
/// started (its tasks exist) while no worker holds any of them (`running_tasks`): not claimed
/// yet, or back in the queue after a snooze or before a retry.
pub fn shown_step_status(status: &str, running_tasks: i32) -> &str {
    match (status, running_tasks) {
        ("started", 0) => "queued",
        _ => status,
    }
}

/// Starts one run with `input`. `name` is an alias (the run starts on its active version, and
/// keeps it) or a concrete flow slug.
pub async fn start_flow(
    executor: impl PgExecutor<'_>,
    name: &str,
    input: &Value,
) -> Result<Run, EngineError> {
    let mut runs = start_flows_as(
        executor,
        name,
        std::slice::from_ref(input),
        true,
        &None,
        &StartRuns::new(),
    )
    .await?;
    runs.pop().ok_or_else(|| EngineError::UnknownFlow {
        flow_slug: name.to_owned(),
    })
}

/// Starts one run per input, in one transaction; the runs come back in input order. `name` is
/// an alias or a concrete flow slug, as for [`start_flow`].
pub async fn start_flows(
    executor: impl PgExecutor<'_>,
    name: &str,
    inputs: &[Value],
) -> Result<Vec<Run>, EngineError> {
    start_flows_as(executor, name, inputs, true, &None, &StartRuns::new()).await
}

/// What a start did for one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StartOutcome {
    /// A new run was created.
    Started,
    /// The input's idempotency key already had a run: that run came back, as it stands, and
    /// nothing new was started.
    AlreadyExisted,
    /// The input's throttle key had an open window and the start was dropped
    /// ([`Excess::Drop`]): the window's run came back, as it stands.
    Dropped,
    /// The input's debounce key had a run that has not begun: the input became that run's
    /// input, its begin moved a window later, and it came back.
    Debounced,
    /// The input's singleton key was held and the start waits its turn
    /// ([`StartRuns::singleton_in_turn`]): its run was created, and waits in the key's line
    /// ([`Run::waiting`]) until the runs before it have ended.
    InLine,
}

impl StartOutcome {
    /// `started` or `already_existed`, as JSON writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::AlreadyExisted => "already_existed",
            Self::Dropped => "dropped",
            Self::Debounced => "debounced",
            Self::InLine => "in_line",
        }
    }
}

/// A run a start gave back, and whether that start created it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StartedRun {
    /// The run as it stands after the start.
    pub run: Run,
    /// Whether the start created it or found it under its idempotency key.
    pub outcome: StartOutcome,
}

/// How a batch of runs starts beyond its inputs: idempotency keys and a start time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartRuns {
    /// One idempotency key per input (`None` for an input without one): a key already used
    /// with the same name gives back its run, as it stands, instead of a new one (while the
    /// run is kept); a key whose run had another input is [`EngineError::IdempotencyConflict`]
    /// and starts nothing.
    pub idempotency_keys: Option<Vec<Option<String>>>,
    /// Start the runs for this time: they exist at once (`scheduled_for`) and their first
    /// tasks become visible then (to the second). `None` or a past time: now.
    pub start_at: Option<DateTime<Utc>>,
    /// Start the runs this long after now on the database's clock (`pgflow.clock()`): in the
    /// place of [`start_at`](Self::start_at), which is ignored when this is given.
    pub start_after: Option<std::time::Duration>,
    /// The W3C trace context to record on the runs (`traceparent`, then `tracestate` after a
    /// newline). `None`: the current span's, with the `otel` feature (see [`crate::trace`]).
    pub trace_context: Option<String>,
    /// The inputs were made from the flow's own Rust input type: the SQL core does not check
    /// them against the flow's input schema (`#[flow(check_input)]`). `false` (the default):
    /// an input that does not fit is [`EngineError::InputMismatch`] and nothing starts.
    pub typed_input: bool,
    /// The runs' priority (see [`Priority`]).
    pub priority: Priority,
    /// At most one run per throttle key in each window (see [`Throttle`]).
    pub throttle: Option<Throttle>,
    /// One singleton key per input (`None` for an input without one): a start whose key is
    /// held by a run still going is [`EngineError::SingletonBusy`], and nothing starts (unless
    /// [`singleton_in_turn`](Self::singleton_in_turn)).
    pub singleton_keys: Option<Vec<Option<String>>>,
    /// A start whose singleton key is held waits its turn instead of being refused: its run is
    /// created at once and waits in the key's line ([`StartOutcome::InLine`]); it begins
    /// (within about a second) once the runs of the key before it have ended. Not with
    /// [`start_at`](Self::start_at).
    pub singleton_in_turn: bool,
    /// One run of the starts of a key that come less than a window apart (see [`Debounce`]).
    pub debounce: Option<Debounce>,
}

/// Debounce keys for a batch of starts: the first start with a key creates its run, which
/// does not begin yet (`scheduled`); each later start with the key less than `window` after the
/// one before replaces the run's input with its own and moves its begin to `window` from then
/// ([`StartOutcome::Debounced`]); the run begins `window` after the last. Scoped like
/// idempotency keys by the flow's alias.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Debounce {
    /// One key per input (`None` for an input without one).
    pub keys: Vec<Option<String>>,
    /// The window, in whole seconds (rounded up), at least one.
    pub window: std::time::Duration,
}

impl Debounce {
    /// Keys `keys`, one per input, each collapsing starts less than `window` apart.
    pub fn new(keys: Vec<Option<String>>, window: std::time::Duration) -> Self {
        Self { keys, window }
    }
}

/// Whole seconds of `window`, rounded up.
fn whole_seconds(window: std::time::Duration) -> u64 {
    window.as_secs() + u64::from(window.subsec_nanos() > 0)
}

/// What a start that meets an open throttle window does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Excess {
    /// Fails with [`EngineError::Throttled`], naming the window's run and its end; nothing of
    /// the call starts.
    Refuse,
    /// Starts nothing for that input and gives back the window's run
    /// ([`StartOutcome::Dropped`]).
    Drop,
}

/// Throttle keys for a batch of starts: a key starts at most one run per `window` (the first
/// start opens the window), scoped like idempotency keys by the flow's alias.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Throttle {
    /// One key per input (`None` for an input without one).
    pub keys: Vec<Option<String>>,
    /// The window, in whole seconds (rounded up), at least one.
    pub window: std::time::Duration,
    /// What a start in an open window does.
    pub excess: Excess,
}

impl Throttle {
    /// Keys `keys`, one per input, each starting at most one run per `window`.
    pub fn new(keys: Vec<Option<String>>, window: std::time::Duration, excess: Excess) -> Self {
        Self {
            keys,
            window,
            excess,
        }
    }
}

impl StartRuns {
    /// Runs started now, without keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// With these keys, one per input.
    #[must_use]
    pub fn idempotency_keys(mut self, keys: Vec<Option<String>>) -> Self {
        self.idempotency_keys = Some(keys);
        self
    }

    /// For this time.
    #[must_use]
    pub fn start_at(mut self, at: Option<DateTime<Utc>>) -> Self {
        self.start_at = at;
        self
    }

    /// This long after now, on the database's clock (in the place of a start time).
    #[must_use]
    pub fn start_after(mut self, delay: Option<std::time::Duration>) -> Self {
        self.start_after = delay;
        self
    }

    /// At this priority.
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }
}

/// The priority as the start functions take it: null for the default.
fn priority_arg(how: &StartRuns) -> Option<i16> {
    (how.priority != Priority::Normal).then(|| how.priority.level())
}

/// The start guards as the start functions take them (see `pgflow.take_start_guards`): null
/// for none.
fn guards_arg(how: &StartRuns) -> Option<Value> {
    let mut guards = serde_json::Map::new();
    if let Some(throttle) = &how.throttle {
        guards.insert(
            "throttle".to_owned(),
            serde_json::json!({
                "keys": throttle.keys,
                "seconds": whole_seconds(throttle.window),
                "drop": throttle.excess == Excess::Drop,
            }),
        );
    }
    if let Some(debounce) = &how.debounce {
        guards.insert(
            "debounce".to_owned(),
            serde_json::json!({
                "keys": debounce.keys,
                "seconds": whole_seconds(debounce.window),
            }),
        );
    }
    if let Some(keys) = &how.singleton_keys {
        guards.insert(
            "singleton".to_owned(),
            serde_json::json!({ "keys": keys, "wait": how.singleton_in_turn }),
        );
    }
    (!guards.is_empty()).then_some(Value::Object(guards))
}

/// [`start_flows`] with keys and a start time ([`StartRuns`]), saying for each input whether
/// its run was started or already existed under its key.
pub async fn start_flows_with(
    executor: impl PgExecutor<'_>,
    name: &str,
    inputs: &[Value],
    how: &StartRuns,
) -> Result<Vec<StartedRun>, EngineError> {
    let ids = new_run_ids(inputs, how);
    let runs = start_flows_as(executor, name, inputs, true, &ids, how).await?;
    Ok(with_outcomes(runs, ids, how))
}

/// Starts runs of exactly the concrete flow `flow_slug` (never resolved as an alias).
pub async fn start_concrete_flows(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    inputs: &[Value],
) -> Result<Vec<Run>, EngineError> {
    start_flows_as(executor, flow_slug, inputs, false, &None, &StartRuns::new()).await
}

/// [`start_concrete_flows`] with keys and a start time ([`StartRuns`]), saying for each input
/// whether its run was started or already existed under its key.
pub async fn start_concrete_flows_with(
    executor: impl PgExecutor<'_>,
    flow_slug: &str,
    inputs: &[Value],
    how: &StartRuns,
) -> Result<Vec<StartedRun>, EngineError> {
    let ids = new_run_ids(inputs, how);
    let runs = start_flows_as(executor, flow_slug, inputs, false, &ids, how).await?;
    Ok(with_outcomes(runs, ids, how))
}

/// The ids a keyed start gives its new runs, so that a run coming back under another id is
/// known to have existed already (or to hold the window that dropped the start). `None` when
/// no input has such a key: every run is new.
fn new_run_ids(inputs: &[Value], how: &StartRuns) -> Option<Vec<Uuid>> {
    let has_key = |keys: &Vec<Option<String>>| keys.iter().any(Option::is_some);
    let keyed = how.idempotency_keys.as_ref().is_some_and(has_key)
        || how
            .throttle
            .as_ref()
            .is_some_and(|t| t.excess == Excess::Drop && has_key(&t.keys))
        || how.debounce.as_ref().is_some_and(|d| has_key(&d.keys));
    keyed.then(|| inputs.iter().map(|_| Uuid::new_v4()).collect())
}

/// Pairs each run with what its start did: a run whose id is not the one its input was given
/// already existed, or held the throttle window that dropped the start.
fn with_outcomes(runs: Vec<Run>, ids: Option<Vec<Uuid>>, how: &StartRuns) -> Vec<StartedRun> {
    let other = if how.idempotency_keys.is_some() {
        StartOutcome::AlreadyExisted
    } else if how.debounce.is_some() {
        StartOutcome::Debounced
    } else {
        StartOutcome::Dropped
    };
    let outcome = |index: usize, run: &Run| match ids.as_ref().and_then(|ids| ids.get(index)) {
        Some(id) if *id != run.run_id => other,
        _ if run.waiting => StartOutcome::InLine,
        _ => StartOutcome::Started,
    };
    runs.into_iter()
        .enumerate()
        .map(|(index, run)| StartedRun {
            outcome: outcome(index, &run),
            run,
        })
        .collect()
}

/// The statement that starts runs by `call` and reads them back. A start that may put runs in
/// a singleton key's line also reads which did (`waiting`), through a volatile function: the
/// statement's own look would not see the lines the call wrote.
fn started_runs(how: &StartRuns, call: &str) -> String {
    // A delay counts from the database's clock: `$6`, the start time, becomes the time that
    // far from now (see `bind_start_time`).
    let call = if how.start_after.is_some() {
        call.replace("$6", "pgflow.clock() + make_interval(secs => $6)")
    } else {
        call.to_owned()
    };
    if how.singleton_in_turn && how.singleton_keys.is_some() {
        format!("select r.*, pgflow.waits_its_turn(r.run_id) as waiting from {call} r")
    } else {
        format!("select * from {call}")
    }
}

/// Binds a start's `$6`: its delay in seconds when it has one (see `started_runs`), else its
/// start time.
trait BindStartTime {
    fn bind_start_time(self, how: &StartRuns) -> Self;
}

impl<'q, O> BindStartTime
    for sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>
{
    fn bind_start_time(self, how: &StartRuns) -> Self {
        match how.start_after {
            Some(delay) => self.bind(delay.as_secs_f64()),
            None => self.bind(how.start_at),
        }
    }
}

/// The trace context a start records: the one given, else the current span's.
fn trace_context(how: &StartRuns) -> Option<String> {
    how.trace_context
        .clone()
        .or_else(crate::trace::current_trace_context)
}

async fn start_flows_as(
    executor: impl PgExecutor<'_>,
    name: &str,
    inputs: &[Value],
    resolve_alias: bool,
    run_ids: &Option<Vec<Uuid>>,
    how: &StartRuns,
) -> Result<Vec<Run>, EngineError> {
    let runs = sqlx::query_as::<_, Run>(&started_runs(
        how,
        "pgflow.start_flows($1, $2, $3, $4, $5, null, $6, $7, $8, $9, $10)",
    ))
    .bind(name)
    .bind(inputs)
    .bind(run_ids)
    .bind(resolve_alias)
    .bind(&how.idempotency_keys)
    .bind_start_time(how)
    .bind(trace_context(how))
    .bind(!how.typed_input)
    .bind(priority_arg(how))
    .bind(guards_arg(how))
    .fetch_all(executor)
    .await?;
    Ok(runs)
}

/// Starts one run per input on `alias`'s active version, which must record exactly `types`
/// (see [`FlowTypes`]); otherwise [`EngineError::AliasTypeMismatch`] and nothing starts.
pub async fn start_alias_typed(
    executor: impl PgExecutor<'_>,
    alias: &str,
    inputs: &[Value],
    types: &FlowTypes,
) -> Result<Vec<Run>, EngineError> {
    start_alias_typed_as(executor, alias, inputs, types, &None, &StartRuns::new()).await
}

/// [`start_alias_typed`] with keys (scoped by the alias) and a start time ([`StartRuns`]),
/// saying for each input whether its run was started or already existed under its key.
pub async fn start_alias_typed_with(
    executor: impl PgExecutor<'_>,
    alias: &str,
    inputs: &[Value],
    types: &FlowTypes,
    how: &StartRuns,
) -> Result<Vec<StartedRun>, EngineError> {
    let ids = new_run_ids(inputs, how);
    let runs = start_alias_typed_as(executor, alias, inputs, types, &ids, how).await?;
    Ok(with_outcomes(runs, ids, how))
}

async fn start_alias_typed_as(
    executor: impl PgExecutor<'_>,
    alias: &str,
    inputs: &[Value],
    types: &FlowTypes,
    run_ids: &Option<Vec<Uuid>>,
    how: &StartRuns,
) -> Result<Vec<Run>, EngineError> {
    let runs = sqlx::query_as::<_, Run>(&started_runs(
        how,
        "pgflow.start_alias_typed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    ))
    .bind(alias)
    .bind(inputs)
    .bind(&types.input)
    .bind(&types.output)
    .bind(&how.idempotency_keys)
    .bind_start_time(how)
    .bind(trace_context(how))
    .bind(run_ids)
    .bind(priority_arg(how))
    .bind(guards_arg(how))
    .fetch_all(executor)
    .await?;
    Ok(runs)
}

/// The flow input a run was started with.
pub async fn run_input(executor: impl PgExecutor<'_>, run_id: Uuid) -> Result<Value, EngineError> {
    let input = sqlx::query_scalar("select input from pgflow.all_runs where run_id = $1 limit 1")
        .bind(run_id)
        .fetch_optional(executor)
        .await?;
    input.ok_or_else(|| EngineError::UnknownRun { run_id })
}

/// A run by id.
pub async fn run(executor: impl PgExecutor<'_>, run_id: Uuid) -> Result<Run, EngineError> {
    let run = sqlx::query_as::<_, Run>(&format!(
        "select r.*, {RUN_WAITING} as waiting from pgflow.all_runs r where r.run_id = $1 limit 1"
    ))
    .bind(run_id)
    .fetch_optional(executor)
    .await?;
    run.ok_or_else(|| EngineError::UnknownRun { run_id })
}

/// The error of the step that failed a run, if any.
pub async fn run_error(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Option<(String, String)>, EngineError> {
    let failed = sqlx::query_as(
        "select step_slug, coalesce(error_message, 'failed') from pgflow.all_step_states
         where run_id = $1 and status = 'failed' order by failed_at limit 1",
    )
    .bind(run_id)
    .fetch_optional(executor)
    .await?;
    Ok(failed)
}

/// The state of one step within a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize, serde::Deserialize)]
#[sqlx(type_name = "text", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StepStatus {
    /// Waiting for its dependencies (or for its condition to be decided).
    Created,
    /// Its dependencies are done and it waits for its signal (no task exists yet).
    Waiting,
    /// Its tasks are queued or running.
    Started,
    /// Every task completed; it has its output.
    Completed,
    /// A task ran out of attempts (or it could not start).
    Failed,
    /// Its condition was not met, a task out of attempts skipped it, or a dependency was
    /// skipped with a cascade.
    Skipped,
    /// Its run was cancelled before it ended.
    Cancelled,
}

impl StepStatus {
    /// Whether the step has ended (completed, failed, skipped or cancelled).
    pub fn is_ended(self) -> bool {
        !matches!(self, Self::Created | Self::Waiting | Self::Started)
    }
}

/// One step of a run as a caller sees it: status, attempts, output and error.
#[derive(Debug, Clone, PartialEq, FromRow, serde::Serialize)]
#[non_exhaustive]
pub struct StepState {
    /// The step.
    pub step_slug: String,
    /// Where it stands.
    pub status: StepStatus,
    /// Why it was skipped (`condition_unmet`, `handler_failed`, `dependency_skipped`,
    /// `timed_out`).
    pub skip_reason: Option<String>,
    /// How many tasks it has (`None` until it started; a map step's element count).
    pub tasks: Option<i32>,
    /// How many of them are not done yet.
    pub remaining_tasks: Option<i32>,
    /// The highest attempt of any of its tasks (`None` before any task exists).
    pub max_attempt: Option<i32>,
    /// Its error, or else the latest error of one of its tasks.
    pub error: Option<String>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it completed, failed, was skipped or cancelled.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its output, once completed (a map step's is the array of its elements' outputs).
    pub output: Option<Value>,
}

/// Each step of the run `run_id`, in the flow's step order (`pgflow.run_step_states`).
pub async fn run_step_states(
    executor: impl PgExecutor<'_>,
    run_id: Uuid,
) -> Result<Vec<StepState>, EngineError> {
    let rows = sqlx::query_as::<_, StepState>(
        "select step_slug, status, skip_reason, tasks, remaining_tasks, max_attempt, error,
                started_at, ended_at, output
         from pgflow.run_step_states($1)",
    )
    .bind(run_id)
    .fetch_all(executor)
    .await?;
    Ok(rows)
}
