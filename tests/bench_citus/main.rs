//! Benchmark: the product's claim path and its enqueue -> claim -> ack loop
//! on the harness's single PostgreSQL server and on the harness's Citus
//! cluster (a coordinator and two workers, `harness::citus`) under
//! `Layout::CitusSchemaSharding`, in one run:
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench citus
//! ```
//!
//! Targets, each on fresh engine schemas made by the product's bootstrap:
//!
//! - (a) the single server (`Options::default()`);
//! - (b) one engine schema on the cluster (its group on one worker);
//! - (c) two engine schemas on the same worker;
//! - (d) two engine schemas on the two different workers (moved there with
//!   `citus_schema_move(..., shard_transfer_mode => 'block_writes')` when
//!   Citus placed them together).
//!
//! Measured, all through the product's `Session` and typed calls:
//!
//! 1. the claim path's latency at one client (a) and (b): `jobs::Promote`
//!    and `jobs::Claim` pipelined (`Session::run_pipelined`, one round
//!    trip), each after an untimed `jobs::Enqueue` of one job, then an
//!    untimed `jobs::Ack`; p50 and p99;
//! 2. eight clients, each looping `Enqueue` -> `Promote` + `Claim`
//!    pipelined -> `Ack` on a queue of its own, for a fixed time, on every
//!    target (on (c) and (d) four clients per schema), in three rounds per
//!    target in alternating order (a b c d, d c b a, a b c d) so that a
//!    load that changes during the run does not favour one target: jobs
//!    acked per second, and the claim path's p50 and p99 under that load;
//! 3. buffers per claim path from `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`
//!    of promote and claim (median of 9 after 5 to settle the plan cache)
//!    on (a) and (b), on the fresh schemas (before the loops) and after
//!    the loops. On Citus the explain goes through the
//!    coordinator: the coordinator's own buffers, and the worker's from the
//!    task's `Remote Plan`.
//!
//! Checked (the run fails after the report otherwise): no statement
//! failed, every job acked exactly once and only jobs that were enqueued,
//! every claim path on Citus one task, (c) on one worker and (d) on two.
//!
//! `--bench` (what `cargo bench` passes) runs the full scale (2,000
//! latency samples per target, 15 s of loop per target); without it (as
//! under `cargo test --benches`) a tiny round (20 samples, 0.6 s) exercises every
//! part; its figures mean nothing. `ALKSTORE_BENCH_SCALE=tiny|full` picks
//! one, `ALKSTORE_BENCH_PHASE_SECS` and `ALKSTORE_BENCH_SAMPLES` override
//! parts of it. The report is printed and written to
//! `target/bench-citus.md`; `/proc/loadavg` is read around each phase (the
//! machine is shared).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use harness::bench::{env_number, load_averages, queue_opts as opts, unix_now};

use hdrhistogram::Histogram;
use schema_gen::render::quote_literal;
use schema_gen::statements::{Session, Statement, jobs};
use schema_gen::{Options, bootstrap_with};
use schema_model::{Job, Layout, SchemaName};
use serde_json::Value;
use tokio_postgres::{Client, SimpleQueryMessage};

/// How big a run is.
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
            "full" => (2_000, 15.0),
            "tiny" => (20, 0.6),
            other => panic!("ALKSTORE_BENCH_SCALE must be tiny or full, not {other:?}"),
        };
        Scale {
            samples: env_number("ALKSTORE_BENCH_SAMPLES")
                .map_or(samples, |v| v as usize)
                .max(1),
            phase: Duration::from_secs_f64(env_number("ALKSTORE_BENCH_PHASE_SECS").unwrap_or(secs)),
            name,
        }
    }
}

const CLIENTS: usize = 8;

/// The loop's rounds per target (its time split between them).
const ROUNDS: u32 = 3;

fn load_now() -> String {
    load_averages().map_or_else(|| "?".to_owned(), |[one, _, _]| one)
}

fn job(queue: &str, now: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.to_owned();
    job.payload = b"bench".to_vec();
    job.priority = 0;
    job.run_at = now;
    job.expires_at = None;
    job.enqueued_at = now;
    job.opts = opts();
    job
}

/// Where a target's connections go.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    Single,
    Citus,
}

async fn open(server: Server) -> Client {
    match server {
        Server::Single => harness::connect().await,
        Server::Citus => harness::citus::cluster().connect_coordinator().await,
    }
}

