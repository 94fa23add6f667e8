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
//! - the product with the library's [`Listener`] and the notify pipelined
//!   behind the enqueue, as [`Notifier::run_and_wake`] sends it (shipped);
//!   the worker claims alone after a notification, runs the claim path
//!   (promote, claim) otherwise;
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
//! the loop's time, the variants taking turns in four slices: no wake-ups;
//! the shipped path with one notifier for the eight (one engine process)
//! and with a notifier each (eight engines); the notifier's task sending
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
use crate::versus::{Kind, System, replay};
use crate::{Scale, exec, progress, ratio, times, unix_now};

/// The queue of the measured jobs.
const QUEUE: &str = "wake";
/// Engine instances waiting for jobs, each with its own listener and one worker.
const ENGINES: usize = 2;
/// The notifier's coalescing interval.
const INTERVAL: Duration = Duration::from_millis(10);
/// An engine's fallback poll while it waits for wake-ups.
const FALLBACK: Duration = Duration::from_secs(5);
/// The enqueue clients of the throughput runs (and of the load).
const CLIENTS: usize = 8;
/// Turns the throughput variants take.
const SLICES: u32 = 4;

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
    /// The worker claims every so many milliseconds.
    Poll(u64),
    /// graphile-worker's `jobs:insert`.
    Graphile,
}

impl Pickup {
    fn label(self) -> String {
        match self {
            Pickup::Lead => {
                "alkstore, wake-ups: notify pipelined behind the enqueue (shipped)".to_owned()
            }
            Pickup::Notifier => "alkstore, wake-ups: notify sent by the notifier's task".to_owned(),
            Pickup::LeadGeneric => {
                "ref: shipped, workers with plan_cache_mode = force_generic_plan".to_owned()
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
    AfterEach,
    InTransaction,
    Graphile,
}

impl Enqueue {
    fn label(self) -> &'static str {
        match self {
            Enqueue::Off => "alkstore, no wake-ups",
            Enqueue::Lead => {
                "alkstore, notify pipelined behind the enqueue, coalesced (shipped): one engine"
            }
            Enqueue::LeadPerClient => {
                "alkstore, the same, each client an engine (8 notifiers coalescing apart)"
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
    latency: Recorder,
    notifications_per_s: f64,
}

pub struct Measured {
    pickup: Vec<PickupRow>,
    throughput: Vec<ThroughputRow>,
    samples: usize,
    graphile: Option<String>,
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
        Pickup::Poll(100),
        Pickup::Poll(1000),
    ];
    if peers.is_some() {
        variants.push(Pickup::Graphile);
    }
    let mut pickup = Vec::new();
    let mut graphile = None;
    for load in [Load::Quiet, Load::Loop] {
        let background = match load {
            Load::Quiet => None,
            Load::Loop => Some(Background::start(admin).await),
        };
        for &variant in &variants {
            progress(&format!(
                "wake-ups: pickup, {}, {}: {samples} jobs",
                variant.label(),
                load.label()
            ));
            let (row, version) = pickup_cell(admin, variant, load, samples, peers).await;
            graphile = graphile.or(version);
            pickup.push(row);
        }
        if let Some(background) = background {
            background.stop(admin).await;
        }
    }
    let throughput = throughput(admin, scale, peers).await;
    Measured {
        pickup,
        throughput,
        samples,
        graphile,
    }
}

// ---------------------------------------------------------------------------
// Pickup

/// What the producer and the workers record: each job's enqueue commit and
/// the first claim that returned it.
#[derive(Default)]
struct Times {
    enqueued: Mutex<HashMap<i64, Instant>>,
    picked: Mutex<Vec<(i64, Instant)>>,
    /// The round trip of each claim that returned a job.
    claims: Mutex<Recorder>,
}

impl Times {
    fn enqueued(&self, id: i64, at: Instant) {
        self.enqueued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, at);
    }

    /// Job `id` came back from the claim sent at `claim_sent`.
    fn picked(&self, id: i64, claim_sent: Instant) {
        let at = Instant::now();
        self.picked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, at));
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(at - claim_sent);
    }

    fn picked_count(&self) -> usize {
        self.picked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn latency(&self) -> Recorder {
        let enqueued = self.enqueued.lock().unwrap_or_else(|e| e.into_inner());
        let mut recorder = Recorder::new();
        for (id, at) in self.picked.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let committed = enqueued
                .get(id)
                .unwrap_or_else(|| panic!("job {id} was picked up but never enqueued"));
            recorder.record(at.saturating_duration_since(*committed));
        }
        recorder
    }
}

/// A small deterministic generator for the gaps between enqueues.
struct Gaps(u64);

impl Gaps {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(20 + self.0 % 61)
    }
}

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

