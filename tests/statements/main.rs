//! The product's statements and row mapping against a real server: every
//! value shape round-trips through its write and read statements byte for
//! byte (payloads with 0x00, 0xff, invalid UTF-8 and JSON with duplicate
//! keys included), a row missing a column or holding one of another type is
//! refused naming the column, the declared parameter types are the ones the
//! server infers, and each statement keeps the promise its docs make
//! (claims fenced by their token, retry out of and promotion back into the
//! claim index, reaping, expiry, lock fences, the schedule compare-and-set,
//! the forward-only checkpoint, the dedup ledger).

mod lifecycles;
mod round_trips;

use harness::engine::run;
use schema_gen::statements::{FromRow, Statement, jobs};
use schema_model::{Job, QueueOpts, SchemaName};
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

/// Payloads a careless mapping would corrupt: NUL, 0xff, bytes that are not
/// UTF-8, JSON with a duplicate key (jsonb would fold it), empty.
const PAYLOADS: [&[u8]; 5] = [
    b"\x00\x01\x00",
    b"\xff\xfe\xff",
    b"\xc3\x28 not utf-8 \xa0\xa1",
    br#"{"a": 1, "a": 2,   "b": [1,2]}"#,
    b"",
];

/// The one row a statement returned, decoded.
async fn one<S: FromRow>(client: &Client, statement: &Statement) -> Option<S> {
    let rows = run(client, statement).await;
    assert!(rows.len() <= 1, "{}: {} rows", statement.name(), rows.len());
    rows.first()
        .map(|row| S::from_row(row).unwrap_or_else(|e| panic!("{}: {e}", statement.name())))
}

async fn count(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), harness::describe_error(&e)))
}

fn opts() -> QueueOpts {
    let mut opts = QueueOpts::default();
    opts.visibility_timeout_s = 30;
    opts.max_attempts = 2;
    opts.backoff_base_s = 5;
    opts.dead_letter_retention_s = 600;
    opts
}

fn job(queue: &str, payload: &[u8], priority: i32, run_at: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = payload.to_vec();
    job.priority = priority;
    job.run_at = run_at;
    job.expires_at = Some(NOW + 10_000 + i64::from(priority));
    job.enqueued_at = NOW - 7;
    job.opts = opts();
    job
}

async fn enqueue(client: &Client, schema: &SchemaName, job: &Job) -> i64 {
    run(client, &jobs::enqueue(schema, job, NOW)).await[0].get(0)
}

async fn claim(
    client: &Client,
    schema: &SchemaName,
    queue: &str,
    worker: &str,
    now: i64,
) -> Vec<Job> {
    run(client, &jobs::promote(schema, queue, now, 100)).await;
    run(client, &jobs::claim(schema, queue, worker, now, 100))
        .await
        .iter()
        .map(|row| Job::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}
