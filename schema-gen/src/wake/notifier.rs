//! The notifier: sends the [`wake`](crate::statements::wake) statement on a
//! connection of its own, coalesced per queue ([`super::coalesce`]), so an
//! engine's enqueue never waits for it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use schema_model::{SchemaName, WakeChannel};

use super::coalesce::{Coalescer, Decision};
use super::connect::Connect;
use crate::statements::{Call, Output, Session, StatementError, StatementMode, wake};

/// The longest wait between two attempts to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The first wait before reconnecting.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// By default, a leading notification goes inside its enqueue's
/// transaction at most once per this interval per queue (BENCHMARKS.md,
/// "Wake-ups": what the inside ones cost the enqueues, and the pickup).
pub const INSIDE_EVERY: Duration = Duration::from_millis(10);

/// Sends the wake-ups of one engine schema's queues, at most one
/// notification per queue per interval: [`run_and_wake`](Self::run_and_wake)
/// runs an enqueue with its notification in the same round trip (inside
/// its transaction at most once per [`INSIDE_EVERY`] per queue, otherwise
/// pipelined behind it: the path BENCHMARKS.md measured fastest);
/// [`wake`](Self::wake), after a
/// transaction that enqueued has committed, hands the wake-up to the
/// notifier's task. Wake-ups within an interval of their queue's last
/// notification are folded into one more, which the task sends on its own
/// connection when the interval ends.
///
/// Start one per process and share it between the engine's tasks (its
/// calls take `&self`; hold it in an `Arc`): the coalescing is per
/// notifier, so eight notifiers on one queue send eight notifications an
/// interval, which measured 10-18 % fewer enqueues than one (BENCHMARKS.md,
/// "Wake-ups").
///
/// The task's connection may go through any pooler (pgbouncer in
/// transaction or statement mode too): the statement is one statement, run
/// unnamed. A lost connection is opened again at the next notification; a
/// notification that could not be sent is owed again after the interval.
///
/// Dropping the notifier stops its task once it has sent what it owes, at
/// once (trailing notifications included), on the connection it has (or
/// one more attempt to open one).
#[derive(Debug)]
pub struct Notifier {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    schema: SchemaName,
    state: Mutex<State>,
    poke: Notify,
    /// The notifier was dropped: send what is owed, then stop.
    closing: AtomicBool,
    sent: AtomicU64,
    inside: AtomicU64,
    folded: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// What the notifier owes, under one lock.
#[derive(Debug)]
struct State {
    coalescer: Coalescer,
    /// Queues to notify at once (their leading edge).
    ready: Vec<String>,
    /// Notifications the task is sending.
    in_flight: usize,
}

impl State {
    fn owed(&self) -> usize {
        self.ready.len() + self.coalescer.owed() + self.in_flight
    }
}

/// What a notifier did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotifierStats {
    /// Notifications sent (committed).
    pub sent: u64,
    /// Of which inside their enqueue's transaction
    /// ([`run_and_wake`](Notifier::run_and_wake)).
    pub inside: u64,
    /// Wake-ups folded into a later notification of their queue.
    pub folded: u64,
    /// Notifications that failed (each is owed again).
    pub failed: u64,
    /// Notifications owed by the notifier's task: due at once, waiting for
    /// the end of their queue's interval, or being sent (not those a caller
    /// of [`lead`](Notifier::lead) sends itself).
    pub owed: usize,
    /// The last failure, in the driver's words.
    pub last_error: Option<String>,
}

impl Notifier {
    /// Connects (once, so that a wrong URL fails here) and starts the
    /// notifier's task for the engine schema `schema`, coalescing each
    /// queue's wake-ups over `interval` (10 ms is what BENCHMARKS.md
    /// measured), and putting a leading notification inside its enqueue's
    /// transaction at most once per [`INSIDE_EVERY`] per queue (or per
    /// `interval`, if longer): [`start_with`](Self::start_with).
    ///
    /// # Errors
    ///
    /// The connection could not be opened.
    pub async fn start(
        connect: impl Connect,
        schema: SchemaName,
        interval: Duration,
    ) -> Result<Self, tokio_postgres::Error> {
        Self::start_with(connect, schema, interval, INSIDE_EVERY.max(interval)).await
    }

    /// [`start`](Self::start), putting a leading notification inside its
    /// enqueue's transaction ([`run_and_wake`](Self::run_and_wake)) at most
    /// once per `inside` per queue: a longer `inside` costs the enqueues
    /// less and wakes fewer lone jobs at their commit. `Duration::MAX`:
    /// never inside.
    ///
    /// # Errors
    ///
    /// The connection could not be opened.
    pub async fn start_with(
        connect: impl Connect,
        schema: SchemaName,
        interval: Duration,
        inside: Duration,
    ) -> Result<Self, tokio_postgres::Error> {
        let first = Open::new(&connect).await?;
        let shared = Arc::new(Shared {
            schema,
            state: Mutex::new(State {
                coalescer: Coalescer::new(interval, inside),
                ready: Vec::new(),
                in_flight: 0,
            }),
            poke: Notify::new(),
            closing: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            inside: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        });
        tokio::spawn(run(connect, Arc::clone(&shared), first));
        Ok(Self { shared })
    }

