//! One way to start runs: [`Client::start`] (one run), [`Client::start_many`] (one per input,
//! in one transaction) and [`Client::start_in`] (inside the caller's transaction), each naming
//! what to start with a [`Start`] and taking [`StartOptions`].

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::PgExecutor;

use super::{Client, RunHandle};
use crate::definition::FlowTypes;
use crate::deployment::FlowSpec;
use crate::engine::{self, Debounce, Excess, Priority, StartRuns, StartedRun, Throttle};
use crate::error::EngineError;

/// What a start names, with the types of its input `I` and output `O`.
///
/// - [`Start::flow::<F>()`](Start::flow): exactly the concrete flow `F` (typed).
/// - [`Start::alias_of::<F>()`](Start::alias_of): `F`'s alias, typed: the run goes to the
///   alias's active version, which must take `F::Input` and produce `F::Output`.
/// - [`Start::named(name)`](Start::named): an alias (its active version) or a concrete flow by
///   name; the output is untyped JSON since versions may differ.
///
/// ```no_run
/// # use pgflow::{Client, Start, StartOptions, EngineError};
/// # async fn demo(client: &Client) -> Result<(), EngineError> {
/// let run = client
///     .start(Start::named("triage"), &serde_json::json!({"thread_id": 7}), StartOptions::new())
///     .await?;
/// # Ok(()) }
/// ```
pub struct Start<I: ?Sized, O> {
    target: Target,
    types: PhantomData<Types<I, O>>,
}

/// The input a start takes and the output its run gives (variance and auto traits of
/// functions: a `Start` is `Send` and `Sync` whatever `I` and `O` are).
type Types<I, O> = (fn(&I), fn() -> O);

impl<I: ?Sized, O> std::fmt::Debug for Start<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Start")
            .field("target", &self.target)
            .finish()
    }
}

impl<I: ?Sized, O> Clone for Start<I, O> {
    fn clone(&self) -> Self {
        Self {
            target: self.target.clone(),
            types: PhantomData,
        }
    }
}

/// What the SQL core is asked to start.
#[derive(Debug, Clone)]
enum Target {
    /// Exactly this concrete flow.
    Flow(&'static str),
    /// This alias's active version, which must record these types.
    AliasTyped {
        alias: &'static str,
        types: FlowTypes,
    },
    /// An alias or a concrete flow, by name.
    Named(String),
}

impl<I: ?Sized, O> Start<I, O> {
    /// Exactly the concrete flow `F`.
    pub fn flow<F: FlowSpec<Input = I, Output = O>>() -> Self
    where
        I: Sized,
    {
        Self {
            target: Target::Flow(F::SLUG),
            types: PhantomData,
        }
    }

    /// `F`'s alias, typed: the run goes to the alias's active version at this moment (the run
    /// keeps it), which may be `F` or another version taking `F::Input` and producing
    /// `F::Output`. Versions share those types when each declares the same `input` and `output`
    /// (`#[flow(alias = "triage", input = TriageInput, output = TriageOutput)]`); the SQL core
    /// checks the active version's recorded types in the same call, and a version with other
    /// types (or a generated `Output` of its own) is refused with
    /// [`EngineError::AliasTypeMismatch`] before anything starts.
    pub fn alias_of<F: FlowSpec<Input = I, Output = O>>() -> Self
    where
        I: Sized,
    {
        Self {
            target: Target::AliasTyped {
                alias: F::ALIAS,
                types: FlowTypes::of::<F::Input, F::Output>(),
            },
            types: PhantomData,
        }
    }

    /// The name started: the concrete flow, the alias, or the name given.
    pub fn name(&self) -> &str {
        match &self.target {
            Target::Flow(slug) => slug,
            Target::AliasTyped { alias, .. } => alias,
            Target::Named(name) => name,
        }
    }
}

impl<I: ?Sized + Serialize> Start<I, Value> {
    /// An alias (the run goes to its active version at this moment, and keeps it) or a
    /// concrete flow, by name; any serializable input, untyped output. An idempotency key is
    /// scoped by the name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            target: Target::Named(name.into()),
            types: PhantomData,
        }
    }
}

