//! The claim designs measured, and the data they are measured on.
//!
//! - **(b) the product**: whatever `schema_gen::statements` ships, run through
//!   the product's own statement functions (`product.rs`).
//! - **(a) the base design** as committed on main at 392e104: claim index
//!   `jobs_claim_idx (queue, priority DESC, run_at, id) WHERE claimed_at IS
//!   NULL`, the claim filtering `run_at <= now` inside the index scan.
//! - **(c) a skip scan over priorities** on that same base schema: a recursive
//!   CTE walks the distinct priorities of the queue's claimable jobs (one index
//!   descent each) and a LATERAL probe takes the due jobs of each priority
//!   (`priority = p AND run_at <= now`, a bounded range), highest first.
//!
//! (a) and (c) are **rejected alternatives the product does not ship**: their
//! DDL and SQL live here, hand-written, only so that the comparison can be
//! re-run. Seeding is hand-written bulk SQL (`generate_series`) for every
//! design alike.

use std::time::{Duration, Instant};

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::pool::{Param, Stmt};
use crate::{exec, product};

/// The `jobs` table of the base design (a), exactly as main at 392e104
/// rendered it (`schema-gen sql`), with its three indexes. Comments left out.
const BASE_JOBS_DDL: &str = r#"
CREATE TABLE {s}.jobs (
    id bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
    run_at bigint NOT NULL,
    expires_at bigint NULL,
    enqueued_at bigint NOT NULL,
    visibility_timeout_s bigint NOT NULL,
    max_attempts integer NOT NULL,
    backoff_base_s bigint NOT NULL,
    dead_letter_retention_s bigint NOT NULL,
    attempts integer NOT NULL,
    worker_id text NULL,
    claimed_at bigint NULL,
    claim_expires_at bigint NULL,
    last_error text NULL,
    PRIMARY KEY (id),
    CONSTRAINT jobs_queue_not_empty CHECK (queue <> ''),
    CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT jobs_max_attempts_at_least_one CHECK (max_attempts >= 1),
    CONSTRAINT jobs_visibility_timeout_positive CHECK (visibility_timeout_s > 0),
    CONSTRAINT jobs_backoff_base_not_negative CHECK (backoff_base_s >= 0),
    CONSTRAINT jobs_dead_letter_retention_positive CHECK (dead_letter_retention_s > 0),
    CONSTRAINT jobs_claim_columns_together CHECK ((worker_id IS NULL AND claimed_at IS NULL AND claim_expires_at IS NULL) OR (worker_id IS NOT NULL AND claimed_at IS NOT NULL AND claim_expires_at IS NOT NULL)),
    CONSTRAINT jobs_claim_expires_after_claim CHECK (claim_expires_at >= claimed_at)
);
CREATE INDEX jobs_claim_idx ON {s}.jobs (queue, priority DESC, run_at, id) WHERE claimed_at IS NULL;
CREATE INDEX jobs_claim_expiry_idx ON {s}.jobs (claim_expires_at) WHERE claim_expires_at IS NOT NULL;
CREATE INDEX jobs_expiry_idx ON {s}.jobs (expires_at) WHERE expires_at IS NOT NULL;
"#;

/// `CREATE SCHEMA` plus the base design's `jobs` table in it.
pub fn base_schema_ddl(schema: &str) -> String {
    format!(
        "CREATE SCHEMA {schema};\n{}",
        BASE_JOBS_DDL.replace("{s}", schema)
    )
}

/// The columns every claim returns: the whole job row.
const RETURNED: &str = "id, queue, payload, priority, run_at, expires_at, enqueued_at, \
     visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, attempts, \
     worker_id, claimed_at, claim_expires_at, last_error";

/// (a) The base claim: the first `limit` claimable jobs in claim order whose
/// `run_at` has come, taken in the same statement; the product's claim
/// statement without its `ready` condition (same shape, same RETURNING).
/// `$1` queue, `$2` now, `$3` worker, `$4` limit.
pub fn base_claim(schema: &str, queue: &str, now: i64, worker: &str, limit: i64) -> Stmt {
    Stmt::new(
        format!(
            "UPDATE {schema}.jobs SET worker_id = $3, claimed_at = $2, \
             claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
             WHERE id = ANY(ARRAY(SELECT id FROM {schema}.jobs \
             WHERE queue = $1 AND claimed_at IS NULL AND run_at <= $2 \
             ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)) \
             RETURNING {RETURNED}"
        ),
        claim_params(queue, now, worker, limit),
    )
}

