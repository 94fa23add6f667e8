//! Proves that the model's indexes serve the engine's hot paths, and that the
//! semantics the module docs promise hold on a real server: the planner picks
//! the named index for each hot-path query with no `Sort` node (the claim
//! ordering is read straight off `jobs_claim_idx`, unlike pg-boss's index),
//! a gap-free stream reader does not skip an id that commits late, lock
//! fences only grow, and the offset upsert only moves forward.
//!
//! The queries here are the shapes the engine will run; each is written with
//! the model's identifiers where it matters and checked with `EXPLAIN`.

use schema_gen::render::script;
use schema_model::SchemaName;
use serde_json::Value;
use tokio_postgres::Client;

async fn fresh_schema(client: &Client, prefix: &str) -> String {
    let name = harness::unique_schema(prefix);
    let schema = SchemaName::new(&name).unwrap_or_else(|e| panic!("{e}"));
    client
        .batch_execute(&script(&schema))
        .await
        .unwrap_or_else(|e| panic!("bootstrap script failed: {}", db_message(&e)));
    name
}

/// The server's own words for a failed statement (tokio-postgres's
/// `Display` says only "db error").
fn db_message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

/// Every node of a JSON plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            out.extend(nodes(child));
        }
    }
    out
}

/// Asserts that `query` is planned through `index` without sorting.
async fn assert_served_by(client: &Client, schema: &str, index: &str, query: &str) {
    client
        .batch_execute(&format!("SET search_path TO \"{schema}\""))
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let row = client
        .query_one(&format!("EXPLAIN (FORMAT JSON) {query}"), &[])
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {query}: {e}"));
    let plan: Value = row.get(0);
    let root = &plan[0]["Plan"];
    let all = nodes(root);
    let uses_index = all
        .iter()
        .any(|node| node["Index Name"].as_str() == Some(index));
    let sorts = all
        .iter()
        .any(|node| node["Node Type"].as_str() == Some("Sort"));
    assert!(
        uses_index && !sorts,
        "{query}\nexpected an index scan on {index} with no Sort; plan:\n{}",
        serde_json::to_string_pretty(root).unwrap_or_default()
    );
}

