//! Under a held snapshot: a steady queue (a producer enqueueing at a fixed
//! rate, 8 clients claiming one job at a time and finishing it) while a
//! `REPEATABLE READ` transaction on another connection holds its snapshot,
//! and with it the xmin horizon, for a while (an analytics query, in the
//! PlanetScale write-up of 2026: 800 jobs/s, 120 s queries). Every job
//! claimed and finished leaves index entries that no vacuum may remove
//! before the snapshot ends, and a claim walks those ahead of the first
//! claimable job. Per system, one after the other: claim-path p50/p99 per
//! interval, buffers of one claim (EXPLAIN (ANALYZE, BUFFERS) of the claim
//! path, once per interval), the backlog and the table's dead tuples, before,
//! during and after the hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_postgres::Client;

use crate::designs::{self, NORMAL};
use crate::explain::Explainer;
use crate::latency::{Recorder, ms};
use crate::loops::{LoopWorker, loop_maintenance};
use crate::maintenance::Maintainer;
use crate::peers::Peers;
use crate::pool::{Commit, db_error};
use crate::report::{Report, Table};
use crate::systems::{Kind, label_of};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

/// One interval of the run.
pub struct Sample {
    /// Seconds since the clients started, at the interval's end.
    pub at: f64,
    pub phase: Phase,
    pub latency: Recorder,
    /// Buffers of one claim path, sampled at the interval's end.
    pub buffers: Option<u64>,
    /// Jobs enqueued (seeded included) and not yet finished.
    pub backlog: i64,
    /// `pg_stat_user_tables.n_dead_tup` of the claim's table.
    pub dead: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Before,
    Held,
    After,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Before => "before",
            Phase::Held => "held",
            Phase::After => "after",
        }
    }
}

pub struct HeldResult {
    pub label: String,
    pub kind: Kind,
    pub samples: Vec<Sample>,
    pub enqueued: u64,
    pub finished: u64,
}

impl HeldResult {
    /// The last interval of `phase`.
    fn last(&self, phase: Phase) -> Option<&Sample> {
        self.samples.iter().rev().find(|s| s.phase == phase)
    }
}

/// The systems under the held snapshot: the product, the floor, the peers
/// and the first candidate of the loops (the one that would ship).
pub fn held_kinds(with_peers: bool, scale: &Scale) -> Vec<Kind> {
    let mut kinds = vec![Kind::Product, Kind::Floor];
    if with_peers {
        kinds.extend([Kind::PgBoss, Kind::Graphile]);
    }
    kinds.extend(scale.loop_cands.first().map(|&c| Kind::Cand(c)));
    kinds
}

pub async fn run(admin: &mut Client, scale: &Scale, peers: Option<&Peers>) -> Vec<HeldResult> {
    let mut out = Vec::new();
    for kind in held_kinds(peers.is_some(), scale) {
        progress(&format!(
            "held snapshot: {}: {:.0} s, a {:.0} s hold from {:.0} s, {:.0} jobs/s",
            kind.name(),
            (scale.held_before + scale.held_hold + scale.held_after).as_secs_f64(),
            scale.held_hold.as_secs_f64(),
            scale.held_before.as_secs_f64(),
            scale.held_rate
        ));
        out.push(run_one(admin, scale, peers, kind).await);
    }
    out
}

/// The jobs seeded before the clients start, so claims find work at once.
const SEEDED: u64 = 1_000;
/// How long a client sleeps after a claim that found nothing.
const EMPTY_POLL_SLEEP: Duration = Duration::from_millis(50);
/// The producer's tick.
const TICK: Duration = Duration::from_millis(10);

