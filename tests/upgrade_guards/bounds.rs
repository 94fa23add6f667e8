//! The bounds of each kind of wait, in the upgrade, its catalog reads and
//! the command line; and the session handed back as found.

use super::*;

/// An index build `CONCURRENTLY` waits for the transactions older than it
/// (here a snapshot held from the moment the build starts) up to the wait
/// bound, not the lock bound: it outwaits a 1.5 s snapshot under a 100 ms
/// lock bound. Past the wait bound it gives up saying so, leaving an
/// invalid index that the rerun drops and builds again.
#[tokio::test]
async fn an_index_build_waits_up_to_the_wait_bound_not_the_lock_bound() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let hold = "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1";

    // Outwaits a snapshot held for 1.5 s.
    let schema = version_1(&client, "upg_build_waits").await;
    let side = Arc::new(SideSession::start());
    let released = Arc::new(AtomicBool::new(false));
    let mut progress = {
        let (side, released) = (side.clone(), released.clone());
        move |event: &Progress| {
            if starts(event, is_first_index_build) {
                side.exec(hold);
                let (side, released) = (side.clone(), released.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(1500));
                    released.store(true, SeqCst);
                    side.exec("COMMIT");
                });
            }
        }
    };
    let mut upgrader = harness::connect().await;
    within(
        Duration::from_secs(10),
        "an index build behind a snapshot",
        upgrade::upgrade(&mut upgrader, &schema, &short(), &mut progress),
    )
    .await
    .unwrap_or_else(|e| panic!("the build did not outwait a 1.5 s snapshot: {e}"));
    assert!(
        released.load(SeqCst),
        "the build did not wait for the snapshot"
    );

    // Gives up at a 500 ms wait bound.
    let schema = version_1(&client, "upg_build_bound").await;
    let side = Arc::new(SideSession::start());
    let mut progress = {
        let side = side.clone();
        move |event: &Progress| {
            if starts(event, is_first_index_build) {
                side.exec(hold);
            }
        }
    };
    let options = UpgradeOptions {
        wait_timeout: Duration::from_millis(500),
        ..short()
    };
    let mut upgrader = harness::connect().await;
    let err = within(
        Duration::from_secs(8),
        "an index build behind a snapshot held throughout",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("500ms"), "{err}");
    let invalid = count(
        &client,
        &format!(
            "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
             WHERE c.relnamespace = '{}'::regnamespace AND NOT x.indisvalid",
            schema.as_str()
        ),
    )
    .await;
    assert_eq!(
        invalid, 1,
        "the build that gave up leaves its invalid index"
    );
    side.exec("COMMIT");
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let found = status(&client, &schema).await;
    assert!(found.passes(), "{} {:?}", found.message, found.differences);
}

