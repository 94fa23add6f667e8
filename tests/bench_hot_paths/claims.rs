//! Claims at scale: claim latency and buffers per claim for each design,
//! size and mix; polls of a queue holding only not-yet-due jobs and of an
//! empty queue.

use std::time::Instant;

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::designs::{
    Design, FUTURE_AHEAD, FUTURE_AHEAD_FEW_PRIORITIES, IDLE, MOSTLY_CLAIMED, Mix, NORMAL,
    drop_schema, seed,
};
use crate::explain::{Explainer, Work};
use crate::latency::{Recorder, ms};
use crate::pool::{self, Conn, Limit, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::{Scale, count, progress, ratio, times, unix_now};

/// Everything measured on claims.
pub struct Measured {
    pub claims: Vec<ClaimResult>,
    pub polls: Vec<PollResult>,
    /// Whether the rejected designs (a) and (c) were measured.
    pub rejected: bool,
}

/// Claims at every size: the product on every mix (`product`), the rejected
/// alternatives on the hostile one (`rejected`); then the polls.
pub async fn run(admin: &mut Client, scale: &Scale, product: bool, rejected: bool) -> Measured {
    let mut claims = Vec::new();
    let mut designs = Vec::new();
    if product {
        for mix in [NORMAL, FUTURE_AHEAD, MOSTLY_CLAIMED] {
            claims.extend(claim_group(admin, scale, Design::Product, mix).await);
        }
        designs.push(Design::Product);
    }
    if rejected {
        for design in [Design::Base, Design::SkipScan] {
            claims.extend(claim_group(admin, scale, design, FUTURE_AHEAD).await);
        }
        claims
            .extend(claim_group(admin, scale, Design::SkipScan, FUTURE_AHEAD_FEW_PRIORITIES).await);
        designs.extend([Design::Base, Design::SkipScan]);
    }
    let mut polls = Vec::new();
    for &size in &scale.sizes {
        polls.extend(poll_cases(admin, scale, size, &designs).await);
    }
    Measured {
        claims,
        polls,
        rejected,
    }
}

/// The claim, design and poll sections, and their targets.
pub fn report(report: &mut Report, measured: &Measured, scale: &Scale) {
    let small = scale.sizes[0];
    let large = scale.sizes[scale.sizes.len() - 1];
    claims_report(report, &measured.claims, small, large);
    if measured.rejected {
        design_report(report, &measured.claims, &measured.polls, small, large);
    }
    polls_report(report, &measured.polls);
}

pub struct ClaimWorker {
    conn: Conn,
    design: Design,
    schema: SchemaName,
    queue: String,
    worker: String,
    latency: Recorder,
}

impl ClaimWorker {
    pub async fn new(design: Design, schema: &SchemaName, queue: &str, index: usize) -> Self {
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
        // Prepared once per connection, outside the timing.
        self.conn
            .prepare_all(&stmts)
            .await
            .map_err(|e| db_error("prepare claim", &e))?;
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

/// Timed claims on one table: its clients stay connected across rounds.
pub struct Timed {
    workers: Vec<ClaimWorker>,
    pub steps: u64,
    pub empty: u64,
}

impl Timed {
    async fn new(design: Design, schema: &SchemaName, queue: &str, clients: usize) -> Self {
        let mut workers = Vec::new();
        for index in 0..clients {
            workers.push(ClaimWorker::new(design, schema, queue, index).await);
        }
        Self {
            workers,
            steps: 0,
            empty: 0,
        }
    }

    async fn round(&mut self, limit: Limit) {
        let run = pool::run(std::mem::take(&mut self.workers), limit).await;
        self.steps += run.steps;
        self.empty += run.empty_steps;
        self.workers = run.workers;
    }

    pub fn latency(&self) -> Recorder {
        Recorder::merged(&self.workers, |w| &w.latency)
    }
}

pub struct ClaimResult {
    pub design: Design,
    pub mix: Mix,
    pub size: u64,
    pub work: Work,
    pub one: Recorder,
    pub eight: Recorder,
    pub steps: (u64, u64),
    pub empty: u64,
}

/// Rounds the timed claims are split into: every size's table is measured
/// in every round, in turn, so a change in the machine's load during the run
/// falls on all sizes alike and the size ratios stay fair.
const ROUNDS: u64 = 4;

/// One design and mix at every size: all tables seeded first, then warmed
/// up, explained, and timed in interleaved rounds.
pub async fn claim_group(
    admin: &mut Client,
    scale: &Scale,
    design: Design,
    mix: Mix,
) -> Vec<ClaimResult> {
    let queue = "bench";
    let mut tables = Vec::new();
    for &size in &scale.sizes {
        progress(&format!(
            "claims: {} / {} / {} jobs: seeding",
            design.label(),
            mix.name,
            count(size)
        ));
        let schema = design.create(admin, "bench_claim").await;
        seed(admin, design, &schema, queue, size, &mix, unix_now()).await;
        tables.push((size, schema));
    }
    // The seeding's dirty pages flushed now, not by a checkpoint during the
    // measurement.
    crate::exec(admin, "CHECKPOINT").await;
    progress(&format!(
        "claims: {} / {}: measuring",
        design.label(),
        mix.name
    ));
    let mut measured = Vec::new();
    for (_, schema) in &tables {
        let mut warmup = Timed::new(design, schema, queue, 1).await;
        warmup
            .round(Limit {
                steps: scale.claim_warmup,
                time: scale.claim_time,
            })
            .await;
        let mut explainer = Explainer::open().await;
        let work = explainer
            .median(
                || design.claim_path(schema, queue, unix_now(), "bench-explain", 1),
                scale.explain_warmup,
                scale.explain_runs,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let one = Timed::new(design, schema, queue, 1).await;
        let eight = Timed::new(design, schema, queue, 8).await;
        measured.push((work, one, eight));
    }
    for _ in 0..ROUNDS {
        for (_, one, _) in &mut measured {
            one.round(Limit {
                steps: scale.claims_one.div_ceil(ROUNDS),
                time: scale.claim_time / ROUNDS as u32,
            })
            .await;
        }
        for (_, _, eight) in &mut measured {
            eight
                .round(Limit {
                    steps: scale.claims_eight.div_ceil(ROUNDS),
                    time: scale.claim_time / ROUNDS as u32,
                })
                .await;
        }
    }
    let mut out = Vec::new();
    for ((size, schema), (work, one, eight)) in tables.into_iter().zip(measured) {
        out.push(ClaimResult {
            design,
            mix,
            size,
            work,
            one: one.latency(),
            eight: eight.latency(),
            steps: (one.steps, eight.steps),
            empty: one.empty + eight.empty,
        });
        drop((one, eight));
        drop_schema(admin, schema.as_str()).await;
    }
    out
}

/// Polls of a queue holding only not-yet-due jobs and of an empty queue, on
/// the same table: buffers (median of the EXPLAIN runs).
pub struct PollResult {
    pub design: Design,
    pub size: u64,
    pub idle: Work,
    pub empty: Work,
}

pub async fn poll_cases(
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

pub fn claim_rows<'a>(
    claims: &'a [ClaimResult],
    design: Design,
    mix: &Mix,
) -> Vec<&'a ClaimResult> {
    claims
        .iter()
        .filter(|c| c.design == design && c.mix.name == mix.name)
        .collect()
}

pub fn claims_report(report: &mut Report, claims: &[ClaimResult], small: u64, large: u64) {
    report.heading(&format!(
        "Claim at scale: {} (claim path: {})",
        product::LABEL,
        product::claim_path_names().join(" -> ")
    ));
    let mut table = claim_table("mix");
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
            let r = ratio(ls.p50_ms(), ss.p50_ms());
            report.verdict(
                format!(
                    "claim p50 at {} <= 1.3x at {} ({}, {clients})",
                    count(large),
                    count(small),
                    mix.name
                ),
                format!("{} vs {}: {}", ms(ls.p50_ms()), ms(ss.p50_ms()), times(r)),
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
pub const FLAT_BUFFERS: i64 = 10;

/// The table [`claim_cells`] fills: its first column is `first` (the mix, or
/// the design).
fn claim_table(first: &str) -> Table {
    Table::new(&[
        first,
        "jobs>",
        "buffers / claim>",
        "rows removed>",
        "indexes",
        "1 client p50>",
        "p99>",
        "8 clients p50>",
        "p99>",
        "claims (1 / 8)>",
    ])
}

pub fn claim_cells(c: &ClaimResult, with_mix: bool) -> Vec<String> {
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
        ms(c.one.p50_ms()),
        ms(c.one.p99_ms()),
        ms(c.eight.p50_ms()),
        ms(c.eight.p99_ms()),
    ];
    let empty = c.empty;
    cells.push(if empty > 0 {
        format!("{} / {} ({empty} found none)", c.steps.0, c.steps.1)
    } else {
        format!("{} / {}", c.steps.0, c.steps.1)
    });
    cells
}

pub fn design_report(
    report: &mut Report,
    claims: &[ClaimResult],
    polls: &[PollResult],
    small: u64,
    large: u64,
) {
    report.heading(&format!("Design comparison: {}", FUTURE_AHEAD.name));
    report.para(&format!("Mix: {}.", FUTURE_AHEAD.about));
    let mut table = claim_table("design");
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
                times(ratio(l.one.p50_ms(), s.one.p50_ms())),
                poll,
            ]);
        }
    }
    report.para(&format!("From {} to {} jobs:", count(small), count(large)));
    report.table(&growth);
}

pub fn polls_report(report: &mut Report, polls: &[PollResult]) {
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
pub const POLL_CONSTANT: i64 = 5;
