//! Proves that the model's indexes serve the engine's hot paths, and that the
//! semantics the module docs promise hold on a real server: the planner picks
//! the named index for each hot-path query with no `Sort` node (the claim
//! ordering is read straight off `jobs_claim_idx`, unlike pg-boss's index),
//! a gap-free stream reader does not skip an id that commits late, lock
//! fences only grow, and the offset upsert only moves forward.
//!
//! The queries are the shapes the engine will run, built with sea-query from
//! the model's identifiers (`harness::queries`) and checked with `EXPLAIN`.

use harness::queries;
use harness::{exec, rows};
use schema_gen::render::script;
use schema_model::SchemaName;
use tokio_postgres::Client;

/// A fresh schema, created by the printed script (what a DBA runs).
async fn fresh_schema(client: &Client, prefix: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    exec(client, &script(&schema)).await;
    schema
}

/// The first column of every row, as offsets or fences.
async fn ids(client: &Client, sql: &str) -> Vec<i64> {
    rows(client, sql).await.iter().map(|r| r.get(0)).collect()
}

/// The statement's error in the server's words, or "" if it succeeded.
async fn refusal(client: &Client, sql: &str) -> String {
    client
        .batch_execute(sql)
        .await
        .err()
        .map(|e| harness::describe_error(&e))
        .unwrap_or_default()
}

#[tokio::test]
async fn every_hot_path_is_an_index_scan_without_a_sort() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = fresh_schema(&client, "hot_paths").await;
    // A realistic spread: 20 queues, most jobs pending, some claimed, a few
    // expiring; a dead-letter table and streams of some size. Bulk rows come
    // from generate_series, which sea-query does not express.
    exec(
        &client,
        &format!(
            r#"
            SET search_path TO "{schema}";
            INSERT INTO jobs (queue, payload, priority, run_at, expires_at, enqueued_at,
                              visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s,
                              attempts, worker_id, claimed_at, claim_expires_at)
            SELECT 'q' || (g % 20), '\x00', g % 5, 1000 + g, CASE WHEN g % 50 = 0 THEN 5000 + g END, 1000,
                   30, 5, 2, 86400, 0,
                   CASE WHEN g % 10 = 0 THEN 'w' END,
                   CASE WHEN g % 10 = 0 THEN 2000 END,
                   CASE WHEN g % 10 = 0 THEN 2000 + g END
            FROM generate_series(1, 40000) g;
            INSERT INTO dead_jobs (id, queue, payload, priority, run_at, enqueued_at, visibility_timeout_s,
                                   max_attempts, backoff_base_s, dead_letter_retention_s, attempts, died_at)
            SELECT g, 'q' || (g % 20), '\x00', 0, 1000, 1000, 30, 5, 2, 86400 + g, 5, 1000 + g
            FROM generate_series(1, 20000) g;
            INSERT INTO stream_events (stream, payload, created_at)
            SELECT 's' || (g % 50), '\x00', 1000 FROM generate_series(1, 200000) g;
            INSERT INTO schedules (name, spec, every_s, queue, payload, priority, max_attempts,
                                   visibility_timeout_s, backoff_base_s, dead_letter_retention_s,
                                   next_fire_at, enabled)
            SELECT 'sched' || g, '@every 1m', 60, 'q1', '\x00', 0, 5, 30, 2, 86400, 1000 + g, g % 4 <> 0
            FROM generate_series(1, 5000) g;
            INSERT INTO locks (name, owner, expires_at)
            SELECT 'lock' || g, 'owner', 1000 + g FROM generate_series(1, 5000) g;
            ANALYZE;
            "#
        ),
    )
    .await;

    let cases = [
        ("jobs_claim_idx", queries::claim(&schema, "q7", 30_000, 10)),
        (
            "jobs_claim_expiry_idx",
            queries::expired_claims(&schema, 2100, 100),
        ),
        ("jobs_expiry_idx", queries::expired_jobs(&schema, 5200, 100)),
        (
            "dead_jobs_purge_idx",
            queries::dead_letter_sweep(&schema, 88_000, 500),
        ),
        (
            "stream_events_stream_id_idx",
            queries::stream_after(&schema, "s3", 20_000, Some(100)),
        ),
        (
            "stream_events_commit_order_idx",
            queries::stream_after_in_commit_order(&schema, "s3", 20_000, Some(100)),
        ),
        (
            "schedules_due_idx",
            queries::due_schedules(&schema, 1100, 50),
        ),
        (
            "locks_expiry_idx",
            queries::lapsed_locks(&schema, 1100, 100),
        ),
    ];
    for (index, query) in cases {
        queries::assert_served_by(&client, index, &query).await;
    }
}