/// The bounds in force, read by an event trigger in the session that runs
/// each DDL statement of an upgrade (`lock_timeout` and `statement_timeout`,
/// in ms): a catalog change under the lock bound, with at most 10 s more to
/// run; what blocks no engine statement (an index built or dropped
/// `CONCURRENTLY`, a validation) under the wait bound, with the statement
/// bound to run. The dry-run script, run by psql on a second schema, runs
/// every statement under the same lock bound as the upgrade.
#[tokio::test]
async fn every_step_runs_under_the_bounds_of_its_kind_in_the_upgrade_and_its_script() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let ran = harness::unique_schema_name("upg_bounds_run");
    let printed = harness::unique_schema_name("upg_bounds_psql");
    for schema in [&ran, &printed] {
        create_version(&client, schema, 1).await;
        fill(&client, schema, 1).await;
    }
    // What the event trigger saw, and marks of the steps as they start.
    let seen = harness::unique_schema("upg_bounds_seen");
    let (on_end, on_drop) = (
        harness::unique_name("upg_bounds_end"),
        harness::unique_name("upg_bounds_drop"),
    );
    let watched = format!("'{}', '{}'", ran.as_str(), printed.as_str());
    let record = |source: &str| {
        format!(
            "DECLARE r record;
             BEGIN
               FOR r IN SELECT schema_name, command_tag AS what FROM {source}
                        WHERE schema_name IN ({watched}) LOOP
                 INSERT INTO {seen}.seen (schema, what, lock_ms, statement_ms)
                 SELECT r.schema_name, r.what,
                        (SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout'),
                        (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout');
               END LOOP;
             EXCEPTION WHEN OTHERS THEN NULL; -- never in anyone's way
             END"
        )
    };
    exec(
        &client,
        &format!(
            "CREATE SCHEMA {seen};
             CREATE TABLE {seen}.seen (n bigserial, schema text, what text, step text,
                                       lock_ms bigint, statement_ms bigint);
             CREATE FUNCTION {seen}.on_end() RETURNS event_trigger LANGUAGE plpgsql AS $f${}$f$;
             CREATE FUNCTION {seen}.on_drop() RETURNS event_trigger LANGUAGE plpgsql AS $f${}$f$;
             CREATE EVENT TRIGGER {on_end} ON ddl_command_end EXECUTE FUNCTION {seen}.on_end();
             CREATE EVENT TRIGGER {on_drop} ON sql_drop EXECUTE FUNCTION {seen}.on_drop();",
            record("pg_event_trigger_ddl_commands()"),
            record(
                "(SELECT schema_name, 'DROP ' || upper(object_type) AS command_tag \
                 FROM pg_event_trigger_dropped_objects()) d"
            )
        ),
    )
    .await;
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(150),
        wait_timeout: Duration::from_secs(7),
        statement_timeout: Duration::from_secs(1800),
        ..short()
    };

    // The upgrade and its contract, each step marked as it starts.
    let side = SideSession::start();
    let mark = format!(
        "INSERT INTO {seen}.seen (schema, step) VALUES ('{}', ",
        ran.as_str()
    );
    let mut progress = move |event: &Progress| {
        if let Progress::StepStarted { step, .. } = event {
            let kind = if matches!(
                step.action,
                Action::CreateIndex { .. }
                    | Action::DropIndex { .. }
                    | Action::ValidateConstraint { .. }
            ) {
                "waits"
            } else {
                "changes"
            };
            side.exec(&format!("{mark}'{kind}')"));
        }
    };
    let mut upgrader = harness::connect().await;
    within(
        RUN_LIMIT,
        "an upgrade",
        upgrade::upgrade(&mut upgrader, &ran, &options, &mut progress),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    within(
        RUN_LIMIT,
        "a contract",
        upgrade::contract(&mut upgrader, &ran, &options, &mut progress),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // The same through the printed scripts.
    let url = harness::database_url();
    for contract in [false, true] {
        let plan = upgrade::dry_run(&client, &printed, &options, contract)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let out = psql_within(&url, &plan.script, RUN_LIMIT);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    exec(
        &client,
        &format!("DROP EVENT TRIGGER {on_end}; DROP EVENT TRIGGER {on_drop}"),
    )
    .await;

    // Each statement of the upgrade, with the kind of the step it ran in
    // (the machinery's own before the first step: a catalog change).
    let statements = |schema: &SchemaName| {
        format!(
            "SELECT what, COALESCE((SELECT m.step FROM {seen}.seen m
                                    WHERE m.schema = s.schema AND m.step IS NOT NULL
                                      AND m.n < s.n ORDER BY m.n DESC LIMIT 1), 'changes'),
                    lock_ms, statement_ms
             FROM {seen}.seen s WHERE s.schema = '{}' AND s.step IS NULL ORDER BY n",
            schema.as_str()
        )
    };
    let upgraded: Vec<(String, String, i64, i64)> = rows(&client, &statements(&ran))
        .await
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let waits = upgraded.iter().filter(|s| s.1 == "waits").count();
    assert!(waits >= 4 && upgraded.len() > waits, "{upgraded:?}");
    for (what, kind, lock_ms, statement_ms) in &upgraded {
        let expected = if kind == "waits" {
            (7_000, 1_810_000)
        } else {
            (150, 10_150)
        };
        assert_eq!(
            (*lock_ms, *statement_ms),
            expected,
            "{what} in a step that {kind}: lock_timeout and statement_timeout (ms)"
        );
    }
    // The script: the same statements under the same lock bounds (comments
    // aside: the script also repeats the version table's, which the upgrade
    // creates before its first step and then finds done).
    let bounds = |statements: Vec<(String, i64)>| {
        let mut statements: Vec<(String, i64)> = statements
            .into_iter()
            .filter(|(what, _)| what != "COMMENT")
            .collect();
        statements.sort();
        statements
    };
    let scripted: Vec<(String, i64)> = rows(&client, &statements(&printed))
        .await
        .iter()
        .map(|r| (r.get(0), r.get(2)))
        .collect();
    assert_eq!(
        bounds(scripted),
        bounds(upgraded.iter().map(|s| (s.0.clone(), s.2)).collect()),
        "the script's statements and their lock bounds differ from the upgrade's"
    );
}

/// The upgrade hands the caller's session back as it found it, whether it
/// succeeds or fails: no session setting left at the upgrade's bounds, and
/// the upgrade lock released (another session's contract runs while this
/// one stays open).
#[tokio::test]
async fn an_upgrade_leaves_its_session_as_it_found_it() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_session").await;
    let mut upgrader = harness::connect().await;
    let pid = backend_pid(&upgrader).await;
    let settings = "SELECT current_setting('lock_timeout') || ' ' || \
                    current_setting('statement_timeout')";
    let before: String = upgrader.query_one(settings, &[]).await.unwrap().get(0);
    let advisory =
        format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = {pid}");
    let mut quiet = |_: &Progress| {};
    within(
        RUN_LIMIT,
        "an upgrade",
        upgrade::upgrade(&mut upgrader, &schema, &short(), &mut quiet),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let after: String = upgrader.query_one(settings, &[]).await.unwrap().get(0);
    assert_eq!(after, before, "the upgrade left its bounds in the session");
    assert_eq!(
        count(&client, &advisory).await,
        0,
        "the upgrade lock outlived the upgrade"
    );

    // A contract that fails: its backfill finds nothing to do (so no vacuum
    // follows it), and its next step gives up behind a reader.
    exec(
        &client,
        &format!("DELETE FROM {} WHERE claimed_at IS NOT NULL", jobs(&schema)),
    )
    .await;
    let reader = harness::connect().await;
    exec(
        &reader,
        &format!("BEGIN; SELECT count(*) FROM {}", jobs(&schema)),
    )
    .await;
    within(
        RUN_LIMIT,
        "a contract behind a reader",
        upgrade::contract(&mut upgrader, &schema, &short(), &mut quiet),
    )
    .await
    .unwrap_err();
    let after: String = upgrader.query_one(settings, &[]).await.unwrap().get(0);
    assert_eq!(
        after, before,
        "a failed contract left its bounds in the session"
    );
    assert_eq!(
        count(&client, &advisory).await,
        0,
        "the upgrade lock outlived the contract"
    );
    exec(&reader, "ROLLBACK").await;
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("a contract in another session, this one open: {e}"));
}

