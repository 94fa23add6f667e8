//! Benchmark: the engine's hot paths at scale, beside pg-boss, in one run on
//! one server (the harness's throwaway PostgreSQL cluster, or
//! `ALKSTORE_TEST_DATABASE_URL`).
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench hot_paths
//! ```
//!
//! In one run: claim p50/p99 and buffers per claim at each size, for every
//! job mix, at 1 and 8 clients, for the product's design and the alternatives
//! measured (`designs.rs`); a poll of a queue holding only not-yet-due jobs
//! against a poll of an empty queue; an enqueue -> claim -> ack loop at 1 and
//! 8 clients with batches of 1 and 10, beside pg-boss (its Node API, and its
//! SQL through this driver); a churn run with default and tuned storage
//! parameters. BENCHMARKS.md explains the figures.
//!
//! `--bench` (what `cargo bench` passes) runs the full scale; without it (as
//! under `cargo test --benches`) a tiny round exercises every part in
//! seconds. `ALKSTORE_BENCH_SCALE=tiny|quick|full` picks a scale explicitly;
//! `ALKSTORE_BENCH_SIZES=10000,100000`, `ALKSTORE_BENCH_LOOP_SECS`,
//! `ALKSTORE_BENCH_CHURN_SECS` override parts of it.

mod designs;
mod explain;
mod latency;
mod pgboss;
mod pool;
mod product;
mod report;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use schema_model::SchemaName;
use tokio_postgres::Client;

use designs::{FUTURE_AHEAD, FUTURE_AHEAD_FEW_PRIORITIES, IDLE, MOSTLY_CLAIMED, Mix, NORMAL};
use explain::{Explainer, Work};
use latency::{Recorder, ms};
use pool::{Conn, Limit, Stmt, Worker, db_error};
use report::{Report, Table};

// ---------------------------------------------------------------------------
// Scale

#[derive(Debug, Clone)]
struct Scale {
    name: String,
    sizes: Vec<u64>,
    /// Claims before measuring, on one client.
    claim_warmup: u64,
    /// Claims measured on one client, at most.
    claims_one: u64,
    /// Claims measured per client with eight clients, at most.
    claims_eight: u64,
    /// Wall time per claim measurement, at most.
    claim_time: Duration,
    /// EXPLAIN runs: settling the plan cache, then measured (median).
    explain_warmup: usize,
    explain_runs: usize,
    loop_time: Duration,
    churn_time: Duration,
    churn_window: Duration,
    churn_backlog: u64,
    churn_clients: usize,
}

impl Scale {
    fn named(name: &str) -> Self {
        let full = Scale {
            name: "full".to_owned(),
            sizes: vec![10_000, 100_000, 1_000_000],
            claim_warmup: 20,
            claims_one: 600,
            claims_eight: 100,
            claim_time: Duration::from_secs(8),
            explain_warmup: 6,
            explain_runs: 5,
            loop_time: Duration::from_secs(60),
            churn_time: Duration::from_secs(300),
            churn_window: Duration::from_secs(60),
            churn_backlog: 100_000,
            churn_clients: 4,
        };
        match name {
            "full" => full,
            "quick" => Scale {
                name: "quick".to_owned(),
                sizes: vec![10_000, 100_000],
                claims_one: 300,
                claims_eight: 40,
                claim_time: Duration::from_secs(4),
                loop_time: Duration::from_secs(5),
                churn_time: Duration::from_secs(30),
                churn_window: Duration::from_secs(10),
                churn_backlog: 20_000,
                ..full
            },
            "tiny" => Scale {
                name: "tiny".to_owned(),
                sizes: vec![2_000, 5_000],
                claim_warmup: 5,
                claims_one: 40,
                claims_eight: 8,
                claim_time: Duration::from_secs(2),
                explain_warmup: 1,
                explain_runs: 1,
                loop_time: Duration::from_secs(1),
                churn_time: Duration::from_secs(4),
                churn_window: Duration::from_secs(1),
                churn_backlog: 2_000,
                churn_clients: 2,
            },
            other => panic!("ALKSTORE_BENCH_SCALE must be tiny, quick or full, not {other:?}"),
        }
    }

