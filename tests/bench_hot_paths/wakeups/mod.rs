//! Wake-ups (`schema_gen::wake`, part `wakeups`): how soon an idle worker
//! starts a job after its enqueue commits, and what wake-ups cost the
//! enqueues. BENCHMARKS.md, "Wake-ups", explains the figures.
//!
//! **Pickup**: a producer enqueues one job at a time, 20 to 80 ms apart at
//! random (so a poll's phase is random too); [`ENGINES`] engine instances
//! wait, each with its own listening connection and one worker on its own
//! connection; pickup is the time from the enqueue's commit (its result at
//! the producer) to the first claim returning the job (its result at the
//! worker). Measured quiet and while eight other clients run the
//! enqueue -> claim -> ack loop on another product schema (the load, with
//! the engine's vacuum step). The variants:
//!
//! - the product with the library's [`Listener`] and
//!   [`Notifier::run_and_wake`]: a queue's leading notify inside its
//!   enqueue's transaction at most every 10 ms (shipped), or 20 or 100 ms;
//!   the worker claims alone after a notification, runs the claim path
//!   (promote, claim) otherwise;
//! - the design shipped before: the notify always pipelined behind the
//!   enqueue;
//! - the same with the notify sent by the notifier's task after the
//!   enqueue returned ([`Notifier::wake`]);
//! - the shipped path with the workers' sessions on generic plans (a
//!   reference: the claim's planning in the pickup);
//! - the product polling every 100 ms and every 1 s;
//! - graphile-worker 0.17: its `add_job` (which notifies `jobs:insert` in
//!   its own transaction) and its worker's get and complete, replayed
//!   through this driver as `versus.rs` does, each engine instance
//!   listening on `jobs:insert` and nudging its worker as graphile-worker's
//!   pool does.
//!
//! The time each claim that returned a job took is reported beside the
//! pickup: the rest is the wake-up's path.
//!
//! **Enqueue throughput**: eight clients enqueue one job per statement for
//! the loop's time, each variant in [`ROUNDS`] slices, each slice right
//! beside one without wake-ups and compared with it: no wake-ups;
//! the design shipped before (the notify always behind) and
//! `run_and_wake` with its leading notify inside at most every 10 (shipped),
//! 20 or 100 ms, each with one notifier for the eight (one engine process)
//! and with a notifier each (eight engines); the first version's
//! candidate path (the enqueue rendered on every call); the notifier's task sending
//! every notification; a notify pipelined after every enqueue (no
//! coalescing); the notify inside every enqueue transaction (`BEGIN;
//! enqueue; pg_notify; COMMIT`, one round trip); graphile-worker's
//! `add_job`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use schema_gen::statements::{Job, Session, jobs, wake};
use schema_gen::wake::{Listener, ListenerOptions, Notifier, Wake, connector, deadline, messages};
use schema_model::{SchemaName, WakeChannel};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::designs::{self, Design};
use crate::latency::{Recorder, ms};
use crate::maintenance::{Maintainer, Policy};
use crate::peers::{GraphileSql, Peers};
use crate::pool::{self, Conn, Limit, Param, Stmt, Worker, db_error};
use crate::report::{Report, Table};
use crate::systems::{Kind, System, replay};
use crate::{Scale, exec, progress, ratio, times, unix_now};

/// The queue of the measured jobs.
const QUEUE: &str = "wake";
/// Engine instances waiting for jobs, each with its own listener and one worker.
const ENGINES: usize = 2;
/// The notifier's coalescing interval.
const INTERVAL: Duration = Duration::from_millis(10);
/// The shipped default: a leading notify inside its enqueue's transaction
/// at most once per this many milliseconds ([`schema_gen::wake::INSIDE_EVERY`]).
const SHIPPED_INSIDE_MS: u64 = 10;
/// An engine's fallback poll while it waits for wake-ups.
const FALLBACK: Duration = Duration::from_secs(5);
/// The enqueue clients of the throughput runs (and of the load).
const CLIENTS: usize = 8;
/// Turns the throughput variants take.
const ROUNDS: u32 = 20;
/// Rounds of the pickup cells.
const PICKUP_ROUNDS: usize = 6;

/// How a waiting worker learns of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pickup {
    /// The library's listener; the producer's notifier sends the notify.
    Notifier,
    /// The library's listener; the producer pipelines the notify behind
    /// its enqueue ([`Notifier::lead`]).
    Lead,
    /// As [`Pickup::Lead`], the workers' sessions with `plan_cache_mode =
    /// force_generic_plan` (a reference: how much of the pickup is the
    /// claim's planning).
    LeadGeneric,
    /// A candidate: the leading notification of an interval inside its
    /// enqueue's transaction (`BEGIN; enqueue; pg_notify; COMMIT`, one round
    /// trip), so it fires at that commit, at most once per so many
    /// milliseconds per queue and engine; the other leading notifications
    /// pipelined behind the enqueue, the rest folded, as shipped.
    LeadInTransaction(u64),
    /// The worker claims every so many milliseconds.
    Poll(u64),
    /// graphile-worker's `jobs:insert`.
    Graphile,
}