/// The upgrade's catalog reads wait at most its lock bound (not the
/// bootstrap's 5 s), and say so, behind a session holding `ACCESS
/// EXCLUSIVE` on a table; so does the dry run's.
#[tokio::test]
async fn the_catalog_reads_of_an_upgrade_wait_at_most_its_lock_bound() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_read_bound");
    create_version(&client, &schema, 1).await;
    let blocker = harness::connect().await;
    let pid = backend_pid(&blocker).await;
    exec(
        &blocker,
        &format!(
            "BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            jobs(&schema)
        ),
    )
    .await;
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(150),
        ..short()
    };
    let err = within(
        Duration::from_secs(5),
        "an upgrade behind ACCESS EXCLUSIVE",
        run_upgrade(&schema, &options),
    )
    .await
    .unwrap_err();
    let words = err.to_string();
    assert!(
        words.contains("150ms") && words.contains(&format!("session {pid}")),
        "{words}"
    );
    let reader = harness::connect().await;
    let err = within(
        Duration::from_secs(5),
        "a dry run behind ACCESS EXCLUSIVE",
        upgrade::dry_run(&reader, &schema, &options, false),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("150ms"), "{err}");
    exec(&blocker, "ROLLBACK").await;
}

/// `schema-gen upgrade --lock-timeout` bounds each wait of a catalog
/// change: behind a reader let go 600 ms after the upgrade is seen
/// waiting, a 100 ms bound gives up and retries (said on stderr) where the
/// default 1 s would have waited it out; a zero bound (which PostgreSQL
/// reads as "wait forever") is refused.
#[test]
fn the_command_lines_lock_timeout_bounds_each_wait() {
    use harness::cli::{assert_usage_error, run as cli, runtime};
    if harness::skip_db_tests() {
        return;
    }
    assert_usage_error(&["upgrade", "--lock-timeout", "0s"], "at least 1ms");
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    let schema = harness::unique_schema_name("upg_cli_lock");
    rt.block_on(create_version(&client, &schema, 1));
    let reader = Arc::new(SideSession::start());
    reader.exec(&format!("BEGIN; SELECT count(*) FROM {}", jobs(&schema)));
    let watcher = {
        let reader = reader.clone();
        let s = schema.as_str().to_owned();
        std::thread::spawn(move || {
            let watch = SideSession::start();
            let waiting = format!(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
                 WHERE c.relnamespace = '\"{s}\"'::regnamespace AND c.relname = 'jobs'
                   AND l.mode = 'AccessExclusiveLock' AND NOT l.granted"
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            while watch.exec(&waiting)[0][0].as_deref() != Some("1") {
                assert!(Instant::now() < deadline, "the upgrade never waited");
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(600));
            reader.exec("COMMIT");
        })
    };
    let url = harness::database_url();
    let ran = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        schema.as_str(),
        "--lock-timeout",
        "100ms",
    ]);
    watcher
        .join()
        .unwrap_or_else(|_| panic!("the watcher panicked"));
    assert_eq!(ran.code, std::process::ExitCode::SUCCESS, "{}", ran.stderr);
    assert!(
        ran.stderr
            .contains("gave up waiting for the lock (attempt 1)"),
        "{}",
        ran.stderr
    );
}