/// (c) The skip scan over priorities, on the base schema. Same parameters as
/// [`base_claim`]. The rows come out in claim order without a sort: the
/// recursive CTE yields priorities highest first and each LATERAL probe its
/// jobs by `run_at, id`.
pub fn skip_scan_claim(schema: &str, queue: &str, now: i64, worker: &str, limit: i64) -> Stmt {
    Stmt::new(
        format!(
            "WITH RECURSIVE priorities (priority) AS ( \
                 (SELECT priority FROM {schema}.jobs \
                  WHERE queue = $1 AND claimed_at IS NULL \
                  ORDER BY priority DESC LIMIT 1) \
               UNION ALL \
                 SELECT (SELECT j.priority FROM {schema}.jobs j \
                         WHERE j.queue = $1 AND j.claimed_at IS NULL AND j.priority < p.priority \
                         ORDER BY j.priority DESC LIMIT 1) \
                 FROM priorities p WHERE p.priority IS NOT NULL \
             ), next AS ( \
                 SELECT c.id FROM priorities p CROSS JOIN LATERAL ( \
                     SELECT j.id FROM {schema}.jobs j \
                     WHERE j.queue = $1 AND j.claimed_at IS NULL \
                       AND j.priority = p.priority AND j.run_at <= $2 \
                     ORDER BY j.run_at, j.id LIMIT $4 FOR UPDATE SKIP LOCKED) c \
                 WHERE p.priority IS NOT NULL \
                 LIMIT $4 \
             ) \
             UPDATE {schema}.jobs SET worker_id = $3, claimed_at = $2, \
             claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
             WHERE id = ANY(ARRAY(SELECT id FROM next)) \
             RETURNING {RETURNED}"
        ),
        claim_params(queue, now, worker, limit),
    )
}

fn claim_params(queue: &str, now: i64, worker: &str, limit: i64) -> Vec<Param> {
    vec![
        Param::Text(queue.to_owned()),
        Param::Int(now),
        Param::Text(worker.to_owned()),
        Param::Int(limit),
    ]
}

/// A job mix: the share of each kind of job, by id, interleaved.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub name: &'static str,
    /// What it stands for, for the report.
    pub about: &'static str,
    /// Percent of jobs not yet due (`run_at` at least an hour ahead), at
    /// priorities above every due job's: half scheduled, half retries in
    /// backoff (attempts > 0, `last_error` set).
    pub future_pct: u64,
    /// Percent of jobs claimed by a worker (claim valid for an hour).
    pub claimed_pct: u64,
    /// Distinct priorities among the not-yet-due jobs.
    pub future_priorities: u64,
    /// Distinct priorities among the due and claimed jobs (0 .. n-1).
    pub due_priorities: u64,
}

pub const NORMAL: Mix = Mix {
    name: "normal",
    about: "every job due, 10 priorities",
    future_pct: 0,
    claimed_pct: 0,
    future_priorities: 1,
    due_priorities: 10,
};

/// A webhook relay whose endpoints are down: most jobs are retries in backoff
/// or scheduled, at higher priorities than the few due ones.
pub const FUTURE_AHEAD: Mix = Mix {
    name: "hostile: not-yet-due ahead",
    about: "80% not yet due (half scheduled, half retries in backoff) at 1,000 distinct \
            priorities above the due ones; 20% due at 5 priorities",
    future_pct: 80,
    claimed_pct: 0,
    future_priorities: 1000,
    due_priorities: 5,
};

/// The same, with only 10 distinct priorities among the not-yet-due jobs: the
/// skip scan's best case.
pub const FUTURE_AHEAD_FEW_PRIORITIES: Mix = Mix {
    name: "hostile: not-yet-due ahead, 10 priorities",
    about: "as above, with the not-yet-due jobs at 10 distinct priorities",
    future_priorities: 10,
    ..FUTURE_AHEAD
};

pub const MOSTLY_CLAIMED: Mix = Mix {
    name: "hostile: most claimed",
    about: "70% claimed, 10% not yet due ahead of the due ones (1,000 priorities), 20% due",
    future_pct: 10,
    claimed_pct: 70,
    future_priorities: 1000,
    due_priorities: 5,
};

/// A queue holding only jobs that are not yet due.
pub const IDLE: Mix = Mix {
    name: "only not yet due",
    about: "every job not yet due",
    future_pct: 100,
    claimed_pct: 0,
    future_priorities: 1000,
    due_priorities: 5,
};