/// Options of a start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartOptions {
    /// The caller's idempotency key (1 to 255 characters), if any.
    pub idempotency_key: Option<String>,
    /// When the run's first tasks become visible (`None`: now, or after
    /// [`start_after`](Self::start_after)).
    pub start_at: Option<DateTime<Utc>>,
    /// How long after now, on the database's clock, the run's first tasks become visible (see
    /// [`start_after`](Self::start_after)).
    pub start_after: Option<Duration>,
    /// How urgent the run is (see [`Priority`]).
    pub priority: Priority,
    /// The run's throttle key, window and what an excess start does, if any (see
    /// [`throttle`](Self::throttle)).
    pub throttle: Option<(String, Duration, Excess)>,
    /// The run's singleton key, if any (see [`singleton`](Self::singleton)).
    pub singleton_key: Option<String>,
    /// Whether a start whose singleton key is held waits its turn rather than being refused
    /// (see [`singleton_in_turn`](Self::singleton_in_turn)).
    pub singleton_in_turn: bool,
    /// The run's debounce key and window, if any (see [`debounce`](Self::debounce)).
    pub debounce: Option<(String, Duration)>,
}

impl StartOptions {
    /// No options: a new run on every start, now.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the run at most once for `key` with the same flow or alias: a later start with
    /// the key gives back this run, as it stands, for as long as the run is kept (retention
    /// frees the key). The key must come with the same input each time; another input is
    /// [`EngineError::IdempotencyConflict`]. Concurrent starts with one key create one run.
    #[must_use]
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Starts the run for `time`: it exists at once (`Run::scheduled_for` records the time;
    /// `pgflow runs` shows it) and its first tasks become visible then, to the second. A past
    /// time starts it now.
    #[must_use]
    pub fn start_at(mut self, time: DateTime<Utc>) -> Self {
        self.start_at = Some(time);
        self.start_after = None;
        self
    }

    /// Starts the run at `priority`: on each queue, its ready tasks are claimed before those
    /// of lower priority (see [`Priority`] for the rule that keeps low ones from starving).
    #[must_use]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Starts at most one run for `key` (with the same flow or alias) in each `window`: the
    /// first start opens the window; a start with the key before it ends is refused
    /// ([`EngineError::Throttled`], nothing starts) or dropped (the window's run comes back,
    /// [`StartOutcome::Dropped`](crate::StartOutcome::Dropped)), as `excess` says. The window
    /// counts whole seconds (rounded up).
    #[must_use]
    pub fn throttle(mut self, key: impl Into<String>, window: Duration, excess: Excess) -> Self {
        self.throttle = Some((key.into(), window, excess));
        self
    }

    /// Starts the run only while no run with `key` (of the same flow or alias) is going:
    /// otherwise [`EngineError::SingletonBusy`] names that run, and nothing starts.
    #[must_use]
    pub fn singleton(mut self, key: impl Into<String>) -> Self {
        self.singleton_key = Some(key.into());
        self.singleton_in_turn = false;
        self
    }

    /// Runs one run with `key` (of the same flow or alias) at a time, in the order they were
    /// started: a start while a run of the key is going creates its run at once, which waits
    /// in the key's line ([`StartOutcome::InLine`](crate::StartOutcome::InLine); the run shows
    /// as `waiting`) and begins once the runs before it have ended, within about a second. A
    /// run cancelled in line never begins. Not with [`start_at`](Self::start_at).
    #[must_use]
    pub fn singleton_in_turn(mut self, key: impl Into<String>) -> Self {
        self.singleton_key = Some(key.into());
        self.singleton_in_turn = true;
        self
    }

    /// Makes one run of the starts with `key` (of the same flow or alias) that come less than
    /// `window` apart: the first creates the run, which waits (`scheduled`, no step begun);
    /// each later one gives it its own input and moves its begin to `window` from then, and
    /// gets that run back ([`StartOutcome::Debounced`](crate::StartOutcome::Debounced)). The
    /// run begins `window` after the last start, with the last input. The window counts whole
    /// seconds (rounded up).
    #[must_use]
    pub fn debounce(mut self, key: impl Into<String>, window: Duration) -> Self {
        self.debounce = Some((key.into(), window));
        self
    }

    /// Starts the run `delay` from now, as [`start_at`](Self::start_at) does for a time. Now is
    /// the database's time (`pgflow.clock()`), not this machine's: a machine whose clock is off
    /// still starts it `delay` from now, and under the test kit's clock
    /// (`pgflow::testing`, feature `testing`) the delay counts on the test's time.
    #[must_use]
    pub fn start_after(mut self, delay: Duration) -> Self {
        self.start_after = Some(delay);
        self.start_at = None;
        self
    }
}

impl Client {
    /// Starts one run of `what` with `input` and `options` (`StartOptions::new()`, or a
    /// reference to options of your own).
    ///
    /// A flow's module has the typed shorthands: `triage_v1::start(&client, &input)` is
    /// `client.start(Start::flow::<triage_v1::Flow>(), &input, StartOptions::new())`.
    pub async fn start<I, O>(
        &self,
        what: Start<I, O>,
        input: &I,
        options: impl Borrow<StartOptions>,
    ) -> Result<RunHandle<O>, EngineError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        self.start_in(self.db(), what, input, options).await
    }

