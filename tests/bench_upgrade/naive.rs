//! THE BENCHMARK'S OWN STRAWMAN, NOT PRODUCT SQL: the obvious hand-written
//! upgrade from version 1 to version 2's `jobs`, in one transaction, as
//! issue 14 describes it (it held `ACCESS EXCLUSIVE` for 33 s at 1M jobs
//! while a plain read waited 31 s). It exists only as the labelled baseline
//! the product's online upgrade is compared with; nothing in the product
//! runs it, and it is deliberately what the product's planner refuses to
//! do: a `NOT NULL` column added and then filled by one `UPDATE` of every
//! row (a rewrite of the whole table under `ACCESS EXCLUSIVE`), plain
//! `CREATE INDEX` (a `SHARE` lock, and here already inside the `ACCESS
//! EXCLUSIVE` transaction), and `ADD CONSTRAINT` without `NOT VALID` (a
//! full scan under the lock). It keeps `DEFAULT false` so version 1's
//! inserts still work after it, which is the most an operator writing it
//! by hand would think of.

use std::time::Instant;

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::unix_now;

/// The strawman's statements, in order, for `schema` at the unix second
/// `now` (the `UPDATE`'s notion of due).
pub fn statements(schema: &SchemaName, now: i64) -> Vec<(&'static str, String)> {
    let t = format!("\"{}\".jobs", schema.as_str());
    let s = schema.as_str();
    vec![
        ("BEGIN", "BEGIN".to_owned()),
        (
            "ADD COLUMN ready NOT NULL DEFAULT false",
            format!("ALTER TABLE {t} ADD COLUMN ready boolean NOT NULL DEFAULT false"),
        ),
        (
            "UPDATE every row's ready",
            format!("UPDATE {t} SET ready = (claimed_at IS NOT NULL OR run_at <= {now})"),
        ),
        (
            "DROP INDEX jobs_claim_idx",
            format!("DROP INDEX \"{s}\".jobs_claim_idx"),
        ),
        (
            "CREATE INDEX jobs_claim_idx (new predicate)",
            format!(
                "CREATE INDEX jobs_claim_idx ON {t} (queue, priority DESC, run_at, id) \
                 WHERE claimed_at IS NULL AND ready"
            ),
        ),
        (
            "CREATE INDEX jobs_promote_idx",
            format!("CREATE INDEX jobs_promote_idx ON {t} (queue, run_at) WHERE NOT ready"),
        ),
        (
            "ADD CONSTRAINT jobs_claimed_job_is_ready (validated)",
            format!(
                "ALTER TABLE {t} ADD CONSTRAINT jobs_claimed_job_is_ready \
                 CHECK (claimed_at IS NULL OR ready)"
            ),
        ),
        (
            "SET storage parameters",
            format!(
                "ALTER TABLE {t} SET (autovacuum_vacuum_scale_factor = 0, \
                 autovacuum_vacuum_threshold = 1000)"
            ),
        ),
        ("COMMIT", "COMMIT".to_owned()),
    ]
}

/// What the strawman's transaction took.
#[derive(Debug, Clone)]
pub struct NaiveRun {
    /// Each statement and its milliseconds.
    pub statements: Vec<(&'static str, f64)>,
    /// From `BEGIN` to `COMMIT` done.
    pub total_ms: f64,
    /// From the `ALTER TABLE` that took `ACCESS EXCLUSIVE` returning to the
    /// `COMMIT` done: how long the lock was held (at least).
    pub exclusive_ms: f64,
    /// Microseconds since the run's start when the transaction began and
    /// when it committed.
    pub span_us: (u64, u64),
}

/// Runs the strawman on `client` (its own session, `upbench-naive`).
pub async fn run(client: &Client, schema: &SchemaName, clock: &crate::engines::Shared) -> NaiveRun {
    let started = Instant::now();
    let begun_us = clock.now_us();
    let mut timings = Vec::new();
    let mut locked_at = None;
    for (what, sql) in statements(schema, unix_now()) {
        let t = Instant::now();
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("the strawman's {what}: {}", harness::describe_error(&e)));
        timings.push((what, t.elapsed().as_secs_f64() * 1000.0));
        if what.starts_with("ADD COLUMN") {
            locked_at = Some(Instant::now());
        }
    }
    let locked = locked_at.unwrap_or(started);
    NaiveRun {
        statements: timings,
        total_ms: started.elapsed().as_secs_f64() * 1000.0,
        exclusive_ms: locked.elapsed().as_secs_f64() * 1000.0,
        span_us: (begun_us, clock.now_us()),
    }
}
