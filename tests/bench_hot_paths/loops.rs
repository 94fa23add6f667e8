//! Throughput at 8 clients: the steady enqueue -> claim -> ack loop, and the
//! burn-down of a backlog (claim -> ack until the queue is empty), for every
//! system at each batch size, `synchronous_commit` on and off.
//!
//! Each system is driven in its batched mode: the product with
//! `enqueue_many`, the claim path with a limit and `ack_many`; pg-boss with
//! `insert`, `fetch` with `batchSize` and `complete` of many ids;
//! graphile-worker with `addJobs` and its worker's batched get and
//! completion (`batchGetJobs` of n, `batchCompleteJobs`); at batch 1 each
//! sends its one-job statements. The systems of one (batch, commit) group
//! take turns in slices, so a change of load falls on all alike.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_postgres::Client;

use crate::candidates::PromoteClock;
use crate::designs::{self, NORMAL};
use crate::latency::{Recorder, ms};
use crate::maintenance::{Maintainer, Policy};
use crate::peers::Peers;
use crate::pool::{self, Commit, Conn, Limit, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::systems::{Claimed, Kind, System, label_of, open_for};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

/// What a loop measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Enqueue `batch`, claim up to `batch`, finish them: the queue stays
    /// as short as the clients keep it.
    Steady,
    /// Claim up to `batch` and finish them, from a seeded backlog, until
    /// the queue is empty (or the time cap).
    BurnDown,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Steady => "steady",
            Shape::BurnDown => "burn-down",
        }
    }
}

pub struct LoopWorker {
    pub conn: Conn,
    pub system: Arc<System>,
    pub batch: u64,
    pub client: usize,
    pub worker: String,
    /// Jobs enqueued by this client so far (their payloads' numbers).
    pub n: u64,
    pub latency: Recorder,
    /// Jobs claimed, shared with the engine's maintenance step.
    pub claims: Arc<AtomicU64>,
    pub promote: PromoteClock,
    /// Enqueues a batch before each claim ([`Shape::Steady`]).
    pub enqueue: bool,
    /// The last claim found nothing ([`Shape::BurnDown`]: done).
    pub drained: bool,
    /// Jobs claimed and finished, not yet acked: a system that acks in its
    /// next claim ([`System::acks_in_claim`]) sends them with it.
    pub unacked: Vec<product::Claimed>,
    /// Statements the server rolled back as a deadlock's victim (and this
    /// client ran again).
    pub deadlocks: u64,
}

/// Whether the server refused the statement as a deadlock's victim.
fn is_deadlock(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
}

impl LoopWorker {
    pub async fn new(
        system: &Arc<System>,
        commit: Commit,
        client: usize,
        batch: u64,
        claims: &Arc<AtomicU64>,
        enqueue: bool,
    ) -> Self {
        Self {
            conn: open_for(system, commit).await,
            system: system.clone(),
            batch,
            client,
            worker: format!("bench-worker-{client}"),
            n: 0,
            latency: Recorder::new(),
            claims: claims.clone(),
            promote: PromoteClock::new(system.paced()),
            enqueue,
            drained: false,
            unacked: Vec::new(),
            deadlocks: 0,
        }
    }

    /// Enqueues `count` jobs due now (one statement).
    pub async fn enqueue(&mut self, count: u64) -> Result<(), String> {
        let now = unix_now();
        let payloads: Vec<Value> = (0..count)
            .map(|k| serde_json::json!({ "client": self.client, "n": self.n + k }))
            .collect();
        let enqueue = self.system.enqueue(&payloads, now);
        self.conn
            .query(&enqueue)
            .await
            .map_err(|e| self.error("enqueue", &e))?;
        self.n += count;
        Ok(())
    }

