//! The client's one notification listener: one `LISTEN` connection (outside the pool) and one
//! reconnect loop for everything the client's workers and streams listen to.
//!
//! A user of it opens a [`Topic`]: a stream of [`Signal`]s for the channels it listens to, and
//! a place to hold session state on the listening connection (the queue wake-up requests of
//! `pgflow.request_wakeups`, which live as long as the session that made them). The notifier
//! remembers what every topic asked for; after a lost connection it reconnects with the
//! runtime's [`Backoff`], listens again, makes the requests again, and then tells every topic
//! [`Signal::Connected`]: notifications may have been missed meanwhile.
//!
//! A topic's signals go to its [`Sink`]: a channel to a task of its own, or a sink that acts on
//! the listening task at once (a queue's wake-up wakes an idle worker from here when the queue
//! is quiet, with no task in between).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{mpsc, oneshot};

use crate::backoff::Backoff;
use crate::db::Pooling;
use crate::engine;
use crate::names::QueueName;

/// What a topic hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Signal {
    /// A notification on one of the topic's channels.
    Notified {
        /// The channel.
        channel: String,
        /// Its payload.
        payload: String,
    },
    /// The listener (re)connected: the topic's channels are listened to and its requests are
    /// in place again. Notifications sent while it was down were missed.
    Connected,
}

/// Where a topic's signals go. It is called on the listening task, between reads of the
/// connection, so it must return at once: hand the signal on or act on it without waiting.
pub(crate) trait Sink: Send + Sync + 'static {
    /// Takes one signal.
    fn deliver(&self, signal: Signal);
}

impl Sink for mpsc::UnboundedSender<Signal> {
    fn deliver(&self, signal: Signal) {
        // The receiver is gone only while its topic is being dropped.
        let _ = self.send(signal);
    }
}

/// The client's listener: opens topics. The listening task ends once the notifier and every
/// topic are dropped.
#[derive(Debug, Clone)]
pub(crate) struct Notifier {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicU64>,
}

/// One user's share of the listener: the channels it listens to and the requests it holds.
/// Dropping it gives them up (a channel no other topic listens to is no longer listened to; its
/// requests are withdrawn).
#[derive(Debug)]
pub(crate) struct Topic {
    id: u64,
    commands: mpsc::UnboundedSender<Command>,
}

/// What the listening task is asked to do.
enum Command {
    Open {
        id: u64,
        sink: Box<dyn Sink>,
    },
    Listen {
        id: u64,
        channel: String,
        done: oneshot::Sender<()>,
    },
    Request {
        id: u64,
        queue: QueueName,
        wanted: bool,
        done: oneshot::Sender<()>,
    },
    Close {
        id: u64,
    },
}

impl Notifier {
    /// Starts the listening task, connecting with `options` (lazily, and again whenever the
    /// connection is lost); with `follow`, with that pool's options as they are at each
    /// connection, so that the listener follows the client's pool to a new primary.
    pub(crate) fn start(options: PgConnectOptions, follow: Option<PgPool>) -> Self {
        let (commands, requests) = mpsc::unbounded_channel();
        // A pool of one, made lazily: the listener's connection is its own, never one of the
        // client's pool.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .connect_lazy_with(options);
        tokio::spawn(listen(pool, follow, requests));
        Self {
            commands,
            next_id: Arc::default(),
        }
    }

    /// A new topic, and the receiver of its signals.
    pub(crate) fn topic(&self) -> (Topic, mpsc::UnboundedReceiver<Signal>) {
        let (signals, receiver) = mpsc::unbounded_channel();
        (self.topic_into(signals), receiver)
    }

    /// A new topic whose signals go to `sink`.
    pub(crate) fn topic_into(&self, sink: impl Sink) -> Topic {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sink = Box::new(sink);
        let _ = self.commands.send(Command::Open { id, sink });
        Topic {
            id,
            commands: self.commands.clone(),
        }
    }
}