    fn from_env(bench_flag: bool) -> Self {
        let default = if bench_flag { "full" } else { "tiny" };
        let name = std::env::var("ALKSTORE_BENCH_SCALE").unwrap_or_else(|_| default.to_owned());
        let mut scale = Scale::named(&name);
        if let Ok(sizes) = std::env::var("ALKSTORE_BENCH_SIZES") {
            scale.sizes = sizes
                .split(',')
                .map(|s| {
                    s.trim().parse().unwrap_or_else(|_| {
                        panic!("ALKSTORE_BENCH_SIZES: {s:?} is not a number of jobs")
                    })
                })
                .collect();
            scale.name.push_str(", sizes overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_LOOP_SECS") {
            scale.loop_time = secs;
            scale.name.push_str(", loop time overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_CHURN_SECS") {
            scale.churn_time = secs;
            scale.churn_window = (secs / 5).min(Duration::from_secs(60));
            scale.name.push_str(", churn time overridden");
        }
        assert!(
            !scale.sizes.is_empty(),
            "ALKSTORE_BENCH_SIZES names no size"
        );
        scale
    }
}

fn env_secs(var: &str) -> Option<Duration> {
    let value = std::env::var(var).ok()?;
    let secs: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("{var}: {value:?} is not a number of seconds"));
    Some(Duration::from_secs_f64(secs))
}

fn main() {
    let bench_flag = std::env::args().any(|a| a == "--bench");
    let scale = Scale::from_env(bench_flag);
    if harness::skip_db_tests() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    runtime.block_on(run(scale));
}

// ---------------------------------------------------------------------------
// Helpers

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// A progress line on stderr, with the time since the run started.
fn progress(text: &str) {
    let started = STARTED.get_or_init(Instant::now);
    eprintln!("[{:>6.1} s] {text}", started.elapsed().as_secs_f64());
}

async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{}", db_error(sql, &e)));
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn times(r: Option<f64>) -> String {
    r.map_or("n/a".to_owned(), |r| format!("{r:.2}x"))
}

fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

// ---------------------------------------------------------------------------
// Designs

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Design {
    /// (b) the product's statements.
    Product,
    /// (a) main's base design.
    Base,
    /// (c) a skip scan over priorities, on the base schema.
    SkipScan,
}

impl Design {
    fn label(self) -> &'static str {
        match self {
            Design::Product => product::LABEL,
            Design::Base => "(a) base: main today",
            Design::SkipScan => "(c) skip scan over priorities",
        }
    }

    /// A fresh schema holding this design's `jobs` table.
    async fn create(self, admin: &mut Client, prefix: &str) -> SchemaName {
        let schema = harness::unique_schema_name(prefix);
        match self {
            Design::Product => product::create(admin, &schema).await,
            Design::Base | Design::SkipScan => {
                exec(admin, &designs::base_schema_ddl(schema.as_str())).await;
            }
        }
        schema
    }

    fn seed_extra(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Design::Product => product::seed_extra(),
            Design::Base | Design::SkipScan => Vec::new(),
        }
    }

    fn claim_path(
        self,
        schema: &SchemaName,
        queue: &str,
        now: i64,
        worker: &str,
        limit: i64,
    ) -> Vec<Stmt> {
        match self {
            Design::Product => product::claim_path(schema, queue, now, worker, limit),
            Design::Base => vec![designs::base_claim(
                schema.as_str(),
                queue,
                now,
                worker,
                limit,
            )],
            Design::SkipScan => vec![designs::skip_scan_claim(
                schema.as_str(),
                queue,
                now,
                worker,
                limit,
            )],
        }
    }
}

/// Bulk-loads `rows` jobs of `mix` into `queue`, then VACUUM ANALYZE, so the
/// table is in the steady state of a table that has been running (hint bits
/// set, visibility map current, statistics fresh).
async fn seed(
    admin: &Client,
    design: Design,
    schema: &SchemaName,
    queue: &str,
    rows: u64,
    mix: &Mix,
    now: i64,
) -> Duration {
    let started = Instant::now();
    let sql = designs::seed_sql(schema.as_str(), queue, rows, mix, now, &design.seed_extra());
    exec(admin, &sql).await;
    exec(admin, &format!("VACUUM (ANALYZE) {schema}.jobs")).await;
    started.elapsed()
}

async fn drop_schema(admin: &Client, schema: &str) {
    exec(admin, &format!("DROP SCHEMA {schema} CASCADE")).await;
}

// ---------------------------------------------------------------------------
// Claims at scale

struct ClaimWorker {
    conn: Conn,
    design: Design,
    schema: SchemaName,
    queue: String,
    worker: String,
    latency: Recorder,
}

impl ClaimWorker {
    async fn new(design: Design, schema: &SchemaName, queue: &str, index: usize) -> Self {
        Self {
            conn: Conn::open().await,
            design,
            schema: schema.clone(),
            queue: queue.to_owned(),
            worker: format!("bench-worker-{index}"),
            latency: Recorder::new(),
        }
    }
}

impl Worker for ClaimWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let stmts = self
            .design
            .claim_path(&self.schema, &self.queue, unix_now(), &self.worker, 1);
        let started = Instant::now();
        let claimed = self
            .conn
            .pipeline(&stmts)
            .await
            .map_err(|e| db_error("claim", &e))?
            .last()
            .map_or(0, Vec::len);
        self.latency.record(started.elapsed());
        Ok(claimed as u64)
    }
}

struct Timed {
    latency: Recorder,
    steps: u64,
    empty: u64,
}

async fn timed_claims(
    design: Design,
    schema: &SchemaName,
    queue: &str,
    clients: usize,
    limit: Limit,
) -> Timed {
    let mut workers = Vec::new();
    for index in 0..clients {
        workers.push(ClaimWorker::new(design, schema, queue, index).await);
    }
    let run = pool::run(workers, limit).await;
    let mut latency = Recorder::new();
    for w in &run.workers {
        latency.merge(&w.latency);
    }
    Timed {
        latency,
        steps: run.steps,
        empty: run.empty_steps,
    }
}