    /// Claims up to `batch` jobs and finishes them; returns how many, and
    /// how long the claim path alone took; `None` when the server chose
    /// this step's transaction as a deadlock's victim (counted in
    /// `deadlocks`; nothing was claimed, the step can be run again).
    pub async fn claim_and_finish(&mut self) -> Result<Option<(u64, Duration)>, String> {
        let (now, limit) = (unix_now(), self.batch as i64);
        let promote = self.promote.due(now);
        let path = if self.system.acks_in_claim() {
            self.system
                .claim_acking(now, &self.worker, limit, promote, &self.unacked)
        } else {
            self.system.claim(now, &self.worker, limit, promote)
        };
        let started = Instant::now();
        let rows = match self.conn.pipeline(&path.stmts).await {
            Ok(rows) => rows,
            Err(e) if is_deadlock(&e) => {
                self.deadlocks += 1;
                return Ok(None);
            }
            Err(e) => return Err(self.error("claim", &e)),
        };
        let took = started.elapsed();
        let claimed = self.system.claimed(path.claimed(&rows))?;
        self.claims
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        if self.system.acks_in_claim() {
            // Finished now, acked with the next claim.
            let count = claimed.len() as u64;
            self.unacked = match claimed {
                Claimed::Product(jobs) => jobs,
                _ => Vec::new(),
            };
            return Ok(Some((count, took)));
        }
        if let Some(ack) = self.system.ack(&claimed, &self.worker) {
            loop {
                match self.conn.query(&ack).await {
                    Ok(_) => break,
                    Err(e) if is_deadlock(&e) => self.deadlocks += 1,
                    Err(e) => return Err(self.error("ack", &e)),
                }
            }
        }
        Ok(Some((claimed.len() as u64, took)))
    }

    /// A failed statement's error, naming the system.
    fn error(&self, what: &str, e: &tokio_postgres::Error) -> String {
        db_error(&format!("{} {what}", label_of(&self.system)), e)
    }
}

impl Worker for LoopWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        if self.enqueue {
            self.enqueue(self.batch).await?;
        }
        let Some((claimed, _)) = self.claim_and_finish().await? else {
            return Ok(0);
        };
        self.latency.record(started.elapsed());
        if !self.enqueue && claimed == 0 {
            self.drained = true;
        }
        Ok(claimed)
    }

    fn finished(&self) -> bool {
        self.drained
    }
}

pub struct LoopResult {
    pub label: String,
    pub kind: Kind,
    pub shape: Shape,
    pub commit: Commit,
    pub clients: usize,
    pub batch: u64,
    pub jobs: u64,
    pub seconds: f64,
    pub jobs_per_s: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// Statements per step (enqueue, claim path, finish).
    pub statements: usize,
    /// Burn-down: the backlog, and whether it was drained within the cap.
    pub backlog: Option<(u64, bool)>,
    /// WAL the server wrote while this system's turns ran (the engine's
    /// maintenance step included), in bytes.
    pub wal_bytes: f64,
    /// Statements rolled back as a deadlock's victim, and run again.
    pub deadlocks: u64,
}

/// Slices each system's steady loop time is split into: the systems take
/// turns.
const SLICES: u32 = 4;

/// The systems of the loops: the product, the floor, the peers (when
/// installed) and the candidates that would ship.
pub fn loop_kinds(with_peers: bool, scale: &Scale) -> Vec<Kind> {
    let mut kinds = vec![Kind::Product, Kind::Floor];
    if with_peers {
        kinds.extend([Kind::PgBoss, Kind::Graphile]);
    }
    kinds.extend(scale.loop_cands.iter().map(|&c| Kind::Cand(c)));
    kinds
}

