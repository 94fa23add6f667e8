//! The enqueue -> claim -> ack loop: alkstore's product statements, pg-boss's
//! SQL through the same driver, and pg-boss's Node API.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::designs::{Design, drop_schema};
use crate::latency::{Recorder, ms};
use crate::maintenance::{Maintainer, Policy};
use crate::pgboss;
use crate::pool::{self, Conn, Limit, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::{Scale, progress, ratio, times, unix_now};

pub struct LoopWorker {
    conn: Conn,
    schema: SchemaName,
    queue: String,
    batch: u64,
    client: usize,
    worker: String,
    n: u64,
    latency: Recorder,
    /// The engine's count of claimed jobs, for its maintenance step.
    claims: Arc<AtomicU64>,
}

impl Worker for LoopWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let now = unix_now();
        let payloads: Vec<Vec<u8>> = (0..self.batch)
            .map(|k| format!(r#"{{"client":{},"n":{}}}"#, self.client, self.n + k).into_bytes())
            .collect();
        let enqueue = product::enqueue(&self.schema, &self.queue, &payloads, now, now);
        self.conn
            .query(&enqueue)
            .await
            .map_err(|e| db_error("enqueue", &e))?;
        let claim = product::claim_path(
            &self.schema,
            &self.queue,
            now,
            &self.worker,
            self.batch as i64,
        );
        let rows = self
            .conn
            .pipeline(&claim)
            .await
            .map_err(|e| db_error("claim", &e))?;
        let claimed = product::claimed(rows.last().map_or(&[][..], Vec::as_slice))?;
        self.claims
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        if !claimed.is_empty() {
            let ack = product::ack(&self.schema, &claimed, &self.worker);
            self.conn
                .query(&ack)
                .await
                .map_err(|e| db_error("ack", &e))?;
        }
        self.latency.record(started.elapsed());
        self.n += self.batch;
        Ok(claimed.len() as u64)
    }
}

pub struct LoopResult {
    pub system: &'static str,
    pub clients: usize,
    pub batch: u64,
    pub jobs_per_s: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

pub const SYSTEM_OURS: &str = "alkstore (product statements, tokio-postgres)";
pub const SYSTEM_PGBOSS_SQL: &str = "pg-boss SQL, same driver (tokio-postgres)";
pub const SYSTEM_PGBOSS_API: &str = "pg-boss Node API (node-postgres)";

/// Slices each system's loop time is split into: the systems take turns,
/// slice by slice, so a change in the machine's load falls on all alike.
const SLICES: u32 = 4;

/// One system's loop, kept across slices.
enum Runner {
    Alkstore {
        schema: SchemaName,
        workers: Vec<LoopWorker>,
        maintainer: Option<Maintainer>,
    },
    BossSql {
        workers: Vec<pgboss::SqlLoopWorker>,
    },
    BossApi {
        queue: String,
        latency: Recorder,
    },
}

struct Totals {
    jobs: u64,
    seconds: f64,
}

async fn alkstore_runner(admin: &mut Client, clients: usize, batch: u64) -> Runner {
    let schema = Design::Product.create(admin, "bench_loop").await;
    let maintainer = loop_maintenance().map(|policy| Maintainer::start(&schema, policy));
    let claims = maintainer
        .as_ref()
        .map_or_else(|| Arc::new(AtomicU64::new(0)), Maintainer::claims);
    let mut workers = Vec::new();
    for client in 0..clients {
        workers.push(LoopWorker {
            conn: Conn::open().await,
            schema: schema.clone(),
            queue: "loop".to_owned(),
            batch,
            client,
            worker: format!("bench-worker-{client}"),
            n: 0,
            latency: Recorder::new(),
            claims: claims.clone(),
        });
    }
    Runner::Alkstore {
        schema,
        workers,
        maintainer,
    }
}

/// One slice of a pool's loop: its workers run for `time`, then wait for the
/// next slice.
async fn run_slice<W: Worker>(workers: &mut Vec<W>, time: Duration, total: &mut Totals) {
    let run = pool::run(std::mem::take(workers), Limit::time(time)).await;
    total.jobs += run.jobs;
    total.seconds += run.elapsed.as_secs_f64();
    *workers = run.workers;
}

/// The engine's maintenance step in the loop, as the statements module docs
/// tell an engine to run it (`ALKSTORE_BENCH_LOOP_VACUUM=off` leaves it out).
fn loop_maintenance() -> Option<Policy> {
    match std::env::var("ALKSTORE_BENCH_LOOP_VACUUM").as_deref() {
        Ok("off") => None,
        Ok("") | Err(_) => Some(Policy::EveryClaims(crate::churn::VACUUM_EVERY_CLAIMS)),
        Ok(other) => panic!("ALKSTORE_BENCH_LOOP_VACUUM must be off or unset, not {other:?}"),
    }
}

pub async fn run(
    admin: &mut Client,
    scale: &Scale,
    boss: Option<&pgboss::PgBoss>,
    boss_sql: Option<Arc<pgboss::PgBossSql>>,
    boss_schema: &str,
) -> Vec<LoopResult> {
    let mut out = Vec::new();
    let slice = scale.loop_time / SLICES;
    for &(clients, batch) in &scale.loop_groups {
        progress(&format!(
            "loop: {clients} client(s), batch {batch}: every system {:.0} s, in {SLICES} turns",
            scale.loop_time.as_secs_f64()
        ));
        let mut runners = vec![alkstore_runner(admin, clients, batch).await];
        if let Some(sql) = boss_sql.clone() {
            let queue = loop_queue(clients, batch, "sql");
            let mut workers = Vec::new();
            for client in 0..clients {
                workers.push(pgboss::SqlLoopWorker::new(sql.clone(), &queue, batch, client).await);
            }
            runners.push(Runner::BossSql { workers });
        }
        if boss.is_some() {
            runners.push(Runner::BossApi {
                queue: loop_queue(clients, batch, "api"),
                latency: Recorder::new(),
            });
        }
        let mut totals: Vec<Totals> = runners
            .iter()
            .map(|_| Totals {
                jobs: 0,
                seconds: 0.0,
            })
            .collect();
        for _ in 0..SLICES {
            for (runner, total) in runners.iter_mut().zip(totals.iter_mut()) {
                match runner {
                    Runner::Alkstore { workers, .. } => {
                        run_slice(workers, slice, total).await;
                    }
                    Runner::BossSql { workers } => run_slice(workers, slice, total).await,
                    Runner::BossApi { queue, latency } => {
                        let boss = boss.expect("a Node API runner only when pg-boss is installed");
                        let api = boss
                            .api_loop(boss_schema, queue, clients, batch, slice)
                            .await
                            .unwrap_or_else(|e| panic!("{e}"));
                        total.jobs += api.jobs;
                        total.seconds += api.seconds;
                        for micros in api.latencies_us {
                            latency.record(Duration::from_secs_f64(micros / 1e6));
                        }
                    }
                }
            }
        }
        for (runner, total) in runners.into_iter().zip(totals) {
            let (system, latency) = match &runner {
                Runner::Alkstore { workers, .. } => {
                    (SYSTEM_OURS, Recorder::merged(workers, |w| &w.latency))
                }
                Runner::BossSql { workers } => {
                    (SYSTEM_PGBOSS_SQL, Recorder::merged(workers, |w| &w.latency))
                }
                Runner::BossApi { latency, .. } => (SYSTEM_PGBOSS_API, latency.clone()),
            };
            out.push(LoopResult {
                system,
                clients,
                batch,
                jobs_per_s: total.jobs as f64 / total.seconds,
                p50: latency.p50_ms(),
                p99: latency.p99_ms(),
            });
            if let Runner::Alkstore {
                schema,
                workers,
                maintainer,
                ..
            } = runner
            {
                drop(workers);
                if let Some(maintainer) = maintainer {
                    maintainer.stop().await;
                }
                drop_schema(admin, schema.as_str()).await;
            }
        }
    }
    out
}

pub fn loop_queue(clients: usize, batch: u64, how: &str) -> String {
    format!("loop_{how}_c{clients}_b{batch}")
}

/// pg-boss's queues for the run's (clients, batch) groups.
pub fn queues(groups: &[(usize, u64)]) -> Vec<String> {
    let mut queues = Vec::new();
    for &(clients, batch) in groups {
        for how in ["sql", "api"] {
            queues.push(loop_queue(clients, batch, how));
        }
    }
    queues
}

pub fn report(report: &mut Report, loops: &[LoopResult]) {
    report.heading("Enqueue -> claim -> ack loop");
    let mut table = Table::new(&[
        "system",
        "clients>",
        "batch>",
        "jobs / s>",
        "step p50>",
        "step p99>",
        "alkstore / this>",
    ]);
    let ours = |clients: usize, batch: u64| {
        loops
            .iter()
            .find(|l| l.system == SYSTEM_OURS && l.clients == clients && l.batch == batch)
            .map(|l| l.jobs_per_s)
    };
    for l in loops {
        table.row(vec![
            l.system.to_owned(),
            l.clients.to_string(),
            l.batch.to_string(),
            format!("{:.0}", l.jobs_per_s),
            ms(l.p50),
            ms(l.p99),
            if l.system == SYSTEM_OURS {
                String::new()
            } else {
                times(ratio(ours(l.clients, l.batch), Some(l.jobs_per_s)))
            },
        ]);
    }
    report.table(&table);
    report.para(
        "One step: enqueue `batch` jobs, claim up to `batch`, ack what was claimed: three \
         round trips for every system. alkstore sends the product's statements as an engine \
         would: `enqueue` and `ack` for one job, `enqueue_many` and `ack_many` for a batch \
         (one statement each), and the claim path's statements pipelined; pg-boss's SQL is \
         one statement per call, as its API sends it. Each alkstore run starts on a fresh schema, each pg-boss \
         run on a fresh queue (its own partition). The systems of one row group take turns in \
         four slices of a quarter of the loop time each, so load changes fall on all alike. pg-boss's Node API runs all clients as \
         concurrent loops in one Node process over a pool of as many connections.",
    );
    for batch in [1u64, 10] {
        let boss = loops
            .iter()
            .find(|l| l.system == SYSTEM_PGBOSS_SQL && l.clients == 8 && l.batch == batch);
        let r = boss.and_then(|b| ratio(ours(8, batch), Some(b.jobs_per_s)));
        report.verdict(
            format!("8-client loop >= 2x pg-boss's SQL through the same driver, batch {batch}"),
            times(r),
            r.is_some_and(|r| r >= 2.0),
        );
    }
}