impl Topic {
    /// Listens to `channel`; returns once the listener listens to it (true), or false when
    /// the listening task is gone. While the listener is down it returns once it is back.
    pub(crate) async fn listen(&self, channel: String) -> bool {
        let (done, listening) = oneshot::channel();
        let sent = self.commands.send(Command::Listen {
            id: self.id,
            channel,
            done,
        });
        sent.is_ok() && listening.await.is_ok()
    }

    /// Holds (`wanted`) or withdraws this topic's request for wake-ups of `queue` on the
    /// listening session; returns once that is done (false when the listening task is gone).
    /// While the listener is down it returns once the request is in place again.
    pub(crate) async fn request_wakeups(&self, queue: &QueueName, wanted: bool) -> bool {
        let (done, requested) = oneshot::channel();
        let sent = self.commands.send(Command::Request {
            id: self.id,
            queue: queue.clone(),
            wanted,
            done,
        });
        sent.is_ok() && requested.await.is_ok()
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close { id: self.id });
    }
}

/// What the listening task knows of one topic.
struct TopicState {
    sink: Box<dyn Sink>,
    channels: HashSet<String>,
    requests: HashSet<QueueName>,
}

/// The listening task's state: the topics, and what the session holds.
#[derive(Default)]
struct Listening {
    topics: HashMap<u64, TopicState>,
    /// Channels the session listens to.
    listened: HashSet<String>,
    /// Queues the session holds a request for (one per queue, whatever the topics).
    requested: HashSet<QueueName>,
    /// Answers to give once the session is back.
    waiting: Vec<oneshot::Sender<()>>,
}

impl Listening {
    fn wanted_channels(&self) -> HashSet<String> {
        self.topics
            .values()
            .flat_map(|topic| topic.channels.iter().cloned())
            .collect()
    }

    fn wanted_requests(&self) -> HashSet<QueueName> {
        self.topics
            .values()
            .flat_map(|topic| topic.requests.iter().cloned())
            .collect()
    }

    /// Applies a command to the wanted state; answers at once only when connected (the caller
    /// then brings the session in line and answers).
    fn apply(&mut self, command: Command) -> Option<oneshot::Sender<()>> {
        match command {
            Command::Open { id, sink } => {
                self.topics.insert(
                    id,
                    TopicState {
                        sink,
                        channels: HashSet::new(),
                        requests: HashSet::new(),
                    },
                );
                None
            }
            Command::Listen { id, channel, done } => {
                if let Some(topic) = self.topics.get_mut(&id) {
                    topic.channels.insert(channel);
                }
                Some(done)
            }
            Command::Request {
                id,
                queue,
                wanted,
                done,
            } => {
                if let Some(topic) = self.topics.get_mut(&id) {
                    if wanted {
                        topic.requests.insert(queue);
                    } else {
                        topic.requests.remove(&queue);
                    }
                }
                Some(done)
            }
            Command::Close { id } => {
                self.topics.remove(&id);
                None
            }
        }
    }

    /// Applies a command while disconnected: its answer waits for the session.
    fn apply_when_connected(&mut self, command: Command) {
        if let Some(done) = self.apply(command) {
            self.waiting.push(done);
        }
    }

    /// Brings the session in line with what the topics want: listens, unlistens, requests and
    /// withdraws.
    async fn sync(&mut self, listener: &mut PgListener) -> Result<(), sqlx::Error> {
        let channels = self.wanted_channels();
        for channel in channels.difference(&self.listened.clone()) {
            listener.listen(channel).await?;
            self.listened.insert(channel.clone());
        }
        for channel in self.listened.clone().difference(&channels) {
            listener.unlisten(channel).await?;
            self.listened.remove(channel);
        }
        let requests = self.wanted_requests();
        for queue in requests.difference(&self.requested.clone()) {
            engine::request_wakeups(&mut *listener, queue)
                .await
                .map_err(into_sqlx)?;
            self.requested.insert(queue.clone());
        }
        for queue in self.requested.clone().difference(&requests) {
            engine::withdraw_wakeups(&mut *listener, queue)
                .await
                .map_err(into_sqlx)?;
            self.requested.remove(queue);
        }
        Ok(())
    }

