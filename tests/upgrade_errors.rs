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
    // What the operator reads: what stays done, and that a rerun resumes;
    // never that nothing was changed.
    let text = err.to_string();
    assert!(
        text.contains(
            "already done, and kept: 4 steps run, 1 backfill batch committed (1 row); run the \
             same command again: it skips what is done and resumes at the step that failed"
        ),
        "{text}"
    );
    assert!(!text.contains("nothing was changed"), "{text}");
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

/// A step that keeps losing its lock gives up after its attempts, and says
/// how many over how long; each attempt's line names the session it waited
/// behind; the error says what stays done (the contract's backfill) and
/// that a rerun resumes. Here a reader holds `jobs` from right after the
/// contract's backfill, so its `ADD CHECK ... NOT VALID` (ACCESS EXCLUSIVE)
/// times out three times at 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_give_up_counts_its_attempts_and_each_attempt_names_the_holder() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_tries");
    create_version(&client, &schema, 1).await;
    // A job a version-1 engine claimed: the contract's backfill makes it ready.
    exec(
        &client,
        &format!(
            "INSERT INTO \"{}\".jobs (queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts, worker_id, claimed_at, claim_expires_at) \
             VALUES ('mail', '\\x00', 0, 1, 1, 30, 3, 1, 60, 1, 'w1', 1, 4000000000)",
            schema.as_str()
        ),
    )
    .await;
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

    let reader = harness::connect().await;
    let pid: i32 = reader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (backfilled, mut read_now) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (reading, wait_for_reader) = std::sync::mpsc::channel::<()>();
    let read_sql = format!("BEGIN; SELECT count(*) FROM \"{}\".jobs", schema.as_str());
    let holding = tokio::spawn(async move {
        if read_now.recv().await.is_some() {
            exec(&reader, &read_sql).await;
            let _ = reading.send(());
        }
        reader
    });
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Progress>::new()));
    let seen = events.clone();
    let mut progress = move |event: &Progress| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(event.clone());
        }
        if let Progress::StepDone { step, .. } = event
            && step.describe().contains("backfill")
        {
            let _ = backfilled.send(());
            let _ = wait_for_reader.recv_timeout(Duration::from_secs(60));
        }
    };
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 3,
        ..UpgradeOptions::default()
    };
    let err = upgrade::contract(&mut upgrader, &schema, &options, &mut progress)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind().name(), "lock_timeout", "{text}");
    assert!(
        text.starts_with("gave up after 3 attempts over ")
            && text.contains("(each waiting at most 100ms, its lock_timeout)"),
        "{text}"
    );
    assert!(text.contains(&format!("session {pid} ")), "{text}");
    assert!(
        text.contains("already done, and kept: 1 step run, 1 backfill batch committed (1 row)")
            && text.contains("resumes at the step that failed"),
        "{text}"
    );
    assert!(!text.contains("nothing was changed"), "{text}");
    let lines: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Progress::LockRetry { .. }))
        .map(Progress::line)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (attempt, line) in lines.iter().enumerate() {
        assert!(
            line.contains(&format!(
                "gave up waiting for the lock (attempt {}) after 100ms, {} attempt",
                attempt + 1,
                2 - attempt
            )) && line.contains(&format!("session {pid} ")),
            "{line}"
        );
    }
    let reader = holding.await.unwrap();
    exec(&reader, "ROLLBACK").await;
    let outcome = upgrade::contract(&mut upgrader, &schema, &options, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("the rerun: {e}"));
    assert!(!outcome.contract_pending(), "{}", outcome.message());
}