impl Pickup {
    fn label(self) -> String {
        match self {
            Pickup::Lead => {
                "alkstore, wake-ups: notify pipelined behind the enqueue (shipped before)"
                    .to_owned()
            }
            Pickup::Notifier => "alkstore, wake-ups: notify sent by the notifier's task".to_owned(),
            Pickup::LeadInTransaction(every) => format!(
                "run_and_wake: a leading notify inside its enqueue's transaction, at most every {every} ms{}",
                if every == SHIPPED_INSIDE_MS {
                    " (shipped)"
                } else {
                    ""
                }
            ),
            Pickup::LeadGeneric => {
                "ref: shipped before, workers with plan_cache_mode = force_generic_plan".to_owned()
            }
            Pickup::Poll(every) if every >= 1000 => {
                format!("alkstore, polling every {} s", every / 1000)
            }
            Pickup::Poll(every) => format!("alkstore, polling every {every} ms"),
            Pickup::Graphile => "graphile-worker, LISTEN jobs:insert".to_owned(),
        }
    }
}

/// What the server is doing besides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Quiet,
    Loop,
}

impl Load {
    fn label(self) -> &'static str {
        match self {
            Load::Quiet => "quiet",
            Load::Loop => "8-client loop",
        }
    }
}

pub struct PickupRow {
    variant: Pickup,
    load: Load,
    latency: Recorder,
    /// The p50 of each round.
    rounds: Vec<Option<f64>>,
    /// The claims that returned a job.
    claim: Recorder,
    claims: u64,
    notifications: u64,
}

/// How an enqueue is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueue {
    Off,
    /// The eight clients are one engine: one notifier for them all.
    Notifier,
    Lead,
    /// The eight clients are eight engines: a notifier each.
    LeadPerClient,
    /// The candidate: the leading notify inside its enqueue's transaction,
    /// one engine, the enqueue's SQL rendered and sent by the benchmark's
    /// connection (`Conn`) as the first version did.
    LeadInTransactionConn,
    /// The candidate on the library's session (statement text cached): a
    /// leading notify inside its enqueue's transaction at most once per so
    /// many milliseconds, the other leading ones pipelined behind; one
    /// engine.
    LeadInTransaction(u64),
    /// The same, eight engines.
    LeadInTransactionPerClient(u64),
    AfterEach,
    InTransaction,
    Graphile,
}

impl Enqueue {
    fn label(self) -> String {
        match self {
            Enqueue::LeadInTransaction(every) => format!(
                "run_and_wake: a leading notify inside its enqueue's transaction at most every {every} ms{}: one engine",
                if every == SHIPPED_INSIDE_MS {
                    " (shipped)"
                } else {
                    ""
                }
            ),
            Enqueue::LeadInTransactionPerClient(every) => {
                format!("cand: the same ({every} ms), each client an engine")
            }
            other => other.fixed_label().to_owned(),
        }
    }

    fn fixed_label(self) -> &'static str {
        match self {
            Enqueue::LeadInTransaction(_) | Enqueue::LeadInTransactionPerClient(_) => "",
            Enqueue::Off => "alkstore, no wake-ups",
            Enqueue::Lead => {
                "alkstore, notify pipelined behind the enqueue, coalesced (shipped before): one engine"
            }
            Enqueue::LeadPerClient => {
                "alkstore, the same, each client an engine (8 notifiers coalescing apart)"
            }
            Enqueue::LeadInTransactionConn => {
                "cand: the leading notify inside its enqueue's transaction (10 ms), enqueue rendered per call on a plain connection: one engine"
            }
            Enqueue::Notifier => "alkstore, notify sent by the notifier's task, coalesced",
            Enqueue::AfterEach => "alkstore, notify pipelined behind every enqueue",
            Enqueue::InTransaction => "alkstore, pg_notify inside every enqueue transaction",
            Enqueue::Graphile => "graphile-worker add_job (notifies inside)",
        }
    }
}

pub struct ThroughputRow {
    variant: Enqueue,
    jobs_per_s: f64,
    /// Each round's rate over the rate without wake-ups in that round, sorted.
    paired: Vec<f64>,
    latency: Recorder,
    notifications_per_s: f64,
}