struct ClaimResult {
    design: Design,
    mix: Mix,
    size: u64,
    seeded: Duration,
    work: Work,
    one: Timed,
    eight: Timed,
}

async fn claim_case(
    admin: &mut Client,
    scale: &Scale,
    design: Design,
    mix: Mix,
    size: u64,
) -> ClaimResult {
    progress(&format!(
        "claims: {} / {} / {} jobs: seeding",
        design.label(),
        mix.name,
        count(size)
    ));
    let schema = design.create(admin, "bench_claim").await;
    let queue = "bench";
    let seeded = seed(admin, design, &schema, queue, size, &mix, unix_now()).await;
    timed_claims(
        design,
        &schema,
        queue,
        1,
        Limit {
            steps: scale.claim_warmup,
            time: scale.claim_time,
        },
    )
    .await;
    let mut explainer = Explainer::open().await;
    let work = explainer
        .median(
            || design.claim_path(&schema, queue, unix_now(), "bench-explain", 1),
            scale.explain_warmup,
            scale.explain_runs,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(explainer);
    let one = timed_claims(
        design,
        &schema,
        queue,
        1,
        Limit {
            steps: scale.claims_one,
            time: scale.claim_time,
        },
    )
    .await;
    let eight = timed_claims(
        design,
        &schema,
        queue,
        8,
        Limit {
            steps: scale.claims_eight,
            time: scale.claim_time,
        },
    )
    .await;
    drop_schema(admin, schema.as_str()).await;
    ClaimResult {
        design,
        mix,
        size,
        seeded,
        work,
        one,
        eight,
    }
}

/// Polls of a queue holding only not-yet-due jobs and of an empty queue, on
/// the same table: buffers (median of the EXPLAIN runs).
struct PollResult {
    design: Design,
    size: u64,
    idle: Work,
    empty: Work,
}

async fn poll_cases(
    admin: &mut Client,
    scale: &Scale,
    size: u64,
    designs: &[Design],
) -> Vec<PollResult> {
    let mut out = Vec::new();
    // The base schema serves (a) and (c): polls change nothing.
    let mut tables: Vec<(Design, SchemaName)> = Vec::new();
    for &design in designs {
        let table_design = if design == Design::SkipScan {
            Design::Base
        } else {
            design
        };
        let schema = match tables.iter().find(|(d, _)| *d == table_design) {
            Some((_, s)) => s.clone(),
            None => {
                progress(&format!(
                    "polls: {} / {} not-yet-due jobs: seeding",
                    table_design.label(),
                    count(size)
                ));
                let schema = table_design.create(admin, "bench_poll").await;
                seed(
                    admin,
                    table_design,
                    &schema,
                    "idle",
                    size,
                    &IDLE,
                    unix_now(),
                )
                .await;
                tables.push((table_design, schema.clone()));
                schema
            }
        };
        let mut explainer = Explainer::open().await;
        let work = |queue: &'static str| {
            let schema = schema.clone();
            move || design.claim_path(&schema, queue, unix_now(), "bench-poll", 1)
        };
        let idle = explainer
            .median(work("idle"), scale.explain_warmup, scale.explain_runs)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let empty = explainer
            .median(work("empty"), scale.explain_warmup, scale.explain_runs)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            idle.rows == 0 && empty.rows == 0,
            "a poll of a queue without due jobs claimed something"
        );
        out.push(PollResult {
            design,
            size,
            idle,
            empty,
        });
    }
    for (_, schema) in tables {
        drop_schema(admin, schema.as_str()).await;
    }
    out
}

// ---------------------------------------------------------------------------
// The enqueue -> claim -> ack loop

struct LoopWorker {
    conn: Conn,
    schema: SchemaName,
    queue: String,
    batch: u64,
    client: usize,
    worker: String,
    n: u64,
    latency: Recorder,
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
            .pipeline(&in_transaction(enqueue))
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
        if !claimed.is_empty() {
            let ack = product::ack(&self.schema, &claimed, &self.worker);
            self.conn
                .pipeline(&in_transaction(ack))
                .await
                .map_err(|e| db_error("ack", &e))?;
        }
        self.latency.record(started.elapsed());
        self.n += self.batch;
        Ok(claimed.len() as u64)
    }
}

/// Several statements as one transaction (pipelined: one round trip), as an
/// engine sends a batch; a single statement as it is.
fn in_transaction(stmts: Vec<Stmt>) -> Vec<Stmt> {
    if stmts.len() < 2 {
        return stmts;
    }
    let mut out = Vec::with_capacity(stmts.len() + 2);
    out.push(Stmt::new("BEGIN", Vec::new()));
    out.extend(stmts);
    out.push(Stmt::new("COMMIT", Vec::new()));
    out
}

struct LoopResult {
    system: &'static str,
    clients: usize,
    batch: u64,
    jobs_per_s: f64,
    p50: Option<f64>,
    p99: Option<f64>,
}

