//! Watching sessions for lock waits, to prove which of the product's
//! statements never wait for another session's rows.
//!
//! Each watched session reports its own waits: with `log_lock_waits` on,
//! `deadlock_timeout` at 1 ms and `client_min_messages = log`, the server
//! sends the waiting session `process P still waiting for ShareLock on
//! transaction N after 1.0 ms` with the wait's context, which names the code
//! path (`while locking tuple (0,1) in relation "jobs"`: a blocking row lock;
//! `while locking updated version (0,4) of tuple ...`: PostgreSQL's
//! update-chain step, see [`Path::UpdateChain`]). So every wait longer than
//! a millisecond is seen, however short, without polling. On each report a
//! monitor session reads `pg_locks` and `pg_stat_activity`: the waiter's
//! lock rows and the holder's, and both sessions' queries.
//!
//! A second monitor polls `pg_stat_activity` every 10 ms for the watched
//! sessions' transactions, so a holder that has finished by the time its
//! wait is read is still named. With [`LockWatch::start`]'s `cancel_after`
//! it also polls `pg_locks`: a watched session of [`Role::SkipsLocked`] still
//! waiting for a row after that long is cancelled (its statement fails with
//! SQLSTATE 57014), for tests whose sessions wait for each other outside the
//! database (a barrier), where such a wait would never end.
//!
//! `log_lock_waits` and `deadlock_timeout` are superuser settings: the
//! watched sessions connect as the harness's superuser.
//!
//! The monitors read the lock table only (`pg_locks` takes the lock
//! manager's partition locks for an instant, no heavyweight lock): they
//! cannot make a watched session wait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::error::DbError;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::pg::{database_url, describe_error};

/// What a watched session does, which decides whether it may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs statements that lock with `SKIP LOCKED` (claim, promote, reap,
    /// reap_exhausted, expire): it must never wait for a row another session
    /// holds.
    SkipsLocked,
    /// Acts on rows it holds by a claim token (ack, ack_many, retry, kill):
    /// it may wait for a session that holds the same row.
    Owner,
}

/// Which code path a wait came from, by the server's context for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `while locking updated version (b,o) of tuple in relation ...`:
    /// heapam.c's `heap_lock_updated_tuple_rec`. A `SKIP LOCKED` lock that
    /// found the row being updated by a transaction which then committed
    /// (between the check and the skip) goes on to lock the row's newer
    /// versions, and waits there for any transaction holding one of them:
    /// that step has no wait policy (PostgreSQL 15, and current master).
    UpdateChain,
    /// A relation extension lock: two sessions adding a page.
    Extension,
    /// Any other wait for a row: a blocking row lock (`while locking tuple`),
    /// an `UPDATE` or `DELETE` waiting for the row (`while updating tuple`,
    /// `while deleting tuple`), a tuple lock, ...
    Row,
}

/// One wait, as the waiting session reported it.
#[derive(Clone, Debug)]
pub struct Wait {
    /// The watched session that waited.
    pub waiter: String,
    /// Its role.
    pub role: Role,
    /// The lock, in the server's words (`ShareLock on transaction 756`).
    pub lock: String,
    /// The server's context of the wait (where in the statement).
    pub context: String,
    /// The code path.
    pub path: Path,
    /// The waiter's and holders' sessions and queries, and their `pg_locks`
    /// rows, read when the wait was reported (a holder that has finished by
    /// then is not listed).
    pub sessions: Vec<String>,
    /// The transaction waited for, if the lock is one.
    pub xid: Option<String>,
    /// How long the wait lasted, when the server said (`acquired ... after`).
    pub lasted: Option<String>,
    /// Whether the poller cancelled the waiter.
    pub cancelled: bool,
}

impl Wait {
    /// Is this a wait the role forbids?
    pub fn is_forbidden(&self) -> bool {
        self.role == Role::SkipsLocked && self.path == Path::Row
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "session {} ({:?}) waited for {} ({}){}{}",
            self.waiter,
            self.role,
            self.lock,
            if self.context.is_empty() {
                "no context"
            } else {
                &self.context
            },
            self.lasted
                .as_ref()
                .map(|t| format!(", for {t}"))
                .unwrap_or_default(),
            if self.cancelled {
                ", cancelled by the watch"
            } else {
                ""
            },
        )?;
        for line in &self.sessions {
            write!(f, "\n    {line}")?;
        }
        Ok(())
    }
}

/// Everything the watch saw.
#[derive(Debug, Default)]
pub struct Waits {
    /// Every reported wait, in the order reported.
    pub all: Vec<Wait>,
    /// `detected deadlock` reports, in the server's words.
    pub deadlocks: Vec<String>,
}

impl Waits {
    /// The waits the roles forbid.
    pub fn forbidden(&self) -> Vec<&Wait> {
        self.all.iter().filter(|w| w.is_forbidden()).collect()
    }