pub struct Measured {
    /// The machine's load average (`/proc/loadavg`: 1, 5 and 15 minutes)
    /// when each phase started, and at the end: the machine is shared.
    load: Vec<(&'static str, String)>,
    pickup: Vec<PickupRow>,
    throughput: Vec<ThroughputRow>,
    samples: usize,
    graphile: Option<String>,
}

/// `ALKSTORE_BENCH_WAKE_FOCUS=1`: only the shipped path, the inside-notify
/// candidates and graphile-worker (what decides the targets), for a quicker
/// run.
fn focused() -> bool {
    harness::bench::env_number("ALKSTORE_BENCH_WAKE_FOCUS").is_some_and(|n| n > 0.0)
}

/// Jobs picked up per pickup cell.
fn samples(scale: &Scale) -> usize {
    let default = match scale.name.split(',').next() {
        Some("full") => 300,
        Some("quick") => 80,
        _ => 15,
    };
    harness::bench::env_number("ALKSTORE_BENCH_WAKE_JOBS").map_or(default, |n| n as usize)
}

pub async fn run(
    admin: &mut tokio_postgres::Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Measured {
    let samples = samples(scale);
    let mut variants = vec![
        Pickup::Lead,
        Pickup::Notifier,
        Pickup::LeadGeneric,
        Pickup::LeadInTransaction(10),
        Pickup::LeadInTransaction(20),
        Pickup::LeadInTransaction(100),
        Pickup::Poll(100),
        Pickup::Poll(1000),
    ];
    if focused() {
        variants.retain(|v| {
            matches!(
                v,
                Pickup::Lead | Pickup::LeadInTransaction(10 | 20) | Pickup::Graphile
            )
        });
    }
    if peers.is_some() {
        variants.push(Pickup::Graphile);
    }
    let mut pickup = Vec::new();
    let mut graphile = None;
    let per_round = samples.div_ceil(PICKUP_ROUNDS);
    let mut load_average = Vec::new();
    for load in [Load::Quiet, Load::Loop] {
        load_average.push((load.label(), load_average_now()));
        let background = match load {
            Load::Quiet => None,
            Load::Loop => Some(Background::start(admin).await),
        };
        let mut cells = Vec::new();
        for &variant in &variants {
            cells.push(pickup::Cell::start(admin, variant, load, peers).await);
        }
        progress(&format!(
            "wake-ups: pickup, {}: {} variants, {PICKUP_ROUNDS} rounds of {per_round} jobs each",
            load.label(),
            cells.len()
        ));
        // The variants take turns, each round starting with another, so
        // the machine's other work falls on all alike.
        for round in 0..PICKUP_ROUNDS {
            for turn in 0..cells.len() {
                let index = (round + turn) % cells.len();
                cells[index].round(per_round).await;
            }
        }
        for cell in cells {
            graphile = graphile.or(cell.graphile_version());
            pickup.push(cell.finish(admin).await);
        }
        if let Some(background) = background {
            background.stop(admin).await;
        }
    }
    load_average.push(("enqueue throughput", load_average_now()));
    let throughput = throughput::throughput(admin, scale, peers).await;
    load_average.push(("the end", load_average_now()));
    Measured {
        load: load_average,
        pickup,
        throughput,
        samples,
        graphile,
    }
}

/// The load average over 1, 5 and 15 minutes, as `/proc/loadavg` says
/// (`?` where there is none).
fn load_average_now() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "?".to_owned(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

mod load;
mod pickup;
mod throughput;

use load::Background;

fn job(now: i64, payload: Vec<u8>) -> Job {
    let mut job = Job::new(QUEUE, payload);
    job.run_at = now;
    job.enqueued_at = now;
    job.opts = harness::bench::queue_opts();
    job
}

fn direct() -> impl schema_gen::wake::Connect {
    let url = harness::database_url();
    let config = url
        .parse::<tokio_postgres::Config>()
        .unwrap_or_else(|e| panic!("the harness URL does not parse: {e}"));
    connector(config, NoTls)
}

// ---------------------------------------------------------------------------
// The report

pub fn report(report: &mut Report, measured: &Measured) {
    report.heading("Wake-ups: pickup latency");
    report.para(&format!(
        "The machine's load average (1, 5, 15 min) when each phase started: {}; cores: {}.",
        measured
            .load
            .iter()
            .map(|(phase, load)| format!("{phase} {load}"))
            .collect::<Vec<_>>()
            .join(", "),
        std::thread::available_parallelism().map_or(0, usize::from)
    ));
    report.para(&format!(
        "From an enqueue's commit (its result at the producer) to the first claim returning the \
         job (its result at the worker), {} jobs per cell, enqueued one at a time 20 to 80 ms \
         apart, in {PICKUP_ROUNDS} rounds: the cells of a load take turns, each round starting \
         with another; by round: the median over the rounds of the cell's p50 over \
         graphile-worker's p50 in the same round. {ENGINES} engine instances wait, each with its own listening connection and one \
         worker (claim of 1, promote of 10, ack). `quiet`: nothing else runs; `8-client loop`: \
         eight other clients run enqueue -> claim -> ack on another product schema meanwhile, \
         with the engine's vacuum step. Claims / job: every claim the workers sent (those that \
         found nothing included) per job. The notifier coalesces over {} ms.{}",
        measured.samples,
        INTERVAL.as_millis(),
        measured
            .graphile
            .as_ref()
            .map_or(String::new(), |v| format!(" graphile-worker {v}."))
    ));
    let mut table = Table::new(&[
        "wake-up",
        "load",
        "pickup p50>",
        "p99>",
        "p50 / graphile-worker's, by round>",
        "of which the claim, p50>",
        "claims / job>",
        "notifications / job>",
    ]);
    let by_round = |row: &PickupRow| {
        let graphile = measured
            .pickup
            .iter()
            .find(|r| r.variant == Pickup::Graphile && r.load == row.load)?;
        let mut ratios: Vec<f64> = row
            .rounds
            .iter()
            .zip(&graphile.rounds)
            .filter_map(|(ours, theirs)| ratio(*ours, *theirs))
            .collect();
        ratios.sort_by(f64::total_cmp);
        quantile(&ratios, 0.5)
    };
    for row in &measured.pickup {
        let jobs = row.latency.count().max(1) as f64;
        table.row(vec![
            row.variant.label(),
            row.load.label().to_owned(),
            ms(row.latency.p50_ms()),
            ms(row.latency.p99_ms()),
            times(by_round(row)),
            ms(row.claim.p50_ms()),
            format!("{:.2}", row.claims as f64 / jobs),
            format!("{:.2}", row.notifications as f64 / jobs / ENGINES as f64),
        ]);
    }
    report.table(&table);
    for load in [Load::Quiet, Load::Loop] {
        let find = |variant| {
            measured
                .pickup
                .iter()
                .find(|r| r.variant == variant && r.load == load)
                .and_then(|r| r.latency.p50_ms())
        };
        if let Some(graphile) = find(Pickup::Graphile) {
            let ours = find(Pickup::LeadInTransaction(SHIPPED_INSIDE_MS));
            let r = ratio(ours, Some(graphile));
            let rounds = measured
                .pickup
                .iter()
                .find(|r| {
                    r.variant == Pickup::LeadInTransaction(SHIPPED_INSIDE_MS) && r.load == load
                })
                .and_then(by_round);
            report.verdict(
                format!(
                    "pickup p50 with wake-ups <= graphile-worker's ({})",
                    load.label()
                ),
                format!(
                    "{} vs {}: {} (by round: {})",
                    ms(ours),
                    ms(Some(graphile)),
                    times(r),
                    times(rounds)
                ),
                r.is_some_and(|r| r <= 1.0),
            );
        }
    }

    report.heading("Wake-ups: enqueue throughput");
    report.para(&format!(
        "{CLIENTS} clients, each on its own connection, enqueue one job per statement on one \
         queue, `synchronous_commit` on; in each of {ROUNDS} rounds every variant runs one \
         slice right beside a slice without wake-ups (before it in even rounds, after it in \
         odd ones), the pairs taking turns (each round starting with another). This / no \
         wake-ups: the median over the rounds of the variant's rate over the rate of the slice \
         beside it, with the quartiles (the machine's other work, which moves over seconds, \
         falls on both alike). Jobs / s: over all of the variant's slices. One engine: \
         the clients share one notifier (the library coalesces per process and queue); each \
         client an engine: a notifier each, so up to {CLIENTS} notifications per interval. \
         Notifications / s: what the clients and their notifiers sent."
    ));
    let mut table = Table::new(&[
        "enqueue",
        "jobs / s>",
        "this / no wake-ups, median [quartiles]>",
        "enqueue p50>",
        "p99>",
        "notifications / s>",
    ]);
    for row in &measured.throughput {
        table.row(vec![
            row.variant.label(),
            format!("{:.0}", row.jobs_per_s),
            format!(
                "{} [{} - {}]",
                times(quantile(&row.paired, 0.5)),
                times(quantile(&row.paired, 0.25)),
                times(quantile(&row.paired, 0.75))
            ),
            ms(row.latency.p50_ms()),
            ms(row.latency.p99_ms()),
            format!("{:.0}", row.notifications_per_s),
        ]);
    }
    report.table(&table);
    if let Some(notifier) = measured
        .throughput
        .iter()
        .find(|r| r.variant == Enqueue::LeadInTransaction(SHIPPED_INSIDE_MS))
    {
        let r = quantile(&notifier.paired, 0.5);
        report.verdict(
            format!(
                "enqueue throughput with wake-ups >= 0.95x without ({CLIENTS} clients, one engine)"
            ),
            format!("{} (median of {ROUNDS} rounds)", times(r)),
            r.is_some_and(|r| r >= 0.95),
        );
    }
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let last = values.len().checked_sub(1)?;
    values.get(((last as f64) * q).round() as usize).copied()
}
