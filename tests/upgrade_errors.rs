//! Typed failures of bootstrap and upgrade: each distinct failure has its
//! own kind, its words name the real role, and an upgrade's error carries
//! what was done before it ([`schema_gen::error::Done`]).

use std::time::Duration;

use harness::exec;
use harness::history::create_version;
use schema_gen::check::{self, VersionState};
use schema_gen::error::Done;
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_gen::{ErrorKind, Options, bootstrap};
use schema_model::SchemaName;

/// A role that may use the schema and write its rows, and owns nothing:
/// the upgrade's first DDL is refused, and the error names that role (not
/// "the current role"), with nothing done.
#[tokio::test]
async fn an_upgrade_without_ownership_names_the_role_and_says_nothing_was_done() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("up_priv");
    let role = harness::unique_name("up_runtime");
    create_version(&admin, &schema, 1).await;
    exec(
        &admin,
        &format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {role}; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
        ),
    )
    .await;
    let mut runtime = harness::connect_url(&harness::url_for_role(&role)).await;
    let mut quiet = |_: &Progress| {};
    let err = upgrade::upgrade(
        &mut runtime,
        &schema,
        &UpgradeOptions::default(),
        &mut quiet,
    )
    .await
    .expect_err("a role that owns nothing cannot upgrade");
    match err.kind() {
        ErrorKind::Privilege { role: named, .. } => assert_eq!(named, &role),
        other => panic!("expected a privilege error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&format!("role {role} lacks ")),
        "{err}"
    );
    assert_eq!(err.kind().name(), "privilege");
    assert_eq!(err.done(), Some(&Done::default()), "{err}");
    assert!(!err.done().is_some_and(Done::changed_anything));
    drop(runtime);
    exec(
        &admin,
        &format!("DROP SCHEMA {schema} CASCADE; DROP OWNED BY {role}; DROP ROLE {role}"),
    )
    .await;
}

/// Rows that say a version was contracted before it expanded are no
/// upgrade this release can follow: bootstrap and upgrade refuse them with
/// a kind of their own (it was drift with no difference, and an untyped
/// error), and `check` says so.
#[tokio::test]
async fn version_rows_no_upgrade_follows_are_refused_as_inconsistent() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("up_rows");
    bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    exec(
        &client,
        &format!(
            "UPDATE \"{}\".schema_versions SET expanded_at = NULL",
            schema.as_str()
        ),
    )
    .await;
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InconsistentVersions { .. }),
        "{err}"
    );
    assert_eq!(err.kind().name(), "inconsistent_versions");
    let mut quiet = |_: &Progress| {};
    let err = upgrade::upgrade(&mut client, &schema, &UpgradeOptions::default(), &mut quiet)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InconsistentVersions { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("schema_versions rows"), "{err}");
    let status = check::status(&client, &schema, &Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.state, VersionState::Unknown, "{}", status.message);
    assert!(!status.passes());
}

/// An upgrade that fails after steps ran carries what it did: here the
/// version-2 swap waits out (without queueing) a session that takes SHARE
/// UPDATE EXCLUSIVE on `jobs` right after the index build, for its whole
/// bound, after four steps and a backfill batch ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upgrade_carries_the_steps_and_batches_it_did() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_done");
    create_version(&client, &schema, 1).await;
    exec(
        &client,
        &format!(
            "INSERT INTO \"{}\".jobs (queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts) VALUES ('mail', '\\x00', 0, 1, 1, 30, 3, 1, 60, 0)",
            schema.as_str()
        ),
    )
    .await;
    let blocker = harness::connect().await;
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (built, mut lock_now) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (locked, wait_for_lock) = std::sync::mpsc::channel::<()>();
    let lock_sql = format!(
        "BEGIN; LOCK TABLE \"{}\".jobs IN SHARE UPDATE EXCLUSIVE MODE",
        schema.as_str()
    );
    let blocking = tokio::spawn(async move {
        if lock_now.recv().await.is_some() {
            exec(&blocker, &lock_sql).await;
            let _ = locked.send(());
        }
        blocker
    });
    // Right after the replacement index is built, and before the swap
    // looks for sessions that alter the table, the blocker takes its lock
    // (the callback waits for it, so the order is certain).
    let mut progress = move |event: &Progress| {
        if let Progress::StepDone { step, .. } = event
            && step.describe().contains("create index jobs_claim_idx_next")
        {
            let _ = built.send(());
            let _ = wait_for_lock.recv_timeout(Duration::from_secs(60));
        }
    };
    let options = UpgradeOptions {
        wait_timeout: Duration::from_millis(300),
        ..UpgradeOptions::default()
    };
    let mut upgrader = harness::connect().await;
    let err = upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress)
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Blocked { .. }), "{err}");
    assert_eq!(err.kind().name(), "blocked");
    assert!(err.to_string().contains(&format!("session {pid}")), "{err}");
    let done = err.done().copied().unwrap_or_default();
    assert_eq!(
        (done.steps_run, done.steps_skipped, done.batches, done.rows),
        (4, 0, 1, 1),
        "{err}"
    );
    assert!(done.changed_anything());
    let blocker = blocking.await.unwrap();
    exec(&blocker, "ROLLBACK").await;
    // A rerun resumes from there.
    let mut quiet = |_: &Progress| {};
    let outcome = upgrade::upgrade(&mut upgrader, &schema, &options, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.steps_skipped, 4, "{}", outcome.message());
}

/// The CLI's error JSON has `done`: null for an upgrade refused before any
/// step (another upgrade holds the lock).
#[tokio::test]
async fn the_json_of_an_upgrade_refused_before_any_step_has_done_null() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema: SchemaName = harness::unique_schema_name("up_done_json");
    create_version(&client, &schema, 1).await;
    let holder = harness::connect().await;
    holder
        .query_one(
            "SELECT pg_advisory_lock($1)",
            &[&upgrade::upgrade_lock_key(&schema)],
        )
        .await
        .unwrap();
    let url = harness::database_url();
    let ran = tokio::task::spawn_blocking(move || {
        harness::cli::run(&[
            "upgrade",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
            "--format",
            "json",
        ])
    })
    .await
    .unwrap();
    assert_eq!(ran.code, std::process::ExitCode::from(2), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(json["kind"], "upgrade_locked", "{json}");
    assert!(
        json.get("done").is_some_and(serde_json::Value::is_null),
        "{json}"
    );
}