/// A validation (a wait that blocks no engine statement) is tried once: behind
/// a session holding `SHARE UPDATE EXCLUSIVE` on `jobs` (taken as the
/// contract's validation starts) it waits its wait bound, then the contract
/// gives up saying so, with no retry (retried as a catalog change is, it
/// would wait the wait bound again each attempt); the rerun completes it.
#[tokio::test]
async fn a_validation_waits_its_wait_bound_once_then_gives_up() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_validate_once").await;
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let side = Arc::new(SideSession::start());
    let recorder = Recorder::default();
    let mut record = recorder.callback();
    let lock = format!(
        "BEGIN; LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE",
        jobs(&schema)
    );
    let mut progress = {
        let side = side.clone();
        move |event: &Progress| {
            record(event);
            if starts(event, |a| matches!(a, Action::ValidateConstraint { .. })) {
                side.exec(&lock);
            }
        }
    };
    let options = UpgradeOptions {
        wait_timeout: Duration::from_millis(300),
        ..short()
    };
    let mut contractor = harness::connect().await;
    let err = within(
        Duration::from_secs(8),
        "a contract whose validation waits behind SHARE UPDATE EXCLUSIVE",
        upgrade::contract(&mut contractor, &schema, &options, &mut progress),
    )
    .await
    .unwrap_err();
    let words = err.to_string();
    assert!(words.contains("300ms"), "{words}");
    assert!(
        words.contains(&format!("session {}", side.pid())),
        "{words}"
    );
    let retries: Vec<Progress> = recorder
        .events()
        .into_iter()
        .filter(|e| matches!(e, Progress::LockRetry { .. }))
        .collect();
    assert!(
        retries.is_empty(),
        "a long wait was tried again: {retries:?}"
    );
    side.exec("ROLLBACK");
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}
