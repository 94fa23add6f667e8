//! Benchmark: what the statement modes and the pools cost on the claim
//! path and the loop, all through the product's `Session` and typed calls:
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench sessions
//! ```
//!
//! Targets, each on a fresh engine schema (the product's DDL script):
//!
//! - `prepared, direct`: a session per connection, statements prepared
//!   once (the default mode, the baseline of the ratios);
//! - `unnamed, direct`: the same connections in `StatementMode::Unnamed`
//!   (every call parsed and planned; the claim path in `BEGIN`/`COMMIT`);
//! - `unnamed, pgbouncer`: the unnamed mode through the harness's
//!   pgbouncer 1.18 in transaction pooling;
//! - `prepared, deadpool` and `prepared, bb8`: a session per checkout of a
//!   deadpool-postgres pool, and a bb8 pool of sessions, 8 connections,
//!   direct;
//! - `unnamed, deadpool via pgbouncer`: a deadpool pool in front of
//!   pgbouncer.
//!
//! Measured per target:
//!
//! 1. the claim path's latency (`Promote` + `Claim` by `run_pipelined`),
//!    each after an untimed `Enqueue` of one job and followed by an untimed
//!    `Ack`, at one client and at eight (each on a queue of its own): p50
//!    and p99;
//! 2. the loop: eight clients, each `Enqueue` -> claim path -> `Ack` on a
//!    queue of its own for a fixed time: jobs acked per second.
//!
//! The targets run in two rounds, the second in the reverse order, so a
//! load that changes during the run does not favour one; each figure is the
//! two rounds merged. Checked (the run fails after the report otherwise):
//! no call failed and every claim path took the job just enqueued.
//!
//! `--bench` (what `cargo bench` passes) runs the full scale (2,000 latency
//! samples per target and client count, 10 s of loop per target and round);
//! without it (as under `cargo test --benches`) a tiny round (16 samples,
//! 0.3 s) exercises every part; its figures mean nothing.
//! `ALKSTORE_BENCH_SCALE=tiny|full`, `ALKSTORE_BENCH_SAMPLES` and
//! `ALKSTORE_BENCH_PHASE_SECS` override. The report is printed and written
//! to `target/bench-sessions.md`, with the load average around each phase
//! (the machine is shared).

use std::fmt::Write as _;
use std::str::FromStr as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bb8_postgres::PostgresConnectionManager;
use harness::bench::{env_number, load_averages, queue_opts, unix_now};
use harness::engine::engine_schema;
use harness::pgbouncer::{self, PoolMode};
use hdrhistogram::Histogram;
use schema_gen::pool::SessionManager;
use schema_gen::statements::{Connection, Job, Session, Sessions, StatementMode, jobs};
use schema_model::SchemaName;
use tokio_postgres::{Config, NoTls};

const CLIENTS: usize = 8;

struct Scale {
    name: String,
    samples: usize,
    phase: Duration,
}

impl Scale {
    fn from_env(bench_flag: bool) -> Scale {
        let name = std::env::var("ALKSTORE_BENCH_SCALE")
            .unwrap_or_else(|_| if bench_flag { "full" } else { "tiny" }.to_owned());
        let (samples, secs) = match name.as_str() {
            "full" => (2_000, 10.0),
            "tiny" => (16, 0.3),
            other => panic!("ALKSTORE_BENCH_SCALE must be tiny or full, not {other:?}"),
        };
        Scale {
            samples: env_number("ALKSTORE_BENCH_SAMPLES").map_or(samples, |v| v as usize),
            phase: Duration::from_secs_f64(env_number("ALKSTORE_BENCH_PHASE_SECS").unwrap_or(secs)),
            name,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    PreparedDirect,
    UnnamedDirect,
    UnnamedBouncer,
    PreparedDeadpool,
    PreparedBb8,
    UnnamedDeadpoolBouncer,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::PreparedDirect,
        Kind::UnnamedDirect,
        Kind::UnnamedBouncer,
        Kind::PreparedDeadpool,
        Kind::PreparedBb8,
        Kind::UnnamedDeadpoolBouncer,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::PreparedDirect => "prepared, direct",
            Kind::UnnamedDirect => "unnamed, direct",
            Kind::UnnamedBouncer => "unnamed, pgbouncer (transaction)",
            Kind::PreparedDeadpool => "prepared, deadpool",
            Kind::PreparedBb8 => "prepared, bb8",
            Kind::UnnamedDeadpoolBouncer => "unnamed, deadpool via pgbouncer",
        }
    }
}

/// Where a target's calls run.
enum Runner {
    Own(Vec<Session>),
    Deadpool(deadpool_postgres::Pool, Sessions),
    Bb8(bb8::Pool<SessionManager<NoTls>>),
}