fn merged<W>(workers: &[W], latency: impl Fn(&W) -> &Recorder) -> Recorder {
    let mut all = Recorder::new();
    for w in workers {
        all.merge(latency(w));
    }
    all
}

const SYSTEM_OURS: &str = "alkstore (product statements, tokio-postgres)";
const SYSTEM_PGBOSS_SQL: &str = "pg-boss SQL, same driver (tokio-postgres)";
const SYSTEM_PGBOSS_API: &str = "pg-boss Node API (node-postgres)";

async fn loops(
    admin: &mut Client,
    scale: &Scale,
    boss: Option<&pgboss::PgBoss>,
    boss_sql: Option<Arc<pgboss::PgBossSql>>,
    boss_schema: &str,
) -> Vec<LoopResult> {
    let mut out = Vec::new();
    for clients in [1usize, 8] {
        for batch in [1u64, 10] {
            progress(&format!("loop: alkstore, {clients} clients, batch {batch}"));
            let schema = Design::Product.create(admin, "bench_loop").await;
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
                });
            }
            let run = pool::run(workers, Limit::time(scale.loop_time)).await;
            let latency = merged(&run.workers, |w| &w.latency);
            out.push(LoopResult {
                system: SYSTEM_OURS,
                clients,
                batch,
                jobs_per_s: run.jobs_per_second(),
                p50: latency.p50_ms(),
                p99: latency.p99_ms(),
            });
            drop(run);
            drop_schema(admin, schema.as_str()).await;

            let Some(sql) = boss_sql.clone() else {
                continue;
            };
            let queue = loop_queue(clients, batch, "sql");
            progress(&format!(
                "loop: pg-boss SQL, {clients} clients, batch {batch}"
            ));
            let mut workers = Vec::new();
            for client in 0..clients {
                workers.push(pgboss::SqlLoopWorker::new(sql.clone(), &queue, batch, client).await);
            }
            let run = pool::run(workers, Limit::time(scale.loop_time)).await;
            let latency = merged(&run.workers, |w| &w.latency);
            out.push(LoopResult {
                system: SYSTEM_PGBOSS_SQL,
                clients,
                batch,
                jobs_per_s: run.jobs_per_second(),
                p50: latency.p50_ms(),
                p99: latency.p99_ms(),
            });

            if let Some(boss) = boss {
                progress(&format!(
                    "loop: pg-boss Node API, {clients} clients, batch {batch}"
                ));
                let queue = loop_queue(clients, batch, "api");
                let api = boss
                    .api_loop(boss_schema, &queue, clients, batch, scale.loop_time)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                out.push(LoopResult {
                    system: SYSTEM_PGBOSS_API,
                    clients,
                    batch,
                    jobs_per_s: api.jobs as f64 / api.seconds,
                    p50: api.p50_us.map(|u| u / 1000.0),
                    p99: api.p99_us.map(|u| u / 1000.0),
                });
                let _ = api.steps;
            }
        }
    }
    out
}

fn loop_queue(clients: usize, batch: u64, how: &str) -> String {
    format!("loop_{how}_c{clients}_b{batch}")
}

fn loop_queues() -> Vec<String> {
    let mut queues = Vec::new();
    for clients in [1usize, 8] {
        for batch in [1u64, 10] {
            for how in ["sql", "api"] {
                queues.push(loop_queue(clients, batch, how));
            }
        }
    }
    queues
}

// ---------------------------------------------------------------------------
// Churn

struct ChurnWorker {
    conn: Conn,
    schema: SchemaName,
    worker: String,
    n: u64,
    started: Instant,
    window: Duration,
    total: Duration,
    first: Recorder,
    last: Recorder,
    all: Recorder,
}

const CHURN_QUEUE: &str = "bench";