async fn pickup_cell(
    admin: &mut tokio_postgres::Client,
    variant: Pickup,
    load: Load,
    samples: usize,
    peers: Option<&Peers>,
) -> (PickupRow, Option<String>) {
    let times = Arc::new(Times::default());
    let (stop, stopped) = watch::channel(false);
    let claims = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    let (system, version) = if variant == Pickup::Graphile {
        let system = Kind::Graphile.create(admin, peers).await;
        let System::Graphile(sql, _) = &system else {
            unreachable!("Kind::Graphile creates graphile-worker")
        };
        let version = sql.version.clone();
        for _ in 0..ENGINES {
            workers.spawn(graphile_worker(
                Arc::clone(sql),
                stopped.clone(),
                Arc::clone(&times),
                Arc::clone(&claims),
            ));
        }
        (system, Some(version))
    } else {
        let schema = Design::Product.create(admin, "wake_pickup").await;
        for engine in 0..ENGINES {
            let listener = match variant {
                Pickup::Poll(_) => None,
                _ => Some(
                    Listener::start(direct(), &schema, [QUEUE], ListenerOptions::default())
                        .await
                        .unwrap_or_else(|e| panic!("listener: {e}")),
                ),
            };
            let session = Session::new(harness::connect().await, schema.clone());
            if variant == Pickup::LeadGeneric {
                exec(session.client(), "SET plan_cache_mode = force_generic_plan").await;
            }
            session
                .prepare_all()
                .await
                .unwrap_or_else(|e| panic!("prepare: {e}"));
            workers.spawn(product_worker(
                session,
                variant,
                listener,
                stopped.clone(),
                Arc::clone(&times),
                Arc::clone(&claims),
                engine,
            ));
        }
        (System::Product(schema), None)
    };

    produce(&system, variant, samples, &times).await;
    // Every job is picked up within a few polls.
    let deadline = Instant::now() + Duration::from_secs(30);
    while times.picked_count() < samples {
        assert!(
            Instant::now() < deadline,
            "{}: {} of {samples} jobs picked up after 30 s",
            variant.label(),
            times.picked_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    let mut notifications = 0;
    while let Some(joined) = workers.join_next().await {
        notifications += joined.unwrap_or_else(|e| panic!("pickup worker: {e}"));
    }
    designs::drop_schema(admin, &format!("\"{}\"", system.schema())).await;
    (
        PickupRow {
            variant,
            load,
            latency: times.latency(),
            claim: times
                .claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            claims: claims.load(Ordering::Relaxed),
            notifications,
        },
        version,
    )
}

/// The producer: one job at a time, 20 to 80 ms apart.
async fn produce(system: &System, variant: Pickup, samples: usize, times: &Times) {
    let mut gaps = Gaps(0x9e37_79b9_7f4a_7c15);
    match system {
        System::Product(schema) => {
            let session = Session::new(harness::connect().await, schema.clone());
            session
                .prepare_all()
                .await
                .unwrap_or_else(|e| panic!("prepare: {e}"));
            let notifier = Notifier::start(direct(), schema.clone(), INTERVAL)
                .await
                .unwrap_or_else(|e| panic!("notifier: {e}"));
            // The producer sends what `Notifier::run_and_wake` sends (the lead
            // variants), and stamps the commit when the enqueue's own result
            // arrives, before the notify's.
            for n in 0..samples {
                tokio::time::sleep(gaps.next()).await;
                let now = unix_now();
                let job = job(now, format!("{{\"n\":{n}}}").into_bytes());
                let enqueue = jobs::Enqueue { job: &job, now };
                let lead = match variant {
                    Pickup::Lead | Pickup::LeadGeneric => notifier.lead(QUEUE),
                    _ => None,
                };
                let (id, committed) = match lead {
                    None => {
                        let id = session.run(&enqueue).await;
                        (id, Instant::now())
                    }
                    Some(channel) => {
                        let enqueued = async {
                            let id = session.run(&enqueue).await;
                            (id, Instant::now())
                        };
                        let notify = async {
                            session
                                .run(&wake::Notify { channel: &channel })
                                .await
                                .unwrap_or_else(|e| panic!("notify: {e}"));
                        };
                        futures_util::future::join(enqueued, notify).await.0
                    }
                };
                let id = id.unwrap_or_else(|e| panic!("enqueue: {e}"));
                times.enqueued(id, committed);
                if variant == Pickup::Notifier {
                    notifier.wake(QUEUE);
                }
            }
        }
        System::Graphile(sql, _) => {
            let mut conn = Conn::open().await;
            for n in 0..samples {
                tokio::time::sleep(gaps.next()).await;
                let add = replay(&sql.add1, &[(1, Param::JsonText(format!("{{\"n\":{n}}}")))]);
                let rows = conn
                    .query(&add)
                    .await
                    .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker add_job", &e)));
                let committed = Instant::now();
                let id: i64 = rows
                    .first()
                    .and_then(|row| row.try_get("id").ok())
                    .unwrap_or_else(|| panic!("graphile-worker's add_job returned no id"));
                times.enqueued(id, committed);
            }
        }
        _ => unreachable!("the pickup runs the product or graphile-worker"),
    }
}

/// One engine instance's worker on the product: the claim path, then (when
/// it came back empty) a wait for a wake-up or the fallback poll, or a poll
/// interval's sleep. Returns the notifications its listener received.
async fn product_worker(
    session: Session,
    variant: Pickup,
    listener: Option<Listener>,
    mut stopped: watch::Receiver<bool>,
    times: Arc<Times>,
    claims: Arc<AtomicU64>,
    engine: usize,
) -> u64 {
    let worker = format!("wake-engine-{engine}");
    let mut wakeup = listener.as_ref().and_then(|l| l.wakeup(QUEUE));
    let mut woke = Wake::Deadline;
    while !*stopped.borrow() {
        if let Some(wakeup) = &mut wakeup {
            wakeup.seen();
        }
        let now = unix_now();
        let claim = jobs::Claim {
            queue: QUEUE,
            worker_id: &worker,
            now,
            limit: 1,
        };
        // A notification means jobs were made ready: the claim alone. Any
        // other turn runs the claim path (promote, claim).
        let sent = Instant::now();
        let claimed = if woke == Wake::Notified {
            session.run(&claim).await
        } else {
            let promote = jobs::Promote {
                queue: QUEUE,
                now,
                limit: 10,
            };
            session
                .run_pipelined(&promote, &claim)
                .await
                .map(|(_, c)| c)
        }
        .unwrap_or_else(|e| panic!("claim: {e}"));
        woke = Wake::Deadline;
        claims.fetch_add(1, Ordering::Relaxed);
        if let Some(job) = claimed.first() {
            times.picked(job.id, sent);
            session
                .run(&jobs::Ack {
                    id: job.id,
                    worker_id: &worker,
                    attempts: job.attempts,
                })
                .await
                .unwrap_or_else(|e| panic!("ack: {e}"));
            continue;
        }
        let wait = async {
            match (&mut wakeup, variant) {
                (Some(wakeup), _) => wakeup.wait_until(Some(deadline(None, FALLBACK))).await,
                (None, Pickup::Poll(every)) => {
                    tokio::time::sleep(Duration::from_millis(every)).await;
                    Wake::Deadline
                }
                (None, _) => unreachable!("a wake-up variant without a listener"),
            }
        };
        tokio::select! {
            w = wait => {
                assert_ne!(w, Wake::Closed, "the listener closed while its worker waited");
                woke = w;
            }
            _ = stopped.changed() => {}
        }
    }
    listener.map_or(0, |l| l.notifications())
}

/// A graphile-worker instance: its listening connection (`LISTEN
/// "jobs:insert"`, each notification nudging its worker, as
/// graphile-worker's pool does) and one worker on a connection of its own,
/// running its get and complete. Returns the notifications it received.
async fn graphile_worker(
    sql: Arc<GraphileSql>,
    mut stopped: watch::Receiver<bool>,
    times: Arc<Times>,
    claims: Arc<AtomicU64>,
) -> u64 {
    let (listening, connection) = tokio_postgres::connect(&harness::database_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("graphile-worker listener: {e}"));
    let (tx, mut wakeups) = watch::channel(0u64);
    let mut stream = messages(connection);
    let driver = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            if let AsyncMessage::Notification(n) = message
                && n.channel() == "jobs:insert"
            {
                tx.send_modify(|seen| *seen += 1);
            }
        }
    });
    exec(&listening, r#"LISTEN "jobs:insert""#).await;
    let mut conn = Conn::open().await;
    let get = replay(&sql.get1, &[]);
    while !*stopped.borrow() {
        wakeups.borrow_and_update();
        let sent = Instant::now();
        let rows = conn
            .query(&get)
            .await
            .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker get_job", &e)));
        claims.fetch_add(1, Ordering::Relaxed);
        if let Some(row) = rows.first() {
            let id: i64 = row
                .try_get("id")
                .unwrap_or_else(|e| panic!("graphile-worker's get returned no id: {e}"));
            times.picked(id, sent);
            conn.query(&replay(&sql.complete1, &[(0, Param::Int(id))]))
                .await
                .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker complete", &e)));
            continue;
        }
        tokio::select! {
            _ = wakeups.changed() => {}
            () = tokio::time::sleep(FALLBACK) => {}
            _ = stopped.changed() => {}
        }
    }
    let received = *wakeups.borrow();
    drop(listening);
    driver.abort();
    received
}