struct Target {
    kind: Kind,
    runner: Runner,
}

fn job(queue: &str, now: i64) -> Job {
    let mut job = Job::new(queue, b"bench".to_vec());
    job.run_at = now;
    job.enqueued_at = now;
    job.opts = queue_opts();
    job
}

/// One step on `session`: an untimed enqueue, the timed claim path (which
/// must take that job), an untimed ack. Returns the claim path's time.
async fn step_on<C: Connection>(session: &Session<C>, queue: &str) -> Result<Duration, String> {
    let now = unix_now();
    let id = session
        .run(&jobs::Enqueue {
            job: &job(queue, now),
            now,
        })
        .await
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let (_, claimed) = session
        .run_pipelined(
            &jobs::Promote {
                queue,
                now,
                limit: 100,
            },
            &jobs::Claim {
                queue,
                worker_id: queue,
                now,
                limit: 1,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let [claimed] = claimed.as_slice() else {
        return Err(format!(
            "claimed {} jobs, not the one enqueued",
            claimed.len()
        ));
    };
    if claimed.id != id {
        return Err(format!("claimed job {} instead of {id}", claimed.id));
    }
    let acked = session
        .run(&jobs::Ack {
            id,
            worker_id: queue,
            attempts: claimed.attempts,
        })
        .await
        .map_err(|e| e.to_string())?;
    if acked != 1 {
        return Err(format!("ack of {id} changed {acked} rows"));
    }
    Ok(took)
}

impl Target {
    async fn new(kind: Kind, schema: &SchemaName) -> Target {
        let direct = harness::database_url();
        let bouncer = pgbouncer::url(PoolMode::Transaction);
        let mode = match kind {
            Kind::PreparedDirect | Kind::PreparedDeadpool | Kind::PreparedBb8 => {
                StatementMode::Prepared
            }
            _ => StatementMode::Unnamed,
        };
        let sessions = Sessions::new(schema.clone()).with_mode(mode);
        let runner = match kind {
            Kind::PreparedDirect | Kind::UnnamedDirect | Kind::UnnamedBouncer => {
                let url = if kind == Kind::UnnamedBouncer {
                    &bouncer
                } else {
                    &direct
                };
                let mut own = Vec::new();
                for _ in 0..CLIENTS {
                    own.push(sessions.session(harness::connect_url(url).await));
                }
                Runner::Own(own)
            }
            Kind::PreparedDeadpool | Kind::UnnamedDeadpoolBouncer => {
                let url = if kind == Kind::PreparedDeadpool {
                    &direct
                } else {
                    &bouncer
                };
                let manager = deadpool_postgres::Manager::new(config(url), NoTls);
                let pool = deadpool_postgres::Pool::builder(manager)
                    .max_size(CLIENTS)
                    .build()
                    .unwrap_or_else(|e| panic!("deadpool: {e}"));
                Runner::Deadpool(pool, sessions)
            }
            Kind::PreparedBb8 => {
                let manager = SessionManager::new(
                    PostgresConnectionManager::new(config(&direct), NoTls),
                    sessions,
                );
                let pool = bb8::Pool::builder()
                    .max_size(CLIENTS as u32)
                    .connection_timeout(Duration::from_secs(120))
                    .build(manager)
                    .await
                    .unwrap_or_else(|e| panic!("bb8: {e}"));
                Runner::Bb8(pool)
            }
        };
        Target { kind, runner }
    }

    /// One step as client `client` (a checkout per step on the pools).
    async fn step(&self, client: usize, queue: &str) -> Result<Duration, String> {
        match &self.runner {
            Runner::Own(own) => step_on(&own[client], queue).await,
            Runner::Deadpool(pool, sessions) => {
                let session = sessions.session(pool.get().await.map_err(|e| e.to_string())?);
                step_on(&session, queue).await
            }
            Runner::Bb8(pool) => {
                let session = pool.get().await.map_err(|e| e.to_string())?;
                step_on(&session, queue).await
            }
        }
    }
}

fn config(url: &str) -> Config {
    Config::from_str(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap_or_else(|e| panic!("histogram: {e}"))
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// `samples` claim paths over `clients` concurrent clients.
async fn latency(
    target: &Arc<Target>,
    clients: usize,
    samples: usize,
    into: &mut Histogram<u64>,
) -> Vec<String> {
    let per_client = samples.div_ceil(clients).max(1);
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let target = Arc::clone(target);
            tokio::spawn(async move {
                let mut histogram = histogram();
                let mut errors = Vec::new();
                let queue = format!("latency-{clients}-{client}");
                // Two steps to settle (preparation, plan cache), untimed.
                for step in 0..per_client + 2 {
                    match target.step(client, &queue).await {
                        Ok(took) if step >= 2 => {
                            let _ = histogram.record(took.as_micros().max(1) as u64);
                        }
                        Ok(_) => {}
                        Err(e) => errors.push(e),
                    }
                }
                (histogram, errors)
            })
        })
        .collect();
    let mut errors = Vec::new();
    for task in tasks {
        let (histogram, mut more) = task.await.unwrap_or_else(|e| panic!("{e}"));
        into.add(&histogram).unwrap_or_else(|e| panic!("{e}"));
        errors.append(&mut more);
    }
    errors
}

/// Eight clients looping for `phase`: jobs acked.
async fn run_loop(target: &Arc<Target>, phase: Duration) -> (u64, Vec<String>) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (target, stop, done) = (Arc::clone(target), Arc::clone(&stop), Arc::clone(&done));
            tokio::spawn(async move {
                let queue = format!("loop-{client}");
                let mut errors = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match target.step(client, &queue).await {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => errors.push(e),
                    }
                }
                errors
            })
        })
        .collect();
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = Vec::new();
    for task in tasks {
        errors.append(&mut task.await.unwrap_or_else(|e| panic!("{e}")));
    }
    (done.load(Ordering::Relaxed), errors)
}

