//! Typed calls into the SQL core (schema `pgflow`): one function per SQL entry point. This
//! module, its children and the read models of [`crate::admin`] are the only places in the
//! runtime that write SQL text.
//!
//! **Stability:** the lower layer under [`Client`](crate::Client) and the workers. Its calls
//! follow the SQL core's entry points, whose signatures change only with a new schema version;
//! it is public so that callers can make a call part of their own transaction and so that the
//! SQL core can be driven by hand (`examples/sql_quickstart.rs`), but before 1.0 it may change
//! in any minor release. Prefer [`Client`](crate::Client) and [`Worker`](crate::Worker).
//!
//! One file per SQL area, named like the SQL files in `pgflow-sql/functions/`:
//! [`definitions`], [`runs`], [`claims`], [`completion`], [`recovery`], [`workers`],
//! [`maintenance`], [`aliases_rollouts`], [`events`], [`retention`], [`run_control`],
//! [`schedules`], [`signals`]. Every item is also re-exported here, so `pgflow::engine::start_flow` is the
//! path to use.
//!
//! Every function takes any executor (a pool, a connection or a transaction), so callers can
//! make a call part of their own transaction.

pub mod aliases_rollouts;
pub mod claims;
pub mod completion;
pub mod definitions;
pub mod events;
pub mod flow_control;
pub mod maintenance;
pub mod recovery;
pub mod retention;
pub mod run_control;
pub mod runs;
pub mod schedules;
pub mod signals;
pub mod subflows;
pub mod workers;

pub use aliases_rollouts::{
    Activation, DrainStatus, LiveWorker, Rollout, activate_flow, alias_state, begin_rollout,
    drain_status, finish_rollout, functions_serving_queues, rollout_progress, rollouts, set_alias,
};
pub use claims::{
    Claim, ClaimedTask, ReleasedClaims, SupportedPairs, TaskKey, claims_at_release,
    next_message_in, read_and_start_tasks, start_tasks,
};
pub use completion::{
    ClaimedAtRelease, CompletedAndClaimed, FailureOutcome, TaskCompletion, TaskFailure,
    complete_and_claim_tasks, complete_tasks, count_stored_completions, fail_tasks,
};
pub use definitions::{CompileStatus, compile_flow};
pub use events::{subscribe_events, unsubscribe_events};
pub use flow_control::{
    begin_deferred_runs, pause_flow, pause_queue, release_capped_tasks, resume_flow, resume_queue,
    set_priority_aging, set_queue_concurrency,
};
pub use maintenance::{refresh_statistics, sample_trends, vacuum_tables};
pub use recovery::{StalledTask, requeue_stalled_tasks};
pub use retention::{
    Archived, Pruned, archive_all, archive_runs, drop_pruned_history, prune, prune_all,
    prune_preview,
};
pub use run_control::{
    Cancellation, DeletedFlow, Resumed, Retry, RunFilter, cancel_matching, cancel_runs,
    delete_flow, resume_matching, resume_run, retry_matching, retry_runs,
};
pub(crate) use runs::RUN_WAITING;
pub use runs::{
    Debounce, Excess, Priority, Run, RunStatus, StartOutcome, StartRuns, StartedRun, StepState,
    StepStatus, Throttle, run, run_error, run_input, run_step_states, shown_status,
    shown_step_status, start_alias_typed, start_alias_typed_with, start_concrete_flows,
    start_concrete_flows_with, start_flow, start_flows, start_flows_with,
};
pub use schedules::{
    ScheduleRow, ScheduleToFire, define_schedule, delete_schedule, fire_schedule, pause_schedule,
    schedule_list, schedules_to_fire, trigger_schedule,
};
pub use signals::{
    CallbackOutcome, EventDelivery, ExpiredWaits, SignalOutcome, emit_event, emit_events,
    event_key, expire_waits, send_signal, send_signal_by_token, send_signal_value, signal_payload,
    signal_token,
};
pub use subflows::{ChildRun, run_children, settle_subflows};
pub use workers::{
    CoverageGap, Heartbeat, LostWorker, deprecate_workers, function_enabled, heartbeat,
    mark_lost_workers, queue_channel, queue_coverage_gaps, register_worker, request_wakeups,
    stop_worker, withdraw_wakeups,
};