/// A role that owns nothing is told to run the upgrade as the owner, or to
/// have the owner run what `upgrade --dry-run` prints (the bootstrap's
/// `schema-gen sql | psql` would fail on a version-1 database), and that
/// remedy works: the owner's psql run of the printed steps expands it.
#[test]
fn the_privilege_error_of_an_upgrade_gives_the_remedy_that_works() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = harness::cli::runtime();
    let schema = harness::unique_schema_name("up_remedy");
    let role = harness::unique_name("up_app");
    rt.block_on(async {
        let admin = harness::connect().await;
        create_version(&admin, &schema, 1).await;
        exec(
            &admin,
            &format!(
                "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {role}; \
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
            ),
        )
        .await;
    });
    let ran = harness::cli::run(&[
        "upgrade",
        "--database-url",
        &harness::url_for_role(&role),
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(ran.code, std::process::ExitCode::from(2), "{}", ran.stderr);
    let line = ran.stderr.trim_end();
    assert!(
        line.starts_with(&format!("schema-gen: role {role} lacks ")),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "run `schema-gen upgrade --schema {schema}` as the role that owns them, or have that \
             role run with psql the steps `schema-gen upgrade --dry-run --schema {schema}` prints"
        )),
        "{line}"
    );
    assert!(!line.contains("schema-gen sql"), "{line}");
    assert!(line.ends_with("nothing was changed"), "{line}");

    let url = harness::database_url();
    let plan = harness::cli::run(&[
        "upgrade",
        "--dry-run",
        "--database-url",
        &url,
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(
        plan.code,
        std::process::ExitCode::SUCCESS,
        "{}",
        plan.stderr
    );
    let applied = harness::psql_script(&url, &plan.stdout);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    rt.block_on(async {
        let admin = harness::connect().await;
        let status = check::status(&admin, &schema, &Options::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            status.state,
            VersionState::ContractPending,
            "{}",
            status.message
        );
        exec(
            &admin,
            &format!("DROP SCHEMA {schema} CASCADE; DROP OWNED BY {role}; DROP ROLE {role}"),
        )
        .await;
    });
}

/// `--lock-timeout` at its documented maximum works for `upgrade` and
/// `upgrade --contract` (each step's statement bound is the lock bound plus
/// an allowance, clamped to what PostgreSQL takes, never past it).
#[test]
fn an_upgrade_runs_at_the_longest_lock_timeout() {
    if harness::skip_db_tests() {
        return;
    }
    let schema = harness::unique_schema_name("up_maxwait");
    harness::cli::runtime().block_on(async {
        create_version(&harness::connect().await, &schema, 1).await;
    });
    let url = harness::database_url();
    for extra in [None, Some("--contract")] {
        let mut args = vec![
            "upgrade",
            "--lock-timeout",
            "2147483647ms",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend(extra);
        let ran = harness::cli::run(&args);
        assert_eq!(
            ran.code,
            std::process::ExitCode::SUCCESS,
            "{args:?}: {}",
            ran.stderr
        );
    }
    let ran = harness::cli::run(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert!(ran.stdout.contains("matches the model"), "{}", ran.stdout);
}

/// An upgrade whose connection is lost after steps committed says which
/// stay done and that a rerun resumes (it said "nothing was changed"), and
/// the rerun does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upgrade_says_what_stays_done() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_cut");
    create_version(&client, &schema, 1).await;
    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let (second_done, mut cut_now) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (cut, wait_for_cut) = std::sync::mpsc::channel::<()>();
    let cutting = tokio::spawn(async move {
        if cut_now.recv().await.is_some() {
            exec(
                &client,
                &format!("SELECT pg_terminate_backend({pid}, 10000)"),
            )
            .await;
            let _ = cut.send(());
        }
    });
    let mut progress = harness::upgrade::pause_after_step(2, second_done, wait_for_cut);
    let err = upgrade::upgrade(
        &mut upgrader,
        &schema,
        &UpgradeOptions::default(),
        &mut progress,
    )
    .await
    .unwrap_err();
    cutting.await.unwrap();
    let text = err.to_string();
    assert_eq!(err.kind().name(), "connection", "{text}");
    assert!(
        text.contains("already done, and kept: 2 steps run;")
            && text.contains("resumes at the step that failed"),
        "{text}"
    );
    assert!(!text.contains("nothing was changed"), "{text}");
    let mut upgrader = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    let outcome = upgrade::upgrade(
        &mut upgrader,
        &schema,
        &UpgradeOptions::default(),
        &mut quiet,
    )
    .await
    .unwrap_or_else(|e| panic!("the rerun: {e}"));
    // The two it ran, and the version table (created by the leg that
    // records version 1, found done as every run finds it).
    assert_eq!(outcome.steps_skipped, 3, "{}", outcome.message());
}