impl Worker for ChurnWorker {
    /// Claim one job, then (1 in 4) retry it 1..30 s later as a failed webhook
    /// delivery would, or ack it and enqueue a new one in its place (7 in 10
    /// due at once, the rest scheduled 5..60 s ahead), so the number of live
    /// jobs stays at the backlog's.
    async fn step(&mut self) -> Result<u64, String> {
        let now = unix_now();
        self.n += 1;
        let n = self.n;
        let claim_started = Instant::now();
        let claim = product::claim_path(&self.schema, CHURN_QUEUE, now, &self.worker, 1);
        let rows = self
            .conn
            .pipeline(&claim)
            .await
            .map_err(|e| db_error("claim", &e))?;
        let took = claim_started.elapsed();
        let at = claim_started - self.started;
        self.all.record(took);
        if at < self.window {
            self.first.record(took);
        }
        if at + self.window >= self.total {
            self.last.record(took);
        }
        let claimed = product::claimed(rows.last().map_or(&[][..], Vec::as_slice))?;
        let stmts = match claimed.first() {
            None => Vec::new(),
            Some(job) if n % 4 == 0 => product::retry(
                &self.schema,
                job,
                &self.worker,
                now + 1 + (n % 30) as i64,
                "POST https://hooks.example.test/endpoint: 503",
            ),
            Some(_) => {
                let run_at = if n % 10 < 7 {
                    now
                } else {
                    now + 5 + (n % 56) as i64
                };
                let payload = format!(r#"{{"n":{n}}}"#).into_bytes();
                let mut stmts = product::ack(&self.schema, &claimed, &self.worker);
                stmts.extend(product::enqueue(
                    &self.schema,
                    CHURN_QUEUE,
                    &[payload],
                    run_at,
                    now,
                ));
                stmts
            }
        };
        self.conn
            .pipeline(&stmts)
            .await
            .map_err(|e| db_error("ack, enqueue or retry", &e))?;
        Ok(claimed.len() as u64)
    }
}

#[derive(Debug, Clone, Default)]
struct TableStats {
    table_bytes: i64,
    indexes: Vec<(String, i64)>,
    updates: i64,
    hot_updates: i64,
    dead: i64,
    live: i64,
    autovacuums: i64,
}

async fn table_stats(admin: &Client, schema: &SchemaName) -> TableStats {
    let relation = format!("{schema}.jobs");
    let row = admin
        .query_one(
            "SELECT pg_relation_size($1::text::regclass), n_tup_upd, n_tup_hot_upd, n_dead_tup, \
             n_live_tup, autovacuum_count \
             FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
            &[&relation],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("table stats", &e)));
    let indexes = admin
        .query(
            "SELECT c.relname::text, pg_relation_size(i.indexrelid) FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::text::regclass \
             ORDER BY c.relname",
            &[&relation],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("index sizes", &e)))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    TableStats {
        table_bytes: row.get(0),
        indexes,
        updates: row.get(1),
        hot_updates: row.get(2),
        dead: row.get(3),
        live: row.get(4),
        autovacuums: row.get(5),
    }
}

struct ChurnResult {
    variant: String,
    reloptions: String,
    first: Recorder,
    last: Recorder,
    all: Recorder,
    jobs_per_s: f64,
    before: TableStats,
    after: TableStats,
}

/// The storage parameters compared in the churn run: the defaults, and the
/// product's declared ones (or, while it declares none, the candidates).
fn churn_variants() -> Vec<(String, Vec<String>)> {
    let declared = product::declared_storage();
    let tuned = if declared.is_empty() {
        vec![
            "fillfactor=70".to_owned(),
            "autovacuum_vacuum_scale_factor=0.01".to_owned(),
            "autovacuum_vacuum_threshold=1000".to_owned(),
            "autovacuum_analyze_scale_factor=0.02".to_owned(),
        ]
    } else {
        declared
    };
    vec![
        ("defaults".to_owned(), Vec::new()),
        ("tuned".to_owned(), tuned),
    ]
}

async fn churn(
    admin: &mut Client,
    scale: &Scale,
    variant: &str,
    options: &[String],
) -> ChurnResult {
    progress(&format!("churn: {variant} storage parameters: seeding"));
    let schema = Design::Product.create(admin, "bench_churn").await;
    // Whatever the model declares is reset first, so each variant has exactly
    // the options it names.
    exec(
        admin,
        &format!(
            "ALTER TABLE {schema}.jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, \
             autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor, \
             autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold)"
        ),
    )
    .await;
    if !options.is_empty() {
        exec(
            admin,
            &format!("ALTER TABLE {schema}.jobs SET ({})", options.join(", ")),
        )
        .await;
    }
    seed(
        admin,
        Design::Product,
        &schema,
        CHURN_QUEUE,
        scale.churn_backlog,
        &FUTURE_AHEAD,
        unix_now(),
    )
    .await;
    let before = table_stats(admin, &schema).await;
    progress(&format!(
        "churn: {variant}: {} clients for {:.0} s",
        scale.churn_clients,
        scale.churn_time.as_secs_f64()
    ));
    let started = Instant::now();
    let mut workers = Vec::new();
    for index in 0..scale.churn_clients {
        workers.push(ChurnWorker {
            conn: Conn::open().await,
            schema: schema.clone(),
            worker: format!("bench-worker-{index}"),
            n: index as u64 * 1_000_000,
            started,
            window: scale.churn_window,
            total: scale.churn_time,
            first: Recorder::new(),
            last: Recorder::new(),
            all: Recorder::new(),
        });
    }
    let run = pool::run(workers, Limit::time(scale.churn_time)).await;
    let jobs_per_s = run.jobs_per_second();
    let first = merged(&run.workers, |w| &w.first);
    let last = merged(&run.workers, |w| &w.last);
    let all = merged(&run.workers, |w| &w.all);
    // Closing the clients flushes their statistics; the server publishes
    // them within a second.
    drop(run);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = table_stats(admin, &schema).await;
    let reloptions: Option<Vec<String>> = admin
        .query_one(
            "SELECT reloptions FROM pg_class WHERE oid = $1::text::regclass",
            &[&format!("{schema}.jobs")],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("reloptions", &e)))
        .get(0);
    drop_schema(admin, schema.as_str()).await;
    ChurnResult {
        variant: variant.to_owned(),
        reloptions: reloptions.map_or("(none)".to_owned(), |o| o.join(", ")),
        first,
        last,
        all,
        jobs_per_s,
        before,
        after,
    }
}

