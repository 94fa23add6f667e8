//! The listener: one direct connection that `LISTEN`s on the channels of a
//! set of queues and wakes the workers waiting on them ([`Wakeup`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client, SimpleQueryMessage};

use schema_model::{SchemaName, WakeChannel};

use super::connect::{Connect, Messages};
use super::error::ListenError;
use crate::pooler::{self, Pooling};
use crate::statements::wake;

/// The first wait before another attempt to reconnect, and the longest.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a listener checks its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerOptions {
    /// How long the probe waits for its notification before it calls the
    /// connection pooled (5 s). Only a connection through a pooler waits
    /// it out, and usually not even that one (see [`Listener`]).
    pub probe_timeout: Duration,
    /// How often an idle connection is asked for a sign of life, and how
    /// long its answer may take (15 s): a connection that died without
    /// closing (a cable, a firewall's idle timeout) is found and replaced
    /// within twice this.
    pub health_check: Duration,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            probe_timeout: Duration::from_secs(5),
            health_check: Duration::from_secs(15),
        }
    }
}

impl ListenerOptions {
    /// [`probe_timeout`](Self::probe_timeout) set to `timeout`.
    pub fn probe_timeout(self, timeout: Duration) -> Self {
        Self {
            probe_timeout: timeout,
            ..self
        }
    }

    /// [`health_check`](Self::health_check) set to `every`.
    pub fn health_check(self, every: Duration) -> Self {
        Self {
            health_check: every,
            ..self
        }
    }
}

/// Where a listener stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenerState {
    /// Listening on every queue's channel.
    Listening,
    /// The connection was lost and is being opened again; wake-ups sent
    /// meanwhile are lost (the workers are told to claim once when it is
    /// back, and their waits' deadlines make them poll until then).
    Reconnecting {
        /// Attempts that failed so far.
        attempts: u32,
        /// Why the connection was lost, or why the last attempt failed.
        last_error: String,
    },
}

/// What one wait of a worker ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A notification of the queue came: claim.
    Notified,
    /// The listener lost its connection and listens again: notifications
    /// sent meanwhile are lost, so claim once.
    Reconnected,
    /// The deadline passed (a scheduled job is due, or it is time for the
    /// fallback poll): claim.
    Deadline,
    /// The listener is gone (dropped): poll from now on.
    Closed,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Signal {
    notified: u64,
    reconnected: u64,
}

/// Listens for the wake-ups of a set of queues of one engine schema, on a
/// connection of its own, and wakes the workers waiting on each queue
/// ([`wakeup`](Self::wakeup)).
///
/// - **A session of its own.** `LISTEN` belongs to a server session: behind
///   a pooler in transaction or statement mode the server connection is
///   handed to other clients between transactions and the notifications
///   never come back. Before it listens, the listener asks
///   [`crate::pooler`] (the one probe of the crate) whether its connection
///   keeps a session of its own: it listens on a channel of its own and a
///   second connection notifies it; unless the notification arrives on the
///   listening connection (within
///   [`probe_timeout`](ListenerOptions::probe_timeout); behind pgbouncer
///   it usually arrives at the second connection at once, which proves the
///   pooling), [`start`](Self::start) refuses with
///   [`ListenError::Pooled`], whose words say that the engine must poll
///   there. On a direct connection the probe takes a round trip or two.
/// - **Reconnects.** A lost connection (closed, or silent past the
///   [`health_check`](ListenerOptions::health_check)) is opened again (and
///   probed, and listened on), with a growing pause between failed
///   attempts (0.1 s to 5 s); then every queue's workers are woken once
///   with [`Wake::Reconnected`], because notifications sent meanwhile are
///   lost. [`state`](Self::state) says where it stands.
/// - **Broadcast.** A notification wakes every worker waiting on its
///   queue (each claims; those that find nothing wait again).
///
/// Dropping the listener closes its connection; waiting workers get
/// [`Wake::Closed`].
#[derive(Debug)]
pub struct Listener {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    schema: SchemaName,
    /// Each queue's signal.
    queues: HashMap<String, watch::Sender<Signal>>,
    /// Each channel's queue.
    channels: HashMap<String, String>,
    state: Mutex<ListenerState>,
    backend_pid: AtomicI32,
    reconnections: AtomicU64,
    notifications: AtomicU64,
}

