//! Smoke tests of the cluster itself, of a model table distributed on it,
//! and of the install step a missing or other Citus is refused with.

use std::path::Path;

use harness::citus::{CITUS_VERSION, citus_installed, cluster, expected_version, task_counts};
use harness::engine::engine_schema;
use harness::{describe_error, rows};
use schema_gen::render::quote_literal;
use schema_gen::statements::locks;

#[tokio::test]
async fn the_cluster_is_a_coordinator_and_two_active_workers() {
    if harness::skip_db_tests() {
        return;
    }
    let cluster = cluster();
    eprintln!("Citus cluster started in {:?}", cluster.startup);
    let coordinator = cluster.connect_coordinator().await;
    let version: String = rows(&coordinator, "SELECT citus_version()").await[0].get(0);
    assert!(
        version.starts_with(&format!("Citus {CITUS_VERSION} ")),
        "{version}"
    );
    let mut workers: Vec<i64> = rows(
        &coordinator,
        "SELECT node_port FROM citus_get_active_worker_nodes()",
    )
    .await
    .iter()
    .map(|row| row.get(0))
    .collect();
    workers.sort();
    let mut expected: Vec<i64> = cluster.workers.iter().map(|p| i64::from(*p)).collect();
    expected.sort();
    assert_eq!(workers, expected);

    let is_coordinator = "SELECT citus_is_coordinator()";
    assert!(rows(&coordinator, is_coordinator).await[0].get::<_, bool>(0));
    for index in 0..2 {
        let worker = cluster.connect_worker(index).await;
        assert!(
            !rows(&worker, is_coordinator).await[0].get::<_, bool>(0),
            "worker {index} says it is the coordinator"
        );
    }
}

#[tokio::test]
async fn the_model_locks_table_distributes_by_name_and_renew_and_release_route_to_one_shard() {
    if harness::skip_db_tests() {
        return;
    }
    let cluster = cluster();
    let coordinator = cluster.connect_coordinator().await;
    // The product's own DDL, as `schema-gen sql` prints it.
    let schema = engine_schema(&coordinator, "citus_smoke").await;
    let table = format!("\"{schema}\".locks");
    coordinator
        .batch_execute(&format!(
            "SELECT create_distributed_table({}, 'name', colocate_with => 'none')",
            quote_literal(&table)
        ))
        .await
        .unwrap_or_else(|e| panic!("distributing {table}: {}", describe_error(&e)));

    let partition = rows(
        &coordinator,
        &format!(
            "SELECT partmethod::text, column_to_column_name(logicalrelid, partkey), \
                    (SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid) \
             FROM pg_dist_partition p WHERE logicalrelid = {}::regclass",
            quote_literal(&table)
        ),
    )
    .await;
    assert_eq!(partition.len(), 1, "{table} is not in pg_dist_partition");
    assert_eq!(partition[0].get::<_, String>(0), "h", "hash distribution");
    assert_eq!(partition[0].get::<_, String>(1), "name");
    let shards: i64 = partition[0].get(2);
    assert!(shards > 1, "{table} has {shards} shards");

    for statement in [
        locks::renew(&schema, "ticker", "node-a", 7, 1_700_000_060, 1_700_000_020),
        locks::release(&schema, "ticker", "node-a", 7),
    ] {
        let (counts, plan) = task_counts(&coordinator, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must route to one shard:\n{plan}",
            statement.name()
        );
    }
    // A statement without the distribution key in it visits every shard:
    // the count above is the routing, not a constant.
    let fan_out = coordinator
        .query(&format!("EXPLAIN (COSTS OFF) SELECT * FROM {table}"), &[])
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN of a full scan: {}", describe_error(&e)));
    let plan: Vec<String> = fan_out.iter().map(|row| row.get(0)).collect();
    assert!(
        plan.iter()
            .any(|line| line.trim() == format!("Task Count: {shards}")),
        "{}",
        plan.join("\n")
    );
}

#[test]
fn a_server_without_citus_is_refused_with_the_install_step() {
    let why = citus_installed(Path::new("/nonexistent/postgresql/bin"))
        .expect_err("no citus.so under /nonexistent");
    assert!(why.contains("bash .ci/install-citus"), "{why}");
    assert!(
        why.contains("/nonexistent/postgresql/lib/citus.so"),
        "{why}"
    );
}

#[test]
fn another_citus_version_is_refused_with_the_install_step() {
    let why = expected_version("Citus 12.1.5 on x86_64-pc-linux-gnu, compiled by gcc")
        .expect_err("12.1.5 is not the version the tests expect");
    assert!(why.contains("Citus 12.1.5"), "{why}");
    assert!(why.contains("bash .ci/install-citus"), "{why}");
    // A version that merely starts with the expected digits is not it either.
    assert!(expected_version("Citus 13.2.20 on x86_64").is_err());
    assert!(expected_version(&format!("Citus {CITUS_VERSION} on x86_64")).is_ok());
}