#[derive(Default)]
struct Figures {
    one: Option<Histogram<u64>>,
    eight: Option<Histogram<u64>>,
    jobs: u64,
    secs: f64,
    loads: Vec<String>,
}

fn load_now() -> String {
    load_averages().map_or_else(|| "?".to_owned(), |[one, _, _]| one)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if harness::skip_db_tests() {
        return;
    }
    let scale = Scale::from_env(std::env::args().any(|a| a == "--bench"));
    let admin = harness::connect().await;
    let mut figures: Vec<Figures> = Kind::ALL.iter().map(|_| Figures::default()).collect();
    let mut errors = Vec::new();
    let mut order: Vec<usize> = (0..Kind::ALL.len()).collect();
    for round in 0..2 {
        if round == 1 {
            order.reverse();
        }
        for &at in &order {
            let kind = Kind::ALL[at];
            let schema = engine_schema(&admin, "bench_sessions").await;
            let target = Arc::new(Target::new(kind, &schema).await);
            let figure = &mut figures[at];
            figure.loads.push(load_now());
            let one = figure.one.get_or_insert_with(histogram);
            errors.extend(latency(&target, 1, scale.samples, one).await);
            let eight = figure.eight.get_or_insert_with(histogram);
            errors.extend(latency(&target, CLIENTS, scale.samples, eight).await);
            let started = Instant::now();
            let (jobs, mut more) = run_loop(&target, scale.phase).await;
            figure.secs += started.elapsed().as_secs_f64();
            figure.jobs += jobs;
            errors.append(&mut more);
            eprintln!("round {round}: {} done", target.kind.label());
        }
    }

    let mut report = String::new();
    let _ = writeln!(
        report,
        "## sessions bench ({} scale: {} claim paths per target, client count and round; {:.0} s of loop per round)\n",
        scale.name,
        scale.samples,
        scale.phase.as_secs_f64()
    );
    let _ = writeln!(
        report,
        "| target | claim path p50, 1 client (ms) | p99 | p50, 8 clients (ms) | p99 | loop, 8 clients (jobs/s) | p50 1 / 8 clients vs prepared direct | loop vs prepared direct | load (1 min) per round |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|---|---|");
    let base = &figures[0];
    let (base_one, base_eight) = (
        base.one.as_ref().map_or(0.0, |h| ms(h, 0.5)),
        base.eight.as_ref().map_or(0.0, |h| ms(h, 0.5)),
    );
    let base_rate = base.jobs as f64 / base.secs.max(f64::EPSILON);
    for (kind, figure) in Kind::ALL.iter().zip(&figures) {
        let (one, eight) = (figure.one.as_ref(), figure.eight.as_ref());
        let (Some(one), Some(eight)) = (one, eight) else {
            continue;
        };
        let rate = figure.jobs as f64 / figure.secs.max(f64::EPSILON);
        let _ = writeln!(
            report,
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.2}x / {:.2}x | {:.2}x | {} |",
            kind.label(),
            ms(one, 0.5),
            ms(one, 0.99),
            ms(eight, 0.5),
            ms(eight, 0.99),
            rate,
            ms(one, 0.5) / base_one,
            ms(eight, 0.5) / base_eight,
            rate / base_rate,
            figure.loads.join(", ")
        );
    }
    println!("{report}");
    let path = harness::paths::cargo_target_dir().join("bench-sessions.md");
    if let Err(e) = std::fs::write(&path, &report) {
        eprintln!("could not write {}: {e}", path.display());
    }
    assert!(
        errors.is_empty(),
        "{} calls failed, the first: {:?}",
        errors.len(),
        errors.first()
    );
}