impl Listener {
    /// Connects, probes that the connection keeps its session, listens on
    /// the channel of every queue of `queues` in the engine schema `schema`
    /// (their [`WakeChannel`]s), and starts the listener's task. When it
    /// returns, every channel is listened on: a worker that claims after
    /// this misses no notification.
    ///
    /// # Errors
    ///
    /// [`ListenError::Pooled`] behind a transaction- or statement-pooling
    /// pooler (the engine must poll); otherwise the connection or a command
    /// failed.
    pub async fn start<Q: AsRef<str>>(
        connect: impl Connect,
        schema: &SchemaName,
        queues: impl IntoIterator<Item = Q>,
        options: ListenerOptions,
    ) -> Result<Self, ListenError> {
        let mut by_queue = HashMap::new();
        let mut channels = HashMap::new();
        for queue in queues {
            let queue = queue.as_ref().to_owned();
            let channel = WakeChannel::new(schema, &queue);
            channels.insert(channel.as_str().to_owned(), queue.clone());
            by_queue.insert(queue, watch::Sender::new(Signal::default()));
        }
        let shared = Arc::new(Shared {
            schema: schema.clone(),
            queues: by_queue,
            channels,
            state: Mutex::new(ListenerState::Listening),
            backend_pid: AtomicI32::new(0),
            reconnections: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
        });
        let first = Listening::open(&connect, &shared, options).await?;
        let task = tokio::spawn(run(connect, Arc::clone(&shared), options, first));
        Ok(Self { shared, task })
    }

    /// A worker's handle on the wake-ups of `queue` (one of the queues the
    /// listener was started with; `None` for another).
    pub fn wakeup(&self, queue: &str) -> Option<Wakeup> {
        let rx = self.shared.queues.get(queue)?.subscribe();
        let seen = *rx.borrow();
        Some(Wakeup { rx, seen })
    }

