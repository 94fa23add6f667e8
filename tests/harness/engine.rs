//! The engine's schema and its product statements on the test server: a
//! fresh engine schema per test, a job to enqueue, a statement run with its
//! bound values, and the bounded wait for the snapshot horizon that the
//! commit-order reader depends on.

use std::time::Duration;

use schema_gen::render::script;
use schema_gen::statements::{Job, Statement};
use schema_model::SchemaName;
use tokio_postgres::{Client, Row};

use crate::pg::{describe_error, exec, unique_schema_name};

/// Creates the engine schema (the product's own DDL script) under a fresh
/// name starting with `prefix`, and returns the name.
///
/// # Panics
///
/// If the script fails.
pub async fn engine_schema(client: &Client, prefix: &str) -> SchemaName {
    let schema = unique_schema_name(prefix);
    exec(client, &script(&schema)).await;
    schema
}

/// A job of `queue` due at `run_at`, stamped enqueued at `enqueued_at`, to
/// enqueue (an enqueue whose `now` is before `run_at` writes it not ready):
/// a payload that is not UTF-8, a visibility timeout of 30 s, 3 attempts, a
/// backoff base of 10 s and a dead-letter retention of 600 s.
pub fn job(queue: &str, run_at: i64, enqueued_at: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = b"\x00job\xff".to_vec();
    job.run_at = run_at;
    job.enqueued_at = enqueued_at;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 3;
    job.opts.backoff_base_s = 10;
    job.opts.dead_letter_retention_s = 600;
    job
}

/// Runs a product statement with its bound values and returns its rows.
///
/// # Panics
///
/// If the statement fails; the message names it.
pub async fn run(client: &Client, statement: &Statement) -> Vec<Row> {
    client
        .query(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), describe_error(&e)))
}

/// Calls `read` until `done` holds for what it returned (at most 1200 times,
/// 50 ms apart: a minute, which only a failing run waits out), and returns
/// the last result.
///
/// The commit-order reader only sees transactions below the snapshot
/// horizon, which is database-wide: another test's open transaction can hold
/// it back for a moment. The caller asserts on what this returns.
pub async fn until_horizon_passes<T>(
    mut read: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let mut last = read().await;
    for _ in 1..1200 {
        if done(&last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = read().await;
    }
    last
}
