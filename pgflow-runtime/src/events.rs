//! Live run and step events. The SQL core notifies every run and step transition on the channel
//! `pgflow_events.<flow_slug>` (see `functions/16_events.sql`); a [`Client`](crate::Client)
//! listens through its one notification listener (shared with its workers' wake-ups) and hands
//! each stream the events of its flow.
//!
//! [`RunEvents`] follows one run: it starts from the run's current state, reads the state again
//! whenever it cannot trust the notifications (after a lost connection, or a notification that
//! would move a status backwards because it was committed before the state it was read with),
//! and ends with the run's final event. [`FlowEvents`] follows every run of a flow, from now on.
//! When the client listens nowhere (behind a transaction-mode pooler without a listen URL, or
//! with notifications off) both read the state every 250 ms instead.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::db::Db;
use crate::engine::{self, RunStatus, StepStatus};
use crate::error::EngineError;
use crate::process::Shared;
use crate::process::notifier::{Notifier, Signal};

/// How often a stream reads the state when no notification comes (a safety net; and the only
/// source behind a transaction-mode pooler).
const POLL_EVERY: Duration = Duration::from_millis(250);
/// With notifications, how long a run stream trusts silence before reading the state again.
const RESYNC_EVERY: Duration = Duration::from_secs(1);

/// One transition of a run or of one of its steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunEvent {
    /// The run's status is now `status`.
    Run {
        /// The run.
        run_id: Uuid,
        /// Its concrete flow.
        flow_slug: String,
        /// Its status.
        status: RunStatus,
    },
    /// A step of the run is now `status` (never `created`).
    Step {
        /// The run.
        run_id: Uuid,
        /// Its concrete flow.
        flow_slug: String,
        /// The step.
        step_slug: String,
        /// Its status.
        status: StepStatus,
    },
}

impl RunEvent {
    /// The run the event belongs to.
    pub fn run_id(&self) -> Uuid {
        match self {
            Self::Run { run_id, .. } | Self::Step { run_id, .. } => *run_id,
        }
    }

    /// Whether this event ends its run (a run event with an ended status).
    pub fn ends_run(&self) -> bool {
        matches!(self, Self::Run { status, .. } if status.is_ended())
    }
}

/// The notification channel of a flow's events.
pub fn events_channel(flow_slug: &str) -> String {
    format!("pgflow_events.{flow_slug}")
}

/// What the shared listener hands its subscribers.
#[derive(Debug, Clone)]
enum HubMessage {
    /// A notification.
    Event(RunEvent),
    /// The connection was lost and is back: notifications may have been missed.
    Reconnected,
}

/// The run events a client's streams follow: one task that listens through the client's
/// notifier (see [`crate::process`]) and broadcasts every event to the streams. It lives while
/// any stream of the client does (each holds it), and gives up its leases when the last ends.
pub(crate) struct EventHub {
    db: Db,
    state: Mutex<Option<HubHandle>>,
}

struct HubHandle {
    messages: broadcast::Sender<HubMessage>,
    listen: mpsc::UnboundedSender<(String, oneshot::Sender<()>)>,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub").finish_non_exhaustive()
    }
}

impl EventHub {
    /// The hub of `shared`'s client: one while any of its streams lives.
    fn of(shared: &Shared) -> Arc<Self> {
        let Ok(hub) = shared.values.get_or_make((), || {
            Ok::<_, Infallible>(Arc::new(Self {
                db: shared.db.clone(),
                state: Mutex::new(None),
            }))
        });
        hub
    }

    /// A receiver of `flow_slug`'s events, listening before it returns; `None` when the client
    /// listens nowhere (behind a transaction-mode pooler without a listen URL, or with
    /// notifications off) or the listener does not answer within 5 s: streams then poll.
    async fn subscribe(
        &self,
        shared: &Shared,
        flow_slug: &str,
    ) -> Option<broadcast::Receiver<HubMessage>> {
        let notifier = shared.notifier()?;
        let (receiver, listen) = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let alive = state.as_ref().is_some_and(|h| !h.listen.is_closed());
            if !alive {
                *state = Some(start_hub(&self.db, notifier));
            }
            let handle = state.as_ref()?;
            (handle.messages.subscribe(), handle.listen.clone())
        };
        let (done, listening) = oneshot::channel();
        listen.send((events_channel(flow_slug), done)).ok()?;
        // Without an answer (the listener cannot connect) the stream polls.
        tokio::time::timeout(Duration::from_secs(5), listening)
            .await
            .ok()?
            .ok()?;
        Some(receiver)
    }
}

/// How long a lease on a flow's events lasts (see `pgflow.subscribe_events`).
const LEASE_SECONDS: i32 = 60;
/// How often the hub renews its leases.
const RENEW_EVERY: Duration = Duration::from_secs(20);

