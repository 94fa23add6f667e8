//! The engine's maintenance statement, `jobs::vacuum`, against a real
//! server: each of its three options does what its docs promise, and
//! without it the test fails.
//!
//! - `SKIP_LOCKED`: with another session holding a lock that conflicts with
//!   VACUUM, the statement returns at once with PostgreSQL's "skipping"
//!   warning, never queued behind the lock (without it, it waits, and the
//!   test's `lock_timeout` turns the wait into an error).
//! - `INDEX_CLEANUP ON`: dead entries at the front of `jobs_claim_idx`, on
//!   fewer than 2% of the heap's pages (where PostgreSQL would otherwise
//!   bypass index vacuuming), are removed, and a claim reads past none of
//!   them.
//! - `TRUNCATE FALSE`: an emptied table keeps its pages (truncating them
//!   would take `ACCESS EXCLUSIVE` on `jobs`, which every claim waits for).

use harness::engine::engine_schema;
use harness::explain::{PlanMode, explain_analyze};
use harness::{connect_with_notices, exec};
use schema_gen::statements::jobs;
use schema_model::{Job, SchemaName};
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

/// Enqueues `n` due jobs into `queue` with the product's batch statement.
async fn seed(client: &Client, schema: &SchemaName, queue: &str, n: usize) {
    let job = {
        let mut job = Job::default();
        job.queue = queue.into();
        job.payload = b"{}".to_vec();
        job.run_at = NOW - 60;
        job.enqueued_at = NOW - 60;
        job.opts.visibility_timeout_s = 30;
        job.opts.max_attempts = 3;
        job.opts.backoff_base_s = 2;
        job.opts.dead_letter_retention_s = 86_400;
        job
    };
    let batch = vec![job; 10_000];
    let mut left = n;
    while left > 0 {
        let chunk = left.min(batch.len());
        let statement = jobs::enqueue_many(schema, &batch[..chunk], NOW);
        client
            .execute(statement.sql(), &statement.args())
            .await
            .unwrap_or_else(|e| panic!("enqueue_many: {}", harness::describe_error(&e)));
        left -= chunk;
    }
}

/// Buffers one claim of `queue` reads (the second of two runs, so the
/// first has set the hint bits and marked the dead index entries it met).
async fn claim_buffers(client: &Client, schema: &SchemaName, queue: &str) -> i64 {
    let claim = jobs::claim(schema, queue, "w", NOW, 1);
    explain_analyze(client, &claim, PlanMode::Custom).await;
    let measured = explain_analyze(client, &claim, PlanMode::Custom).await;
    assert_eq!(
        measured.rows,
        1,
        "the claim found no job:\n{}",
        measured.pretty()
    );
    assert!(
        measured.indexes.iter().any(|i| i == "jobs_claim_idx"),
        "the claim did not read jobs_claim_idx:\n{}",
        measured.pretty()
    );
    measured.buffers
}

async fn relation_pages(client: &Client, schema: &SchemaName) -> i64 {
    client
        .query_one(
            "SELECT pg_relation_size($1::text::regclass) / current_setting('block_size')::bigint",
            &[&format!("{schema}.jobs")],
        )
        .await
        .unwrap_or_else(|e| panic!("relation size: {}", harness::describe_error(&e)))
        .get(0)
}

#[tokio::test]
async fn vacuum_skips_a_locked_jobs_table_at_once() {
    let holder = harness::connect().await;
    let schema = engine_schema(&holder, "vacuum_locked").await;
    // SHARE UPDATE EXCLUSIVE conflicts with VACUUM (and with another
    // VACUUM, an ANALYZE, a CREATE INDEX CONCURRENTLY).
    exec(
        &holder,
        &format!("BEGIN; LOCK TABLE {schema}.jobs IN SHARE UPDATE EXCLUSIVE MODE"),
    )
    .await;

    let (engine, notices) = connect_with_notices().await;
    // The bound a waiting VACUUM would run into: without SKIP_LOCKED the
    // statement fails here with a lock timeout (the holder keeps its lock
    // until below). A lock timeout, not a statement timeout: it fires on a
    // lock wait only, never because a loaded machine is slow to run the
    // vacuum.
    exec(&engine, "SET lock_timeout = '1s'").await;
    let vacuum = jobs::vacuum(&schema);
    if let Err(e) = engine.batch_execute(vacuum.sql()).await {
        panic!(
            "the vacuum waited for the lock instead of skipping the table: {}",
            harness::describe_error(&e)
        );
    }
    // The notice travels before the command's completion: it is here now.
    let warnings: Vec<String> = notices
        .take()
        .iter()
        .map(|n| n.message().to_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|m| m.contains("skipping vacuum of \"jobs\"") && m.contains("lock not available")),
        "PostgreSQL did not say it skipped jobs: {warnings:?}"
    );

    exec(&holder, "ROLLBACK").await;
    // With the lock gone the same statement vacuums jobs, saying nothing.
    engine
        .batch_execute(vacuum.sql())
        .await
        .unwrap_or_else(|e| panic!("vacuum: {}", harness::describe_error(&e)));
    let warnings = notices.take();
    assert!(
        warnings.is_empty(),
        "an unlocked vacuum warned: {:?}",
        warnings.iter().map(|n| n.message()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn vacuum_removes_dead_claim_index_entries_and_keeps_the_tables_pages() {
    let client = harness::connect().await;
    let schema = engine_schema(&client, "vacuum_cleanup").await;
    // No autovacuum may do the work this test proves the statement does.
    exec(
        &client,
        &format!("ALTER TABLE {schema}.jobs SET (autovacuum_enabled = false)"),
    )
    .await;
    seed(&client, &schema, "q", 150_000).await;
    exec(&client, &format!("VACUUM (ANALYZE) {schema}.jobs")).await;
    let pages = relation_pages(&client, &schema).await;
    let clean = claim_buffers(&client, &schema, "q").await;

    // The first 1,500 jobs done (as a claim then an ack would leave them:
    // dead rows, and dead entries at the front of the claim index), on
    // about 1% of the heap's pages.
    exec(
        &client,
        &format!(
            "DELETE FROM {schema}.jobs WHERE id IN \
             (SELECT id FROM {schema}.jobs ORDER BY id LIMIT 1500)"
        ),
    )
    .await;
    let dirty = claim_buffers(&client, &schema, "q").await;
    assert!(
        dirty >= clean + 5,
        "the dead entries cost a claim nothing ({clean} buffers clean, {dirty} with them): \
         the test no longer sets up what it proves"
    );

    let vacuum = jobs::vacuum(&schema);
    client
        .batch_execute(vacuum.sql())
        .await
        .unwrap_or_else(|e| panic!("vacuum: {}", harness::describe_error(&e)));
    let vacuumed = claim_buffers(&client, &schema, "q").await;
    assert!(
        vacuumed <= clean + 2,
        "after the vacuum a claim read {vacuumed} buffers ({clean} before the deletes, {dirty} \
         with the dead entries): the dead index entries were not removed"
    );

    // Emptied, the table keeps its pages: no ACCESS EXCLUSIVE truncation.
    exec(&client, &format!("DELETE FROM {schema}.jobs")).await;
    client
        .batch_execute(vacuum.sql())
        .await
        .unwrap_or_else(|e| panic!("vacuum: {}", harness::describe_error(&e)));
    assert_eq!(
        relation_pages(&client, &schema).await,
        pages,
        "the vacuum truncated jobs (it took ACCESS EXCLUSIVE to do that)"
    );
}