// ---------------------------------------------------------------------------
// The load: eight clients running the loop on a product schema of their own

/// The load runs on a runtime of its own, so that its eight clients never
/// queue ahead of the producer's or a worker's task in the measuring
/// runtime (which would stamp a commit late, and a pickup short): they
/// share the machine's cores, as engine processes do.
struct Background {
    schema: SchemaName,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    maintainer: Maintainer,
    runtime: tokio::runtime::Runtime,
}

impl Background {
    async fn start(admin: &mut tokio_postgres::Client) -> Self {
        let schema = Design::Product.create(admin, "wake_load").await;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the load's runtime: {e}"));
        let maintainer = {
            let _entered = runtime.enter();
            Maintainer::start(
                &schema,
                Policy::EveryClaims(crate::churn::VACUUM_EVERY_CLAIMS),
            )
        };
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for client in 0..CLIENTS {
            let schema = schema.clone();
            let stopped = stopped.clone();
            let counter = maintainer.claims();
            tasks.spawn_on(
                async move {
                    let mut conn = Conn::open().await;
                    let worker = format!("load-{client}");
                    let mut n = 0u64;
                    while !*stopped.borrow() {
                        let now = unix_now();
                        let payload = format!("{{\"client\":{client},\"n\":{n}}}").into_bytes();
                        let enqueue =
                            crate::product::enqueue(&schema, "load", &[payload], now, now);
                        conn.query(&enqueue)
                            .await
                            .unwrap_or_else(|e| panic!("{}", db_error("load enqueue", &e)));
                        let path = crate::product::claim_path(&schema, "load", now, &worker, 1);
                        let rows = conn
                            .pipeline(&path)
                            .await
                            .unwrap_or_else(|e| panic!("{}", db_error("load claim", &e)));
                        let claimed =
                            crate::product::claimed(rows.last().map_or(&[][..], Vec::as_slice))
                                .unwrap_or_else(|e| panic!("{e}"));
                        counter.fetch_add(claimed.len() as u64, Ordering::Relaxed);
                        if !claimed.is_empty() {
                            conn.query(&crate::product::ack(&schema, &claimed, &worker))
                                .await
                                .unwrap_or_else(|e| panic!("{}", db_error("load ack", &e)));
                        }
                        n += 1;
                    }
                },
                runtime.handle(),
            );
        }
        Self {
            schema,
            stop,
            tasks,
            maintainer,
            runtime,
        }
    }