/// Takes or renews the hub's leases on the events of `flows` (the triggers notify a flow only
/// while someone holds one). A failure is logged: streams then learn of transitions by reading
/// the state, every [`RESYNC_EVERY`].
async fn lease(db: &Db, subscriber: Uuid, flows: &[String]) {
    if flows.is_empty() {
        return;
    }
    if let Err(error) = engine::subscribe_events(db, subscriber, flows, LEASE_SECONDS).await {
        tracing::warn!(
            %error,
            "cannot subscribe to run events; streams read the state every second instead"
        );
    }
}

/// Starts the hub's task: a topic of the client's notifier, listening on each flow's channel
/// asked for, every notification broadcast as an event; after the notifier reconnects it says
/// so. It holds a lease on each flow it listens to (renewed every [`RENEW_EVERY`], given up when
/// the client is dropped), without which the triggers send nothing.
fn start_hub(db: &Db, notifier: &Notifier) -> HubHandle {
    let (messages, _) = broadcast::channel(4096);
    let (listen, mut requests) = mpsc::unbounded_channel::<(String, oneshot::Sender<()>)>();
    let (topic, mut signals) = notifier.topic();
    let sender = messages.clone();
    let db = db.clone();
    tokio::spawn(async move {
        let subscriber = Uuid::new_v4();
        let mut flows: Vec<String> = Vec::new();
        let mut renew = tokio::time::interval(RENEW_EVERY);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                request = requests.recv() => {
                    let Some((channel, done)) = request else { break };
                    if let Some(flow) = channel.strip_prefix("pgflow_events.")
                        && !flows.iter().any(|f| f == flow)
                    {
                        // The lease first: a transition committed once the lease and the
                        // LISTEN are in place is notified.
                        lease(&db, subscriber, &[flow.to_owned()]).await;
                        flows.push(flow.to_owned());
                    }
                    if topic.listen(channel).await {
                        let _ = done.send(());
                    }
                }
                _ = renew.tick() => lease(&db, subscriber, &flows).await,
                signal = signals.recv() => match signal {
                    Some(Signal::Notified { payload, .. }) => {
                        if let Ok(event) = serde_json::from_str::<RunEvent>(&payload) {
                            let _ = sender.send(HubMessage::Event(event));
                        }
                    }
                    Some(Signal::Connected) => {
                        lease(&db, subscriber, &flows).await;
                        let _ = sender.send(HubMessage::Reconnected);
                    }
                    None => break,
                },
            }
        }
        // The client is gone: give the leases up (they run out anyway).
        drop(topic);
        let _ = engine::unsubscribe_events(&db, subscriber).await;
    });
    HubHandle { messages, listen }
}

/// What a run stream knows of the run: the statuses it has reported.
#[derive(Default)]
struct Known {
    run: Option<RunStatus>,
    steps: HashMap<String, StepStatus>,
}

/// How far along a status is: a notification that would go back is not trusted.
fn rank_step(status: StepStatus) -> u8 {
    match status {
        StepStatus::Created => 0,
        StepStatus::Started => 1,
        _ => 2,
    }
}

fn rank_run(status: RunStatus) -> u8 {
    u8::from(status.is_ended())
}

/// The events of one run, from its current state to its end.
pub struct RunEvents {
    /// The client's hub, held while the stream lives.
    _hub: Arc<EventHub>,
    db: Db,
    run_id: Uuid,
    flow_slug: String,
    receiver: Option<broadcast::Receiver<HubMessage>>,
    known: Known,
    pending: VecDeque<RunEvent>,
    ended: bool,
}

impl RunEvents {
    pub(crate) async fn start(shared: &Shared, run_id: Uuid) -> Result<Self, EngineError> {
        let hub = EventHub::of(shared);
        let run = engine::run(&hub.db, run_id).await?;
        // Listen first, then read: nothing committed between the two is lost.
        let receiver = hub.subscribe(shared, &run.flow_slug).await;
        let mut events = Self {
            db: hub.db.clone(),
            _hub: hub,
            run_id,
            flow_slug: run.flow_slug,
            receiver,
            known: Known::default(),
            pending: VecDeque::new(),
            ended: false,
        };
        events.resync().await?;
        Ok(events)
    }