async fn run_one(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
    kind: Kind,
) -> HeldResult {
    let system = Arc::new(kind.create(admin, peers).await);
    system.seed(admin, SEEDED, &NORMAL, unix_now()).await;
    let maintainer = system
        .product_schema()
        .zip(loop_maintenance())
        .map(|(schema, policy)| Maintainer::start(schema, policy));
    let claims = maintainer
        .as_ref()
        .map_or_else(|| Arc::new(AtomicU64::new(0)), Maintainer::claims);
    exec(admin, "CHECKPOINT").await;

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let interval = scale.held_sample;
    let enqueued = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    // The producer: due jobs at the run's rate, caught up tick by tick.
    {
        let mut producer = LoopWorker::new(&system, Commit::Off, 1000, 1, &claims, true).await;
        let (stop, enqueued, rate) = (stop.clone(), enqueued.clone(), scale.held_rate);
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                let behind = due
                    .saturating_sub(enqueued.load(Ordering::Relaxed))
                    .min(1_000);
                if behind > 0 {
                    producer
                        .enqueue(behind)
                        .await
                        .unwrap_or_else(|e| panic!("held snapshot producer: {e}"));
                    enqueued.fetch_add(behind, Ordering::Relaxed);
                }
                tokio::time::sleep(TICK).await;
            }
            Vec::new()
        });
    }
    for client in 0..scale.held_clients {
        let mut worker = LoopWorker::new(&system, Commit::Off, client, 1, &claims, false).await;
        let (stop, finished) = (stop.clone(), finished.clone());
        tasks.spawn(async move {
            let mut slots: Vec<Recorder> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let Some((done, took)) = worker
                    .claim_and_finish()
                    .await
                    .unwrap_or_else(|e| panic!("held snapshot client {client}: {e}"))
                else {
                    continue;
                };
                let slot = (started.elapsed().as_secs_f64() / interval.as_secs_f64()) as usize;
                if slots.len() <= slot {
                    slots.resize_with(slot + 1, Recorder::new);
                }
                slots[slot].record(took);
                finished.fetch_add(done, Ordering::Relaxed);
                if done == 0 {
                    tokio::time::sleep(EMPTY_POLL_SLEEP).await;
                }
            }
            slots
        });
    }

    // The controller: the hold, and one sample per interval.
    let mut explainer = Explainer::open().await;
    let holder = harness::connect().await;
    let hold_at = scale.held_before;
    let release_at = scale.held_before + scale.held_hold;
    let end_at = release_at + scale.held_after;
    let mut holding = false;
    let mut samples = Vec::new();
    let mut tick = 1u32;
    loop {
        let next = interval * tick;
        tokio::time::sleep(next.saturating_sub(started.elapsed())).await;
        let buffers = explainer
            .path(
                // With its promote, as the first claim of each second runs it.
                &system.claim(unix_now(), "bench-explain", 1, true).stmts,
            )
            .await
            .unwrap_or_else(|e| panic!("held snapshot EXPLAIN: {e}"))
            .buffers;
        let dead: i64 = admin
            .query_one(
                &format!(
                    "SELECT COALESCE(n_dead_tup, 0) FROM pg_catalog.pg_stat_user_tables \
                     WHERE relid = '{}'::regclass",
                    system.table()
                ),
                &[],
            )
            .await
            .map(|r| r.get(0))
            .unwrap_or_else(|e| panic!("{}", db_error("n_dead_tup", &e)));
        let start = next - interval;
        samples.push(Sample {
            at: next.as_secs_f64(),
            phase: if next <= hold_at {
                Phase::Before
            } else if start >= hold_at && next <= release_at {
                Phase::Held
            } else {
                Phase::After
            },
            latency: Recorder::new(),
            buffers: Some(buffers),
            backlog: (SEEDED + enqueued.load(Ordering::Relaxed)) as i64
                - finished.load(Ordering::Relaxed) as i64,
            dead,
        });
        // The interval just sampled is over: the hold starts or ends now.
        if next >= hold_at && next < release_at && !holding {
            // The snapshot is taken by the transaction's first query and kept
            // until COMMIT; it reads none of the systems' tables.
            exec(
                &holder,
                "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_catalog.pg_class",
            )
            .await;
            holding = true;
        } else if next >= release_at && holding {
            exec(&holder, "COMMIT").await;
            holding = false;
        }
        if next >= end_at {
            break;
        }
        tick += 1;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(joined) = tasks.join_next().await {
        let slots = joined.unwrap_or_else(|e| panic!("held snapshot task: {e}"));
        for (index, slot) in slots.iter().enumerate() {
            if let Some(sample) = samples.get_mut(index) {
                sample.latency.merge(slot);
            }
        }
    }
    if let Some(m) = maintainer {
        m.stop().await;
    }
    drop(explainer);
    designs::drop_schema(admin, &format!("\"{}\"", system.schema())).await;
    HeldResult {
        label: label_of(&system),
        kind,
        samples,
        enqueued: enqueued.load(Ordering::Relaxed),
        finished: finished.load(Ordering::Relaxed),
    }
}