#[tokio::test]
async fn every_hot_path_is_an_index_scan_without_a_sort() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = fresh_schema(&client, "hot_paths").await;
    // A realistic spread: 20 queues, most jobs pending, some claimed, a few
    // expiring; a dead-letter table and streams of some size.
    client
        .batch_execute(&format!(
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
        ))
        .await
        .unwrap_or_else(|e| panic!("seeding failed: {}", db_message(&e)));

    let cases = [
        (
            "jobs_claim_idx",
            "SELECT id FROM jobs WHERE queue = 'q7' AND claimed_at IS NULL AND run_at <= 30000 \
             ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED",
        ),
        (
            "jobs_claim_expiry_idx",
            "SELECT id FROM jobs WHERE claim_expires_at IS NOT NULL AND claim_expires_at < 2100 \
             ORDER BY claim_expires_at LIMIT 100",
        ),
        (
            "jobs_expiry_idx",
            "SELECT id FROM jobs WHERE expires_at IS NOT NULL AND expires_at < 5200 \
             ORDER BY expires_at LIMIT 100",
        ),
        (
            "dead_jobs_purge_idx",
            "SELECT id FROM dead_jobs WHERE purge_at < 88000 ORDER BY purge_at LIMIT 500",
        ),
        (
            "stream_events_stream_id_idx",
            "SELECT id, key, payload FROM stream_events WHERE stream = 's3' AND id > 20000 \
             ORDER BY id LIMIT 100",
        ),
        (
            "stream_events_commit_order_idx",
            "SELECT id, payload FROM stream_events WHERE stream = 's3' \
             AND (tx_id, id) > ('0'::xid8, 20000) \
             AND tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
             ORDER BY tx_id, id LIMIT 100",
        ),
        (
            "schedules_due_idx",
            "SELECT name FROM schedules WHERE enabled AND next_fire_at <= 1100 \
             ORDER BY next_fire_at LIMIT 50 FOR UPDATE SKIP LOCKED",
        ),
        (
            "locks_expiry_idx",
            "SELECT name FROM locks WHERE expires_at < 1100 ORDER BY expires_at LIMIT 100",
        ),
    ];
    for (index, query) in cases {
        assert_served_by(&client, &schema, index, query).await;
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
    for client in [&early, &late, &reader] {
        client
            .batch_execute(&format!("SET search_path TO \"{schema}\""))
            .await
            .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    }
    let append = "INSERT INTO stream_events (stream, payload, created_at) \
                  VALUES ('s', '\\x01', 1) RETURNING id";
    // `early` takes the lower id and stays open; `late` takes a higher id and commits.
    early
        .batch_execute("BEGIN")
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let low: i64 = early
        .query_one(append, &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let high: i64 = late
        .query_one(append, &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    assert!(low < high);

    let naive = "SELECT id FROM stream_events WHERE stream = 's' AND id > $1 ORDER BY id";
    let gap_free = "SELECT id FROM stream_events WHERE stream = 's' \
                    AND (tx_id, id) > (COALESCE((SELECT tx_id FROM stream_events WHERE id = $1), '0'::xid8), $1) \
                    AND tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
                    ORDER BY tx_id, id";
    let ids = |rows: Vec<tokio_postgres::Row>| {
        rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>()
    };

    // While `early` is open, the naive reader delivers `high` and checkpoints past `low`.
    let naive_first = ids(reader
        .query(naive, &[&0_i64])
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e))));
    assert_eq!(naive_first, vec![high]);
    // The gap-free reader holds `high` back: a transaction below it is still running.
    let careful_first = ids(reader
        .query(gap_free, &[&0_i64])
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e))));
    assert_eq!(careful_first, Vec::<i64>::new());

    early
        .batch_execute("COMMIT")
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));

    let naive_next = ids(reader
        .query(naive, &[&high])
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e))));
    assert_eq!(
        naive_next,
        Vec::<i64>::new(),
        "the naive reader has skipped {low} for good"
    );
    // The horizon is database-wide: other tests' open transactions can hold
    // it back for a moment, so wait (bounded) for it to pass both appends.
    let mut careful = Vec::new();
    for _ in 0..200 {
        careful = ids(reader
            .query(gap_free, &[&0_i64])
            .await
            .unwrap_or_else(|e| panic!("{}", db_message(&e))));
        if careful.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(careful, vec![low, high], "commit order delivers both");
    let resumed = ids(reader
        .query(gap_free, &[&low])
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e))));
    assert_eq!(
        resumed,
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
    client
        .batch_execute(&format!("SET search_path TO \"{schema}\""))
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let acquire = "INSERT INTO locks (name, owner, expires_at) VALUES ('l', $1, 100) \
                   ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, \
                   expires_at = EXCLUDED.expires_at, fence = DEFAULT RETURNING fence";
    let mut fences = Vec::new();
    for owner in ["a", "b"] {
        let fence: i64 = client
            .query_one(acquire, &[&owner])
            .await
            .map(|r| r.get(0))
            .unwrap_or_else(|e| panic!("{}", db_message(&e)));
        fences.push(fence);
    }
    client
        .execute("DELETE FROM locks WHERE name = 'l'", &[])
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let fence: i64 = client
        .query_one(acquire, &[&"c"])
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    fences.push(fence);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must only grow: {fences:?}"
    );

    let forged = client
        .execute("UPDATE locks SET fence = 1000000 WHERE name = 'l'", &[])
        .await
        .err()
        .map(|e| db_message(&e))
        .unwrap_or_default();
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
    client
        .batch_execute(&format!("SET search_path TO \"{schema}\""))
        .await
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    let upsert = "INSERT INTO stream_offsets (stream, consumer, \"offset\") VALUES ('s', 'c', $1) \
                  ON CONFLICT (stream, consumer) DO UPDATE SET \"offset\" = EXCLUDED.\"offset\" \
                  WHERE stream_offsets.\"offset\" < EXCLUDED.\"offset\"";
    for offset in [5_i64, 9, 3, 9, 12, 1] {
        client
            .execute(upsert, &[&offset])
            .await
            .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    }
    let stored: i64 = client
        .query_one("SELECT \"offset\" FROM stream_offsets", &[])
        .await
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{}", db_message(&e)));
    assert_eq!(stored, 12);
    let refused = client
        .execute(upsert.replace("$1", "-1").as_str(), &[])
        .await
        .err()
        .map(|e| db_message(&e))
        .unwrap_or_default();
    assert!(
        refused.contains("stream_offsets_offset_not_negative"),
        "{refused}"
    );
}