    async fn stop(mut self, admin: &tokio_postgres::Client) {
        let _ = self.stop.send(true);
        while let Some(joined) = self.tasks.join_next().await {
            joined.unwrap_or_else(|e| panic!("load client: {e}"));
        }
        self.maintainer.stop().await;
        self.runtime.shutdown_background();
        designs::drop_schema(admin, &format!("\"{}\"", self.schema)).await;
    }
}

// ---------------------------------------------------------------------------
// Enqueue throughput

struct EnqueueWorker {
    /// The product's variants run the library's calls on a session; the
    /// notify in the transaction and graphile-worker's `add_job` are
    /// pipelined SQL on a connection.
    session: Option<Session>,
    conn: Option<Conn>,
    variant: Enqueue,
    schema: SchemaName,
    channel: WakeChannel,
    notifier: Option<Arc<Notifier>>,
    graphile: Option<Arc<GraphileSql>>,
    latency: Recorder,
    /// Notifications this client sent itself, besides its notifier's.
    sent: u64,
    client: usize,
    n: u64,
}

impl EnqueueWorker {
    fn session(&self) -> Result<&Session, String> {
        self.session.as_ref().ok_or_else(|| "no session".to_owned())
    }
}

impl Worker for EnqueueWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let now = unix_now();
        let payload = format!("{{\"client\":{},\"n\":{}}}", self.client, self.n);
        self.n += 1;
        let job = job(now, payload.clone().into_bytes());
        let enqueue = jobs::Enqueue { job: &job, now };
        let failed = |e: schema_gen::statements::StatementError| e.to_string();
        match self.variant {
            Enqueue::Off => {
                self.session()?.run(&enqueue).await.map_err(failed)?;
            }
            Enqueue::Lead | Enqueue::LeadPerClient => {
                let notifier = self.notifier.as_ref().ok_or("no notifier")?;
                notifier
                    .run_and_wake(self.session()?, &enqueue, QUEUE)
                    .await
                    .map_err(failed)?;
            }
            Enqueue::Notifier => {
                self.session()?.run(&enqueue).await.map_err(failed)?;
                self.notifier.as_ref().ok_or("no notifier")?.wake(QUEUE);
            }
            Enqueue::AfterEach => {
                let session = self.session()?;
                let notify = wake::Notify {
                    channel: &self.channel,
                };
                let (enqueued, notified) =
                    futures_util::future::join(session.run(&enqueue), session.run(&notify)).await;
                enqueued.map_err(failed)?;
                notified.map_err(failed)?;
                self.sent += 1;
            }
            Enqueue::InTransaction => {
                let statements = [
                    Stmt::new("BEGIN", Vec::new()),
                    Stmt::from(jobs::enqueue(&self.schema, &job, now)),
                    Stmt::new(
                        "SELECT pg_catalog.pg_notify($1, '')",
                        vec![Param::Text(self.channel.as_str().to_owned())],
                    ),
                    Stmt::new("COMMIT", Vec::new()),
                ];
                let conn = self.conn.as_mut().ok_or("no connection")?;
                conn.pipeline(&statements)
                    .await
                    .map_err(|e| db_error("enqueue with notify inside", &e))?;
                self.sent += 1;
            }
            Enqueue::Graphile => {
                let sql = self.graphile.as_ref().ok_or("graphile-worker's SQL")?;
                let add = replay(&sql.add1, &[(1, Param::JsonText(payload))]);
                let conn = self.conn.as_mut().ok_or("no connection")?;
                conn.query(&add)
                    .await
                    .map_err(|e| db_error("graphile-worker add_job", &e))?;
                self.sent += 1;
            }
        }
        self.latency.record(started.elapsed());
        Ok(1)
    }
}