// ---------------------------------------------------------------------------
// The run

async fn run(scale: Scale) {
    progress(&format!("hot-path benchmark, {} scale", scale.name));
    let mut admin = harness::connect().await;
    let version: String = admin
        .query_one("SHOW server_version", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    let load_before = load_average();

    // The peer first: a missing Node fails the run before the long parts.
    let pgboss_wanted = match std::env::var("ALKSTORE_BENCH_PGBOSS").as_deref() {
        Ok("skip") => {
            assert!(
                std::env::var_os("CI").is_none(),
                "ALKSTORE_BENCH_PGBOSS=skip is for local runs only and is refused when CI is set"
            );
            eprintln!(
                "\n!!!!!!!! ALKSTORE_BENCH_PGBOSS=skip: pg-boss is LEFT OUT of this run !!!!!!!!\n"
            );
            false
        }
        Ok("") | Err(_) => true,
        Ok(other) => panic!("ALKSTORE_BENCH_PGBOSS must be skip or unset, not {other:?}"),
    };
    let mut boss = None;
    let mut boss_sql = None;
    let boss_schema = harness::unique_schema("pgboss_bench");
    if pgboss_wanted {
        progress(&format!(
            "pg-boss {}: installing under target/",
            pgboss::PGBOSS_VERSION
        ));
        let installed = pgboss::install().unwrap_or_else(|e| panic!("pg-boss: {e}"));
        installed
            .setup(&boss_schema, &loop_queues())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let sql = installed
            .sql(&boss_schema)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            sql.version, installed.version,
            "the pg-boss SQL comes from another version than the one installed"
        );
        boss_sql = Some(Arc::new(sql));
        boss = Some(installed);
    }

    let mut report = Report::default();
    let sizes = scale.sizes.clone();
    let (small, large) = (sizes[0], sizes[sizes.len() - 1]);

    // Claims at scale.
    let mut claims = Vec::new();
    for &size in &sizes {
        for mix in [NORMAL, FUTURE_AHEAD, MOSTLY_CLAIMED] {
            claims.push(claim_case(&mut admin, &scale, Design::Product, mix, size).await);
        }
        for design in [Design::Base, Design::SkipScan] {
            claims.push(claim_case(&mut admin, &scale, design, FUTURE_AHEAD, size).await);
        }
        claims.push(
            claim_case(
                &mut admin,
                &scale,
                Design::SkipScan,
                FUTURE_AHEAD_FEW_PRIORITIES,
                size,
            )
            .await,
        );
    }
    let mut polls = Vec::new();
    for &size in &sizes {
        polls.extend(
            poll_cases(
                &mut admin,
                &scale,
                size,
                &[Design::Product, Design::Base, Design::SkipScan],
            )
            .await,
        );
    }

    let loop_results = loops(
        &mut admin,
        &scale,
        boss.as_ref(),
        boss_sql.clone(),
        &boss_schema,
    )
    .await;

    let mut churns = Vec::new();
    for (variant, options) in churn_variants() {
        churns.push(churn(&mut admin, &scale, &variant, &options).await);
    }

    if boss.is_some() {
        drop_schema(&admin, &boss_schema).await;
    }
    let load_after = load_average();

    // ---- The report.
    report.para(&format!(
        "PostgreSQL {version}, {} scale, one run. Load average (1, 5, 15 min) {load_before} \
         at the start, {load_after} at the end, on {} cores.{}",
        scale.name,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        boss.as_ref()
            .map_or(" pg-boss left out.".to_owned(), |b| format!(
                " pg-boss {} on Node {}.",
                b.version, b.node_version
            ))
    ));

    claims_report(&mut report, &claims, small, large);
    design_report(&mut report, &claims, &polls, small, large);
    polls_report(&mut report, &polls);
    loops_report(&mut report, &loop_results);
    churn_report(&mut report, &churns, &scale);

    report.finish("Hot paths: measured figures");
}

// ---------------------------------------------------------------------------
// Report sections

fn claim_rows<'a>(claims: &'a [ClaimResult], design: Design, mix: &Mix) -> Vec<&'a ClaimResult> {
    claims
        .iter()
        .filter(|c| c.design == design && c.mix.name == mix.name)
        .collect()
}