    /// Starts one run of `what` per input, in one transaction, in input order (all on one
    /// version of an alias). `options` holds none (every run with the defaults), one (for
    /// every run) or one per input; the runs of one call share their start time.
    pub async fn start_many<I, O>(
        &self,
        what: Start<I, O>,
        inputs: &[I],
        options: &[StartOptions],
    ) -> Result<Vec<RunHandle<O>>, EngineError>
    where
        I: Serialize,
        O: DeserializeOwned,
    {
        let inputs = inputs
            .iter()
            .map(encode_input)
            .collect::<Result<Vec<_>, _>>()?;
        let how = start_runs(inputs.len(), options)?;
        let runs = start_runs_of(self.db(), &what.target, &inputs, &how).await?;
        Ok(runs.iter().map(RunHandle::of_start).collect())
    }

    /// [`start`](Self::start) inside the caller's transaction (or on any executor): the run
    /// exists, and its first tasks are visible to workers, once that transaction commits, and
    /// not at all if it rolls back.
    ///
    /// ```no_run
    /// # use pgflow::{Client, Start, StartOptions, EngineError};
    /// # async fn demo(client: &Client) -> Result<(), EngineError> {
    /// let mut tx = client.pool().begin().await?;
    /// // ... the application's own writes in `tx` ...
    /// let run = client
    ///     .start_in(&mut *tx, Start::named("triage"), &7, StartOptions::new())
    ///     .await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_in<'c, I, O>(
        &self,
        executor: impl PgExecutor<'c>,
        what: Start<I, O>,
        input: &I,
        options: impl Borrow<StartOptions>,
    ) -> Result<RunHandle<O>, EngineError>
    where
        I: Serialize + ?Sized,
        O: DeserializeOwned,
    {
        let inputs = [encode_input(input)?];
        let how = start_runs(1, std::slice::from_ref(options.borrow()))?;
        let runs = start_runs_of(executor, &what.target, &inputs, &how).await?;
        runs.first()
            .map(RunHandle::of_start)
            .ok_or_else(|| EngineError::UnknownFlow {
                flow_slug: what.name().to_owned(),
            })
    }
}

/// The engine's form of `options` for `count` runs: none, one for all, or one each.
fn start_runs(count: usize, options: &[StartOptions]) -> Result<StartRuns, EngineError> {
    let shared_or_each = match options.len() {
        0 => return Ok(StartRuns::new()),
        1 => vec![&options[0]; count],
        n if n == count => options.iter().collect(),
        n => {
            return Err(EngineError::InvalidArguments(format!(
                "start_many: {n} options for {count} inputs; give none, one for every run, or \
                 one per input"
            )));
        }
    };
    let (start_at, start_after) = (options[0].start_at, options[0].start_after);
    if options
        .iter()
        .any(|o| o.start_at != start_at || o.start_after != start_after)
    {
        return Err(EngineError::InvalidArguments(
            "start_many: the runs of one call share their start time; start runs for other \
             times in calls of their own"
                .to_owned(),
        ));
    }
    let priority = options[0].priority;
    if options.iter().any(|o| o.priority != priority) {
        return Err(EngineError::InvalidArguments(
            "start_many: the runs of one call share their priority; start runs of other \
             priorities in calls of their own"
                .to_owned(),
        ));
    }
    let throttle = throttle_of(&shared_or_each)?;
    let debounce = debounce_of(&shared_or_each)?;
    let singleton_keys: Vec<Option<String>> = shared_or_each
        .iter()
        .map(|o| o.singleton_key.clone())
        .collect();
    let singleton_keys = singleton_keys
        .iter()
        .any(Option::is_some)
        .then_some(singleton_keys);
    let mut in_turn = shared_or_each
        .iter()
        .filter(|o| o.singleton_key.is_some())
        .map(|o| o.singleton_in_turn);
    let singleton_in_turn = in_turn.next().unwrap_or(false);
    if in_turn.any(|other| other != singleton_in_turn) {
        return Err(EngineError::InvalidArguments(
            "start_many: the singleton starts of one call either all wait their turn or all \
             refuse a held key; start the others in a call of their own"
                .to_owned(),
        ));
    }
    let keys: Vec<Option<String>> = shared_or_each
        .iter()
        .map(|o| o.idempotency_key.clone())
        .collect();
    let keys = keys.iter().any(Option::is_some).then_some(keys);
    Ok(StartRuns {
        idempotency_keys: keys,
        start_at,
        start_after,
        trace_context: None,
        typed_input: false,
        priority,
        throttle,
        singleton_keys,
        singleton_in_turn,
        debounce,
    })
}