pub fn report(report: &mut Report, results: &[HeldResult], scale: &Scale) {
    report.heading("Under a held snapshot");
    report.para(&format!(
        "Each system alone, one after the other: {seeded} due jobs seeded, a producer \
         enqueueing {rate:.0} jobs/s (due at once), {clients} clients each claiming one job \
         and finishing it (after a claim that found nothing: {sleep} ms asleep), \
         `synchronous_commit` off; the product and its candidate with the engine's \
         maintenance step (`jobs::vacuum` after every 2,000 claims). From {hold_at:.0} s to \
         {release:.0} s another connection holds a `REPEATABLE READ` snapshot (`BEGIN \
         ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class`, then idle in \
         transaction), so nothing that dies meanwhile can be vacuumed. Latency: the claim path \
         (a claim or an empty poll) in each {interval:.0} s interval; buffers: one claim path \
         under EXPLAIN (ANALYZE, BUFFERS) at the interval's end; backlog: jobs enqueued and \
         not yet finished; dead: `n_dead_tup` of the claim's table.",
        seeded = count(SEEDED),
        rate = scale.held_rate,
        clients = scale.held_clients,
        sleep = EMPTY_POLL_SLEEP.as_millis(),
        hold_at = scale.held_before.as_secs_f64(),
        release = (scale.held_before + scale.held_hold).as_secs_f64(),
        interval = scale.held_sample.as_secs_f64(),
    ));
    let mut summary = Table::new(&[
        "system",
        "jobs enqueued / finished>",
        "before: p50 / p99>",
        "buffers>",
        "end of hold: p50 / p99>",
        "buffers>",
        "backlog>",
        "dead>",
        "after: p50 / p99>",
        "buffers>",
        "backlog>",
    ]);
    for r in results {
        let cell = |phase: Phase| {
            r.last(phase).map_or_else(
                || ("n/a".to_owned(), "n/a".to_owned()),
                |s| {
                    (
                        format!("{} / {}", ms(s.latency.p50_ms()), ms(s.latency.p99_ms())),
                        s.buffers.map_or("n/a".to_owned(), |b| b.to_string()),
                    )
                },
            )
        };
        let (before, before_buffers) = cell(Phase::Before);
        let (held, held_buffers) = cell(Phase::Held);
        let (after, after_buffers) = cell(Phase::After);
        let end = r.last(Phase::Held);
        summary.row(vec![
            r.label.clone(),
            format!("{} / {}", r.enqueued, r.finished),
            before,
            before_buffers,
            held,
            held_buffers,
            end.map_or("n/a".to_owned(), |s| s.backlog.to_string()),
            end.map_or("n/a".to_owned(), |s| s.dead.to_string()),
            after,
            after_buffers,
            r.last(Phase::After)
                .map_or("n/a".to_owned(), |s| s.backlog.to_string()),
        ]);
    }
    report.table(&summary);

    report.para(
        "Over time: claim-path p50 / p99 in the interval, buffers of one claim path, backlog.",
    );
    let mut headers = vec!["at".to_owned(), "phase".to_owned()];
    headers.extend(results.iter().map(|r| r.label.clone()));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut over_time = Table::new(&header_refs);
    let rows = results.iter().map(|r| r.samples.len()).max().unwrap_or(0);
    for i in 0..rows {
        let first = results.iter().find_map(|r| r.samples.get(i));
        let mut row = vec![
            first.map_or(String::new(), |s| format!("{:.0} s", s.at)),
            first.map_or(String::new(), |s| s.phase.name().to_owned()),
        ];
        for r in results {
            row.push(r.samples.get(i).map_or(String::new(), |s| {
                format!(
                    "{} / {}, {} buf, {}",
                    ms(s.latency.p50_ms()),
                    ms(s.latency.p99_ms()),
                    s.buffers.map_or("n/a".to_owned(), |b| b.to_string()),
                    s.backlog
                )
            }));
        }
        over_time.row(row);
    }
    report.table(&over_time);

    // Issue 24: claim p99 at the end of the hold at most a third of the best
    // peer's, for the product and its candidate.
    let best_peer = results
        .iter()
        .filter(|r| matches!(r.kind, Kind::PgBoss | Kind::Graphile))
        .filter_map(|r| Some((r.last(Phase::Held)?.latency.p99_ms()?, r.label.clone())))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((best, peer)) = best_peer {
        for r in results
            .iter()
            .filter(|r| matches!(r.kind, Kind::Product | Kind::Cand(_)))
        {
            let p99 = r.last(Phase::Held).and_then(|s| s.latency.p99_ms());
            let x = ratio(p99, Some(best));
            report.verdict(
                format!(
                    "{}: claim p99 at the end of a {:.0} s held snapshot <= 1/3 of the best \
                     peer's",
                    r.label,
                    scale.held_hold.as_secs_f64()
                ),
                format!("{} vs {} ({peer}): {}", ms(p99), ms(Some(best)), times(x)),
                x.is_some_and(|x| x <= 1.0 / 3.0),
            );
        }
    }
}