/// Two appends commit in the opposite order of their ids. A naive `id >
/// offset` reader skips the lower id; the reader the module docs describe,
/// in `(tx_id, id)` order below the snapshot horizon, delivers both.
#[tokio::test]
async fn a_gap_free_stream_reader_does_not_skip_an_id_that_commits_late() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = fresh_schema(&admin, "commit_order").await;
    let early = harness::connect().await;
    let late = harness::connect().await;
    let reader = harness::connect().await;
    let append = queries::append_event(&schema, "s", b"\x01");
    // `early` takes the lower id and stays open; `late` takes a higher id and commits.
    exec(&early, "BEGIN").await;
    let low = ids(&early, &append).await[0];
    let high = ids(&late, &append).await[0];
    assert!(low < high);

    let naive = |offset| queries::stream_after(&schema, "s", offset, None);
    let gap_free = |offset| queries::stream_after_in_commit_order(&schema, "s", offset, None);

    // While `early` is open, the naive reader delivers `high` and checkpoints past `low`.
    assert_eq!(ids(&reader, &naive(0)).await, vec![high]);
    // The gap-free reader holds `high` back: a transaction below it is still running.
    assert_eq!(ids(&reader, &gap_free(0)).await, Vec::<i64>::new());

    exec(&early, "COMMIT").await;

    assert_eq!(
        ids(&reader, &naive(high)).await,
        Vec::<i64>::new(),
        "the naive reader has skipped {low} for good"
    );
    // The horizon is database-wide: other tests' open transactions can hold
    // it back for a moment, so wait (bounded) for it to pass both appends.
    let mut careful = Vec::new();
    for _ in 0..200 {
        careful = ids(&reader, &gap_free(0)).await;
        if careful.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(careful, vec![low, high], "commit order delivers both");
    assert_eq!(
        ids(&reader, &gap_free(low)).await,
        vec![high],
        "resuming after the checkpoint's (tx_id, id)"
    );
}

/// The fence is an identity: every acquisition draws a higher value, also
/// after a release that deleted the row, and nobody can write one by hand.
#[tokio::test]
async fn lock_fences_only_grow_and_cannot_be_forged() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = fresh_schema(&client, "fences").await;
    let mut fences = Vec::new();
    for owner in ["a", "b"] {
        fences.extend(ids(&client, &queries::acquire_lock(&schema, "l", owner, 100)).await);
    }
    exec(
        &client,
        &format!("DELETE FROM \"{schema}\".locks WHERE name = 'l'"),
    )
    .await;
    fences.extend(ids(&client, &queries::acquire_lock(&schema, "l", "c", 100)).await);
    assert_eq!(fences.len(), 3);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must only grow: {fences:?}"
    );

    let forged = refusal(
        &client,
        &format!("UPDATE \"{schema}\".locks SET fence = 1000000 WHERE name = 'l'"),
    )
    .await;
    assert!(
        forged.contains("fence"),
        "writing a fence by hand must be refused: {forged:?}"
    );
}

/// The checkpoint upsert the engine uses only moves forward; the CHECK
/// refuses a negative offset by name.
#[tokio::test]
async fn the_offset_upsert_only_moves_forward() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = fresh_schema(&client, "offsets").await;
    for offset in [5_i64, 9, 3, 9, 12, 1] {
        exec(&client, &queries::advance_offset(&schema, "s", "c", offset)).await;
    }
    let stored = ids(
        &client,
        &format!("SELECT \"offset\" FROM \"{schema}\".stream_offsets"),
    )
    .await;
    assert_eq!(stored, vec![12]);
    let refused = refusal(&client, &queries::advance_offset(&schema, "s", "c", -1)).await;
    assert!(
        refused.contains("stream_offsets_offset_not_negative"),
        "{refused}"
    );
}