    /// Where the listener stands.
    pub fn state(&self) -> ListenerState {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The server process of the listening connection (`pg_backend_pid()`),
    /// while it is listening.
    pub fn backend_pid(&self) -> Option<i32> {
        Some(self.shared.backend_pid.load(Ordering::Relaxed)).filter(|pid| *pid != 0)
    }

    /// How often the connection was lost and opened again.
    pub fn reconnections(&self) -> u64 {
        self.shared.reconnections.load(Ordering::Relaxed)
    }

    /// Notifications received on the queues' channels.
    pub fn notifications(&self) -> u64 {
        self.shared.notifications.load(Ordering::Relaxed)
    }

    /// The engine schema.
    pub fn schema(&self) -> &SchemaName {
        &self.shared.schema
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A worker's handle on one queue's wake-ups.
///
/// The loop of a worker: [`seen`](Self::seen), claim; when the claim came
/// back empty, ask [`NextDue`](crate::statements::wake::NextDue) and wait
/// ([`wait_until`](Self::wait_until)) until a wake-up, the next due job or
/// the fallback poll, whichever comes first ([`deadline`]). A notification
/// that arrives while the worker claims is kept: the wait after the claim
/// returns at once, so no wake-up falls between a claim and a wait.
#[derive(Debug, Clone)]
pub struct Wakeup {
    rx: watch::Receiver<Signal>,
    seen: Signal,
}

impl Wakeup {
    /// Marks every wake-up so far as seen: call it just before claiming.
    pub fn seen(&mut self) {
        self.seen = *self.rx.borrow_and_update();
    }

    /// Waits for a wake-up after the last [`seen`](Self::seen), or until
    /// `deadline` (none: no deadline).
    pub async fn wait_until(&mut self, deadline: Option<Instant>) -> Wake {
        let changed = self.rx.changed();
        let result = match deadline {
            Some(at) => match tokio::time::timeout_at(at, changed).await {
                Ok(result) => result,
                Err(_) => return Wake::Deadline,
            },
            None => changed.await,
        };
        if result.is_err() {
            return Wake::Closed;
        }
        let now = *self.rx.borrow_and_update();
        let wake = if now.reconnected == self.seen.reconnected {
            Wake::Notified
        } else {
            Wake::Reconnected
        };
        self.seen = now;
        wake
    }
}

/// The deadline of an idle worker's wait: when the queue's next due job
/// (`next_due`, a unix second from
/// [`NextDue`](crate::statements::wake::NextDue)) comes due, or after
/// `poll`, whichever is sooner.
pub fn deadline(next_due: Option<i64>, poll: Duration) -> Instant {
    let now = Instant::now();
    let polled = now + poll;
    let Some(run_at) = next_due else {
        return polled;
    };
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let due = Duration::from_secs(u64::try_from(run_at).unwrap_or(0));
    polled.min(now + due.saturating_sub(since_epoch))
}

/// An open, probed, listening connection.
struct Listening {
    client: Client,
    /// The channels of the notifications that are no queue's (the pooler
    /// probe's), from the connection's driver.
    others: mpsc::UnboundedReceiver<String>,
    /// Why the connection ended, sent by its driver when it does.
    lost: oneshot::Receiver<String>,
    driver: JoinHandle<()>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Why the pooler probe could not answer.
enum ProbeFailure {
    /// The second connection could not be opened.
    Open(tokio_postgres::Error),
    /// Its `LISTEN`, `NOTIFY` or `UNLISTEN` failed.
    Query(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for ProbeFailure {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Query(error)
    }
}

impl Listening {
    async fn open(
        connect: &impl Connect,
        shared: &Arc<Shared>,
        options: ListenerOptions,
    ) -> Result<Self, ListenError> {
        let (client, messages) = connect.connect().await.map_err(ListenError::connect)?;
        let (others_tx, others) = mpsc::unbounded_channel();
        let (lost_tx, lost) = oneshot::channel();
        let driver = tokio::spawn(drive(messages, others_tx, lost_tx, Arc::clone(shared)));
        let mut listening = Self {
            client,
            others,
            lost,
            driver,
        };
        let pid = backend_pid(&listening.client).await?;
        listening.require_session(connect, options).await?;
        let commands: Vec<String> = shared
            .queues
            .keys()
            .map(|queue| wake::listen(&WakeChannel::new(&shared.schema, queue)))
            .collect();
        listening
            .client
            .batch_execute(&commands.join("; "))
            .await
            .map_err(|e| ListenError::query("LISTEN", e))?;
        shared.backend_pid.store(pid, Ordering::Relaxed);
        Ok(listening)
    }

    /// Refuses a connection that does not keep a session of its own:
    /// [`pooler::probe_on`], with a second connection from `connect`.
    async fn require_session(
        &mut self,
        connect: &impl Connect,
        options: ListenerOptions,
    ) -> Result<(), ListenError> {
        let open = || async {
            let (client, messages) = connect.connect().await.map_err(ProbeFailure::Open)?;
            Ok(pooler::watch_messages(client, messages))
        };
        let probed =
            pooler::probe_on(&self.client, &mut self.others, open, options.probe_timeout).await;
        match probed {
            Ok(Pooling::SessionKept) => Ok(()),
            // A connection that ended during the probe heard nothing
            // because it was lost, not because of a pooler.
            Ok(Pooling::Pooled(evidence)) => match self.lost.try_recv() {
                Ok(detail) => Err(ListenError::Lost { detail }),
                Err(oneshot::error::TryRecvError::Closed) => Err(ListenError::Lost {
                    detail: "the connection closed".to_owned(),
                }),
                Err(oneshot::error::TryRecvError::Empty) if self.client.is_closed() => {
                    Err(ListenError::Lost {
                        detail: "the connection closed".to_owned(),
                    })
                }
                Err(oneshot::error::TryRecvError::Empty) => Err(ListenError::Pooled { evidence }),
            },
            Err(ProbeFailure::Open(e)) => Err(ListenError::connect(e)),
            Err(ProbeFailure::Query(e)) => Err(ListenError::query("pooler probe", e)),
        }
    }

    /// Watches the connection until it is lost (its driver delivers the
    /// notifications); returns why.
    async fn serve(&mut self, options: ListenerOptions) -> String {
        let mut health =
            tokio::time::interval_at(Instant::now() + options.health_check, options.health_check);
        loop {
            tokio::select! {
                // Another channel's (a late probe's): nobody waits for it.
                Some(_) = self.others.recv() => {}
                why = &mut self.lost => {
                    return why.unwrap_or_else(|_| "the connection closed".to_owned());
                }
                _ = health.tick() => {
                    let answer =
                        tokio::time::timeout(options.health_check, self.client.simple_query(""))
                            .await;
                    match answer {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return crate::error::detail(&e),
                        Err(_) => {
                            return format!(
                                "no answer to a health check within {:?}",
                                options.health_check
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Drives the connection's messages: a notification of a queue's channel
/// wakes that queue's workers at once (no other task in between); any
/// other's channel is passed on to `others` (the probe's); when the
/// connection ends, says why on `lost`.
async fn drive(
    mut messages: Messages,
    others: mpsc::UnboundedSender<String>,
    lost: oneshot::Sender<String>,
    shared: Arc<Shared>,
) {
    let why = loop {
        match messages.next().await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                if let Some(signal) = shared
                    .channels
                    .get(n.channel())
                    .and_then(|queue| shared.queues.get(queue))
                {
                    shared.notifications.fetch_add(1, Ordering::Relaxed);
                    signal.send_modify(|s| s.notified += 1);
                } else {
                    // Nobody listening for it any more is fine.
                    let _ = others.send(n.channel().to_owned());
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => break crate::error::detail(&e),
            None => break "the connection closed".to_owned(),
        }
    };
    // Sent before `others` is dropped: the probe, seeing `others` end,
    // finds why.
    let _ = lost.send(why);
}

/// `pg_backend_pid()`, by the simple protocol (no statement to prepare).
async fn backend_pid(client: &Client) -> Result<i32, ListenError> {
    let messages = client
        .simple_query("SELECT pg_catalog.pg_backend_pid()")
        .await
        .map_err(|e| ListenError::query("pg_backend_pid()", e))?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|pid| pid.parse().ok()),
            _ => None,
        })
        .unwrap_or(0))
}

async fn run(
    connect: impl Connect,
    shared: Arc<Shared>,
    options: ListenerOptions,
    first: Listening,
) {
    let mut listening = first;
    loop {
        let why = listening.serve(options).await;
        drop(listening);
        shared.backend_pid.store(0, Ordering::Relaxed);
        set_state(
            &shared,
            ListenerState::Reconnecting {
                attempts: 0,
                last_error: why,
            },
        );
        let mut attempts = 0;
        let mut backoff = MIN_BACKOFF;
        listening = loop {
            match Listening::open(&connect, &shared, options).await {
                Ok(open) => break open,
                Err(error) => {
                    attempts += 1;
                    set_state(
                        &shared,
                        ListenerState::Reconnecting {
                            attempts,
                            last_error: error.to_string(),
                        },
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        set_state(&shared, ListenerState::Listening);
        shared.reconnections.fetch_add(1, Ordering::Relaxed);
        for signal in shared.queues.values() {
            signal.send_modify(|s| s.reconnected += 1);
        }
    }
}

fn set_state(shared: &Shared, state: ListenerState) {
    *shared.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix_now() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }

    #[test]
    fn the_deadline_is_the_next_due_second_or_the_poll() {
        let poll = Duration::from_secs(30);
        let before = Instant::now();
        let none = deadline(None, poll);
        assert!(none >= before + poll && none <= Instant::now() + poll);
        // Due already: now.
        assert!(deadline(Some(unix_now() - 10), poll) <= Instant::now());
        assert!(deadline(Some(0), poll) <= Instant::now());
        // Due in two seconds: at the start of that second, within (1 s, 2 s].
        let run_at = unix_now() + 2;
        let before = Instant::now();
        let due = deadline(Some(run_at), poll);
        assert!(
            due > before + Duration::from_millis(900),
            "{:?}",
            due - before
        );
        assert!(due <= Instant::now() + Duration::from_secs(2));
        // Due after the poll: the poll.
        let far = deadline(Some(unix_now() + 3600), poll);
        assert!(far <= Instant::now() + poll);
    }
}
