//! The churn run: claim latency in the first and last window, table and
//! index sizes, dead tuples and the share of HOT updates, for the default and
//! the tuned storage parameters.

use std::time::{Duration, Instant};

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::designs::{Design, FUTURE_AHEAD, drop_schema, seed};
use crate::explain::Explainer;
use crate::latency::{Recorder, ms};
use crate::pool::{self, Conn, Limit, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

pub struct ChurnWorker {
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

/// Both variants, one after the other.
pub async fn run(admin: &mut Client, scale: &Scale) -> Vec<ChurnResult> {
    let mut out = Vec::new();
    for (variant, options) in variants() {
        out.push(churn_variant(admin, scale, &variant, &options).await);
    }
    out
}

pub const CHURN_QUEUE: &str = "bench";

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

#[derive(Debug, Clone, Default)]
pub struct TableStats {
    pub table_bytes: i64,
    pub indexes: Vec<(String, i64)>,
    pub updates: i64,
    pub hot_updates: i64,
    pub dead: i64,
    pub live: i64,
    pub autovacuums: i64,
}

pub async fn table_stats(admin: &Client, schema: &SchemaName) -> TableStats {
    let relation = format!("{schema}.jobs");
    let row = admin
        .query_one(
            &format!(
                "SELECT pg_relation_size($1::text::regclass), n_tup_upd, n_tup_hot_upd, \
                 n_dead_tup, (SELECT count(*) FROM {relation}), autovacuum_count \
                 FROM pg_stat_user_tables WHERE relid = $1::text::regclass"
            ),
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

pub struct ChurnResult {
    pub variant: String,
    pub reloptions: String,
    pub first: Recorder,
    pub last: Recorder,
    pub all: Recorder,
    pub jobs_per_s: f64,
    pub before: TableStats,
    pub after: TableStats,
    /// Buffers per claim before and after the churn.
    pub buffers: (u64, u64),
}

/// The storage parameters compared in the churn run: the defaults, and the
/// product's declared ones (or, while it declares none, the candidates).
fn variants() -> Vec<(String, Vec<String>)> {
    let declared = product::declared_storage();
    let mut with_fillfactor = declared.clone();
    with_fillfactor.push("fillfactor=70".to_owned());
    vec![
        ("defaults".to_owned(), Vec::new()),
        ("the product's declared".to_owned(), declared),
        ("declared + fillfactor 70".to_owned(), with_fillfactor),
    ]
}

/// Buffers one claim reads now (median of the EXPLAIN runs; each claims a
/// job for real): the load-free measure of what churn did to the indexes.
async fn claim_buffers(schema: &SchemaName, scale: &Scale) -> u64 {
    let mut explainer = Explainer::open().await;
    explainer
        .median(
            || product::claim_path(schema, CHURN_QUEUE, unix_now(), "bench-explain", 1),
            scale.explain_warmup,
            scale.explain_runs,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .buffers
}

async fn churn_variant(
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
    let buffers_before = claim_buffers(&schema, scale).await;
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
    let first = Recorder::merged(&run.workers, |w| &w.first);
    let last = Recorder::merged(&run.workers, |w| &w.last);
    let all = Recorder::merged(&run.workers, |w| &w.all);
    // Closing the clients flushes their statistics; the server publishes
    // them within a second.
    drop(run);
    let buffers_after = claim_buffers(&schema, scale).await;
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
        buffers: (buffers_before, buffers_after),
    }
}

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
        "buffers / claim before -> after>",
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
            format!("{} -> {}", c.buffers.0, c.buffers.1),
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
