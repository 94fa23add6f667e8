//! The product's design (b), the ready/scheduled split: its schema from
//! `schema_gen::bootstrap`, every statement from the product's own statement
//! functions (`schema_gen::statements::jobs`), bound through the product's
//! binder; nothing here writes SQL. Only the bulk seeding (designs.rs) is
//! hand-written, and it fills `ready` the way enqueue does (`run_at <= now`).

use schema_gen::statements::{CLAIM_PATH, FromRow, jobs};
use schema_model::{Job, SchemaName, TableModel};

use crate::pool::Stmt;

/// What the claim path is called in the report.
pub const LABEL: &str = "(b) product: ready/scheduled split";

/// Jobs one promotion makes ready at most, per job claimed: the product's
/// own factor (`Session::claim` uses it).
pub use jobs::PROMOTE_PER_CLAIMED;

/// Creates the product's schema as the engine does at open.
pub async fn create(admin: &mut tokio_postgres::Client, schema: &SchemaName) {
    schema_gen::bootstrap(admin, schema)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema}: {e}"));
}

/// Columns the product's design adds to a seeded job, as SQL over the job's
/// kind `k` ('future', 'claimed', 'due'): `ready` is `run_at <= now`, as
/// enqueue and retry write it (a claimed job is always ready).
pub fn seed_extra() -> Vec<(&'static str, &'static str)> {
    vec![("ready", "k <> 'future'")]
}

/// The statements one claim of up to `limit` jobs runs, in the product's
/// order ([`CLAIM_PATH`]); `promote`: whether this claim promotes first, as
/// the product's `Session::claim` decides (`candidates::PromoteClock`).
pub fn claim_path(
    schema: &SchemaName,
    queue: &str,
    now: i64,
    worker: &str,
    limit: i64,
    promote: bool,
) -> Vec<Stmt> {
    CLAIM_PATH
        .iter()
        .filter_map(|step| match *step {
            "promote" => promote.then(|| self::promote(schema, queue, now, limit)),
            "claim" => Some(claim(schema, queue, now, worker, limit)),
            other => {
                panic!("the product's claim path has a step the benchmark does not know: {other}")
            }
        })
        .collect()
}

/// The product's promote ahead of a claim of up to `limit` jobs.
pub fn promote(schema: &SchemaName, queue: &str, now: i64, limit: i64) -> Stmt {
    let limit = u32::try_from(limit).unwrap_or(u32::MAX);
    Stmt::from(jobs::promote(
        schema,
        queue,
        now,
        limit.saturating_mul(PROMOTE_PER_CLAIMED),
    ))
}

/// The product's claim of up to `limit` jobs.
pub fn claim(schema: &SchemaName, queue: &str, now: i64, worker: &str, limit: i64) -> Stmt {
    let limit = u32::try_from(limit).unwrap_or(u32::MAX);
    Stmt::from(jobs::claim(schema, queue, worker, now, limit))
}

/// The names of the claim path's statements, for the report.
pub fn claim_path_names() -> Vec<String> {
    CLAIM_PATH.iter().map(|s| (*s).to_owned()).collect()
}

use harness::bench::queue_opts as opts;

/// Enqueues `payloads`, one job each, due at `run_at`, as an engine sends
/// them: one job with [`jobs::enqueue`], a batch with [`jobs::enqueue_many`]
/// (one statement whatever its size).
pub fn enqueue(
    schema: &SchemaName,
    queue: &str,
    payloads: &[Vec<u8>],
    run_at: i64,
    now: i64,
) -> Stmt {
    let batch: Vec<Job> = payloads
        .iter()
        .map(|payload| {
            let mut job = Job::default();
            job.queue = queue.to_owned();
            job.payload = payload.clone();
            job.priority = 0;
            job.run_at = run_at;
            job.expires_at = None;
            job.enqueued_at = now;
            job.opts = opts();
            job
        })
        .collect();
    match batch.as_slice() {
        [job] => Stmt::from(jobs::enqueue(schema, job, now)),
        _ => Stmt::from(jobs::enqueue_many(schema, &batch, now)),
    }
}

/// A claimed job: what ack and retry need to name its claim.
pub struct Claimed {
    pub id: i64,
    pub attempts: i32,
}

/// The jobs a claim returned, decoded with the product's row mapping.
pub fn claimed(rows: &[tokio_postgres::Row]) -> Result<Vec<Claimed>, String> {
    rows.iter()
        .map(|row| {
            let job = Job::from_row(row).map_err(|e| format!("claim row: {e}"))?;
            Ok(Claimed {
                id: job.id,
                attempts: job.attempts,
            })
        })
        .collect()
}

/// Acknowledges the claimed jobs, as an engine does: one job with
/// [`jobs::ack`], several with [`jobs::ack_many`] (one statement).
pub fn ack(schema: &SchemaName, claimed: &[Claimed], worker: &str) -> Stmt {
    match claimed {
        [job] => Stmt::from(jobs::ack(schema, job.id, worker, job.attempts)),
        _ => {
            let claims: Vec<(i64, i32)> = claimed.iter().map(|c| (c.id, c.attempts)).collect();
            Stmt::from(jobs::ack_many(schema, worker, &claims))
        }
    }
}

/// Releases the claim on `job` for another attempt at `run_at`.
pub fn retry(
    schema: &SchemaName,
    job: &Claimed,
    worker: &str,
    run_at: i64,
    error: &str,
    now: i64,
) -> Stmt {
    Stmt::from(jobs::retry(
        schema,
        job.id,
        worker,
        job.attempts,
        run_at,
        Some(error),
        now,
    ))
}

/// Storage parameters the product declares on `jobs` (reloptions form).
pub fn declared_storage() -> Vec<String> {
    <schema_model::Jobs as TableModel>::storage_parameters()
        .into_iter()
        .map(schema_model::StorageParameter::reloption)
        .collect()
}