    /// The run.
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// The next event, or `None` once the run's final event was returned.
    pub async fn next(&mut self) -> Option<Result<RunEvent, EngineError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.ends_run() {
                    self.ended = true;
                    self.pending.clear();
                }
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            if let Err(error) = self.wait_for_news().await {
                return Some(Err(error));
            }
        }
    }

    /// Waits for notifications (or the polling interval) and queues what is new.
    async fn wait_for_news(&mut self) -> Result<(), EngineError> {
        let Some(receiver) = self.receiver.as_mut() else {
            tokio::time::sleep(POLL_EVERY).await;
            return self.resync().await;
        };
        let received = tokio::time::timeout(RESYNC_EVERY, receiver.recv()).await;
        match received {
            Ok(Ok(HubMessage::Event(event))) if event.run_id() == self.run_id => {
                if !self.accept(event) {
                    self.resync().await?;
                }
            }
            Ok(Ok(HubMessage::Event(_))) => {}
            // Reconnected, fell behind the broadcast, or silence: read the state.
            Ok(Ok(HubMessage::Reconnected) | Err(broadcast::error::RecvError::Lagged(_))) => {
                self.resync().await?;
            }
            Ok(Err(broadcast::error::RecvError::Closed)) => {
                self.receiver = None;
                self.resync().await?;
            }
            Err(_silence) => self.resync().await?,
        }
        Ok(())
    }

    /// Queues a notified event that moves forward; `false` when it would move a status back
    /// (committed before what was read, or a retry): then the state is read instead.
    fn accept(&mut self, event: RunEvent) -> bool {
        match &event {
            RunEvent::Run { status, .. } => {
                let known = self.known.run.map_or(0, rank_run);
                if self.known.run == Some(*status) {
                    return true;
                }
                if rank_run(*status) < known {
                    return false;
                }
                self.known.run = Some(*status);
            }
            RunEvent::Step {
                step_slug, status, ..
            } => {
                let known = self.known.steps.get(step_slug).copied();
                if known == Some(*status) {
                    return true;
                }
                if known.is_some_and(|k| rank_step(*status) < rank_step(k)) {
                    return false;
                }
                self.known.steps.insert(step_slug.clone(), *status);
            }
        }
        self.pending.push_back(event);
        true
    }

    /// Reads the run and its steps and queues what changed since the last report: step
    /// events in step order, after the run's event while it is going and before it once it
    /// ended.
    async fn resync(&mut self) -> Result<(), EngineError> {
        let steps = engine::run_step_states(&self.db, self.run_id).await?;
        let run = engine::run(&self.db, self.run_id).await?;
        // A run still going is reported before its steps; an ended one after them.
        let run_event = (self.known.run != Some(run.status)).then(|| RunEvent::Run {
            run_id: self.run_id,
            flow_slug: self.flow_slug.clone(),
            status: run.status,
        });
        self.known.run = Some(run.status);
        let mut run_event = run_event;
        if !run.status.is_ended()
            && let Some(event) = run_event.take()
        {
            self.pending.push_back(event);
        }
        for step in steps {
            if step.status == StepStatus::Created
                || self.known.steps.get(&step.step_slug) == Some(&step.status)
            {
                continue;
            }
            self.known.steps.insert(step.step_slug.clone(), step.status);
            self.pending.push_back(RunEvent::Step {
                run_id: self.run_id,
                flow_slug: self.flow_slug.clone(),
                step_slug: step.step_slug,
                status: step.status,
            });
        }
        if let Some(event) = run_event {
            self.pending.push_back(event);
        }
        Ok(())
    }
}

/// The events of every run of one flow, from now on. Events committed while the listening
/// connection was down are not replayed: after [`FlowEvent::Reconnected`], read the runs you
/// follow again.
pub struct FlowEvents {
    /// The client's hub, held while the stream lives.
    _hub: Arc<EventHub>,
    receiver: Option<broadcast::Receiver<HubMessage>>,
    flow_slug: String,
}

/// What a flow stream yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlowEvent {
    /// A transition.
    Event(RunEvent),
    /// The listening connection was lost and is back; transitions in between were missed.
    Reconnected,
}

impl FlowEvents {
    pub(crate) async fn start(shared: &Shared, flow_slug: &str) -> Result<Self, EngineError> {
        let hub = EventHub::of(shared);
        let receiver = hub.subscribe(shared, flow_slug).await;
        if receiver.is_none() {
            return Err(EngineError::InvalidArguments(
                "flow events need LISTEN, and this client listens nowhere (a transaction-mode \
                 pooler cannot carry LISTEN, or notifications are off) or its listener does \
                 not answer; follow single runs (they poll), or give the client a direct \
                 `ProcessConfig::listen_url`"
                    .to_owned(),
            ));
        }
        Ok(Self {
            _hub: hub,
            receiver,
            flow_slug: flow_slug.to_owned(),
        })
    }

    /// The next event of the flow; `None` when the client is gone.
    pub async fn next(&mut self) -> Option<FlowEvent> {
        let receiver = self.receiver.as_mut()?;
        loop {
            match receiver.recv().await {
                Ok(HubMessage::Event(event)) => match &event {
                    RunEvent::Run { flow_slug, .. } | RunEvent::Step { flow_slug, .. }
                        if *flow_slug == self.flow_slug =>
                    {
                        return Some(FlowEvent::Event(event));
                    }
                    _ => {}
                },
                Ok(HubMessage::Reconnected) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    return Some(FlowEvent::Reconnected);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
