//! The dry run's script keeps the upgrade's safety when psql runs it.

use super::*;

/// The dry run's script keeps the upgrade's safety when psql runs it: it
/// takes the upgrade lock (giving up at the lock bound while another
/// upgrade holds it, having changed nothing), gives up a catalog change
/// behind a reader at the lock bound instead of queueing the engine behind
/// it, gives up an index build at the wait bound, drops the invalid index
/// that leaves when printed and run again, and backfills in transactions of
/// at most one window of keys.
#[tokio::test]
async fn the_dry_run_script_keeps_the_upgrades_bounds_and_lock() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_script").await;
    let url = harness::database_url();
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(200),
        wait_timeout: Duration::from_millis(500),
        batch_size: 500,
        ..short()
    };
    let script = || async { upgrade::dry_run(&client, &schema, &options, false).await };
    // A script stopped at a bound of 200 or 500 ms ends in seconds: one
    // that does not has lost a bound.
    let limit = Duration::from_secs(8);
    let stopped = |ran: &std::process::Output, what: &str| {
        let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
        assert!(!ran.status.success(), "{what}: the script ran through");
        assert!(stderr.contains("lock timeout"), "{what}: {stderr}");
    };

    // Another upgrade holds the upgrade lock: nothing changes.
    let before = (
        harness::dump::dump_schema(&client, schema.as_str()).await,
        dump_rows(&client, &schema).await,
    );
    let holder = harness::connect().await;
    let key = upgrade::upgrade_lock_key(&schema);
    holder
        .query_one("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let plan = script().await.unwrap_or_else(|e| panic!("{e}"));
    stopped(
        &psql_within(&url, &plan.script, limit),
        "behind the upgrade lock",
    );
    let after = (
        harness::dump::dump_schema(&client, schema.as_str()).await,
        dump_rows(&client, &schema).await,
    );
    assert!(
        after == before,
        "the script changed the schema without the upgrade lock"
    );
    holder
        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();

    // A reader holds jobs: the first catalog change gives up at 200 ms.
    let reader = harness::connect().await;
    exec(
        &reader,
        &format!("BEGIN; SELECT count(*) FROM {}", jobs(&schema)),
    )
    .await;
    let plan = script().await.unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    stopped(&psql_within(&url, &plan.script, limit), "behind a reader");
    assert!(started.elapsed() < Duration::from_secs(10));
    exec(&reader, "COMMIT").await;

    // A snapshot older than the first index build: it gives up at 500 ms,
    // leaving an invalid index.
    let snapshot = harness::connect().await;
    exec(&snapshot, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").await;
    let plan = script().await.unwrap_or_else(|e| panic!("{e}"));
    stopped(
        &psql_within(&url, &plan.script, limit),
        "behind an old snapshot",
    );
    exec(&snapshot, "COMMIT").await;
    let invalid = format!(
        "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
         WHERE c.relnamespace = '{}'::regnamespace AND NOT x.indisvalid",
        schema.as_str()
    );
    assert_eq!(count(&client, &invalid).await, 1);

    // Printed again and run: complete, the invalid index built again. (With
    // a wait bound of seconds: an index build waits for every older
    // snapshot in the database, the other tests' too.)
    let completing = UpgradeOptions {
        wait_timeout: Duration::from_secs(10),
        ..options.clone()
    };
    let plan = upgrade::dry_run(&client, &schema, &completing, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ran = psql_within(&url, &plan.script, Duration::from_secs(30));
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(count(&client, &invalid).await, 0);
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;
    let windows: Vec<i64> = rows(
        &client,
        &format!(
            "SELECT count(*) FROM {} WHERE ready GROUP BY xmin::text",
            jobs(&schema)
        ),
    )
    .await
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(windows.len() >= 5, "{windows:?}");
    assert!(windows.iter().all(|n| *n <= 500), "{windows:?}");
}