    /// How many waits took each path, by role.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for w in &self.all {
            *counts
                .entry(format!("{:?} {:?}", w.role, w.path))
                .or_default() += 1;
        }
        let mut words: Vec<String> = counts
            .into_iter()
            .map(|(what, n)| format!("{n} x {what}"))
            .collect();
        if !self.deadlocks.is_empty() {
            words.push(format!("{} deadlock(s) detected", self.deadlocks.len()));
        }
        if words.is_empty() {
            "no lock waits".to_owned()
        } else {
            words.join(", ")
        }
    }

    /// Panics, naming both sessions and their queries, if a session waited
    /// in a way its role forbids.
    pub fn assert_none_forbidden(&self) {
        let forbidden = self.forbidden();
        assert!(
            forbidden.is_empty(),
            "{} wait(s) for another session's row by a statement that must skip locked rows:\n{}",
            forbidden.len(),
            forbidden
                .iter()
                .map(|w| format!("  {w}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

struct Report {
    session: String,
    role: Role,
    pid: i32,
    notice: DbError,
}

enum Message {
    Report(Box<Report>),
    /// Answered once every report sent before it is handled.
    Flush(tokio::sync::oneshot::Sender<()>),
}

#[derive(Default)]
struct Shared {
    /// pid -> (session name, role).
    sessions: BTreeMap<i32, (String, Role)>,
    waits: Vec<Wait>,
    deadlocks: Vec<String>,
    /// xid -> (pid, the queries the poller saw it run), for the watched
    /// sessions' transactions.
    transactions: BTreeMap<String, (i32, Vec<String>)>,
}

/// Watches sessions opened through it for lock waits; see the module docs.
pub struct LockWatch {
    shared: Arc<Mutex<Shared>>,
    reports: mpsc::UnboundedSender<Message>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    resolver: tokio::task::JoinHandle<()>,
    poller: tokio::task::JoinHandle<()>,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl LockWatch {
    /// Starts the monitors. With `cancel_after`, a [`Role::SkipsLocked`]
    /// session found waiting for a row (a `transactionid` or `tuple` lock)
    /// for that long is cancelled.
    pub async fn start(cancel_after: Option<Duration>) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (reports, received) = mpsc::unbounded_channel();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let resolver = tokio::spawn(resolve(received, Arc::clone(&shared)));
        let poller = tokio::spawn(poll(Arc::clone(&shared), Arc::clone(&stop), cancel_after));
        LockWatch {
            shared,
            reports,
            stop,
            resolver,
            poller,
        }
    }

    /// Opens a watched session named `name` (for the messages) with `role`.
    /// It has `lock_timeout` 60 s: only a failing run waits that long.
    pub async fn session(&self, name: &str, role: Role) -> Client {
        let (client, mut connection) = tokio_postgres::connect(&database_url(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connecting {name}: {}", describe_error(&e)));
        // Known once the session has asked; it waits for nothing before.
        let backend = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let reports = self.reports.clone();
        let session = name.to_owned();
        let pid_of_session = Arc::clone(&backend);
        tokio::spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notice(notice))) => {
                        let _ = reports.send(Message::Report(Box::new(Report {
                            session: session.clone(),
                            role,
                            pid: pid_of_session.load(std::sync::atomic::Ordering::SeqCst),
                            notice,
                        })));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        eprintln!("watched session {session}: connection closed: {e}");
                        break;
                    }
                    None => break,
                }
            }
        });
        client
            .batch_execute(
                "SET log_lock_waits = on; SET deadlock_timeout = '1ms'; \
                 SET client_min_messages = log; SET lock_timeout = '60s'",
            )
            .await
            .unwrap_or_else(|e| panic!("setting up {name}: {}", describe_error(&e)));
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap_or_else(|e| panic!("{name}: {}", describe_error(&e)))
            .get(0);
        backend.store(pid, std::sync::atomic::Ordering::SeqCst);
        lock(&self.shared)
            .sessions
            .insert(pid, (name.to_owned(), role));
        client
    }

    /// The waits reported so far.
    pub fn seen(&self) -> Vec<Wait> {
        lock(&self.shared).waits.clone()
    }

    /// Stops the monitors and returns what they saw.
    pub async fn stop(self) -> Waits {
        // The reports of the last waits may still be on their way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.poller
            .await
            .unwrap_or_else(|e| panic!("the pg_locks poller failed: {e}"));
        let (flushed, done) = tokio::sync::oneshot::channel();
        let _ = self.reports.send(Message::Flush(flushed));
        done.await
            .unwrap_or_else(|_| panic!("the lock-wait resolver failed (see its panic above)"));
        // The sessions' connections hold senders too, so it would not end.
        self.resolver.abort();
        let mut shared = lock(&self.shared);
        let (transactions, sessions) = (shared.transactions.clone(), shared.sessions.clone());
        for wait in &mut shared.waits {
            let Some(xid) = &wait.xid else { continue };
            if wait.sessions.iter().any(|line| line.starts_with("holder")) {
                continue;
            }
            wait.sessions.push(match transactions.get(xid) {
                Some((pid, queries)) => format!(
                    "holder: session {} (pid {pid}) ran, in transaction {xid} (seen by the poller; \
                     it had ended when the wait was read): {}",
                    sessions.get(pid).map_or("?", |(name, _)| name.as_str()),
                    queries.join("; ")
                ),
                None => format!("holder: transaction {xid}, ended before a poll saw it"),
            });
        }
        Waits {
            all: std::mem::take(&mut shared.waits),
            deadlocks: std::mem::take(&mut shared.deadlocks),
        }
    }
}