/// A fresh engine schema made by the product's bootstrap.
async fn schema(server: Server, prefix: &str) -> SchemaName {
    let mut client = open(server).await;
    let schema = harness::unique_schema_name(prefix);
    let layout = match server {
        Server::Single => Layout::SingleServer,
        Server::Citus => Layout::CitusSchemaSharding,
    };
    let options = Options {
        layout,
        ..Options::default()
    };
    bootstrap_with(&mut client, &schema, &options)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema}: {e}"));
    schema
}

/// The worker port that holds `schema`'s shards.
async fn worker_of(client: &Client, schema: &SchemaName) -> Result<u16, String> {
    let rows = client
        .query(
            &format!(
                "SELECT DISTINCT n.nodeport FROM pg_dist_shard s \
                 JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) \
                 WHERE s.logicalrelid::text LIKE {}",
                quote_literal(&format!("{schema}.%"))
            ),
            &[],
        )
        .await
        .map_err(|e| harness::describe_error(&e))?;
    match rows.as_slice() {
        [row] => u16::try_from(row.get::<_, i32>(0)).map_err(|e| e.to_string()),
        _ => Err(format!("{schema}'s shards are on {} nodes", rows.len())),
    }
}

/// Moves `schema` to the worker at `port` unless it is there.
async fn place(client: &Client, schema: &SchemaName, port: u16) -> Result<(), String> {
    if worker_of(client, schema).await? == port {
        return Ok(());
    }
    client
        .batch_execute("CALL citus_cleanup_orphaned_resources()")
        .await
        .map_err(|e| format!("cleaning up: {}", harness::describe_error(&e)))?;
    client
        .batch_execute(&format!(
            "SELECT citus_schema_move({}, '127.0.0.1', {port}, \
             shard_transfer_mode => 'block_writes')",
            quote_literal(schema.as_str())
        ))
        .await
        .map_err(|e| format!("moving {schema}: {}", harness::describe_error(&e)))?;
    match worker_of(client, schema).await? {
        p if p == port => Ok(()),
        p => Err(format!("{schema} is on {p} after its move to {port}")),
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap_or_else(|e| panic!("histogram: {e}"))
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// The claim path at one client: `samples` rounds of an untimed enqueue,
/// the timed promote + claim (pipelined), an untimed ack.
async fn latency(
    server: Server,
    schema: &SchemaName,
    samples: usize,
) -> Result<Histogram<u64>, String> {
    let session = Session::new(open(server).await, schema.clone());
    let mut h = histogram();
    let (queue, worker) = ("latency", "bench-latency");
    for _ in 0..samples {
        let now = unix_now();
        session
            .run(&jobs::Enqueue {
                job: &job(queue, now),
                now,
            })
            .await
            .map_err(|e| format!("enqueue: {e}"))?;
        let began = Instant::now();
        let (_, claimed) = session
            .run_pipelined(
                &jobs::Promote {
                    queue,
                    now,
                    limit: 10,
                },
                &jobs::Claim {
                    queue,
                    worker_id: worker,
                    now,
                    limit: 1,
                },
            )
            .await
            .map_err(|e| format!("claim path: {e}"))?;
        h.saturating_record(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
        let [claimed] = claimed.as_slice() else {
            return Err(format!("a claim returned {} jobs, not 1", claimed.len()));
        };
        let acked = session
            .run(&jobs::Ack {
                id: claimed.id,
                worker_id: worker,
                attempts: claimed.attempts,
            })
            .await
            .map_err(|e| format!("ack: {e}"))?;
        if acked != 1 {
            return Err(format!("ack of job {} deleted {acked} rows", claimed.id));
        }
    }
    Ok(h)
}

/// What one client of the loop did.
#[derive(Default)]
struct ClientLog {
    enqueued: Vec<i64>,
    acked: Vec<i64>,
    claim: Option<Histogram<u64>>,
    failures: Vec<String>,
}

async fn client_loop(
    server: Server,
    schema: SchemaName,
    index: usize,
    stop: Arc<AtomicBool>,
) -> ClientLog {
    let session = Session::new(open(server).await, schema);
    let queue = format!("loop-{index}");
    let worker = format!("bench-loop-{index}");
    let mut log = ClientLog::default();
    let mut h = histogram();
    while !stop.load(Ordering::Relaxed) {
        let now = unix_now();
        match session
            .run(&jobs::Enqueue {
                job: &job(&queue, now),
                now,
            })
            .await
        {
            Ok(id) => log.enqueued.push(id),
            Err(e) => {
                log.failures.push(format!("enqueue: {e}"));
                continue;
            }
        }
        let began = Instant::now();
        let claimed = match session
            .run_pipelined(
                &jobs::Promote {
                    queue: &queue,
                    now,
                    limit: 10,
                },
                &jobs::Claim {
                    queue: &queue,
                    worker_id: &worker,
                    now,
                    limit: 1,
                },
            )
            .await
        {
            Ok((_, claimed)) => claimed,
            Err(e) => {
                log.failures.push(format!("claim path: {e}"));
                continue;
            }
        };
        h.saturating_record(u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX));
        for job in &claimed {
            match session
                .run(&jobs::Ack {
                    id: job.id,
                    worker_id: &worker,
                    attempts: job.attempts,
                })
                .await
            {
                Ok(1) => log.acked.push(job.id),
                Ok(n) => log
                    .failures
                    .push(format!("ack of job {} deleted {n} rows", job.id)),
                Err(e) => log.failures.push(format!("ack: {e}")),
            }
        }
    }
    log.claim = Some(h);
    log
}

/// What the eight-client loop measured on one target.
struct LoopRun {
    acked: usize,
    elapsed: Duration,
    claim: Histogram<u64>,
    load: (String, String),
    problems: Vec<String>,
}

/// [`CLIENTS`] clients spread evenly over `schemas` for `phase`.
async fn run_loop(server: Server, schemas: &[SchemaName], phase: Duration) -> LoopRun {
    let stop = Arc::new(AtomicBool::new(false));
    let load_before = load_now();
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(client_loop(
                server,
                schemas[i % schemas.len()].clone(),
                i,
                stop.clone(),
            ))
        })
        .collect();
    let began = Instant::now();
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);
    let mut claim = histogram();
    // Ids are per schema: keyed by the client's schema.
    let (mut enqueued, mut acked, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    for (i, handle) in handles.into_iter().enumerate() {
        let log = handle
            .await
            .unwrap_or_else(|e| panic!("a loop client panicked: {e}"));
        let on = i % schemas.len();
        enqueued.extend(log.enqueued.into_iter().map(|id| (on, id)));
        acked.extend(log.acked.into_iter().map(|id| (on, id)));
        problems.extend(log.failures);
        if let Some(h) = log.claim {
            claim
                .add(&h)
                .unwrap_or_else(|e| panic!("adding histograms: {e}"));
        }
    }
    let elapsed = began.elapsed();
    let distinct: HashSet<(usize, i64)> = acked.iter().copied().collect();
    if distinct.len() != acked.len() {
        problems.push(format!(
            "{} acks of {} distinct jobs",
            acked.len(),
            distinct.len()
        ));
    }
    let known: HashSet<(usize, i64)> = enqueued.iter().copied().collect();
    if let Some((on, stray)) = acked.iter().find(|id| !known.contains(id)) {
        problems.push(format!(
            "job {stray} of {} was acked but never enqueued",
            schemas[*on]
        ));
    }
    LoopRun {
        acked: acked.len(),
        elapsed,
        claim,
        load: (load_before, load_now()),
        problems,
    }
}

