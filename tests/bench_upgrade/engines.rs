//! The engines that run beneath the upgrade: version 1's claim loop with
//! its own statements from history (prepared once per connection, as an
//! engine of that release would), this release's claim loop through the
//! product's [`Session`], and a plain read (version 1's `expired_claims`)
//! that shows how long a reader waits.
//!
//! Each client keeps its own log (every claim's start and latency, what it
//! enqueued, claimed and acked, what failed) and hands it back when it
//! stops, so nothing is shared while it runs but the phase and the stop
//! flag.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use schema_gen::statements::{Job, QueueOpts, Session, jobs};
use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::unix_now;

/// The queues the seed fills and the clients work on (client `i` works on
/// `QUEUES[i % 4]`, so two clients of eight share each queue and skip each
/// other's locked rows).
pub const QUEUES: [&str; 4] = ["mail", "sms", "webhook", "report"];

/// Each client enqueues one job every this many claims.
pub const ENQUEUE_EVERY: u64 = 4;

/// What the benchmark is doing, as the clients tag their samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Phase {
    /// Version 1's loop on version 1, before anything runs.
    Before = 0,
    /// Version 1's loop while `upgrade` (the expand) runs.
    Expand,
    /// Version 1's loop on the expanded schema, after the expand.
    Expanded,
    /// This release's loop on the expanded schema, before the contract.
    NewBefore,
    /// This release's loop while `contract` runs.
    Contract,
    /// Version 1's loop on version 1, before the strawman.
    NaiveBefore,
    /// Version 1's loop while the strawman's one transaction runs.
    Naive,
    /// Version 1's loop after the strawman committed.
    NaiveAfter,
}

impl Phase {
    pub const ALL: [Phase; 8] = [
        Phase::Before,
        Phase::Expand,
        Phase::Expanded,
        Phase::NewBefore,
        Phase::Contract,
        Phase::NaiveBefore,
        Phase::Naive,
        Phase::NaiveAfter,
    ];

    pub fn from_u8(v: u8) -> Phase {
        Phase::ALL[usize::from(v).min(Phase::ALL.len() - 1)]
    }

    pub fn label(self) -> &'static str {
        match self {
            Phase::Before => "v1 loop, before the upgrade",
            Phase::Expand => "v1 loop, during `upgrade` (expand)",
            Phase::Expanded => "v1 loop, on the expanded schema",
            Phase::NewBefore => "this release's loop, before the contract",
            Phase::Contract => "this release's loop, during `contract`",
            Phase::NaiveBefore => "v1 loop, before the strawman",
            Phase::Naive => "v1 loop, during the strawman's transaction",
            Phase::NaiveAfter => "v1 loop, after the strawman committed",
        }
    }
}

/// The run's clock and the phase the clients tag their samples with.
#[derive(Clone)]
pub struct Shared {
    pub started: Instant,
    phase: Arc<AtomicU8>,
    pub stop: Arc<AtomicBool>,
}

impl Shared {
    pub fn new(started: Instant, phase: Phase) -> Self {
        Self {
            started,
            phase: Arc::new(AtomicU8::new(phase as u8)),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A handle on the same clock and phase with its own stop flag, for a
    /// group of tasks stopped together.
    pub fn fork(&self) -> Self {
        Self {
            started: self.started,
            phase: self.phase.clone(),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Microseconds since the run's start.
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::SeqCst))
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// Which statement of a loop a sample times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The claim (version 1: its transaction; this release: the claim path).
    Claim,
    Enqueue,
    Ack,
    /// The plain reader's read.
    Read,
}

/// One statement (a claim is one, whatever it sends): when it started, how
/// long it took, whether it failed.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub kind: Kind,
    pub phase: Phase,
    pub start_us: u64,
    pub latency_us: u64,
    pub failed: bool,
}

impl Sample {
    pub fn end_us(&self) -> u64 {
        self.start_us + self.latency_us
    }
}

/// What one client did.
#[derive(Debug, Default)]
pub struct ClientLog {
    pub samples: Vec<Sample>,
    pub enqueued: Vec<i64>,
    pub claimed: Vec<i64>,
    pub acked: Vec<i64>,
    /// Phase and message of every failed statement (an ack that deleted no
    /// row is one: its claim was lost).
    pub failures: Vec<(Phase, String)>,
    /// The backend pid of its connection, which ends when the client
    /// returns (the server's backend a moment later).
    pub backend: i32,
}

/// Starts timing a statement.
struct Timer {
    kind: Kind,
    phase: Phase,
    start_us: u64,
    started: Instant,
}

impl Timer {
    fn start(kind: Kind, shared: &Shared) -> Self {
        Self {
            kind,
            phase: shared.phase(),
            start_us: shared.now_us(),
            started: Instant::now(),
        }
    }