/// Every column of a seeded job, as SQL over `i` (1..n) and the job's kind
/// `k` ('future', 'claimed' or 'due'). `extra` adds design-specific columns
/// (name, expression).
pub fn seed_sql(
    schema: &str,
    queue: &str,
    rows: u64,
    mix: &Mix,
    now: i64,
    extra: &[(&str, &str)],
) -> String {
    let future = mix.future_pct;
    let claimed = mix.future_pct + mix.claimed_pct;
    let dp = mix.due_priorities;
    let fp = mix.future_priorities;
    let queue = queue.replace('\'', "''");
    let mut columns = vec![
        ("queue", format!("'{queue}'")),
        ("payload", "decode(repeat('ab', 64), 'hex')".to_owned()),
        (
            "priority",
            format!("CASE WHEN k = 'future' THEN {dp} + i % {fp} ELSE i % {dp} END"),
        ),
        (
            "run_at",
            format!(
                "CASE WHEN k = 'due' THEN {now} - 1 - i % 3600 \
                 WHEN k = 'claimed' THEN {now} - 60 \
                 WHEN i % 2 = 0 THEN {now} + 3600 + i % 3600 \
                 ELSE {now} + 86400 + i % 86400 END"
            ),
        ),
        ("expires_at", "NULL".to_owned()),
        ("enqueued_at", format!("{now} - 7200")),
        ("visibility_timeout_s", "300".to_owned()),
        ("max_attempts", "25".to_owned()),
        ("backoff_base_s", "10".to_owned()),
        ("dead_letter_retention_s", "604800".to_owned()),
        (
            "attempts",
            "CASE WHEN k = 'claimed' THEN 1 WHEN k = 'future' AND i % 2 = 0 THEN 1 + i % 7 ELSE 0 END"
                .to_owned(),
        ),
        (
            "worker_id",
            "CASE WHEN k = 'claimed' THEN 'worker-' || i % 8 END".to_owned(),
        ),
        (
            "claimed_at",
            format!("CASE WHEN k = 'claimed' THEN {now} - 10 END"),
        ),
        (
            "claim_expires_at",
            format!("CASE WHEN k = 'claimed' THEN {now} + 3600 END"),
        ),
        (
            "last_error",
            "CASE WHEN k = 'future' AND i % 2 = 0 \
             THEN 'POST https://hooks.example.test/endpoint: connection refused' END"
                .to_owned(),
        ),
    ];
    for (name, expr) in extra {
        columns.push((name, (*expr).to_owned()));
    }
    let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
    let exprs: Vec<String> = columns.iter().map(|(_, e)| e.clone()).collect();
    format!(
        "INSERT INTO {schema}.jobs ({}) \
         SELECT {} FROM ( \
             SELECT i, CASE WHEN b < {future} THEN 'future' WHEN b < {claimed} THEN 'claimed' \
                       ELSE 'due' END AS k \
             FROM (SELECT i, (i * 37) % 100 AS b FROM generate_series(1, {rows}) AS i) g \
         ) s",
        names.join(", "),
        exprs.join(", ")
    )
}

// ---------------------------------------------------------------------------
// The designs, for the runs

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// (b) the product's statements.
    Product,
    /// (a) main's base design.
    Base,
    /// (c) a skip scan over priorities, on the base schema.
    SkipScan,
}

impl Design {
    pub fn label(self) -> &'static str {
        match self {
            Design::Product => product::LABEL,
            Design::Base => "(a) base: main today",
            Design::SkipScan => "(c) skip scan over priorities",
        }
    }

    /// A fresh schema holding this design's `jobs` table.
    pub async fn create(self, admin: &mut Client, prefix: &str) -> SchemaName {
        let schema = harness::unique_schema_name(prefix);
        match self {
            Design::Product => product::create(admin, &schema).await,
            Design::Base | Design::SkipScan => {
                exec(admin, &base_schema_ddl(schema.as_str())).await;
            }
        }
        schema
    }

    pub fn seed_extra(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Design::Product => product::seed_extra(),
            Design::Base | Design::SkipScan => Vec::new(),
        }
    }

    pub fn claim_path(
        self,
        schema: &SchemaName,
        queue: &str,
        now: i64,
        worker: &str,
        limit: i64,
    ) -> Vec<Stmt> {
        match self {
            // With its promote, as the first claim of each second runs it: the
            // part measures the path at its largest.
            Design::Product => product::claim_path(schema, queue, now, worker, limit, true),
            Design::Base => vec![base_claim(schema.as_str(), queue, now, worker, limit)],
            Design::SkipScan => vec![skip_scan_claim(schema.as_str(), queue, now, worker, limit)],
        }
    }
}

/// Bulk-loads `rows` jobs of `mix` into `queue`, then VACUUM ANALYZE, so the
/// table is in the steady state of a table that has been running (hint bits
/// set, visibility map current, statistics fresh).
pub async fn seed(
    admin: &Client,
    design: Design,
    schema: &SchemaName,
    queue: &str,
    rows: u64,
    mix: &Mix,
    now: i64,
) -> Duration {
    let started = Instant::now();
    let sql = seed_sql(schema.as_str(), queue, rows, mix, now, &design.seed_extra());
    exec(admin, &sql).await;
    exec(admin, &format!("VACUUM (ANALYZE) {schema}.jobs")).await;
    started.elapsed()
}

pub async fn drop_schema(admin: &Client, schema: &str) {
    exec(admin, &format!("DROP SCHEMA {schema} CASCADE")).await;
}