async fn throughput(
    admin: &mut tokio_postgres::Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Vec<ThroughputRow> {
    let mut variants = vec![
        Enqueue::Off,
        Enqueue::Lead,
        Enqueue::LeadPerClient,
        Enqueue::Notifier,
        Enqueue::AfterEach,
        Enqueue::InTransaction,
    ];
    if peers.is_some() {
        variants.push(Enqueue::Graphile);
    }
    progress(&format!(
        "wake-ups: enqueue throughput, {CLIENTS} clients, {} variants, {:.0} s each in {SLICES} turns",
        variants.len(),
        scale.loop_time.as_secs_f64()
    ));
    let slice = scale.loop_time / SLICES;
    let mut runners = Vec::new();
    for &variant in &variants {
        let (schema_name, graphile) = if variant == Enqueue::Graphile {
            let system = Kind::Graphile.create(admin, peers).await;
            let System::Graphile(sql, schema) = system else {
                unreachable!("Kind::Graphile creates graphile-worker")
            };
            (schema, Some(sql))
        } else {
            let schema = Design::Product.create(admin, "wake_enqueue").await;
            (schema.as_str().to_owned(), None)
        };
        let schema = SchemaName::new(&schema_name)
            .unwrap_or_else(|_| harness::unique_schema_name("wake_unused"));
        let notifier = || async {
            Arc::new(
                Notifier::start(direct(), schema.clone(), INTERVAL)
                    .await
                    .unwrap_or_else(|e| panic!("notifier: {e}")),
            )
        };
        let shared = match variant {
            Enqueue::Notifier | Enqueue::Lead => Some(notifier().await),
            _ => None,
        };
        let mut workers = Vec::new();
        for client in 0..CLIENTS {
            let notifier = match variant {
                Enqueue::LeadPerClient => Some(notifier().await),
                _ => shared.clone(),
            };
            let on_conn = matches!(variant, Enqueue::InTransaction | Enqueue::Graphile);
            let (session, conn) = if on_conn {
                (None, Some(Conn::open().await))
            } else {
                let session = Session::new(harness::connect().await, schema.clone());
                session
                    .prepare_all()
                    .await
                    .unwrap_or_else(|e| panic!("prepare: {e}"));
                (Some(session), None)
            };
            workers.push(EnqueueWorker {
                session,
                conn,
                variant,
                channel: WakeChannel::new(&schema, QUEUE),
                schema: schema.clone(),
                notifier,
                graphile: graphile.clone(),
                latency: Recorder::new(),
                sent: 0,
                client,
                n: 0,
            });
        }
        runners.push((variant, schema_name, workers, 0u64, 0f64));
    }
    exec(admin, "CHECKPOINT").await;
    for _ in 0..SLICES {
        for (_, _, workers, jobs, seconds) in &mut runners {
            let run = pool::run(std::mem::take(workers), Limit::time(slice)).await;
            *jobs += run.jobs;
            *seconds += run.elapsed.as_secs_f64();
            *workers = run.workers;
        }
    }
    let mut out = Vec::new();
    for (variant, schema, workers, jobs, seconds) in runners {
        let latency = Recorder::merged(&workers, |w| &w.latency);
        // Each notifier once, however many clients share it.
        let mut notifiers: Vec<&Arc<Notifier>> =
            workers.iter().filter_map(|w| w.notifier.as_ref()).collect();
        notifiers.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let sent: u64 = workers.iter().map(|w| w.sent).sum::<u64>()
            + notifiers.iter().map(|n| n.stats().sent).sum::<u64>();
        out.push(ThroughputRow {
            variant,
            jobs_per_s: jobs as f64 / seconds,
            latency,
            notifications_per_s: sent as f64 / seconds,
        });
        drop(workers);
        designs::drop_schema(admin, &format!("\"{schema}\"")).await;
    }
    out
}

// ---------------------------------------------------------------------------
// The report

pub fn report(report: &mut Report, measured: &Measured) {
    report.heading("Wake-ups: pickup latency");
    report.para(&format!(
        "From an enqueue's commit (its result at the producer) to the first claim returning the \
         job (its result at the worker), {} jobs per cell, enqueued one at a time 20 to 80 ms \
         apart; {ENGINES} engine instances wait, each with its own listening connection and one \
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
        "of which the claim, p50>",
        "claims / job>",
        "notifications / job>",
    ]);
    for row in &measured.pickup {
        let jobs = row.latency.count().max(1) as f64;
        table.row(vec![
            row.variant.label(),
            row.load.label().to_owned(),
            ms(row.latency.p50_ms()),
            ms(row.latency.p99_ms()),
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
            let ours = find(Pickup::Lead);
            let r = ratio(ours, Some(graphile));
            report.verdict(
                format!(
                    "pickup p50 with wake-ups <= graphile-worker's ({})",
                    load.label()
                ),
                format!("{} vs {}: {}", ms(ours), ms(Some(graphile)), times(r)),
                r.is_some_and(|r| r <= 1.0),
            );
        }
    }

    report.heading("Wake-ups: enqueue throughput");
    report.para(&format!(
        "{CLIENTS} clients, each on its own connection, enqueue one job per statement on one \
         queue, `synchronous_commit` on; the variants take turns in {SLICES} slices. One engine: \
         the clients share one notifier (the library coalesces per process and queue); each \
         client an engine: a notifier each, so up to {CLIENTS} notifications per interval. \
         Notifications / s: what the clients and their notifiers sent."
    ));
    let off = measured
        .throughput
        .iter()
        .find(|r| r.variant == Enqueue::Off)
        .map(|r| r.jobs_per_s);
    let mut table = Table::new(&[
        "enqueue",
        "jobs / s>",
        "this / no wake-ups>",
        "enqueue p50>",
        "p99>",
        "notifications / s>",
    ]);
    for row in &measured.throughput {
        table.row(vec![
            row.variant.label().to_owned(),
            format!("{:.0}", row.jobs_per_s),
            times(ratio(Some(row.jobs_per_s), off)),
            ms(row.latency.p50_ms()),
            ms(row.latency.p99_ms()),
            format!("{:.0}", row.notifications_per_s),
        ]);
    }
    report.table(&table);
    if let Some(notifier) = measured
        .throughput
        .iter()
        .find(|r| r.variant == Enqueue::Lead)
    {
        let r = ratio(Some(notifier.jobs_per_s), off);
        report.verdict(
            format!(
                "enqueue throughput with wake-ups >= 0.95x without ({CLIENTS} clients, one engine)"
            ),
            times(r),
            r.is_some_and(|r| r >= 0.95),
        );
    }
}