/// The debounce of a call: one key per input, one window for all.
fn debounce_of(options: &[&StartOptions]) -> Result<Option<Debounce>, EngineError> {
    let mut windows = options
        .iter()
        .filter_map(|o| o.debounce.as_ref().map(|d| d.1));
    let Some(window) = windows.next() else {
        return Ok(None);
    };
    if windows.any(|other| other != window) {
        return Err(EngineError::InvalidArguments(
            "start_many: the runs of one call share their debounce window; start runs with \
             others in calls of their own"
                .to_owned(),
        ));
    }
    let keys = options
        .iter()
        .map(|o| o.debounce.as_ref().map(|(key, _)| key.clone()))
        .collect();
    Ok(Some(Debounce::new(keys, window)))
}

/// The throttle of a call: one key per input, one window and excess for all.
fn throttle_of(options: &[&StartOptions]) -> Result<Option<Throttle>, EngineError> {
    let mut shared = None;
    for (_, window, excess) in options.iter().filter_map(|o| o.throttle.as_ref()) {
        match shared {
            None => shared = Some((*window, *excess)),
            Some(first) if first != (*window, *excess) => {
                return Err(EngineError::InvalidArguments(
                    "start_many: the runs of one call share their throttle window and excess; \
                     start runs with others in calls of their own"
                        .to_owned(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(shared.map(|(window, excess)| {
        let keys = options
            .iter()
            .map(|o| o.throttle.as_ref().map(|(key, _, _)| key.clone()))
            .collect();
        Throttle::new(keys, window, excess)
    }))
}

/// Calls the engine's start for `target`. The inputs of a typed target come from the flow's
/// own input type, so the SQL core does not check them against its input schema.
async fn start_runs_of<'c>(
    executor: impl PgExecutor<'c>,
    target: &Target,
    inputs: &[Value],
    how: &StartRuns,
) -> Result<Vec<StartedRun>, EngineError> {
    let runs = match target {
        Target::Flow(slug) => {
            let typed = StartRuns {
                typed_input: true,
                ..how.clone()
            };
            engine::start_concrete_flows_with(executor, slug, inputs, &typed).await
        }
        Target::AliasTyped { alias, types } => {
            engine::start_alias_typed_with(executor, alias, inputs, types, how).await
        }
        Target::Named(name) => engine::start_flows_with(executor, name, inputs, how).await,
    }?;
    let name = match target {
        Target::Flow(name) | Target::AliasTyped { alias: name, .. } => name,
        Target::Named(name) => name.as_str(),
    };
    crate::metrics::runs_started(name, runs.len());
    Ok(runs)
}

/// A flow input as JSON.
fn encode_input<I: Serialize + ?Sized>(input: &I) -> Result<Value, EngineError> {
    serde_json::to_value(input).map_err(|source| EngineError::Encode {
        what: "a flow input",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_none_one_for_all_or_one_each() {
        assert_eq!(start_runs(3, &[]).unwrap(), StartRuns::new());

        let keyed = StartOptions::new().idempotency_key("k");
        let all = start_runs(2, std::slice::from_ref(&keyed)).unwrap();
        assert_eq!(
            all.idempotency_keys,
            Some(vec![Some("k".to_owned()), Some("k".to_owned())])
        );

        let each = start_runs(2, &[StartOptions::new(), keyed.clone()]).unwrap();
        assert_eq!(
            each.idempotency_keys,
            Some(vec![None, Some("k".to_owned())])
        );

        let error = start_runs(3, &[StartOptions::new(), keyed]).unwrap_err();
        assert!(
            error.to_string().contains("2 options for 3 inputs"),
            "{error}"
        );

        let later = StartOptions::new().start_after(Duration::from_secs(60));
        let error = start_runs(2, &[StartOptions::new(), later]).unwrap_err();
        assert!(
            error.to_string().contains("share their start time"),
            "{error}"
        );
    }
}