/// Buffers of one execution of a statement, from `EXPLAIN (ANALYZE,
/// BUFFERS, FORMAT JSON)`: the plan root's (the coordinator's on Citus), and
/// the workers' (every task's `Remote Plan` root) if any, and the task count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Buffers {
    local: i64,
    remote: i64,
    tasks: i64,
}

fn remote_plans(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "Remote Plan" {
                    // [[{"Plan": ...}]]: one explain result per task.
                    if let Some(plan) = inner.get(0).and_then(|p| p.get(0)).map(|p| &p["Plan"]) {
                        out.push(plan.clone());
                    }
                } else {
                    remote_plans(inner, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| remote_plans(i, out)),
        _ => {}
    }
}

fn task_count(value: &Value) -> i64 {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(key, inner)| {
                if key == "Task Count" {
                    inner.as_i64().unwrap_or(0)
                } else {
                    task_count(inner)
                }
            })
            .sum(),
        Value::Array(items) => items.iter().map(task_count).sum(),
        _ => 0,
    }
}

/// Explains one execution of `statement`: on the single server prepared
/// as `name` (once) and run with `EXPLAIN EXECUTE`, so the plan is the one a
/// prepared statement gets; on Citus with its values written into the SQL
/// (a custom plan): Citus 13.2.2 writes the remote plan of an `EXPLAIN
/// ANALYZE EXECUTE` with parameters as text inside the JSON, and without
/// its buffers.
async fn explain(
    client: &Client,
    server: Server,
    name: &str,
    statement: &Statement,
) -> Result<Buffers, String> {
    let arguments = harness::explain::literals(statement);
    let target = match server {
        Server::Citus => {
            let mut sql = statement.sql().to_owned();
            for (i, literal) in arguments.iter().enumerate().rev() {
                sql = sql.replace(&format!("${}", i + 1), literal);
            }
            sql
        }
        Server::Single => {
            let exists = client
                .query(
                    "SELECT 1 FROM pg_prepared_statements WHERE name = $1",
                    &[&name],
                )
                .await
                .map_err(|e| harness::describe_error(&e))?;
            if exists.is_empty() {
                let types: Vec<String> = statement.params().iter().map(|p| p.type_name()).collect();
                let types = if types.is_empty() {
                    String::new()
                } else {
                    format!("({})", types.join(", "))
                };
                client
                    .batch_execute(&format!("PREPARE {name}{types} AS {}", statement.sql()))
                    .await
                    .map_err(|e| {
                        format!(
                            "PREPARE {}: {}",
                            statement.name(),
                            harness::describe_error(&e)
                        )
                    })?;
            }
            format!("EXECUTE {name}({})", arguments.join(", "))
        }
    };
    let explained = client
        .simple_query(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {target}"))
        .await
        .map_err(|e| {
            format!(
                "EXPLAIN {}: {}",
                statement.name(),
                harness::describe_error(&e)
            )
        })?;
    let text = explained
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| format!("EXPLAIN {} returned no row", statement.name()))?;
    let plan: Value = serde_json::from_str(&text)
        .map_err(|e| format!("EXPLAIN {}: {e}:\n{text}", statement.name()))?;
    let root = &plan[0]["Plan"];
    let mut remote = Vec::new();
    remote_plans(root, &mut remote);
    Ok(Buffers {
        local: harness::explain::measure(root.clone()).buffers,
        remote: remote
            .into_iter()
            .map(|p| harness::explain::measure(p).buffers)
            .sum(),
        tasks: task_count(root),
    })
}

