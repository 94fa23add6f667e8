//! The database the upgrade starts from: version 1 (`e63468a`), created by
//! `harness::history::create_version` from its shipped script, and filled
//! by hand-written bulk SQL (`generate_series`, then `VACUUM (ANALYZE)`):
//! the benchmark's own fixture, not product SQL.
//!
//! The mix, interleaved by id over four queues and ten priorities:
//!
//! - 80% due (`run_at` up to an hour ago);
//! - 15% not yet due: half scheduled up to a day ahead, half retries in
//!   backoff (`attempts` 1, `last_error` set, up to an hour ahead);
//! - 5% claimed by workers that are not running (claims valid for an
//!   hour), so they stay claimed through the run.

use std::collections::HashSet;

use schema_model::SchemaName;
use tokio_postgres::Client;

use crate::unix_now;

/// Creates `schema` at version 1 and fills it with `jobs` jobs; returns
/// their ids.
pub async fn version_1_with_jobs(client: &Client, schema: &SchemaName, jobs: u64) -> HashSet<i64> {
    harness::history::create_version(client, schema, 1).await;
    let now = unix_now();
    let s = schema.as_str();
    // b = (i * 37) % 100 interleaves the kinds by id.
    let sql = format!(
        "INSERT INTO \"{s}\".jobs (queue, payload, priority, run_at, expires_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts, worker_id, claimed_at, claim_expires_at, last_error) \
         SELECT (ARRAY['mail', 'sms', 'webhook', 'report'])[1 + i % 4], \
                decode(md5(i::text) || md5((i + 1)::text), 'hex'), \
                (i / 4) % 10, \
                CASE WHEN b < 80 THEN {now} - i % 3600 \
                     WHEN b < 95 AND i % 2 = 0 THEN {now} + 60 + i % 86400 \
                     WHEN b < 95 THEN {now} + 60 + i % 3600 \
                     ELSE {now} - 600 END, \
                NULL, {now} - 7200, 3600, 5, 10, 86400, \
                CASE WHEN b >= 95 OR (b >= 80 AND i % 2 = 1) THEN 1 ELSE 0 END, \
                CASE WHEN b >= 95 THEN 'gone-worker-' || i % 8 END, \
                CASE WHEN b >= 95 THEN {now} - 60 END, \
                CASE WHEN b >= 95 THEN {now} + 3600 END, \
                CASE WHEN b >= 80 AND b < 95 AND i % 2 = 1 \
                     THEN 'POST https://hooks.example.test/endpoint: connection refused' END \
         FROM (SELECT i, (i * 37) % 100 AS b FROM generate_series(1, {jobs}) AS i) g"
    );
    harness::exec(client, &sql).await;
    harness::exec(client, &format!("VACUUM (ANALYZE) \"{s}\".jobs")).await;
    ids(client, schema).await
}

/// Every job id in `schema.jobs`.
pub async fn ids(client: &Client, schema: &SchemaName) -> HashSet<i64> {
    harness::rows(
        client,
        &format!("SELECT id FROM \"{}\".jobs", schema.as_str()),
    )
    .await
    .iter()
    .map(|r| r.get::<_, i64>(0))
    .collect()
}