/// The steady loop of every group of `scale.loop_groups`.
pub async fn run_steady(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Vec<LoopResult> {
    let mut out = Vec::new();
    for &(clients, batch) in &scale.loop_groups {
        for &commit in &scale.loop_commits {
            progress(&format!(
                "loop: {clients} client(s), batch {batch}, synchronous_commit {}: every system \
                 {:.0} s, in {SLICES} turns",
                commit.setting(),
                scale.loop_time.as_secs_f64()
            ));
            out.extend(run_group(admin, scale, peers, Shape::Steady, clients, batch, commit).await);
        }
    }
    out
}

/// The burn-down of a backlog of `scale.burn_backlog` jobs, at every group
/// of `scale.loop_groups`.
pub async fn run_burn_down(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Vec<LoopResult> {
    let mut out = Vec::new();
    for &(clients, batch) in &scale.loop_groups {
        for &commit in &scale.loop_commits {
            progress(&format!(
                "burn-down: {} jobs, {clients} client(s), batch {batch}, synchronous_commit {}: \
                 turns of {:.0} s, at most {:.0} s per system",
                count(scale.burn_backlog),
                commit.setting(),
                scale.burn_slice.as_secs_f64(),
                scale.burn_cap.as_secs_f64()
            ));
            out.extend(
                run_group(admin, scale, peers, Shape::BurnDown, clients, batch, commit).await,
            );
        }
    }
    out
}

struct Runner {
    kind: Kind,
    system: Arc<System>,
    workers: Vec<LoopWorker>,
    maintainer: Option<Maintainer>,
    jobs: u64,
    seconds: f64,
    wal_bytes: f64,
}

async fn run_group(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
    shape: Shape,
    clients: usize,
    batch: u64,
    commit: Commit,
) -> Vec<LoopResult> {
    let mut runners = Vec::new();
    for kind in loop_kinds(peers.is_some(), scale) {
        let system = Arc::new(kind.create(admin, peers).await);
        if shape == Shape::BurnDown {
            system
                .seed(admin, scale.burn_backlog, &NORMAL, unix_now())
                .await;
        }
        let maintainer = system
            .product_schema()
            .zip(loop_maintenance())
            .map(|(schema, policy)| Maintainer::start(schema, policy));
        let claims = maintainer
            .as_ref()
            .map_or_else(|| Arc::new(AtomicU64::new(0)), Maintainer::claims);
        let mut workers = Vec::new();
        for client in 0..clients {
            workers.push(
                LoopWorker::new(
                    &system,
                    commit,
                    client,
                    batch,
                    &claims,
                    shape == Shape::Steady,
                )
                .await,
            );
        }
        runners.push(Runner {
            kind,
            system,
            workers,
            maintainer,
            jobs: 0,
            seconds: 0.0,
            wal_bytes: 0.0,
        });
    }
    // What earlier parts (and the seeding) left dirty is flushed before,
    // not during.
    exec(admin, "CHECKPOINT").await;
    let (slice, cap) = match shape {
        Shape::Steady => (scale.loop_time / SLICES, scale.loop_time),
        Shape::BurnDown => (scale.burn_slice, scale.burn_cap),
    };
    loop {
        let mut ran = false;
        for r in &mut runners {
            let left = cap.as_secs_f64() - r.seconds;
            if left <= 0.001 || r.workers.iter().all(|w| w.drained) {
                continue;
            }
            ran = true;
            let time = slice.min(Duration::from_secs_f64(left));
            let wal_before = wal_lsn(admin).await;
            let run = pool::run(std::mem::take(&mut r.workers), Limit::time(time)).await;
            r.wal_bytes += wal_since(admin, &wal_before).await;
            r.jobs += run.jobs;
            r.seconds += run.elapsed.as_secs_f64();
            r.workers = run.workers;
        }
        if !ran {
            break;
        }
    }
    let mut out = Vec::new();
    for r in runners {
        let latency = Recorder::merged(&r.workers, |w| &w.latency);
        let path = r
            .system
            .claim(unix_now(), "x", batch as i64, !r.system.paced());
        let statements = usize::from(shape == Shape::Steady)
            + path.statements()
            + usize::from(!matches!(*r.system, System::Floor(_)) && !r.system.acks_in_claim());
        out.push(LoopResult {
            label: label_of(&r.system),
            kind: r.kind,
            shape,
            commit,
            clients,
            batch,
            jobs: r.jobs,
            seconds: r.seconds,
            jobs_per_s: r.jobs as f64 / r.seconds,
            p50: latency.p50_ms(),
            p99: latency.p99_ms(),
            statements,
            backlog: (shape == Shape::BurnDown)
                .then(|| (scale.burn_backlog, r.workers.iter().all(|w| w.drained))),
            wal_bytes: r.wal_bytes,
            deadlocks: r.workers.iter().map(|w| w.deadlocks).sum(),
        });
        drop(r.workers);
        if let Some(m) = r.maintainer {
            m.stop().await;
        }
        designs::drop_schema(admin, &format!("\"{}\"", r.system.schema())).await;
    }
    out
}

pub fn report_loops(report: &mut Report, loops: &[LoopResult], scale: &Scale) {
    for shape in [Shape::Steady, Shape::BurnDown] {
        let rows: Vec<&LoopResult> = loops.iter().filter(|l| l.shape == shape).collect();
        if rows.is_empty() {
            continue;
        }
        match shape {
            Shape::Steady => {
                report.heading("Enqueue -> claim -> ack loop beside the floor and the peers");
                report.para(
                    "One step: enqueue `batch` jobs (one statement), claim up to `batch` (the \
                     claim path, pipelined), finish what was claimed (one statement; the \
                     floor's claim deletes, so it has none). alkstore and its candidates: \
                     `jobs::enqueue`/`enqueue_many`, the claim path, `jobs::ack`/`ack_many`, \
                     with the engine's maintenance step beside it (`jobs::vacuum` after every \
                     2,000 claims). pg-boss: `send`/`insert`, `fetch` (`batchSize` = batch), \
                     `complete` of the fetched ids; graphile-worker: `addJob`/`addJobs`, the \
                     worker's batched get (`batchGetJobs` of batch) and completion \
                     (`batchCompleteJobs`); each the statement its package sent, replayed with \
                     this step's values. Each system starts on a fresh schema; the systems of \
                     one row group take turns in four slices.",
                );
            }
            Shape::BurnDown => {
                report.heading("Burn-down: a backlog drained by the clients");
                report.para(&format!(
                    "Each system seeded with {} due jobs (the normal mix: 10 priorities), then \
                     claim -> finish steps until a client's claim finds nothing, the systems \
                     taking turns of {:.0} s, each stopped after {:.0} s in all; jobs/s over \
                     the time it ran. The same statements as the steady loop, without the \
                     enqueue.",
                    count(scale.burn_backlog),
                    scale.burn_slice.as_secs_f64(),
                    scale.burn_cap.as_secs_f64()
                ));
            }
        }
        report.para(
            "WAL bytes / job: what the server wrote to its WAL during the system's turns \
             (`pg_current_wal_insert_lsn` before and after each turn; every statement, the \
             engine's maintenance step included, and the full-page images of the pages each \
             system touched first after the group's checkpoint), per job: the write \
             amplification a design has by its physics, whatever the load.",
        );
        let mut table = Table::new(&[
            "system",
            "synchronous_commit",
            "clients>",
            "batch>",
            "statements / step>",
            "jobs>",
            "s>",
            "jobs / s>",
            "step p50>",
            "step p99>",
            "WAL bytes / job>",
            "deadlocks>",
            "alkstore / this>",
        ]);
        for l in &rows {
            let jobs = match l.backlog {
                Some((backlog, true)) => format!("{} (drained)", count(backlog)),
                Some((backlog, false)) => format!("{} of {}", l.jobs, count(backlog)),
                None => l.jobs.to_string(),
            };
            table.row(vec![
                l.label.clone(),
                l.commit.setting().to_owned(),
                l.clients.to_string(),
                l.batch.to_string(),
                l.statements.to_string(),
                jobs,
                format!("{:.1}", l.seconds),
                format!("{:.0}", l.jobs_per_s),
                ms(l.p50),
                ms(l.p99),
                if l.jobs > 0 {
                    format!("{:.0}", l.wal_bytes / l.jobs as f64)
                } else {
                    "n/a".to_owned()
                },
                l.deadlocks.to_string(),
                if l.kind == Kind::Product {
                    String::new()
                } else {
                    times(ratio(same(loops, l, Kind::Product), Some(l.jobs_per_s)))
                },
            ]);
        }
        report.table(&table);
    }
    loop_verdicts(report, loops, scale);
}

/// The server's WAL insert position now.
async fn wal_lsn(admin: &Client) -> String {
    admin
        .query_one("SELECT pg_catalog.pg_current_wal_insert_lsn()::text", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_error("pg_current_wal_insert_lsn", &e)))
}

/// WAL bytes written since `lsn`.
async fn wal_since(admin: &Client, lsn: &str) -> f64 {
    admin
        .query_one(
            "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), \
             $1::text::pg_lsn)::float8",
            &[&lsn],
        )
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_error("pg_wal_lsn_diff", &e)))
}