/// Buffers of the claim path (promote, claim), each after an enqueue of one
/// job: the median (by total) of 9 after 5, per statement.
async fn claim_buffers(server: Server, schema: &SchemaName) -> Result<[Buffers; 2], String> {
    let client = open(server).await;
    let session = Session::new(open(server).await, schema.clone());
    let (queue, worker) = ("explained", "bench-explain");
    let mut runs: Vec<[Buffers; 2]> = Vec::new();
    for round in 0..14 {
        let now = unix_now();
        session
            .run(&jobs::Enqueue {
                job: &job(queue, now),
                now,
            })
            .await
            .map_err(|e| format!("enqueue: {e}"))?;
        let promote = explain(
            &client,
            server,
            "bench_promote",
            &jobs::promote(schema, queue, now, 10),
        )
        .await?;
        let claim = explain(
            &client,
            server,
            "bench_claim",
            &jobs::claim(schema, queue, worker, now, 1),
        )
        .await?;
        if round >= 5 {
            runs.push([promote, claim]);
        }
    }
    let mut pick = |i: usize| {
        runs.sort_by_key(|r| r[i].local + r[i].remote);
        runs[runs.len() / 2][i]
    };
    Ok([pick(0), pick(1)])
}

/// `jobs`' live and dead rows and autovacuum runs, from
/// `pg_stat_user_tables` (on Citus, of the shard, on its worker).
async fn jobs_state(server: Server, schema: &SchemaName) -> String {
    let client = open(server).await;
    let counts = "n_live_tup || ' live, ' || n_dead_tup || ' dead, ' || autovacuum_count \
                  || ' autovacuums' FROM pg_stat_user_tables";
    let table = quote_literal(&format!("{schema}.jobs"));
    let sql = match server {
        Server::Single => format!("SELECT {counts} WHERE relid = {table}::regclass"),
        Server::Citus => format!(
            "SELECT result FROM run_command_on_placements({table}, \
             $$SELECT {counts} WHERE relid = '%s'::regclass$$)"
        ),
    };
    rows1(&client, &sql).await
}