async fn monitor(what: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(&database_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting the {what}: {}", describe_error(&e)));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `pg_locks`' object of a lock row, in words.
const LOCK_OBJECT: &str = "CASE l.locktype \
    WHEN 'transactionid' THEN 'transaction ' || l.transactionid \
    WHEN 'tuple' THEN format('tuple (%s,%s) of %s', l.page, l.tuple, l.relation::regclass) \
    WHEN 'extend' THEN 'extension of ' || l.relation::regclass \
    WHEN 'relation' THEN 'relation ' || l.relation::regclass \
    ELSE l.locktype END";

/// Turns each session's wait reports into [`Wait`]s, reading who holds the
/// lock as soon as the report comes.
async fn resolve(mut received: mpsc::UnboundedReceiver<Message>, shared: Arc<Mutex<Shared>>) {
    let monitor = Arc::new(monitor("lock-wait resolver").await);
    let mut reading = tokio::task::JoinSet::new();
    let sql = Arc::new(format!(
        "WITH waited AS (SELECT * FROM pg_locks WHERE pid = $1 AND NOT granted), \
         holders AS ( \
             SELECT pid FROM pg_stat_activity WHERE backend_xid::text = $2 \
             UNION SELECT unnest(pg_blocking_pids($1))) \
         SELECT a.pid, a.state, a.query, \
                (SELECT string_agg(format('%s %s on %s (%s)', l.locktype, l.mode, {LOCK_OBJECT}, CASE WHEN l.granted THEN 'granted' ELSE 'waiting' END), '; ' ORDER BY l.granted, l.locktype) \
                 FROM pg_locks l \
                 WHERE l.pid = a.pid AND ( \
                     (a.pid = $1 AND (NOT l.granted OR l.locktype = 'tuple')) \
                     OR EXISTS (SELECT 1 FROM waited w WHERE l.granted AND l.locktype = w.locktype \
                         AND l.transactionid IS NOT DISTINCT FROM w.transactionid \
                         AND l.relation IS NOT DISTINCT FROM w.relation \
                         AND l.page IS NOT DISTINCT FROM w.page AND l.tuple IS NOT DISTINCT FROM w.tuple) \
                     OR (l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.transactionid::text = $2))) \
         FROM pg_stat_activity a WHERE a.pid = $1 OR a.pid IN (SELECT pid FROM holders) \
         ORDER BY a.pid <> $1, a.pid"
    ));
    while let Some(message) = received.recv().await {
        let report = match message {
            Message::Report(report) => *report,
            Message::Flush(done) => {
                while reading.join_next().await.is_some() {}
                let _ = done.send(());
                continue;
            }
        };
        let message = report.notice.message();
        let context = report.notice.where_().unwrap_or("").to_owned();
        if let Some(rest) = message
            .split(" detected deadlock while waiting for ")
            .nth(1)
        {
            lock(&shared)
                .deadlocks
                .push(format!("session {}: waiting for {rest}", report.session));
            continue;
        }
        if let Some(rest) = message.split(" acquired ").nth(1) {
            if let Some((what, after)) = rest.rsplit_once(" after ") {
                let mut shared = lock(&shared);
                if let Some(wait) = shared
                    .waits
                    .iter_mut()
                    .rev()
                    .find(|w| w.waiter == report.session && w.lock == what)
                {
                    wait.lasted = Some(after.to_owned());
                }
            }
            continue;
        }
        let Some(rest) = message.split(" still waiting for ").nth(1) else {
            continue;
        };
        let what = rest.rsplit_once(" after ").map_or(rest, |(what, _)| what);
        let xid = what
            .split(" on transaction ")
            .nth(1)
            .unwrap_or("")
            .to_owned();
        let path = if what.contains(" on extension of relation ") {
            Path::Extension
        } else if context.contains("while locking updated version") {
            Path::UpdateChain
        } else {
            Path::Row
        };
        let index = {
            let mut shared = lock(&shared);
            shared.waits.push(Wait {
                waiter: report.session,
                role: report.role,
                lock: what.to_owned(),
                context,
                path,
                sessions: Vec::new(),
                xid: (!xid.is_empty()).then(|| xid.clone()),
                lasted: None,
                cancelled: false,
            });
            shared.waits.len() - 1
        };
        // Read at once, beside the next reports: the holder may end soon.
        let (monitor, sql, shared) = (Arc::clone(&monitor), Arc::clone(&sql), Arc::clone(&shared));
        let waited = format!("{} (waiting)", what.split(" on ").nth(1).unwrap_or(""));
        reading.spawn(async move {
            let sessions = match monitor.query(sql.as_str(), &[&report.pid, &xid]).await {
                Ok(rows) => {
                    let names = lock(&shared).sessions.clone();
                    rows.iter()
                        .map(|row| {
                            let pid: i32 = row.get(0);
                            let state: Option<String> = row.get(1);
                            let query: Option<String> = row.get(2);
                            let locks = row.get::<_, Option<String>>(3).unwrap_or_default();
                            let who = names.get(&pid).map_or_else(
                                || "a session the test does not watch".to_owned(),
                                |(name, _)| format!("session {name}"),
                            );
                            let part = if pid != report.pid {
                                "holder"
                            } else if locks.contains(&waited) {
                                "waiter"
                            } else {
                                "waiter (no longer waiting when read)"
                            };
                            format!(
                                "{part}: {who} (pid {pid}, {}) running: {}\n      pg_locks: {}",
                                state.unwrap_or_default(),
                                query.unwrap_or_default(),
                                if locks.is_empty() { "-" } else { &locks }
                            )
                        })
                        .collect()
                }
                Err(e) => vec![format!("reading pg_locks failed: {}", describe_error(&e))],
            };
            lock(&shared).waits[index].sessions = sessions;
        });
    }
}

/// Polls `pg_stat_activity` for the watched sessions' transactions (so a
/// wait's holder can be named after it has finished), and `pg_locks` for
/// watched sessions that wait for a row: a [`Role::SkipsLocked`] one that has
/// waited for `cancel_after` is cancelled.
async fn poll(
    shared: Arc<Mutex<Shared>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    cancel_after: Option<Duration>,
) {
    let monitor = monitor("pg_locks poller").await;
    let mut first_seen: BTreeMap<(i32, String), Instant> = BTreeMap::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let pids: Vec<i32> = lock(&shared).sessions.keys().copied().collect();
        let running = monitor
            .query(
                "SELECT pid, backend_xid::text, query FROM pg_stat_activity \
                 WHERE pid = ANY($1) AND backend_xid IS NOT NULL",
                &[&pids],
            )
            .await
            .unwrap_or_else(|e| panic!("reading pg_stat_activity: {}", describe_error(&e)));
        {
            let mut shared = lock(&shared);
            for row in running {
                let (pid, xid, query): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
                let ran = shared
                    .transactions
                    .entry(xid)
                    .or_insert_with(|| (pid, Vec::new()));
                if !matches!(query.as_str(), "BEGIN" | "COMMIT" | "ROLLBACK")
                    && !ran.1.contains(&query)
                {
                    ran.1.push(query);
                }
            }
        }
        if let Some(cancel_after) = cancel_after {
            let skipping: Vec<i32> = lock(&shared)
                .sessions
                .iter()
                .filter(|(_, (_, role))| *role == Role::SkipsLocked)
                .map(|(pid, _)| *pid)
                .collect();
            let rows = monitor
                .query(
                    &format!(
                        "SELECT l.pid, {LOCK_OBJECT} FROM pg_locks l \
                         WHERE NOT l.granted AND l.pid = ANY($1) AND l.locktype IN ('transactionid', 'tuple')"
                    ),
                    &[&skipping],
                )
                .await
                .unwrap_or_else(|e| panic!("reading pg_locks: {}", describe_error(&e)));
            let now = Instant::now();
            let waiting: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            first_seen.retain(|key, _| waiting.contains(key));
            for key in waiting {
                let since = *first_seen.entry(key.clone()).or_insert(now);
                if now.duration_since(since) >= cancel_after {
                    let _ = monitor
                        .execute("SELECT pg_cancel_backend($1)", &[&key.0])
                        .await;
                    first_seen.remove(&key);
                    let mut shared = lock(&shared);
                    let name = shared
                        .sessions
                        .get(&key.0)
                        .map(|(name, _)| name.clone())
                        .unwrap_or_default();
                    if let Some(wait) = shared
                        .waits
                        .iter_mut()
                        .rev()
                        .find(|w| w.waiter == name && !w.cancelled)
                    {
                        wait.cancelled = true;
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
