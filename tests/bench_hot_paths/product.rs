//! The product's design (b): its schema from `schema_gen::bootstrap`, its
//! statements from `schema_gen::statements`.
//!
//! TEMPORARY: until the statements API lands on branch issue-10 these are
//! main's base-design statements, written here; they are replaced by calls to
//! the product's statement functions when it is merged.

use schema_model::SchemaName;

use crate::pool::{Param, Stmt};

/// What the claim path is called in the report.
pub const LABEL: &str = "(b) product";

/// Creates the product's schema as the engine does at open.
pub async fn create(admin: &mut tokio_postgres::Client, schema: &SchemaName) {
    schema_gen::bootstrap(admin, schema)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema}: {e}"));
}

/// Columns the product's design adds to a seeded job, as SQL over the job's
/// kind `k` ('future', 'claimed', 'due').
pub fn seed_extra() -> Vec<(&'static str, &'static str)> {
    Vec::new()
}

/// The statements one claim of up to `limit` jobs runs, in order.
pub fn claim_path(
    schema: &SchemaName,
    queue: &str,
    now: i64,
    worker: &str,
    limit: i64,
) -> Vec<Stmt> {
    vec![crate::designs::base_claim(
        schema.as_str(),
        queue,
        now,
        worker,
        limit,
    )]
}

/// The names of the claim path's statements, for the report.
pub fn claim_path_names() -> Vec<String> {
    vec!["claim".to_owned()]
}

/// Enqueues `payloads` (one job each, due at `run_at`), returning their ids.
pub fn enqueue(
    schema: &SchemaName,
    queue: &str,
    payloads: &[Vec<u8>],
    run_at: i64,
    now: i64,
) -> Vec<Stmt> {
    payloads
        .iter()
        .map(|payload| {
            Stmt::new(
                format!(
                    "INSERT INTO {schema}.jobs (queue, payload, priority, run_at, expires_at, \
                     enqueued_at, visibility_timeout_s, max_attempts, backoff_base_s, \
                     dead_letter_retention_s, attempts) \
                     VALUES ($1, $2, 0, $3, NULL, $4, 300, 25, 10, 604800, 0) RETURNING id"
                ),
                vec![
                    Param::Text(queue.to_owned()),
                    Param::Bytes(payload.clone()),
                    Param::Int(run_at),
                    Param::Int(now),
                ],
            )
        })
        .collect()
}

/// A claimed job: what ack and retry need to name its claim.
pub struct Claimed {
    pub id: i64,
    pub attempts: i32,
}

/// The jobs a claim returned, decoded.
pub fn claimed(rows: &[tokio_postgres::Row]) -> Result<Vec<Claimed>, String> {
    rows.iter()
        .map(|r| {
            Ok(Claimed {
                id: r.try_get("id").map_err(|e| e.to_string())?,
                attempts: r.try_get("attempts").map_err(|e| e.to_string())?,
            })
        })
        .collect()
}

/// Acknowledges (deletes) the claimed jobs.
pub fn ack(schema: &SchemaName, jobs: &[Claimed], worker: &str) -> Vec<Stmt> {
    jobs.iter()
        .map(|job| {
            Stmt::new(
                format!("DELETE FROM {schema}.jobs WHERE id = $1 AND worker_id = $2"),
                vec![Param::Int(job.id), Param::Text(worker.to_owned())],
            )
        })
        .collect()
}

/// Releases the claim on `job` for another attempt at `run_at`.
pub fn retry(
    schema: &SchemaName,
    job: &Claimed,
    worker: &str,
    run_at: i64,
    error: &str,
) -> Vec<Stmt> {
    let id = job.id;
    vec![Stmt::new(
        format!(
            "UPDATE {schema}.jobs SET worker_id = NULL, claimed_at = NULL, \
             claim_expires_at = NULL, run_at = $3, last_error = $4 \
             WHERE id = $1 AND worker_id = $2"
        ),
        vec![
            Param::Int(id),
            Param::Text(worker.to_owned()),
            Param::Int(run_at),
            Param::Text(error.to_owned()),
        ],
    )]
}

/// Storage parameters the product declares on `jobs` (reloptions form).
pub fn declared_storage() -> Vec<String> {
    <schema_model::Jobs as schema_model::TableModel>::storage_parameters()
        .into_iter()
        .map(schema_model::StorageParameter::reloption)
        .collect()
}