fn claims_report(report: &mut Report, claims: &[ClaimResult], small: u64, large: u64) {
    report.heading(&format!(
        "Claim at scale: {} (claim path: {})",
        product::LABEL,
        product::claim_path_names().join(" -> ")
    ));
    let mut table = Table::new(&[
        "mix",
        "jobs>",
        "buffers / claim>",
        "rows removed>",
        "indexes",
        "1 client p50>",
        "p99>",
        "8 clients p50>",
        "p99>",
        "claims (1 / 8)>",
    ]);
    for mix in [NORMAL, FUTURE_AHEAD, MOSTLY_CLAIMED] {
        for c in claim_rows(claims, Design::Product, &mix) {
            table.row(claim_cells(c, true));
        }
    }
    report.table(&table);
    report.para(
        "Buffers: shared buffers hit or read by one claim (every statement of the claim path), \
         the median of the EXPLAIN (ANALYZE, BUFFERS) runs of the prepared statements. Latency: \
         the claim path alone, one job per claim, each client on its own connection with its \
         statements prepared.",
    );
    for mix in [NORMAL, FUTURE_AHEAD, MOSTLY_CLAIMED] {
        let rows = claim_rows(claims, Design::Product, &mix);
        let at = |size: u64| rows.iter().find(|c| c.size == size);
        let (Some(s), Some(l)) = (at(small), at(large)) else {
            continue;
        };
        for (clients, ls, ss) in [
            ("1 client", &l.one, &s.one),
            ("8 clients", &l.eight, &s.eight),
        ] {
            let r = ratio(ls.latency.p50_ms(), ss.latency.p50_ms());
            report.verdict(
                format!(
                    "claim p50 at {} <= 1.3x at {} ({}, {clients})",
                    count(large),
                    count(small),
                    mix.name
                ),
                format!(
                    "{} vs {}: {}",
                    ms(ls.latency.p50_ms()),
                    ms(ss.latency.p50_ms()),
                    times(r)
                ),
                r.is_some_and(|r| r <= 1.3),
            );
        }
        let grew = l.work.buffers as i64 - s.work.buffers as i64;
        report.verdict(
            format!(
                "buffers per claim flat from {} to {} ({}): at most +{FLAT_BUFFERS}",
                count(small),
                count(large),
                mix.name
            ),
            format!("{} -> {} ({grew:+})", s.work.buffers, l.work.buffers),
            grew <= FLAT_BUFFERS,
        );
    }
}

/// What "flat" allows: each B-tree the claim path descends may gain a level
/// between 10k and 1M rows.
const FLAT_BUFFERS: i64 = 10;

fn claim_cells(c: &ClaimResult, with_mix: bool) -> Vec<String> {
    let mut cells = vec![
        if with_mix {
            c.mix.name.to_owned()
        } else {
            c.design.label().to_owned()
        },
        count(c.size),
        c.work.buffers.to_string(),
        c.work.rows_removed.to_string(),
        if c.work.sorts.is_empty() {
            c.work.indexes.join(", ")
        } else {
            format!(
                "{} **+ {}**",
                c.work.indexes.join(", "),
                c.work.sorts.join(", ")
            )
        },
        ms(c.one.latency.p50_ms()),
        ms(c.one.latency.p99_ms()),
        ms(c.eight.latency.p50_ms()),
        ms(c.eight.latency.p99_ms()),
    ];
    let empty = c.one.empty + c.eight.empty;
    cells.push(if empty > 0 {
        format!("{} / {} ({empty} found none)", c.one.steps, c.eight.steps)
    } else {
        format!("{} / {}", c.one.steps, c.eight.steps)
    });
    let _ = c.seeded;
    cells
}

fn design_report(
    report: &mut Report,
    claims: &[ClaimResult],
    polls: &[PollResult],
    small: u64,
    large: u64,
) {
    report.heading(&format!("Design comparison: {}", FUTURE_AHEAD.name));
    report.para(&format!("Mix: {}.", FUTURE_AHEAD.about));
    let mut table = Table::new(&[
        "design",
        "jobs>",
        "buffers / claim>",
        "rows removed>",
        "indexes",
        "1 client p50>",
        "p99>",
        "8 clients p50>",
        "p99>",
        "claims (1 / 8)>",
    ]);
    for design in [Design::Base, Design::SkipScan, Design::Product] {
        for c in claim_rows(claims, design, &FUTURE_AHEAD) {
            table.row(claim_cells(c, false));
        }
    }
    for c in claim_rows(claims, Design::SkipScan, &FUTURE_AHEAD_FEW_PRIORITIES) {
        let mut cells = claim_cells(c, false);
        cells[0] = format!("{}, 10 priorities ahead", c.design.label());
        table.row(cells);
    }
    report.table(&table);
    let mut growth = Table::new(&[
        "design",
        "buffers at small>",
        "at large>",
        "p50 ratio large / small (1 client)>",
        "idle-queue poll buffers at large>",
    ]);
    for design in [Design::Base, Design::SkipScan, Design::Product] {
        let rows = claim_rows(claims, design, &FUTURE_AHEAD);
        let at = |size: u64| rows.iter().find(|c| c.size == size);
        let poll = polls
            .iter()
            .find(|p| p.design == design && p.size == large)
            .map_or("n/a".to_owned(), |p| p.idle.buffers.to_string());
        if let (Some(s), Some(l)) = (at(small), at(large)) {
            growth.row(vec![
                design.label().to_owned(),
                s.work.buffers.to_string(),
                l.work.buffers.to_string(),
                times(ratio(l.one.latency.p50_ms(), s.one.latency.p50_ms())),
                poll,
            ]);
        }
    }
    report.para(&format!("From {} to {} jobs:", count(small), count(large)));
    report.table(&growth);
}

