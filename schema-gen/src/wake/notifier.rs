//! The notifier: sends the [`wake`](crate::statements::wake) statement on a
//! connection of its own, coalesced per queue ([`super::coalesce`]), so an
//! engine's enqueue never waits for it.

use std::sync::atomic::{AtomicU64, Ordering};
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
use crate::statements::{Call, wake};

/// The longest wait between two attempts to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The first wait before reconnecting.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Sends wake-ups for one engine schema: call [`wake`](Self::wake) after
/// each enqueue (or promote, or retry) that made jobs ready has committed;
/// a task of the notifier sends the `wake` statement on its own connection,
/// at most once per queue per interval (the first at once, the others
/// folded into one at the interval's end), and the caller never waits.
///
/// Its connection may go through any pooler (pgbouncer in transaction or
/// statement mode too): the statement is one statement, run unnamed. A lost
/// connection is opened again at the next notification; a notification that
/// could not be sent is owed again after the interval.
///
/// Dropping the notifier stops its task; a trailing notification still
/// owed is then not sent (the workers' fallback poll finds its jobs).
#[derive(Debug)]
pub struct Notifier {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    schema: SchemaName,
    coalescer: Mutex<Coalescer>,
    /// Queues to notify at once (their leading edge).
    ready: Mutex<Vec<String>>,
    poke: Notify,
    sent: AtomicU64,
    folded: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// What a notifier did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotifierStats {
    /// Notifications sent (committed).
    pub sent: u64,
    /// Wake-ups folded into a later notification of their queue.
    pub folded: u64,
    /// Notifications that failed (each is owed again).
    pub failed: u64,
    /// Queues whose notification is owed: decided but not sent yet, or
    /// waiting for the end of their interval.
    pub owed: usize,
    /// The last failure, in the driver's words.
    pub last_error: Option<String>,
}

impl Notifier {
    /// Connects (once, so that a wrong URL fails here) and starts the
    /// notifier's task for the engine schema `schema`, coalescing each
    /// queue's wake-ups over `interval` (10 ms is what BENCHMARKS.md
    /// measured).
    ///
    /// # Errors
    ///
    /// The connection could not be opened.
    pub async fn start(
        connect: impl Connect,
        schema: SchemaName,
        interval: Duration,
    ) -> Result<Self, tokio_postgres::Error> {
        let first = Open::new(&connect).await?;
        let shared = Arc::new(Shared {
            schema,
            coalescer: Mutex::new(Coalescer::new(interval)),
            ready: Mutex::new(Vec::new()),
            poke: Notify::new(),
            sent: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        });
        let task = tokio::spawn(run(connect, Arc::clone(&shared), first));
        Ok(Self { shared, task })
    }

    /// `queue` has jobs ready: its listening workers are notified, at once
    /// or at the end of its interval. Never blocks, never fails.
    pub fn wake(&self, queue: &str) {
        let decision = lock(&self.shared.coalescer).wake(queue, Instant::now());
        match decision {
            Decision::Now => lock(&self.shared.ready).push(queue.to_owned()),
            Decision::Later => {
                self.shared.folded.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.shared.poke.notify_one();
    }

    /// What the notifier did so far.
    pub fn stats(&self) -> NotifierStats {
        NotifierStats {
            sent: self.shared.sent.load(Ordering::Relaxed),
            folded: self.shared.folded.load(Ordering::Relaxed),
            failed: self.shared.failed.load(Ordering::Relaxed),
            owed: lock(&self.shared.ready).len() + lock(&self.shared.coalescer).owed(),
            last_error: lock(&self.shared.last_error).clone(),
        }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.task.abort();
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
        let driver = tokio::spawn(async move {
            while let Some(Ok(_)) = messages.next().await {}
        });
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
    // The text depends on nothing but the statement: built once.
    let statement = wake::notify(&WakeChannel::new(&shared.schema, ""));
    loop {
        let next = lock(&shared.coalescer).next_due();
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
        let mut batch = std::mem::take(&mut *lock(&shared.ready));
        batch.extend(lock(&shared.coalescer).due(now));
        if batch.is_empty() {
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
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let Some(o) = open.as_ref() else { continue };
        let sends = batch.iter().map(|queue| {
            let channel = WakeChannel::new(&shared.schema, queue);
            let (client, sql, types) = (&o.client, statement.sql(), statement.param_types());
            async move {
                let values = wake::Notify { channel: &channel }.values();
                let params: Vec<(&(dyn ToSql + Sync), Type)> =
                    values.as_params().into_iter().zip(types).collect();
                client.query_typed(sql, &params).await
            }
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
    }
}

/// Records a failed notification of each of `queues`, owed again.
fn fail(shared: &Shared, queues: &[String], now: Instant, error: &tokio_postgres::Error) {
    let mut coalescer = lock(&shared.coalescer);
    for queue in queues {
        coalescer.failed(queue, now);
    }
    shared
        .failed
        .fetch_add(queues.len() as u64, Ordering::Relaxed);
    *lock(&shared.last_error) = Some(crate::error::detail(error));
}
