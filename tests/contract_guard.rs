//! `schema-gen upgrade --contract` while engines of version 1 are still
//! connected: refused, naming each (by its `application_name`, or by its
//! last statement being one only version 1 runs), nothing changed; run
//! anyway with `--allow-older-engines`, after which a version-1 enqueue
//! fails (`null value in column "ready"`), as the refusal and the README
//! say; and run without the flag once they are gone.
//!
//! A session named `alkstore-engine/<release>` counts for every engine
//! schema of its database, so the tagged sessions live in one test only
//! (the binary's tests run in parallel on one database).

use std::process::ExitCode;

use harness::cli::{Ran, run, runtime};
use harness::history::{OldStatement, create_version, old_statements};
use harness::{connect_url, exec};
use schema_gen::check::{self, VersionState};
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_gen::{Options, SchemaName};
use tokio_postgres::Client;

/// A version-1 schema, expanded to this release's version (its contract
/// pending).
async fn expanded_version_1(prefix: &str) -> SchemaName {
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name(prefix);
    create_version(&admin, &schema, 1).await;
    let mut upgrader = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    upgrade::upgrade(
        &mut upgrader,
        &schema,
        &UpgradeOptions::default(),
        &mut quiet,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    schema
}

/// A version-1 engine's connection, named `application` when given.
async fn engine(application: Option<&str>) -> (Client, i32) {
    let mut url = harness::database_url();
    if let Some(name) = application {
        url.push_str(&format!(" application_name={name}"));
    }
    let client = connect_url(&url).await;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    (client, pid)
}

/// Version 1's enqueue, prepared and run on `client` as that release's
/// engine runs it.
async fn enqueue_v1(
    client: &Client,
    statement: &OldStatement,
) -> Result<(), tokio_postgres::Error> {
    let (queue, payload, priority) = ("mail", vec![1_u8], 0_i32);
    let (run_at, expires, enqueued) = (1_i64, None::<i64>, 1_i64);
    let (visibility, attempts, backoff, retention) = (30_i64, 3_i32, 1_i64, 60_i64);
    let prepared = client.prepare(&statement.sql).await?;
    let values = statement.bind(&[
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
    ]);
    client.query(&prepared, &values).await.map(|_| ())
}

fn contract(schema: &SchemaName, extra: &[&str]) -> Ran {
    let url = harness::database_url();
    let mut args = vec![
        "upgrade",
        "--contract",
        "--database-url",
        &url,
        "--schema",
        schema.as_str(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

async fn state(schema: &SchemaName) -> VersionState {
    let admin = harness::connect().await;
    check::status(&admin, schema, &Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .state
}

/// Refused while a version-1 engine named `alkstore-engine/e63468a` (idle,
/// it has run nothing of the engine's) and an unnamed one whose last
/// statement was version 1's enqueue are connected, naming both with
/// their role and since when; still refused, naming the unnamed one, once
/// the named one is gone; run once neither is left.
#[test]
fn a_contract_refuses_while_version_1_engines_are_connected_and_names_them() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let (schema, named, unnamed, named_pid, unnamed_pid) = rt.block_on(async {
        let schema = expanded_version_1("cguard").await;
        let (named, named_pid) = engine(Some("alkstore-engine/e63468a")).await;
        let (unnamed, unnamed_pid) = engine(None).await;
        let old = old_statements(1, &schema);
        enqueue_v1(&unnamed, &old["enqueue"])
            .await
            .unwrap_or_else(|e| panic!("version 1's enqueue on the expanded schema: {e}"));
        (schema, named, unnamed, named_pid, unnamed_pid)
    });

    let refused = contract(&schema, &["--format", "json"]);
    assert_eq!(refused.code, ExitCode::from(2), "{}", refused.stderr);
    let json: serde_json::Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(json["kind"], "older_engines", "{json}");
    assert!(json["done"].is_null(), "{json}");
    let line = refused.stderr.trim_end();
    for words in [
        format!(
            "session {named_pid} (role postgres, application \"alkstore-engine/e63468a\", \
             connected since "
        ),
        "runs version 1 (by its application_name)".to_owned(),
        format!("session {unnamed_pid} (role postgres, connected since "),
        "runs version 1 (by its last statement, version 1's enqueue)".to_owned(),
        "engines older than version 2 are still connected".to_owned(),
        "inserts into jobs (null value in column \"ready\")".to_owned(),
        "their enqueues included".to_owned(),
        "nothing was changed".to_owned(),
        "--allow-older-engines".to_owned(),
    ] {
        assert!(line.contains(&words), "{words:?} in {line}");
    }
    rt.block_on(async {
        assert_eq!(state(&schema).await, VersionState::ContractPending);
        drop(named);
    });
    let (still_refused, _) = wait_for_exit(&schema, named_pid);
    assert_eq!(
        still_refused.code,
        ExitCode::from(2),
        "{}",
        still_refused.stderr
    );
    assert!(
        still_refused
            .stderr
            .contains(&format!("session {unnamed_pid} "))
            && !still_refused
                .stderr
                .contains(&format!("session {named_pid} ")),
        "{}",
        still_refused.stderr
    );
    rt.block_on(async {
        drop(unnamed);
    });
    let (ran, _) = wait_for_exit(&schema, unnamed_pid);
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    rt.block_on(async { assert_eq!(state(&schema).await, VersionState::Current) });
}

/// Runs the contract once the backend `pid` has left `pg_stat_activity`
/// (a dropped client's backend ends a moment later).
fn wait_for_exit(schema: &SchemaName, pid: i32) -> (Ran, ()) {
    runtime().block_on(async {
        let admin = harness::connect().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await
                .unwrap()
                .get(0);
            if left == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "session {pid} never ended"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    (contract(schema, &[]), ())
}

/// With `--allow-older-engines` the contract runs beside a version-1
/// engine, warns that it fails from now on, and it does: its next enqueue
/// is refused (`null value in column "ready"`), not only its claims.
#[test]
fn a_contract_allowed_beside_a_version_1_engine_breaks_its_enqueues() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let (schema, unnamed, old) = rt.block_on(async {
        let schema = expanded_version_1("cguard_allow").await;
        let (unnamed, _) = engine(None).await;
        let old = old_statements(1, &schema);
        enqueue_v1(&unnamed, &old["enqueue"])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (schema, unnamed, old)
    });
    let ran = contract(&schema, &["--allow-older-engines"]);
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("warning: contracting while engines of older versions are connected"),
        "{}",
        ran.stderr
    );
    rt.block_on(async {
        let err = enqueue_v1(&unnamed, &old["enqueue"])
            .await
            .expect_err("version 1's enqueue after the contract");
        let message = err
            .as_db_error()
            .map(|db| db.message().to_owned())
            .unwrap_or_default();
        assert!(
            message.contains("null value in column \"ready\""),
            "{message}"
        );
        exec(
            &harness::connect().await,
            &format!("DROP SCHEMA \"{schema}\" CASCADE"),
        )
        .await;
    });
}

/// `--allow-older-engines` goes with `--contract` only.
#[test]
fn allow_older_engines_needs_the_contract() {
    let ran = run(&["upgrade", "--allow-older-engines", "--schema", "alk"]);
    assert_eq!(ran.code, ExitCode::from(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("--contract"), "{}", ran.stderr);
}