fn polls_report(report: &mut Report, polls: &[PollResult]) {
    report.heading("Poll of a queue holding only not-yet-due jobs vs an empty queue");
    let mut table = Table::new(&[
        "design",
        "not-yet-due jobs in the queue>",
        "buffers: not-yet-due queue>",
        "buffers: empty queue>",
        "rows removed>",
    ]);
    for p in polls {
        table.row(vec![
            p.design.label().to_owned(),
            count(p.size),
            p.idle.buffers.to_string(),
            p.empty.buffers.to_string(),
            p.idle.rows_removed.to_string(),
        ]);
    }
    report.table(&table);
    report.para(
        "Both polls run the whole claim path on the same table; the empty queue has no row. \
         Median of the EXPLAIN (ANALYZE, BUFFERS) runs.",
    );
    for p in polls.iter().filter(|p| p.design == Design::Product) {
        let extra = p.idle.buffers as i64 - p.empty.buffers as i64;
        report.verdict(
            format!(
                "poll of {} not-yet-due jobs <= empty-queue poll + {POLL_CONSTANT} buffers",
                count(p.size)
            ),
            format!("{} vs {} ({extra:+})", p.idle.buffers, p.empty.buffers),
            extra <= POLL_CONSTANT,
        );
    }
}

/// "Give or take a constant": one index level more, on each index the poll
/// descends.
const POLL_CONSTANT: i64 = 5;

fn loops_report(report: &mut Report, loops: &[LoopResult]) {
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
        "One step: enqueue `batch` jobs, claim up to `batch`, ack what was claimed. alkstore \
         sends a batch of single-job statements as one pipelined transaction, and the claim \
         path's statements pipelined; pg-boss's SQL is one statement per call, as its API \
         sends it. Each alkstore run starts on a fresh schema, each pg-boss \
         run on a fresh queue (its own partition). pg-boss's Node API runs all clients as \
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

fn kib(bytes: i64) -> String {
    if bytes >= 10 * 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / 1024.0 / 1024.0)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

fn churn_report(report: &mut Report, churns: &[ChurnResult], scale: &Scale) {
    report.heading("Churn");
    report.para(&format!(
        "{} clients for {:.0} s on a backlog of {} jobs ({}). One step: claim one job, then \
         (1 in 4) retry it 1..30 s later, or ack it and enqueue a new one in its place (7 in \
         10 due at once, the rest 5..60 s ahead), so the live jobs stay at the backlog's count. First and last window: {:.0} s each.",
        scale.churn_clients,
        scale.churn_time.as_secs_f64(),
        count(scale.churn_backlog),
        FUTURE_AHEAD.about,
        scale.churn_window.as_secs_f64()
    ));
    let mut table = Table::new(&[
        "storage parameters",
        "jobs / s>",
        "claim p50 first>",
        "p50 last>",
        "last / first>",
        "p99 first>",
        "p99 last>",
        "heap before -> after>",
        "indexes before -> after",
        "dead tuples>",
        "HOT updates>",
        "autovacuums>",
    ]);
    for c in churns {
        let updates = c.after.updates - c.before.updates;
        let hot = c.after.hot_updates - c.before.hot_updates;
        let indexes: Vec<String> = c
            .after
            .indexes
            .iter()
            .map(|(name, after)| {
                let before = c
                    .before
                    .indexes
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(0, |(_, b)| *b);
                format!("{name} {} -> {}", kib(before), kib(*after))
            })
            .collect();
        table.row(vec![
            format!("{}: {}", c.variant, c.reloptions),
            format!("{:.0}", c.jobs_per_s),
            ms(c.first.p50_ms()),
            ms(c.last.p50_ms()),
            times(ratio(c.last.p50_ms(), c.first.p50_ms())),
            ms(c.first.p99_ms()),
            ms(c.last.p99_ms()),
            format!(
                "{} -> {}",
                kib(c.before.table_bytes),
                kib(c.after.table_bytes)
            ),
            indexes.join("; "),
            format!("{} (live {})", c.after.dead, c.after.live),
            if updates > 0 {
                format!(
                    "{hot} / {updates} = {:.0}%",
                    100.0 * hot as f64 / updates as f64
                )
            } else {
                "no updates".to_owned()
            },
            (c.after.autovacuums - c.before.autovacuums).to_string(),
        ]);
        let _ = c.all.count();
        let r = ratio(c.last.p50_ms(), c.first.p50_ms());
        report.verdict(
            format!(
                "churn ({}): last-window claim p50 <= 1.2x first-window",
                c.variant
            ),
            format!(
                "{} vs {}: {}",
                ms(c.last.p50_ms()),
                ms(c.first.p50_ms()),
                times(r)
            ),
            r.is_some_and(|r| r <= 1.2),
        );
    }
    report.table(&table);
}