/// The jobs/s of `kind` in `l`'s group.
fn same(loops: &[LoopResult], l: &LoopResult, kind: Kind) -> Option<f64> {
    loops
        .iter()
        .find(|o| {
            o.kind == kind
                && o.shape == l.shape
                && o.commit == l.commit
                && o.clients == l.clients
                && o.batch == l.batch
        })
        .map(|o| o.jobs_per_s)
}

/// Issue 24's loop targets, for the product and each candidate of the
/// loops: at 8 clients, at least 2x the faster peer's jobs/s and 0.66x the
/// floor's, per shape, batch and commit setting.
fn loop_verdicts(report: &mut Report, loops: &[LoopResult], scale: &Scale) {
    let mut ours = vec![Kind::Product];
    ours.extend(scale.loop_cands.iter().map(|&c| Kind::Cand(c)));
    for l in loops
        .iter()
        .filter(|l| ours.contains(&l.kind) && l.clients == 8)
    {
        let peer = [Kind::PgBoss, Kind::Graphile]
            .into_iter()
            .filter_map(|k| same(loops, l, k))
            .max_by(f64::total_cmp);
        let what = format!(
            "{} {}, batch {}, synchronous_commit {}",
            l.label,
            l.shape.name(),
            l.batch,
            l.commit.setting()
        );
        if let Some(peer) = peer {
            let r = ratio(Some(l.jobs_per_s), Some(peer));
            report.verdict(
                format!("{what}: 8-client jobs/s >= 2x the faster peer's"),
                format!("{:.0} vs {peer:.0}: {}", l.jobs_per_s, times(r)),
                r.is_some_and(|r| r >= 2.0),
            );
        }
        if let Some(floor) = same(loops, l, Kind::Floor) {
            let r = ratio(Some(l.jobs_per_s), Some(floor));
            report.verdict(
                format!("{what}: 8-client jobs/s >= 0.66x the floor's"),
                format!("{:.0} vs {floor:.0}: {}", l.jobs_per_s, times(r)),
                r.is_some_and(|r| r >= 0.66),
            );
        }
    }
}

/// The engine's maintenance step in the loop, as the statements module docs
/// tell an engine to run it (`ALKSTORE_BENCH_LOOP_VACUUM=off` leaves it out).
pub fn loop_maintenance() -> Option<Policy> {
    match std::env::var("ALKSTORE_BENCH_LOOP_VACUUM").as_deref() {
        Ok("off") => None,
        Ok("") | Err(_) => Some(Policy::EveryClaims(crate::churn::VACUUM_EVERY_CLAIMS)),
        Ok(other) => panic!("ALKSTORE_BENCH_LOOP_VACUUM must be off or unset, not {other:?}"),
    }
}
