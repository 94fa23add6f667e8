//! The schema moved to the other worker with every row, and the
//! undistribute that would break it refused.

use std::process::ExitCode;

use harness::citus::{cluster, task_counts};
use harness::engine::run;
use harness::{describe_error, rows};
use schema_gen::render::quote_literal;
use schema_gen::statements::{FromRow, jobs, locks, streams};
use schema_model::{Job, Lock, SchemaName};
use tokio_postgres::Client;

use super::{NOW, citus_schema, event, hot_paths, job, shard_worker};

/// Every row of every table of `schema`, as one digest per table (in table
/// order): what a move must keep.
async fn contents(client: &Client, schema: &SchemaName) -> Vec<(String, i64, String)> {
    let mut all = Vec::new();
    for table in [
        "consumed_events",
        "dead_jobs",
        "jobs",
        "locks",
        "schedules",
        "schema_versions",
        "stream_events",
        "stream_offsets",
    ] {
        let row = &rows(
            client,
            &format!(
                "SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') \
                 FROM \"{schema}\".{table} t"
            ),
        )
        .await[0];
        all.push((table.to_owned(), row.get(0), row.get(1)));
    }
    all
}

/// Calls `sql` on the coordinator and returns its error, if any.
async fn call(client: &Client, sql: &str) -> Result<(), String> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| describe_error(&e))
}

/// Resharding under schema sharding is moving the schema's shard group to
/// another node. The identity columns of `jobs`, `stream_events` and
/// `locks` do not stand in the way: `citus_schema_move` with
/// `shard_transfer_mode => 'block_writes'` moves a populated schema to the
/// other worker keeping every row, the hot paths are then one task on the
/// new node, ids and fences go on from where they were, and `check` still
/// passes; `citus_move_shard_placement` of one table moves the whole group
/// back. The default mode (`auto`) and `force_logical` need
/// `wal_level = logical`, which the harness (like a default server) does
/// not have, and say so. `citus_schema_undistribute` is what the identity
/// columns refuse, changing nothing.
#[test]
fn the_schema_moves_to_the_other_worker_with_every_row_and_undistribute_is_refused() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = harness::cli::runtime();
    let (schema, from) = rt.block_on(async {
        let (client, schema) = citus_schema("citus_move").await;
        let mut last_id = 0;
        for _ in 0..20 {
            let row = &run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await[0];
            last_id = row.get::<_, i64>(0);
        }
        let claimed = run(&client, &jobs::claim(&schema, "mail", "w", NOW, 5)).await;
        assert_eq!(claimed.len(), 5);
        for i in 0..20 {
            run(
                &client,
                &streams::append(&schema, &event("s", &format!("k{i}"))),
            )
            .await;
        }
        run(
            &client,
            &locks::acquire_free(&schema, "ticker", "node-a", NOW + 30),
        )
        .await;
        let before = contents(&client, &schema).await;
        let from = shard_worker(&client, &schema).await;
        let to = 1 - from;
        let (from_port, to_port) = (cluster().workers[from], cluster().workers[to]);
        let literal = quote_literal(schema.as_str());
        assert_eq!(
            rows(&client, "SHOW wal_level").await[0].get::<_, String>(0),
            "replica"
        );
        for mode in ["", ", shard_transfer_mode => 'force_logical'"] {
            let err = call(
                &client,
                &format!("SELECT citus_schema_move({literal}, '127.0.0.1', {to_port}{mode})"),
            )
            .await
            .expect_err("a logical move without wal_level = logical");
            assert!(
                err.contains("logical decoding requires wal_level >= logical"),
                "{mode}: {err}"
            );
            assert_eq!(shard_worker(&client, &schema).await, from, "{mode}");
        }
        call(
            &client,
            &format!(
                "SELECT citus_schema_move({literal}, '127.0.0.1', {to_port}, \
                 shard_transfer_mode => 'block_writes')"
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("citus_schema_move with block_writes: {e}"));
        assert_eq!(shard_worker(&client, &schema).await, to);
        assert_eq!(
            contents(&client, &schema).await,
            before,
            "rows lost or changed"
        );

        // The hot paths: one task, on the new node.
        let claimed =
            Job::from_row(&run(&client, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
                .unwrap_or_else(|e| panic!("{e}"));
        // (A plan names the node of each task it could explain; the
        // row-moving CTEs' plans say `Could not get remote plan`.)
        let node = format!("Node: host=127.0.0.1 port={to_port} ");
        let mut named = Vec::new();
        for statement in hot_paths(&schema, &claimed) {
            let (counts, plan) = task_counts(&client, &statement).await;
            assert_eq!(counts, [1], "{}:\n{plan}", statement.name());
            let nodes: Vec<&str> = plan.lines().filter(|l| l.contains("Node: ")).collect();
            assert!(
                nodes.iter().all(|l| l.contains(&node)),
                "{} not on {to_port}:\n{plan}",
                statement.name()
            );
            if !nodes.is_empty() {
                named.push(statement.name());
            }
        }
        assert!(
            named.contains(&"claim") && named.contains(&"enqueue"),
            "{named:?}"
        );
        // Identity values are drawn on the coordinator: they go on, no
        // collision with the moved rows.
        let next: i64 = run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await[0].get(0);
        // (Not last_id + 1: Citus draws one for EXPLAIN of the enqueue above.)
        assert!(next > last_id, "id {next} after {last_id}");
        run(&client, &locks::clear_lapsed(&schema, "ticker", NOW + 31)).await;
        let taken = run(
            &client,
            &locks::acquire_free(&schema, "ticker", "node-b", NOW + 90),
        )
        .await;
        let fence = Lock::from_row(&taken[0])
            .unwrap_or_else(|e| panic!("{e}"))
            .fence;
        assert!(fence > 1, "fence {fence} after a move");

        // One table's placement moves the whole colocated group back, once
        // the moved-away copies are cleaned up.
        call(&client, "CALL citus_cleanup_orphaned_resources()")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let shard: i64 = rows(
            &client,
            &format!(
                "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = {}::regclass",
                quote_literal(&format!("{schema}.jobs"))
            ),
        )
        .await[0]
            .get(0);
        call(
            &client,
            &format!(
                "SELECT citus_move_shard_placement({shard}, '127.0.0.1', {to_port}, \
                 '127.0.0.1', {from_port}, shard_transfer_mode => 'block_writes')"
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("citus_move_shard_placement: {e}"));
        assert_eq!(shard_worker(&client, &schema).await, from);
        (schema, from)
    });
    let checked = harness::cli::run(&[
        "check",
        "--layout",
        "citus",
        "--database-url",
        &cluster().coordinator_url(),
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(
        checked.code,
        ExitCode::SUCCESS,
        "{}{}",
        checked.stdout,
        checked.stderr
    );

    // Undistributing is what the identity columns refuse; nothing changes.
    rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        let before = contents(&client, &schema).await;
        let err = call(
            &client,
            &format!(
                "SELECT citus_schema_undistribute({})",
                quote_literal(schema.as_str())
            ),
        )
        .await
        .expect_err("undistributing a schema with identity columns");
        assert!(
            err.contains("cannot complete operation on a table with identity column"),
            "{err}"
        );
        assert_eq!(shard_worker(&client, &schema).await, from);
        assert_eq!(contents(&client, &schema).await, before);
    });
}