    /// `queue` has new jobs (due now or later), or jobs made ready: the
    /// notifier's task notifies its listening workers, at once or at the
    /// end of the queue's interval. Never blocks, never fails. For an
    /// enqueue on a session, [`run_and_wake`](Self::run_and_wake) is a
    /// round trip faster for the workers.
    pub fn wake(&self, queue: &str) {
        {
            let mut state = lock(&self.shared.state);
            match state.coalescer.wake(queue, Instant::now(), false) {
                Decision::Now | Decision::Inside => state.ready.push(queue.to_owned()),
                Decision::Later => {
                    self.shared.folded.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.shared.poke.notify_one();
    }

    /// Runs `call` (an enqueue of `queue`'s jobs, a retry of one of its
    /// jobs) on `session` and wakes `queue`, in the same round trip:
    ///
    /// - the leading notification of the queue's interval, at most once per
    ///   [`inside`](Self::start_with) interval per queue, goes **inside**
    ///   `call`'s transaction (`BEGIN`, `call`, notify, `COMMIT`, sent
    ///   together): the listeners hear of the job at its commit, before the
    ///   producer has its answer;
    /// - the other leading ones are pipelined right behind `call`, and the
    ///   server runs them once `call` has committed, in a transaction of
    ///   their own;
    /// - the rest are folded into the queue's trailing notification, which
    ///   the notifier's task sends.
    ///
    /// A commit that notifies holds PostgreSQL's database-wide notify lock
    /// through its flush, so the inside ones are bounded per interval:
    /// BENCHMARKS.md, "Wake-ups", measures both the pickup and what it costs
    /// the enqueues.
    ///
    /// The session is taken exclusively (`&mut`): no other call of it can
    /// fall inside that transaction. On a
    /// [`StatementMode::Unnamed`] session (behind a pooler, where statement
    /// pooling refuses a transaction of several statements) the notify is
    /// never inside. A session, not a transaction: enqueues
    /// made in a transaction call [`wake`](Self::wake) after it committed.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     session: &mut schema_gen::statements::Session,
    /// #     notifier: &schema_gen::wake::Notifier,
    /// #     job: &schema_gen::statements::Job,
    /// # ) -> Result<(), schema_gen::statements::StatementError> {
    /// use schema_gen::statements::jobs;
    ///
    /// let id = notifier
    ///     .run_and_wake(session, &jobs::Enqueue { job, now: 1_700_000_000 }, &job.queue)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `call`'s error, or a `COMMIT` that failed: a notification that failed
    /// never fails `call` (inside the transaction, it rolled `call` back,
    /// which is then run alone); it is owed again and sent by the
    /// notifier's task (counted in [`stats`](Self::stats)), so the caller
    /// never retries an enqueue that committed.
    pub async fn run_and_wake<Q: Call + Sync>(
        &self,
        session: &mut Session,
        call: &Q,
        queue: &str,
    ) -> Result<Output<Q>, StatementError> {
        // Behind a pooler (unnamed statements) a transaction of several
        // statements may be refused (statement pooling): never inside there.
        let may_go_inside = session.mode() == StatementMode::Prepared;
        let decision = self.decide(queue, may_go_inside);
        if decision == Decision::Later {
            return session.run(call).await;
        }
        let channel = WakeChannel::new(&self.shared.schema, queue);
        let notify = wake::Notify { channel: &channel };
        if decision == Decision::Inside {
            return match session.run_in_one_transaction(call, &notify).await {
                Ok((output, ())) => {
                    self.shared.sent.fetch_add(1, Ordering::Relaxed);
                    self.shared.inside.fetch_add(1, Ordering::Relaxed);
                    Ok(output)
                }
                Err(error) if error.statement() == <wake::Notify<'_> as Call>::NAME => {
                    // Rolled back with the notify: `call` took no effect.
                    self.failed(queue, &error);
                    session.run(call).await
                }
                Err(error) => Err(error),
            };
        }
        let (output, notified) =
            futures_util::future::join(session.run(call), session.run(&notify)).await;
        match notified {
            Ok(()) => {
                self.shared.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => self.failed(queue, &error),
        }
        output
    }

    /// The coalescer's decision for a wake-up of `queue` now, folded ones
    /// counted (and the task poked for their trailing notification).
    fn decide(&self, queue: &str, may_go_inside: bool) -> Decision {
        let decision =
            lock(&self.shared.state)
                .coalescer
                .wake(queue, Instant::now(), may_go_inside);
        if decision == Decision::Later {
            self.shared.folded.fetch_add(1, Ordering::Relaxed);
            self.shared.poke.notify_one();
        }
        decision
    }

    /// A notification of `queue` the caller sent failed: owed again, sent
    /// by the task.
    fn failed(&self, queue: &str, error: &StatementError) {
        lock(&self.shared.state)
            .coalescer
            .failed(queue, Instant::now());
        self.shared.failed.fetch_add(1, Ordering::Relaxed);
        *lock(&self.shared.last_error) = Some(error.to_string());
        self.shared.poke.notify_one();
    }

    /// [`wake`](Self::wake) for a caller that sends a notification due at
    /// once itself: returns the channel to notify, which the caller sends
    /// (the [`wake`](crate::statements::wake::notify) statement) on its own
    /// connection right behind its enqueue, pipelined (one round trip; the
    /// server runs it once the enqueue has committed, in a transaction of
    /// its own). `None`: the wake-up is folded into the queue's trailing
    /// notification, which the notifier sends. What the caller sends is not
    /// in [`stats`](Self::stats); [`run_and_wake`](Self::run_and_wake)
    /// counts it.
    pub fn lead(&self, queue: &str) -> Option<WakeChannel> {
        match self.decide(queue, false) {
            Decision::Now | Decision::Inside => Some(WakeChannel::new(&self.shared.schema, queue)),
            Decision::Later => None,
        }
    }

    /// What the notifier did so far.
    pub fn stats(&self) -> NotifierStats {
        NotifierStats {
            sent: self.shared.sent.load(Ordering::Relaxed),
            inside: self.shared.inside.load(Ordering::Relaxed),
            folded: self.shared.folded.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
            owed: lock(&self.shared.state).owed(),
            last_error: lock(&self.shared.last_error).clone(),
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Not aborted: a wake-up handed over just before the drop is still
        // sent (the task ends by itself, see `run`).
        self.shared.closing.store(true, Ordering::Release);
        self.shared.poke.notify_one();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the value whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The notifier's connection, with the task that drives it.
struct Open {
    client: Client,
    driver: JoinHandle<()>,
}

impl Open {
    async fn new(connect: &impl Connect) -> Result<Self, tokio_postgres::Error> {
        let (client, mut messages) = connect.connect().await?;
        let driver = tokio::spawn(async move { while let Some(Ok(_)) = messages.next().await {} });
        Ok(Self { client, driver })
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

async fn run(connect: impl Connect, shared: Arc<Shared>, first: Open) {
    let mut open = Some(first);
    let mut backoff = MIN_BACKOFF;
    loop {
        let next = lock(&shared.state).coalescer.next_due();
        match next {
            Some(at) => {
                tokio::select! {
                    () = shared.poke.notified() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => shared.poke.notified().await,
        }
        let now = Instant::now();
        let closing = shared.closing.load(Ordering::Acquire);
        let batch = {
            let mut state = lock(&shared.state);
            let mut batch = std::mem::take(&mut state.ready);
            if closing {
                batch.extend(state.coalescer.drain());
            } else {
                batch.extend(state.coalescer.due(now));
            }
            state.in_flight = batch.len();
            batch
        };
        if batch.is_empty() {
            if closing {
                return;
            }
            continue;
        }
        if open.as_ref().is_none_or(|o| o.client.is_closed()) {
            open = None;
            match Open::new(&connect).await {
                Ok(o) => {
                    open = Some(o);
                    backoff = MIN_BACKOFF;
                }
                Err(error) => {
                    fail(&shared, &batch, now, &error);
                    if closing {
                        return;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let Some(o) = open.as_ref() else { continue };
        let sends = batch.iter().map(|queue| {
            let channel = WakeChannel::new(&shared.schema, queue);
            let (client, schema) = (&o.client, &shared.schema);
            async move { notify_unnamed(client, schema, &channel).await }
        });
        let results = futures_util::future::join_all(sends).await;
        for (queue, result) in batch.iter().zip(results) {
            match result {
                Ok(_) => {
                    shared.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => fail(&shared, std::slice::from_ref(queue), now, &error),
            }
        }
        lock(&shared.state).in_flight = 0;
        if closing {
            return;
        }
    }
}

/// Runs the [`wake`](crate::statements::wake::notify) statement for
/// `channel` unnamed: no prepared statement for a pooler in transaction or
/// statement mode to lose between transactions.
async fn notify_unnamed(
    client: &Client,
    schema: &SchemaName,
    channel: &WakeChannel,
) -> Result<(), tokio_postgres::Error> {
    let statement = wake::Notify { channel }.statement(schema);
    let params: Vec<(&(dyn ToSql + Sync), Type)> = statement
        .args()
        .into_iter()
        .zip(statement.param_types())
        .collect();
    client.query_typed(statement.sql(), &params).await.map(drop)
}

/// Records a failed notification of each of `queues`, owed again (no
/// longer in flight).
fn fail(shared: &Shared, queues: &[String], now: Instant, error: &tokio_postgres::Error) {
    let mut state = lock(&shared.state);
    for queue in queues {
        state.coalescer.failed(queue, now);
    }
    state.in_flight = state.in_flight.saturating_sub(queues.len());
    shared
        .failed
        .fetch_add(queues.len() as u64, Ordering::Relaxed);
    *lock(&shared.last_error) = Some(crate::error::detail(error));
}