    fn done(self, failed: bool) -> Sample {
        Sample {
            kind: self.kind,
            phase: self.phase,
            start_us: self.start_us,
            latency_us: u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
            failed,
        }
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    harness::describe_error(e)
}

/// A connection named `name`, and its backend pid.
async fn open(name: &str) -> (Client, i32) {
    let client = harness::connect().await;
    client
        .batch_execute(&format!("SET application_name = '{name}'"))
        .await
        .unwrap_or_else(|e| panic!("{name}: {}", describe(&e)));
    let pid = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{name}: {}", describe(&e)))
        .get(0);
    (client, pid)
}

/// Version 1's claim loop on one connection, with version 1's statements
/// from `schema-model/history/v1/statements.json`, each prepared once: the
/// claim is its `claim` (`SELECT ... FOR UPDATE SKIP LOCKED`, one job) and
/// `claim_mark` in one transaction, then `ack`; one `enqueue` every
/// [`ENQUEUE_EVERY`] claims. Runs until `shared.stop`, stopping between two
/// loops so it holds no claim it did not ack.
pub async fn old_client(schema: SchemaName, index: usize, shared: Shared) -> ClientLog {
    let worker = format!("upbench-old-{index}");
    let (mut client, backend) = open(&worker).await;
    let statements = harness::history::old_statements(1, &schema);
    let get = |name: &str| {
        statements
            .get(name)
            .unwrap_or_else(|| panic!("version 1 has no statement {name}"))
            .clone()
    };
    let (enqueue, claim, mark, ack) = (get("enqueue"), get("claim"), get("claim_mark"), get("ack"));
    let prepare = |s: &harness::history::OldStatement| s.sql.clone();
    let enqueue_p = client
        .prepare(&prepare(&enqueue))
        .await
        .unwrap_or_else(|e| panic!("prepare enqueue: {}", describe(&e)));
    let claim_p = client
        .prepare(&prepare(&claim))
        .await
        .unwrap_or_else(|e| panic!("prepare claim: {}", describe(&e)));
    let mark_p = client
        .prepare(&prepare(&mark))
        .await
        .unwrap_or_else(|e| panic!("prepare claim_mark: {}", describe(&e)));
    let ack_p = client
        .prepare(&prepare(&ack))
        .await
        .unwrap_or_else(|e| panic!("prepare ack: {}", describe(&e)));

    let queue = QUEUES[index % QUEUES.len()].to_owned();
    let mut log = ClientLog {
        backend,
        ..ClientLog::default()
    };
    let mut round: u64 = 0;
    while !shared.stopped() {
        round += 1;
        let now = unix_now();
        if round.is_multiple_of(ENQUEUE_EVERY) {
            let payload = round.to_be_bytes().to_vec();
            let priority = i32::try_from(round % 10).unwrap_or(0);
            let none: Option<i64> = None;
            let (timeout, attempts, backoff, retention) = (30i64, 3i32, 10i64, 86_400i64);
            let values = enqueue.bind(&[
                ("queue", &queue),
                ("payload", &payload),
                ("priority", &priority),
                ("run_at", &now),
                ("expires_at", &none),
                ("enqueued_at", &now),
                ("visibility_timeout_s", &timeout),
                ("max_attempts", &attempts),
                ("backoff_base_s", &backoff),
                ("dead_letter_retention_s", &retention),
            ]);
            let timer = Timer::start(Kind::Enqueue, &shared);
            let result = client.query_one(&enqueue_p, &values).await;
            log.samples.push(timer.done(result.is_err()));
            match result {
                Ok(row) => log.enqueued.push(row.get(0)),
                Err(e) => log
                    .failures
                    .push((shared.phase(), format!("v1 enqueue: {}", describe(&e)))),
            }
        }

        let timer = Timer::start(Kind::Claim, &shared);
        let phase = timer.phase;
        let claimed = claim_once(
            &mut client,
            (&claim, &claim_p),
            (&mark, &mark_p),
            &queue,
            &worker,
            now,
        )
        .await;
        log.samples.push(timer.done(claimed.is_err()));
        let ids = match claimed {
            Ok(ids) => ids,
            Err(message) => {
                log.failures.push((phase, message));
                continue;
            }
        };
        for id in &ids {
            log.claimed.push(*id);
            let values = ack.bind(&[("id", id), ("worker_id", &worker)]);
            let timer = Timer::start(Kind::Ack, &shared);
            let result = client.execute(&ack_p, &values).await;
            log.samples.push(timer.done(!matches!(result, Ok(1))));
            match result {
                Ok(1) => log.acked.push(*id),
                Ok(n) => log.failures.push((
                    shared.phase(),
                    format!("v1 ack of job {id} deleted {n} rows: its claim was lost"),
                )),
                Err(e) => log
                    .failures
                    .push((shared.phase(), format!("v1 ack: {}", describe(&e)))),
            }
        }
        if ids.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    log
}

/// One claim of version 1: `BEGIN`, `claim`, `claim_mark` per id, `COMMIT`.
async fn claim_once(
    client: &mut Client,
    claim: (&harness::history::OldStatement, &tokio_postgres::Statement),
    mark: (&harness::history::OldStatement, &tokio_postgres::Statement),
    queue: &String,
    worker: &String,
    now: i64,
) -> Result<Vec<i64>, String> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| format!("v1 claim BEGIN: {}", describe(&e)))?;
    let limit = 1i64;
    let values = claim
        .0
        .bind(&[("queue", queue), ("now", &now), ("limit", &limit)]);
    let ids: Vec<i64> = tx
        .query(claim.1, &values)
        .await
        .map_err(|e| format!("v1 claim: {}", describe(&e)))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lapses = now + 3600;
    for id in &ids {
        let values = mark.0.bind(&[
            ("worker_id", worker),
            ("claimed_at", &now),
            ("claim_expires_at", &lapses),
            ("id", id),
        ]);
        tx.execute(mark.1, &values)
            .await
            .map_err(|e| format!("v1 claim_mark: {}", describe(&e)))?;
    }
    tx.commit()
        .await
        .map_err(|e| format!("v1 claim COMMIT: {}", describe(&e)))?;
    Ok(ids)
}

/// This release's claim loop on one connection through the product's
/// [`Session`] (each statement prepared once): the claim path
/// (`jobs::Promote`, limit 10, then `jobs::Claim`, one job, pipelined in one
/// round trip), then `jobs::Ack`; one `jobs::Enqueue` every
/// [`ENQUEUE_EVERY`] claims.
pub async fn new_client(schema: SchemaName, index: usize, shared: Shared) -> ClientLog {
    let worker = format!("upbench-new-{index}");
    let (client, backend) = open(&worker).await;
    let session = Session::new(client, schema);
    let queue = QUEUES[index % QUEUES.len()];
    let opts = {
        let mut opts = QueueOpts::default();
        opts.visibility_timeout_s = 3600;
        opts.max_attempts = 3;
        opts.backoff_base_s = 10;
        opts.dead_letter_retention_s = 86_400;
        opts
    };
    let mut log = ClientLog {
        backend,
        ..ClientLog::default()
    };
    let mut round: u64 = 0;
    while !shared.stopped() {
        round += 1;
        let now = unix_now();
        if round.is_multiple_of(ENQUEUE_EVERY) {
            let job = {
                let mut job = Job::default();
                job.queue = queue.to_owned();
                job.payload = round.to_be_bytes().to_vec();
                job.priority = i32::try_from(round % 10).unwrap_or(0);
                job.run_at = now;
                job.enqueued_at = now;
                job.opts = opts.clone();
                job
            };
            let timer = Timer::start(Kind::Enqueue, &shared);
            let result = session.run(&jobs::Enqueue { job: &job, now }).await;
            log.samples.push(timer.done(result.is_err()));
            match result {
                Ok(id) => log.enqueued.push(id),
                Err(e) => log.failures.push((shared.phase(), format!("enqueue: {e}"))),
            }
        }
        let timer = Timer::start(Kind::Claim, &shared);
        let phase = timer.phase;
        let result = session
            .run_pipelined(
                &jobs::Promote {
                    queue,
                    now,
                    limit: 10,
                },
                &jobs::Claim {
                    queue,
                    worker_id: &worker,
                    now,
                    limit: 1,
                },
            )
            .await;
        log.samples.push(timer.done(result.is_err()));
        let claimed = match result {
            Ok((_, claimed)) => claimed,
            Err(e) => {
                log.failures.push((phase, format!("claim path: {e}")));
                continue;
            }
        };
        for job in &claimed {
            log.claimed.push(job.id);
            let ack = jobs::Ack {
                id: job.id,
                worker_id: &worker,
                attempts: job.attempts,
            };
            let timer = Timer::start(Kind::Ack, &shared);
            let result = session.run(&ack).await;
            log.samples.push(timer.done(!matches!(result, Ok(1))));
            match result {
                Ok(1) => log.acked.push(job.id),
                Ok(n) => log.failures.push((
                    shared.phase(),
                    format!("ack of job {} deleted {n} rows: its claim was lost", job.id),
                )),
                Err(e) => log.failures.push((shared.phase(), format!("ack: {e}"))),
            }
        }
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    log
}

/// A plain read every 50 ms: version 1's `expired_claims` (the reaper's
/// read, an index scan that takes only `ACCESS SHARE`), to show how long a
/// reader waits behind each upgrade. To the contract's check it is an
/// engine of version 1 (its last statement is one only version 1 runs), so
/// it stops with version 1's loop.
pub async fn reader(schema: SchemaName, shared: Shared) -> ClientLog {
    let (client, backend) = open("upbench-read").await;
    let statements = harness::history::old_statements(1, &schema);
    let read = statements
        .get("expired_claims")
        .unwrap_or_else(|| panic!("version 1 has no statement expired_claims"))
        .clone();
    let prepared = client
        .prepare(&read.sql)
        .await
        .unwrap_or_else(|e| panic!("prepare expired_claims: {}", describe(&e)));
    let mut log = ClientLog {
        backend,
        ..ClientLog::default()
    };
    while !shared.stopped() {
        let now = unix_now();
        let limit = 10i64;
        let values = read.bind(&[("now", &now), ("limit", &limit)]);
        let timer = Timer::start(Kind::Read, &shared);
        let phase = timer.phase;
        let result = client.query(&prepared, &values).await;
        log.samples.push(timer.done(result.is_err()));
        if let Err(e) = result {
            log.failures
                .push((phase, format!("v1 expired_claims: {}", describe(&e))));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    log
}

/// Every client's log, merged.
#[derive(Debug, Default)]
pub struct Logs {
    /// Every claim, enqueue and ack of the loops.
    pub statements: Vec<Sample>,
    pub reads: Vec<Sample>,
    pub enqueued: Vec<i64>,
    pub claimed: Vec<i64>,
    pub acked: Vec<i64>,
    pub failures: Vec<(Phase, String)>,
}

impl Logs {
    pub fn add_claims(&mut self, log: ClientLog) {
        self.statements.extend(log.samples);
        self.enqueued.extend(log.enqueued);
        self.claimed.extend(log.claimed);
        self.acked.extend(log.acked);
        self.failures.extend(log.failures);
    }

    pub fn add_reads(&mut self, log: ClientLog) {
        self.reads.extend(log.samples);
        self.failures.extend(log.failures);
    }

    /// The ledger: every seeded or enqueued job is either acked (once) or
    /// still in the table, and nothing else is.
    pub fn ledger(&self, seeded: &HashSet<i64>, left: &HashSet<i64>) -> Ledger {
        let mut claimed = HashSet::new();
        let claimed_twice = self
            .claimed
            .iter()
            .filter(|id| !claimed.insert(**id))
            .count();
        let mut acked = HashSet::new();
        let acked_twice = self.acked.iter().filter(|id| !acked.insert(**id)).count();
        let mut known: HashSet<i64> = seeded.clone();
        known.extend(self.enqueued.iter().copied());
        let lost = known
            .iter()
            .filter(|id| !acked.contains(id) && !left.contains(id))
            .count();
        let acked_but_left = acked.iter().filter(|id| left.contains(id)).count();
        let unknown = left.iter().filter(|id| !known.contains(id)).count();
        Ledger {
            seeded: seeded.len(),
            enqueued: self.enqueued.len(),
            acked: acked.len(),
            left: left.len(),
            claimed_twice,
            acked_twice,
            lost,
            acked_but_left,
            unknown,
        }
    }
}

/// The job accounting of one part.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ledger {
    pub seeded: usize,
    pub enqueued: usize,
    pub acked: usize,
    pub left: usize,
    /// Ids handed out by two claims.
    pub claimed_twice: usize,
    /// Ids acked twice.
    pub acked_twice: usize,
    /// Seeded or enqueued, never acked, and gone from the table.
    pub lost: usize,
    /// Acked, yet still in the table.
    pub acked_but_left: usize,
    /// In the table, yet neither seeded nor enqueued.
    pub unknown: usize,
}

impl Ledger {
    pub fn clean(&self) -> bool {
        self.claimed_twice == 0
            && self.acked_twice == 0
            && self.lost == 0
            && self.acked_but_left == 0
            && self.unknown == 0
    }

    pub fn doubled(&self) -> usize {
        self.claimed_twice + self.acked_twice + self.acked_but_left
    }
}
