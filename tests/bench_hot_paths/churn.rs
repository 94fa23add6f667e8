//! The churn run: claim latency and buffers per claim over time, table and
//! index sizes, dead tuples and the share of HOT updates, for each way of
//! keeping `jobs` clean that is compared (the variants).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::designs::{Design, FUTURE_AHEAD, drop_schema, seed};
use crate::explain::Explainer;
use crate::latency::{Recorder, ms};
use crate::maintenance::{Maintainer, Policy};
use crate::pool::{self, Conn, Limit, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

pub const CHURN_QUEUE: &str = "bench";

// ---------------------------------------------------------------------------
// The variants

/// What keeps `jobs` clean in one churn run.
#[derive(Debug, Clone)]
pub struct Variant {
    /// Its name in `ALKSTORE_BENCH_CHURN_VARIANTS` and the report.
    pub name: &'static str,
    /// Storage parameters on `jobs` (reloptions form); nothing else is set.
    pub reloptions: Vec<String>,
    /// Server settings set with `ALTER SYSTEM` for the run, reset after.
    pub server: Vec<(&'static str, &'static str)>,
    /// The engine's maintenance step, run on its own connection.
    pub maintenance: Option<Policy>,
}

impl Variant {
    pub fn about(&self) -> String {
        let mut parts = vec![if self.reloptions.is_empty() {
            "no storage parameters".to_owned()
        } else {
            self.reloptions.join(", ")
        }];
        for (name, value) in &self.server {
            parts.push(format!("server {name} = {value}"));
        }
        if let Some(policy) = self.maintenance {
            parts.push(format!("the engine runs {}", policy.describe()));
        }
        parts.join("; ")
    }
}

/// The clock the time-driven maintenance variant runs on.
pub const VACUUM_EVERY: Duration = Duration::from_secs(1);

/// Claims between two runs of the claim-driven maintenance variant.
pub const VACUUM_EVERY_CLAIMS: u64 = 2_000;

/// The `autovacuum_naptime` of the naptime variants (the server's default is
/// 1 min).
const NAPTIME: &str = "1s";

/// Every variant the churn run knows, by name.
pub fn variants() -> Vec<Variant> {
    let declared = product::declared_storage();
    let mut unthrottled = declared.clone();
    unthrottled.push("autovacuum_vacuum_cost_delay=0".to_owned());
    vec![
        Variant {
            name: "defaults",
            reloptions: Vec::new(),
            server: Vec::new(),
            maintenance: None,
        },
        Variant {
            name: "declared",
            reloptions: declared.clone(),
            server: Vec::new(),
            maintenance: None,
        },
        Variant {
            name: "naptime",
            reloptions: declared.clone(),
            server: vec![("autovacuum_naptime", NAPTIME)],
            maintenance: None,
        },
        Variant {
            name: "naptime-unthrottled",
            reloptions: unthrottled,
            server: vec![("autovacuum_naptime", NAPTIME)],
            maintenance: None,
        },
        Variant {
            name: "vacuum-clock",
            reloptions: declared.clone(),
            server: Vec::new(),
            maintenance: Some(Policy::Every(VACUUM_EVERY)),
        },
        Variant {
            name: "vacuum-claims",
            reloptions: declared,
            server: Vec::new(),
            maintenance: Some(Policy::EveryClaims(VACUUM_EVERY_CLAIMS)),
        },
    ]
}

/// The variants this run compares (`ALKSTORE_BENCH_CHURN_VARIANTS`, or the
/// scale's).
pub fn chosen(names: &[String]) -> Vec<Variant> {
    let all = variants();
    names
        .iter()
        .map(|name| {
            all.iter()
                .find(|v| v.name == name)
                .cloned()
                .unwrap_or_else(|| {
                    panic!(
                        "ALKSTORE_BENCH_CHURN_VARIANTS: {name:?} is not one of {:?}",
                        all.iter().map(|v| v.name).collect::<Vec<_>>()
                    )
                })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The clients

pub struct ChurnWorker {
    conn: Conn,
    schema: SchemaName,
    worker: String,
    n: u64,
    started: Instant,
    window: Duration,
    total: Duration,
    sample: Duration,
    first: Recorder,
    last: Recorder,
    /// One recorder per sample interval.
    series: Vec<Recorder>,
    /// The engine's count of claimed jobs, for a claim-driven maintenance step.
    claims: Arc<AtomicU64>,
}

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
        let claim = product::claim_path(&self.schema, CHURN_QUEUE, now, &self.worker, 1, true);
        let rows = self
            .conn
            .pipeline(&claim)
            .await
            .map_err(|e| db_error("claim", &e))?;
        let took = claim_started.elapsed();
        let at = claim_started - self.started;
        if at < self.window {
            self.first.record(took);
        }
        if at + self.window >= self.total {
            self.last.record(took);
        }
        let slot = (at.as_secs_f64() / self.sample.as_secs_f64()) as usize;
        if let Some(recorder) = self.series.get_mut(slot) {
            recorder.record(took);
        }
        let claimed = product::claimed(rows.last().map_or(&[][..], Vec::as_slice))?;
        self.claims
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        let stmts = match claimed.first() {
            None => Vec::new(),
            Some(job) if n.is_multiple_of(4) => vec![product::retry(
                &self.schema,
                job,
                &self.worker,
                now + 1 + (n % 30) as i64,
                "POST https://hooks.example.test/endpoint: 503",
                now,
            )],
            Some(_) => {
                let run_at = if n % 10 < 7 {
                    now
                } else {
                    now + 5 + (n % 56) as i64
                };
                let payload = format!(r#"{{"n":{n}}}"#).into_bytes();
                vec![
                    product::ack(&self.schema, &claimed, &self.worker),
                    product::enqueue(&self.schema, CHURN_QUEUE, &[payload], run_at, now),
                ]
            }
        };
        self.conn
            .pipeline(&stmts)
            .await
            .map_err(|e| db_error("ack, enqueue or retry", &e))?;
        Ok(claimed.len() as u64)
    }
}

// ---------------------------------------------------------------------------
// What is measured

#[derive(Debug, Clone, Default)]
pub struct TableStats {
    pub table_bytes: i64,
    pub indexes: Vec<(String, i64)>,
    pub updates: i64,
    pub hot_updates: i64,
    pub dead: i64,
    pub live: i64,
    pub autovacuums: i64,
    pub vacuums: i64,
}

pub async fn table_stats(admin: &Client, schema: &SchemaName) -> TableStats {
    let relation = format!("{schema}.jobs");
    let row = admin
        .query_one(
            &format!(
                "SELECT pg_relation_size($1::text::regclass), n_tup_upd, n_tup_hot_upd, \
                 n_dead_tup, (SELECT count(*) FROM {relation}), autovacuum_count, vacuum_count \
                 FROM pg_stat_user_tables WHERE relid = $1::text::regclass"
            ),
            &[&relation],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("table stats", &e)));
    let indexes = index_sizes(admin, &relation).await;
    TableStats {
        table_bytes: row.get(0),
        indexes,
        updates: row.get(1),
        hot_updates: row.get(2),
        dead: row.get(3),
        live: row.get(4),
        autovacuums: row.get(5),
        vacuums: row.get(6),
    }
}

async fn index_sizes(admin: &Client, relation: &str) -> Vec<(String, i64)> {
    admin
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
        .collect()
}

/// One point of the time series, taken by the sampler.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the churn started.
    pub at: f64,
    /// Buffers one claim read (median of three EXPLAIN runs).
    pub buffers: u64,
    /// ... of them in each statement of the claim path.
    pub steps: Vec<u64>,
    pub dead: i64,
    /// Vacuums of `jobs` so far in the run (autovacuum and the engine's).
    pub vacuums: i64,
}

/// Buffers one claim reads now (median of the EXPLAIN runs; each claims a
/// job for real): the load-free measure of what churn did to the indexes.
async fn claim_buffers(
    explainer: &mut Explainer,
    schema: &SchemaName,
    warmup: usize,
    runs: usize,
) -> (u64, Vec<u64>) {
    let work = explainer
        .median(
            || product::claim_path(schema, CHURN_QUEUE, unix_now(), "bench-explain", 1, true),
            warmup,
            runs,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (work.buffers, work.steps)
}

async fn sample(
    explainer: &mut Explainer,
    stats: &Client,
    schema: &SchemaName,
    at: f64,
    vacuums_before: i64,
) -> Sample {
    let (buffers, steps) = claim_buffers(explainer, schema, 0, 3).await;
    let relation = format!("{schema}.jobs");
    let row = stats
        .query_one(
            "SELECT n_dead_tup, autovacuum_count + vacuum_count \
             FROM pg_stat_user_tables WHERE relid = $1::text::regclass",
            &[&relation],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("sample stats", &e)));
    Sample {
        at,
        buffers,
        steps,
        dead: row.get(0),
        vacuums: row.get::<_, i64>(1) - vacuums_before,
    }
}

pub struct ChurnResult {
    pub variant: Variant,
    pub reloptions: String,
    pub first: Recorder,
    pub last: Recorder,
    pub series: Vec<Recorder>,
    pub samples: Vec<Sample>,
    pub jobs_per_s: f64,
    pub before: TableStats,
    pub after: TableStats,
    /// Buffers per claim before and after the churn.
    pub buffers: (u64, u64),
    /// The engine's maintenance runs: how long each took, and how many were
    /// skipped (lock not available).
    pub maintenance: Recorder,
    pub maintenance_skipped: u64,
}

/// Every chosen variant, one after the other.
pub async fn run(admin: &mut Client, scale: &Scale) -> Vec<ChurnResult> {
    let mut out = Vec::new();
    for variant in chosen(&scale.churn_variants) {
        out.push(churn_variant(admin, scale, &variant).await);
    }
    out
}

async fn set_server(admin: &Client, settings: &[(&str, &str)], reset: bool) {
    for (name, value) in settings {
        let sql = if reset {
            format!("ALTER SYSTEM RESET {name}")
        } else {
            format!(
                "ALTER SYSTEM SET {name} = {}",
                schema_gen::render::quote_literal(value)
            )
        };
        exec(admin, &sql).await;
    }
    if !settings.is_empty() {
        exec(admin, "SELECT pg_reload_conf()").await;
        // The launcher rereads its configuration on the signal; give it a
        // moment before the clock starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn churn_variant(admin: &mut Client, scale: &Scale, variant: &Variant) -> ChurnResult {
    progress(&format!("churn: {}: seeding", variant.name));
    let schema = Design::Product.create(admin, "bench_churn").await;
    // Whatever the model declares is reset first, so each variant has exactly
    // the options it names.
    exec(
        admin,
        &format!(
            "ALTER TABLE {schema}.jobs RESET (fillfactor, autovacuum_vacuum_scale_factor, \
             autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor, \
             autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, \
             autovacuum_vacuum_cost_delay)"
        ),
    )
    .await;
    if !variant.reloptions.is_empty() {
        exec(
            admin,
            &format!(
                "ALTER TABLE {schema}.jobs SET ({})",
                variant.reloptions.join(", ")
            ),
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
    let mut explainer = Explainer::open().await;
    let (buffers_before, _) = claim_buffers(
        &mut explainer,
        &schema,
        scale.explain_warmup,
        scale.explain_runs,
    )
    .await;
    set_server(admin, &variant.server, false).await;
    progress(&format!(
        "churn: {}: {} clients for {:.0} s ({})",
        variant.name,
        scale.churn_clients,
        scale.churn_time.as_secs_f64(),
        variant.about()
    ));
    let slots = (scale.churn_time.as_secs_f64() / scale.churn_sample.as_secs_f64()).ceil() as usize;
    let maintainer = variant
        .maintenance
        .map(|policy| Maintainer::start(&schema, policy));
    let claims = maintainer
        .as_ref()
        .map_or_else(|| Arc::new(AtomicU64::new(0)), Maintainer::claims);
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
            sample: scale.churn_sample,
            first: Recorder::new(),
            last: Recorder::new(),
            series: (0..slots).map(|_| Recorder::new()).collect(),
            claims: claims.clone(),
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The sampler: buffers per claim and the table's state every interval.
    let sampler = {
        let schema = schema.clone();
        let stop = stop.clone();
        let interval = scale.churn_sample;
        let vacuums_before = before.autovacuums + before.vacuums;
        tokio::spawn(async move {
            let stats = harness::connect().await;
            let mut samples = Vec::new();
            let mut k = 1;
            loop {
                // Somewhere inside the k-th interval, not at its end: a
                // sample taken in step with a periodic vacuum would always
                // see the same moment of its cycle.
                let phase =
                    0.1 + 0.8 * (((k as u64).wrapping_mul(2_654_435_761) % 1000) as f64 / 1000.0);
                let due = started + interval.mul_f64((k - 1) as f64 + phase);
                tokio::time::sleep_until(due.into()).await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let at = started.elapsed().as_secs_f64();
                samples.push(sample(&mut explainer, &stats, &schema, at, vacuums_before).await);
                k += 1;
            }
            (samples, explainer)
        })
    };
    let run = pool::run(workers, Limit::time(scale.churn_time)).await;
    stop.store(true, Ordering::Relaxed);
    let jobs_per_s = run.jobs_per_second();
    let first = Recorder::merged(&run.workers, |w| &w.first);
    let last = Recorder::merged(&run.workers, |w| &w.last);
    let series: Vec<Recorder> = (0..slots)
        .map(|slot| Recorder::merged(&run.workers, |w| &w.series[slot]))
        .collect();
    // Closing the clients flushes their statistics; the server publishes
    // them within a second.
    drop(run);
    let (samples, mut explainer) = sampler
        .await
        .unwrap_or_else(|e| panic!("churn sampler: {e}"));
    let (maintenance, maintenance_skipped) = match maintainer {
        Some(maintainer) => {
            let runs = maintainer.stop().await;
            (runs.durations, runs.skipped)
        }
        None => (Recorder::new(), 0),
    };
    let (buffers_after, steps_after) = claim_buffers(
        &mut explainer,
        &schema,
        scale.explain_warmup,
        scale.explain_runs,
    )
    .await;
    progress(&format!(
        "churn: {}: buffers per claim after: {buffers_after} {steps_after:?}",
        variant.name
    ));
    set_server(admin, &variant.server, true).await;
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
        variant: variant.clone(),
        reloptions: reloptions.map_or("(none)".to_owned(), |o| o.join(", ")),
        first,
        last,
        series,
        samples,
        jobs_per_s,
        before,
        after,
        buffers: (buffers_before, buffers_after),
        maintenance,
        maintenance_skipped,
    }
}

// ---------------------------------------------------------------------------
// The report

pub fn kib(bytes: i64) -> String {
    if bytes >= 10 * 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / 1024.0 / 1024.0)
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

pub fn report(report: &mut Report, churns: &[ChurnResult], scale: &Scale) {
    report.heading("Churn");
    report.para(&format!(
        "{} clients for {:.0} s on a backlog of {} jobs ({}). One step: claim one job, then \
         (1 in 4) retry it 1..30 s later, or ack it and enqueue a new one in its place (7 in \
         10 due at once, the rest 5..60 s ahead), so the live jobs stay at the backlog's count. \
         First and last window: {:.0} s each. Buffers per claim: median of three EXPLAIN \
         (ANALYZE, BUFFERS) runs of the claim path every {:.0} s (before and after: of {}).",
        scale.churn_clients,
        scale.churn_time.as_secs_f64(),
        count(scale.churn_backlog),
        FUTURE_AHEAD.about,
        scale.churn_window.as_secs_f64(),
        scale.churn_sample.as_secs_f64(),
        scale.explain_runs,
    ));
    let mut variants = Table::new(&[
        "variant",
        "storage parameters on jobs (as the server reports them)",
        "server settings",
        "engine maintenance",
    ]);
    for c in churns {
        variants.row(vec![
            c.variant.name.to_owned(),
            c.reloptions.clone(),
            c.variant
                .server
                .iter()
                .map(|(name, value)| format!("{name} = {value}"))
                .collect::<Vec<_>>()
                .join(", "),
            c.variant
                .maintenance
                .map_or(String::new(), Policy::describe),
        ]);
    }
    report.table(&variants);
    let mut table = Table::new(&[
        "variant",
        "jobs / s>",
        "claim p50 first>",
        "p50 last>",
        "last / first>",
        "p99 first>",
        "p99 last>",
        "buffers / claim before, median during, max during, after>",
        "vacuums (auto + engine)>",
        "engine vacuum p50 / max>",
        "heap before -> after>",
        "indexes before -> after",
        "dead tuples at the end>",
        "HOT updates>",
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
        let mut during: Vec<u64> = c.samples.iter().map(|s| s.buffers).collect();
        during.sort_unstable();
        let median = during.get(during.len() / 2).copied().unwrap_or(0);
        let max = during.last().copied().unwrap_or(0);
        table.row(vec![
            c.variant.name.to_owned(),
            format!("{:.0}", c.jobs_per_s),
            ms(c.first.p50_ms()),
            ms(c.last.p50_ms()),
            times(ratio(c.last.p50_ms(), c.first.p50_ms())),
            ms(c.first.p99_ms()),
            ms(c.last.p99_ms()),
            format!("{}, {median}, {max}, {}", c.buffers.0, c.buffers.1),
            format!(
                "{} + {}",
                c.after.autovacuums - c.before.autovacuums,
                c.after.vacuums - c.before.vacuums
            ),
            if c.maintenance.count() > 0 {
                format!(
                    "{} / {} ({} runs, {} skipped)",
                    ms(c.maintenance.p50_ms()),
                    ms(c.maintenance.quantile_ms(1.0)),
                    c.maintenance.count(),
                    c.maintenance_skipped
                )
            } else {
                String::new()
            },
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
        ]);
        let r = ratio(c.last.p50_ms(), c.first.p50_ms());
        report.verdict(
            format!(
                "churn ({}): last-window claim p50 <= 1.2x first-window",
                c.variant.name
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

    // Over time: buffers per claim, claim p50 in the interval, dead tuples.
    report.para(&format!(
        "Over time, every {:.0} s: buffers one claim read / claim p50 in the interval / dead \
         tuples / vacuums of jobs so far.",
        scale.churn_sample.as_secs_f64()
    ));
    let mut headers = vec!["at>".to_owned()];
    headers.extend(churns.iter().map(|c| format!("{}>", c.variant.name)));
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut series = Table::new(&header_refs);
    let rows = churns.iter().map(|c| c.samples.len()).max().unwrap_or(0);
    for k in 0..rows {
        let at = churns
            .iter()
            .find_map(|c| c.samples.get(k))
            .map_or(0.0, |s| s.at);
        let mut row = vec![format!("{at:.0} s")];
        for c in churns {
            row.push(match c.samples.get(k) {
                Some(s) => format!(
                    "{} {:?} / {} / {} / {}",
                    s.buffers,
                    s.steps,
                    ms(c.series.get(k).and_then(Recorder::p50_ms)),
                    s.dead,
                    s.vacuums
                ),
                None => String::new(),
            });
        }
        series.row(row);
    }
    report.table(&series);
}
