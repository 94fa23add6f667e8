//! Upgrades on the Citus cluster (the harness's coordinator and two
//! workers): a version-1 schema distributed with `citus_schema_distribute`
//! reaches the model with `schema-gen upgrade --layout citus`, expand then
//! contract, every row kept (count and md5 of each table's rows, over the
//! columns version 1 had), the new table a single-shard table of the
//! schema's colocation group, and `check --layout citus` finds the model
//! after each phase (exit 4, `contract_pending`, after the expand; 0 after
//! the contract); an upgrade that creates the schema creates it distributed.

use std::process::ExitCode;

use harness::citus::cluster;
use harness::cli::{run, runtime};
use harness::history::{create_version, old_statements};
use harness::{exec, rows};
use schema_gen::render::quote_literal;
use schema_model::SchemaName;
use tokio_postgres::Client;

/// Count and md5 of each table's rows over `columns` (table, columns),
/// in key order.
async fn fingerprints(
    client: &Client,
    schema: &SchemaName,
    tables: &[(String, Vec<String>)],
) -> Vec<(String, i64, String)> {
    let mut out = Vec::new();
    for (table, columns) in tables {
        let row = columns
            .iter()
            .map(|c| format!("t.\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let found = rows(
            client,
            &format!(
                "SELECT count(*), md5(COALESCE(string_agg(ROW({row})::text, '|' ORDER BY \
                 ROW({row})::text), '')) FROM \"{schema}\".\"{table}\" t"
            ),
        )
        .await;
        out.push((table.clone(), found[0].get(0), found[0].get(1)));
    }
    out
}

/// Each table of `schema` and its columns, as the catalog has them now.
async fn tables_and_columns(client: &Client, schema: &SchemaName) -> Vec<(String, Vec<String>)> {
    let found = rows(
        client,
        &format!(
            "SELECT c.relname::text, array_agg(a.attname::text ORDER BY a.attnum) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             WHERE n.nspname = {} AND c.relkind = 'r' GROUP BY 1 ORDER BY 1",
            quote_literal(schema.as_str())
        ),
    )
    .await;
    found.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Rows written by version 1's own statements (and a bulk of jobs), so
/// every table the upgrade touches has rows to keep.
async fn fill_with_version_1(client: &Client, schema: &SchemaName) {
    let old = old_statements(1, schema);
    let now: i64 = 1_800_000_000;
    for i in 0..40_i64 {
        let queue = if i % 2 == 0 { "mail" } else { "sms" };
        let payload = i.to_be_bytes().to_vec();
        let priority = i32::try_from(i % 5).unwrap_or(0);
        let run_at = now - 100 + i * 10;
        let expires: Option<i64> = (i % 7 == 0).then_some(now + 3600);
        let (enqueued, visibility, attempts, backoff, retention) =
            (now - 200, 30_i64, 3_i32, 1_i64, 600_i64);
        old["enqueue"]
            .run(
                client,
                &[
                    ("queue", &queue),
                    ("payload", &payload),
                    ("priority", &priority),
                    ("run_at", &run_at),
                    ("expires_at", &expires),
                    ("enqueued_at", &enqueued),
                    ("visibility_timeout_s", &visibility),
                    ("max_attempts", &attempts),
                    ("backoff_base_s", &backoff),
                    ("dead_letter_retention_s", &retention),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("version 1's enqueue: {e}"));
    }
    // Two jobs claimed the version-1 way (claim, then mark).
    let limit = 2_i64;
    let claimed = old["claim"]
        .run(
            client,
            &[("queue", &"mail"), ("now", &now), ("limit", &limit)],
        )
        .await
        .unwrap_or_else(|e| panic!("version 1's claim: {e}"));
    for row in claimed {
        let id: i64 = row.get(0);
        old["claim_mark"]
            .run(
                client,
                &[
                    ("worker_id", &"w1"),
                    ("claimed_at", &now),
                    ("claim_expires_at", &(now + 30)),
                    ("id", &id),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("version 1's claim_mark: {e}"));
    }
    for i in 0..5_i64 {
        let payload = vec![u8::try_from(i).unwrap_or(0)];
        old["stream_append"]
            .run(
                client,
                &[
                    ("stream", &"orders"),
                    ("payload", &payload),
                    ("created_at", &now),
                ],
            )
            .await
            .unwrap_or_else(|e| panic!("version 1's stream_append: {e}"));
    }
    let offset = 2_i64;
    old["checkpoint"]
        .run(
            client,
            &[
                ("stream", &"orders"),
                ("consumer", &"billing"),
                ("offset", &offset),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("version 1's checkpoint: {e}"));
    old["lock_acquire"]
        .run(
            client,
            &[
                ("name", &"leader"),
                ("owner", &"w1"),
                ("expires_at", &(now + 60)),
            ],
        )
        .await
        .unwrap_or_else(|e| panic!("version 1's lock_acquire: {e}"));
    let s = schema.as_str();
    exec(
        client,
        &format!(
            "INSERT INTO \"{s}\".dead_jobs (id, queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts, worker_id, claimed_at, last_error, died_at) \
             VALUES (99999, 'mail', '\\x01', 0, 1, 1, 30, 3, 1, 600, 3, 'w9', 5, 'gave up', {now}); \
             INSERT INTO \"{s}\".schedules (name, spec, every_s, queue, payload, priority, \
             max_attempts, visibility_timeout_s, backoff_base_s, dead_letter_retention_s, \
             next_fire_at, enabled) \
             VALUES ('hourly', '@every 1h', 3600, 'mail', '\\x03', 0, 3, 30, 1, 600, {now}, true); \
             INSERT INTO \"{s}\".consumed_events (consumer, event_id, consumed_at) \
             VALUES ('billing', 'e-1', 1)"
        ),
    )
    .await;
}

/// The colocation group of each table of `schema` that Citus knows, and
/// whether it is a single-shard table (no distribution column, not a
/// reference table).
async fn placement(client: &Client, schema: &SchemaName) -> Vec<(String, i32, bool)> {
    let found = rows(
        client,
        &format!(
            "SELECT c.relname::text, p.colocationid, \
                    p.partmethod = 'n' AND p.repmodel = 's' AND p.partkey IS NULL \
             FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {} ORDER BY 1",
            quote_literal(schema.as_str())
        ),
    )
    .await;
    found
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Asserts `check --layout citus` exits `code` (0 matches, 4 contract
/// pending: the model's shape either way).
fn check_says(url: &str, schema: &SchemaName, code: u8, what: &str) {
    let check = run(&[
        "check",
        "--layout",
        "citus",
        "--database-url",
        url,
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(
        check.code,
        ExitCode::from(code),
        "check --layout citus {what}: {}{}",
        check.stdout,
        check.stderr
    );
}

#[test]
fn a_distributed_version_1_schema_reaches_the_model_keeping_every_row() {
    if harness::skip_db_tests() {
        return;
    }
    let url = cluster().coordinator_url();
    let rt = runtime();
    let schema = harness::unique_schema_name("cup_v1");
    let (columns, before, groups) = rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        create_version(&client, &schema, 1).await;
        fill_with_version_1(&client, &schema).await;
        exec(
            &client,
            &format!(
                "SELECT citus_schema_distribute({})",
                quote_literal(&format!("\"{schema}\""))
            ),
        )
        .await;
        // As Citus asks after distributing tables that held rows: the
        // coordinator's local copies go (the rows live in the shards).
        exec(
            &client,
            &format!(
                "SELECT truncate_local_data_after_distributing_table(c.oid) FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = {} AND c.relkind = 'r'",
                quote_literal(schema.as_str())
            ),
        )
        .await;
        let columns = tables_and_columns(&client, &schema).await;
        let before = fingerprints(&client, &schema, &columns).await;
        let groups = placement(&client, &schema).await;
        (columns, before, groups)
    });
    assert_eq!(groups.len(), 7, "{groups:?}");
    let group = groups[0].1;
    assert!(
        groups.iter().all(|(_, g, single)| *g == group && *single),
        "version 1 distributed as one schema: {groups:?}"
    );
    assert!(
        before.iter().any(|(t, n, _)| t == "jobs" && *n == 40),
        "{before:?}"
    );

    let upgrade = |extra: &[&str]| {
        let mut args = vec![
            "upgrade",
            "--layout",
            "citus",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let expanded = upgrade(&[]);
    assert_eq!(
        expanded.code,
        ExitCode::SUCCESS,
        "upgrade --layout citus: {}{}",
        expanded.stdout,
        expanded.stderr
    );
    assert!(
        expanded.stdout.contains("with its contract pending"),
        "{}",
        expanded.stdout
    );
    check_says(&url, &schema, 4, "after the expand");
    let contracted = upgrade(&["--contract"]);
    assert_eq!(
        contracted.code,
        ExitCode::SUCCESS,
        "upgrade --contract --layout citus: {}{}",
        contracted.stdout,
        contracted.stderr
    );
    check_says(&url, &schema, 0, "after the contract");

    let (after, groups_after) = rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        let after = fingerprints(&client, &schema, &columns).await;
        let groups = placement(&client, &schema).await;
        exec(&client, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
        (after, groups)
    });
    assert_eq!(
        after, before,
        "every row of every table, over version 1's columns"
    );
    assert_eq!(groups_after.len(), 8, "{groups_after:?}");
    assert!(
        groups_after
            .iter()
            .any(|(t, g, single)| t == "schema_versions" && *g == group && *single),
        "the new table is a single-shard table of the schema's group: {groups_after:?}"
    );
    assert!(
        groups_after
            .iter()
            .all(|(_, g, single)| *g == group && *single),
        "{groups_after:?}"
    );
}

/// `upgrade --layout citus` on a schema that does not exist creates it
/// distributed (as `apply --layout citus` would), and check passes.
#[test]
fn an_upgrade_that_creates_the_schema_creates_it_distributed() {
    if harness::skip_db_tests() {
        return;
    }
    let url = cluster().coordinator_url();
    let schema = harness::unique_schema_name("cup_new");
    let created = run(&[
        "upgrade",
        "--layout",
        "citus",
        "--database-url",
        &url,
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(
        created.code,
        ExitCode::SUCCESS,
        "{}{}",
        created.stdout,
        created.stderr
    );
    assert!(
        created.stdout.contains("created schema"),
        "{}",
        created.stdout
    );
    check_says(&url, &schema, 0, "after the upgrade created it");
    let groups = runtime().block_on(async {
        let client = cluster().connect_coordinator().await;
        let groups = placement(&client, &schema).await;
        exec(&client, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
        groups
    });
    assert_eq!(groups.len(), 8, "{groups:?}");
    assert!(
        groups
            .iter()
            .all(|(_, g, single)| *g == groups[0].1 && *single),
        "{groups:?}"
    );
}

/// A version-1 schema distributed on the cluster, its coordinator's local
/// copies truncated (as Citus asks after distributing tables that held
/// rows).
async fn distributed_version_1(client: &Client, prefix: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    create_version(client, &schema, 1).await;
    fill_with_version_1(client, &schema).await;
    exec(
        client,
        &format!(
            "SELECT citus_schema_distribute({}); \
             SELECT truncate_local_data_after_distributing_table(c.oid) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = {} AND c.relkind = 'r'",
            quote_literal(&format!("\"{schema}\"")),
            quote_literal(schema.as_str())
        ),
    )
    .await;
    schema
}

/// A step's lock wait on the worker's shard is bounded by the lock bound,
/// as on the coordinator: the bounds reach the worker's part of the step's
/// transaction (`citus.propagate_set_commands`), so a session holding the
/// shard on the worker makes the step give up after `lock_timeout` and try
/// again, not wait for the statement bound while the coordinator holds the
/// table's lock and queues the engine.
#[tokio::test]
async fn a_step_waiting_on_the_worker_gives_up_at_the_lock_bound_and_retries() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = cluster().connect_coordinator().await;
    let schema = distributed_version_1(&client, "cup_wbound").await;
    let found = rows(
        &client,
        &format!(
            "SELECT shard_name(s.logicalrelid, s.shardid)::text, n.nodeport \
             FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid) \
             JOIN pg_dist_node n USING (groupid) \
             WHERE s.logicalrelid = '\"{schema}\".jobs'::regclass"
        ),
    )
    .await;
    let shard: String = found[0].get(0);
    let port: i32 = found[0].get(1);
    let worker = cluster()
        .workers
        .iter()
        .position(|w| i32::from(*w) == port)
        .unwrap_or_else(|| panic!("jobs' shard on port {port}, not a worker"));
    let holder = cluster().connect_worker(worker).await;
    exec(
        &holder,
        &format!(
            "BEGIN; SET LOCAL citus.enable_manual_changes_to_shards = on; \
             LOCK TABLE {shard} IN ACCESS SHARE MODE"
        ),
    )
    .await;
    let options = schema_gen::upgrade::UpgradeOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        lock_attempts: 2,
        layout: schema_model::Layout::CitusSchemaSharding,
        ..schema_gen::upgrade::UpgradeOptions::default()
    };
    let retries = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = retries.clone();
    let mut progress = move |event: &schema_gen::upgrade::Progress| {
        if matches!(event, schema_gen::upgrade::Progress::LockRetry { .. }) {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let err = schema_gen::upgrade::upgrade(&mut client, &schema, &options, &mut progress)
        .await
        .expect_err("the shard is held on the worker");
    assert_eq!(err.kind().name(), "lock_timeout", "{err}");
    assert_eq!(
        retries.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "{err}"
    );
    exec(&holder, "ROLLBACK").await;
    exec(&client, &format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}