    /// Hands a notification to the topics that listen to its channel.
    fn dispatch(&self, channel: &str, payload: &str) {
        for topic in self.topics.values() {
            if topic.channels.contains(channel) {
                topic.sink.deliver(Signal::Notified {
                    channel: channel.to_owned(),
                    payload: payload.to_owned(),
                });
            }
        }
    }

    /// Tells every topic that the session is (back) in place.
    fn connected(&mut self) {
        for topic in self.topics.values() {
            topic.sink.deliver(Signal::Connected);
        }
        for done in self.waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// An engine error of a session call, as the connection error it stands for.
fn into_sqlx(error: crate::EngineError) -> sqlx::Error {
    match error {
        crate::EngineError::Database(error) => error,
        other => sqlx::Error::Protocol(other.to_string()),
    }
}

/// The listening task: connects, keeps the session in line with the topics, dispatches
/// notifications; reconnects when the connection is lost; ends when every sender is dropped.
async fn listen(
    pool: PgPool,
    follow: Option<PgPool>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut state = Listening::default();
    let mut backoff = Backoff::default();
    loop {
        if let Some(followed) = &follow {
            pool.set_connect_options((*followed.connect_options()).clone());
        }
        // Connect, taking commands meanwhile (answered once connected).
        let mut listener = loop {
            let connected = tokio::select! {
                connected = PgListener::connect_with(&pool) => connected,
                command = commands.recv() => match command {
                    Some(command) => {
                        state.apply_when_connected(command);
                        continue;
                    }
                    None => return,
                },
            };
            match connected {
                Ok(mut listener) => {
                    // No reconnect behind our back: sqlx's eager reconnect, when the wait for a
                    // notification is cancelled midway (a command came), leaves the listener to
                    // reconnect silently at its next use, on a session without our requests. A
                    // lost connection must come back here, where everything is made again.
                    listener.eager_reconnect(false);
                    break listener;
                }
                Err(error) => {
                    let pause = backoff.next_pause();
                    tracing::warn!(
                        %error,
                        retry_in_ms = pause.as_millis() as u64,
                        "cannot listen for notifications; workers poll and event streams read \
                         the state until it recovers"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        command = commands.recv() => match command {
                            Some(command) => state.apply_when_connected(command),
                            None => return,
                        },
                    }
                }
            }
        };
        // A new session listens to nothing and holds no request.
        state.listened.clear();
        state.requested.clear();
        if let Err(error) = state.sync(&mut listener).await {
            tracing::warn!(%error, "listening failed; reconnecting");
            continue;
        }
        backoff.reset();
        state.connected();
        if serve(&mut state, &mut listener, &mut commands).await {
            return;
        }
        // Lost: a moment before connecting again.
        let pause = backoff.next_pause();
        tokio::time::sleep(pause).await;
    }
}

/// Serves one session; true when every sender is gone (the task ends), false when the
/// connection was lost.
async fn serve(
    state: &mut Listening,
    listener: &mut PgListener,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> bool {
    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else {
                    let _ = listener.unlisten_all().await;
                    return true;
                };
                let done = state.apply(command);
                if let Err(error) = state.sync(listener).await {
                    tracing::warn!(%error, "listening failed; reconnecting");
                    state.waiting.extend(done);
                    return false;
                }
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            received = listener.try_recv() => match received {
                Ok(Some(notification)) => {
                    state.dispatch(notification.channel(), notification.payload());
                }
                // Lost (`None`: terminated) or failed.
                Ok(None) => return false,
                Err(error) => {
                    tracing::warn!(%error, "listening failed; reconnecting");
                    return false;
                }
            },
        }
    }
}

/// The connect options of a `listen_url`: it must reach Postgres directly (or through a
/// session-mode pooler), since a `LISTEN` lasts as long as its session.
pub(crate) fn listen_options(url: &str) -> Result<PgConnectOptions, sqlx::Error> {
    let (options, pooling) = crate::connect::parse_url(url)?;
    if pooling == Pooling::Transaction {
        return Err(sqlx::Error::Configuration(
            "a listen URL must not go through a transaction-mode pooler (it says \
             `pgbouncer=true`): LISTEN needs a session; give the database's direct URL"
                .into(),
        ));
    }
    Ok(options)
}