/// One row of the buffers table: the claim path's buffers on `schema`
/// and the state of its `jobs`.
async fn buffer_row(
    label: &str,
    server: Server,
    schema: &SchemaName,
    problems: &mut Vec<String>,
) -> String {
    let state = jobs_state(server, schema).await;
    match claim_buffers(server, schema).await {
        Ok([promote, claim]) => {
            if server == Server::Citus && (promote.tasks, claim.tasks) != (1, 1) {
                problems.push(format!(
                    "{label}: the claim path is {} + {} tasks, not one each",
                    promote.tasks, claim.tasks
                ));
            }
            format!(
                "| {label} | {} + {} | {} + {} | {} + {} | {state} |",
                promote.local,
                promote.remote,
                claim.local,
                claim.remote,
                promote.tasks,
                claim.tasks
            )
        }
        Err(e) => {
            problems.push(format!("{label}: {e}"));
            format!("| {label} | failed | failed | - | {state} |")
        }
    }
}

struct Report {
    text: String,
    problems: Vec<String>,
}

fn main() {
    let bench_flag = std::env::args().any(|a| a == "--bench");
    if harness::skip_db_tests() {
        return;
    }
    let scale = Scale::from_env(bench_flag);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let report = runtime.block_on(run(&scale));
    println!("{}", report.text);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("bench-citus.md");
    if let Err(e) = std::fs::write(&path, &report.text) {
        eprintln!("could not write {}: {e}", path.display());
    }
    assert!(
        report.problems.is_empty(),
        "the Citus benchmark found problems:\n- {}",
        report.problems.join("\n- ")
    );
}

async fn run(scale: &Scale) -> Report {
    let started = Instant::now();
    let load_start = load_now();
    let cluster = harness::citus::cluster();
    let [w1, w2] = cluster.workers;
    let coordinator = cluster.connect_coordinator().await;
    let mut problems = Vec::new();

    // The schemas, made side by side, and where they are.
    let names: Vec<String> = ["one", "same_a", "same_b", "apart_a", "apart_b"]
        .iter()
        .map(|name| format!("bench_citus_{name}"))
        .collect();
    let (single, citus) = tokio::join!(
        schema(Server::Single, "bench_citus_single"),
        futures_util::future::join_all(names.iter().map(|name| schema(Server::Citus, name)))
    );
    let [one, same_a, same_b, apart_a, apart_b]: [SchemaName; 5] = citus
        .try_into()
        .unwrap_or_else(|_| panic!("five Citus schemas were made"));
    let same = [same_a, same_b];
    let apart = [apart_a, apart_b];
    for (schema, port) in [
        (&same[0], w1),
        (&same[1], w1),
        (&apart[0], w1),
        (&apart[1], w2),
    ] {
        if let Err(e) = place(&coordinator, schema, port).await {
            problems.push(e);
        }
    }
    let setup = started.elapsed();

    // 3a. Buffers per claim path on the fresh schemas (a queue of its own,
    // before the loops).
    let mut buffer_rows = Vec::new();
    for (label, server, schema) in [
        ("(a) single server, fresh schema", Server::Single, &single),
        ("(b) Citus, fresh schema", Server::Citus, &one),
    ] {
        buffer_rows.push(buffer_row(label, server, schema, &mut problems).await);
    }

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Citus benchmark ({} scale)\n\n{} on the harness's cluster (coordinator and two \
         workers, one machine) and single server; {} claim-path samples at one client, \
         {CLIENTS}-client loops of {:.1} s. Load average (1 min) at the start: {load_start}.\n",
        scale.name,
        rows1(&coordinator, "SELECT citus_version()").await,
        scale.samples,
        scale.phase.as_secs_f64()
    );

    // 1. Latency at one client.
    let _ = writeln!(
        text,
        "## Claim path at one client (promote + claim pipelined)\n\n\
         | target | p50 ms | p99 ms | load before -> after |\n|---|---:|---:|---|"
    );
    let mut p50 = Vec::new();
    for (label, server, schema) in [
        ("(a) single server", Server::Single, &single),
        ("(b) Citus, one schema", Server::Citus, &one),
    ] {
        let before = load_now();
        match latency(server, schema, scale.samples).await {
            Ok(h) => {
                let _ = writeln!(
                    text,
                    "| {label} | {:.2} | {:.2} | {before} -> {} |",
                    ms(&h, 0.5),
                    ms(&h, 0.99),
                    load_now()
                );
                p50.push(ms(&h, 0.5));
            }
            Err(e) => problems.push(format!("{label}: {e}")),
        }
    }
    if let [a, b] = p50.as_slice() {
        let _ = writeln!(text, "\np50 ratio (b)/(a): {:.2}\n", b / a);
    }

    // 2. The eight-client loop.
    let _ = writeln!(
        text,
        "## {CLIENTS} clients: enqueue -> claim path -> ack\n\n\
         {ROUNDS} rounds of {:.1} s per target, in alternating order.\n\n\
         | target | jobs/s | jobs/s per round | claim p50 ms | claim p99 ms | load at each round |\n\
         |---|---:|---|---:|---:|---|",
        (scale.phase / ROUNDS).as_secs_f64()
    );
    let targets = [
        ("(a) single server", Server::Single, vec![single.clone()]),
        ("(b) Citus, one schema", Server::Citus, vec![one.clone()]),
        (
            "(c) Citus, two schemas, one worker",
            Server::Citus,
            same.to_vec(),
        ),
        (
            "(d) Citus, two schemas, two workers",
            Server::Citus,
            apart.to_vec(),
        ),
    ];
    // Rounds in alternating order, so that a load that grows or falls
    // during the run does not favour the targets measured first.
    struct Total {
        acked: usize,
        elapsed: Duration,
        claim: Histogram<u64>,
        rounds: Vec<f64>,
        loads: Vec<String>,
    }
    let mut totals: Vec<Total> = targets
        .iter()
        .map(|_| Total {
            acked: 0,
            elapsed: Duration::ZERO,
            claim: histogram(),
            rounds: Vec::new(),
            loads: Vec::new(),
        })
        .collect();
    let round_phase = scale.phase / ROUNDS;
    for round in 0..ROUNDS {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (label, server, schemas) = &targets[i];
            let run = run_loop(*server, schemas, round_phase).await;
            let total = &mut totals[i];
            total.acked += run.acked;
            total.elapsed += run.elapsed;
            total
                .claim
                .add(&run.claim)
                .unwrap_or_else(|e| panic!("adding histograms: {e}"));
            total
                .rounds
                .push(run.acked as f64 / run.elapsed.as_secs_f64());
            total.loads.push(run.load.0);
            problems.extend(run.problems.into_iter().map(|p| format!("{label}: {p}")));
        }
    }
    let mut rates = Vec::new();
    for ((label, _, _), total) in targets.iter().zip(&totals) {
        if total.acked == 0 {
            problems.push(format!("{label}: no job was acked"));
        }
        let rate = total.acked as f64 / total.elapsed.as_secs_f64();
        let rounds: Vec<String> = total.rounds.iter().map(|r| format!("{r:.0}")).collect();
        let _ = writeln!(
            text,
            "| {label} | {rate:.0} | {} | {:.2} | {:.2} | {} |",
            rounds.join(", "),
            ms(&total.claim, 0.5),
            ms(&total.claim, 0.99),
            total.loads.join(", ")
        );
        rates.push(rate);
    }
    if let [a, b, c, d] = rates.as_slice() {
        let _ = writeln!(
            text,
            "\nRatios: (b)/(a) {:.2}, (c)/(b) {:.2}, (d)/(b) {:.2}, (d)/(c) {:.2}\n",
            b / a,
            c / b,
            d / b,
            d / c
        );
    }

    // 3. Buffers per claim path.
    let _ = writeln!(
        text,
        "## Buffers per claim path (EXPLAIN (ANALYZE, BUFFERS), median of 9)\n\n\
         | target | promote: local + remote | claim: local + remote | tasks | `jobs` before |\n\
         |---|---|---|---|---|"
    );
    for (label, server, schema) in [
        (
            "(a) single server, after the loops",
            Server::Single,
            &single,
        ),
        ("(b) Citus, after the loops", Server::Citus, &one),
    ] {
        buffer_rows.push(buffer_row(label, server, schema, &mut problems).await);
    }
    for row in buffer_rows {
        let _ = writeln!(text, "{row}");
    }
    let _ = writeln!(
        text,
        "\nSet-up {:.1} s (the cluster's start {:.1} s, the bootstraps, the moves); \
         the whole run {:.1} s; load average at the end: {}.",
        setup.as_secs_f64(),
        cluster.startup.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        load_now()
    );
    if !problems.is_empty() {
        let _ = writeln!(text, "\nProblems:\n\n- {}", problems.join("\n- "));
    }
    Report { text, problems }
}

async fn rows1(client: &Client, sql: &str) -> String {
    client
        .query_one(sql, &[])
        .await
        .map(|row| row.get::<_, String>(0))
        .unwrap_or_else(|e| format!("({sql}: {e})"))
}
