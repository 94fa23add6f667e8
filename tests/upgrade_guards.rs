//! Every guard of the upgrade machinery fires here by what it does to rows,
//! locks, waits, exit codes or words (never by the text of its SQL): the
//! bounds and the row locks of a backfill batch, the waits of an index
//! build, the final verification, the upgrade's session left as found, the
//! catalog reads' bound, the dry-run script's own bounds and lock, the
//! version rows' consistency, drift while a contract is pending, an upgrade
//! stopped after any step, the command line's `--lock-timeout`, and the
//! planner's refusals and self-check. Each test has a short bound of its
//! own, so a guard that regresses fails it in seconds.
//!
//! How these were found, and how to find the next ones: list every guard
//! of `schema-gen/src/upgrade/` (and what bootstrap and `check` do with
//! versions), remove or weaken it by hand (updating its SQL pins so that
//! only behaviour can tell), run `pg_upgrade`, `upgrade_guards` and
//! `schema-gen --lib`, note which test fails, and revert. A guard no test
//! catches gets a test here. The guards and the test that catches each:
//!
//! | guard removed or weakened | test that fails |
//! |---|---|
//! | GUARD TABLE FILLED IN BELOW | |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use harness::history::{create_version, dump_rows, restricted};
use harness::upgrade::{
    RUN_LIMIT, Recorder, SideSession, backend_pid, bounded, fill, now, psql_within,
    ready_is_derived_from_run_at, run_contract, run_upgrade, status, within,
};
use harness::{exec, rows};
use schema_gen::check::VersionState;
use schema_gen::upgrade::{self, Action, Phase, Progress, Step, UpgradeOptions};
use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;
use tokio_postgres::Client;

/// Short bounds: 100 ms per lock wait, three tries, 5 s for a wait that
/// blocks no engine statement, 1,000 keys a batch.
fn short() -> UpgradeOptions {
    UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 3,
        wait_timeout: Duration::from_secs(5),
        batch_size: 1000,
        ..bounded()
    }
}

/// A schema created by version 1's release, filled with rows in every state.
async fn version_1(client: &Client, prefix: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    create_version(client, &schema, 1).await;
    fill(client, &schema, 1).await;
    schema
}

fn jobs(schema: &SchemaName) -> String {
    format!("\"{}\".jobs", schema.as_str())
}

/// Whether `event` starts a step doing `action`-like work.
fn starts(event: &Progress, what: fn(&Action) -> bool) -> bool {
    matches!(event, Progress::StepStarted { step, .. } if what(&step.action))
}

fn is_backfill(action: &Action) -> bool {
    matches!(action, Action::Backfill { .. })
}

fn is_first_index_build(action: &Action) -> bool {
    matches!(action, Action::CreateIndex { index, .. } if index == "jobs_claim_idx_next")
}

/// One integer a query returns.
async fn count(client: &Client, sql: &str) -> i64 {
    rows(client, sql).await[0].get(0)
}

/// The expand's backfill never waits for a row an engine holds (it skips
/// it: here, due jobs a version 1 worker has locked mid-claim, so the
/// batches would wait for them until the lock bound, retry and give up),
/// and leaves the jobs an engine has claimed untouched (the contract's
/// job): no new row version, `ready` still false.
#[tokio::test]
async fn the_backfill_skips_rows_an_engine_holds_and_leaves_claimed_jobs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_skip").await;
    let jobs = jobs(&schema);
    let claimed: Vec<(i64, String)> = rows(
        &client,
        &format!("SELECT id, ctid::text FROM {jobs} WHERE claimed_at IS NOT NULL ORDER BY id"),
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert!(!claimed.is_empty());
    // A worker mid-claim as the backfill starts: three due, unclaimed jobs
    // locked FOR UPDATE (held from then on, so the later steps, which take
    // no row locks, run beside it).
    let worker = Arc::new(SideSession::start());
    let held: Arc<std::sync::Mutex<Vec<i64>>> = Arc::default();
    let claim =
        format!("BEGIN; SELECT id FROM {jobs} WHERE queue = 'bulk' ORDER BY id LIMIT 3 FOR UPDATE");
    let recorder = Recorder::default();
    let mut record = recorder.callback();
    let mut progress = {
        let (worker, held) = (worker.clone(), held.clone());
        move |event: &Progress| {
            record(event);
            if starts(event, is_backfill)
                && let Ok(mut held) = held.lock()
            {
                held.extend(
                    worker
                        .exec(&claim)
                        .iter()
                        .filter_map(|r| r[0].as_deref().and_then(|id| id.parse::<i64>().ok())),
                );
            }
        }
    };
    let mut upgrader = harness::connect().await;
    within(
        Duration::from_secs(30),
        "an upgrade beside a worker's row locks",
        upgrade::upgrade(&mut upgrader, &schema, &short(), &mut progress),
    )
    .await
    .unwrap_or_else(|e| panic!("the backfill waited for a row a worker holds: {e}"));
    assert!(
        !recorder
            .events()
            .iter()
            .any(|e| matches!(e, Progress::LockRetry { .. })),
        "a batch waited for a lock: {:?}",
        recorder.events()
    );
    let ready = |ids: Vec<i64>| {
        let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
        format!(
            "SELECT count(*) FROM {jobs} WHERE ready AND id IN ({})",
            list.join(", ")
        )
    };
    let held = held.lock().map(|h| h.clone()).unwrap_or_default();
    assert_eq!(
        held.len(),
        3,
        "the worker took its rows as the backfill started"
    );
    assert_eq!(
        count(&client, &ready(held.clone())).await,
        0,
        "rows a worker holds were backfilled"
    );
    let still: Vec<(i64, String)> = rows(
        &client,
        &format!(
            "SELECT id, ctid::text FROM {jobs} WHERE claimed_at IS NOT NULL AND NOT ready \
             ORDER BY id"
        ),
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert_eq!(
        still, claimed,
        "the expand's backfill touched a claimed job (the contract's)"
    );
    // Every other due, unclaimed job was made ready.
    let left = count(
        &client,
        &format!(
            "SELECT count(*) FROM {jobs} WHERE NOT ready AND claimed_at IS NULL AND run_at <= {}",
            now()
        ),
    )
    .await;
    assert_eq!(left, held.len() as i64);
    worker.exec("ROLLBACK");
}

/// A backfill walks the keys in windows of `batch_size`, each one
/// transaction: the rows it sets share a transaction id per window (read as
/// the last batch ends, before the vacuum that follows, which may freeze
/// them), at most `batch_size` of them, and each batch reports at most
/// that many.
#[tokio::test]
async fn each_backfill_batch_is_a_transaction_of_at_most_one_window_of_keys() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_windows").await;
    let options = UpgradeOptions {
        batch_size: 300,
        ..short()
    };
    let recorder = Recorder::default();
    let mut record = recorder.callback();
    let side = SideSession::start();
    let groups = format!(
        "SELECT count(*) FROM {} WHERE ready GROUP BY xmin::text",
        jobs(&schema)
    );
    let read: Arc<std::sync::Mutex<Vec<i64>>> = Arc::default();
    let mut progress = {
        let read = read.clone();
        move |event: &Progress| {
            record(event);
            if let Progress::Batch {
                keys_done,
                keys_total,
                ..
            } = event
                && keys_done == keys_total
                && let Ok(mut read) = read.lock()
            {
                *read = side
                    .exec(&groups)
                    .iter()
                    .filter_map(|r| r[0].as_deref().and_then(|n| n.parse().ok()))
                    .collect();
            }
        }
    };
    let mut upgrader = harness::connect().await;
    within(
        RUN_LIMIT,
        "an upgrade",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let windows = read.lock().map(|w| w.clone()).unwrap_or_default();
    let made_ready: i64 = windows.iter().sum();
    assert!(made_ready >= 2500, "{made_ready}");
    assert!(
        windows.iter().all(|n| *n <= 300),
        "a transaction set more rows than a window holds keys: {windows:?}"
    );
    let batches: Vec<(u64, i64)> = recorder
        .events()
        .iter()
        .filter_map(|e| match e {
            Progress::Batch {
                rows, keys_total, ..
            } => Some((*rows, *keys_total)),
            _ => None,
        })
        .collect();
    let keys = batches.first().map_or(0, |b| b.1);
    assert_eq!(
        batches.len() as i64,
        (keys + 299) / 300,
        "one batch per window of 300 keys: {batches:?}"
    );
    assert!(batches.iter().all(|b| b.0 <= 300), "{batches:?}");
    assert_eq!(
        batches.iter().map(|b| b.0 as i64).sum::<i64>(),
        made_ready,
        "the batches report the rows they set"
    );
}

/// A batch waits for its lock at most the lock bound (here behind a
/// session holding `SHARE` on `jobs`, taken as the backfill starts), tries
/// again after a pause, and gives up after its attempts naming the
/// holder; the rerun completes the backfill.
#[tokio::test]
async fn a_backfill_batch_waits_at_most_the_lock_bound_then_retries_and_gives_up() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_batch_lock").await;
    let side = Arc::new(SideSession::start());
    let recorder = Recorder::default();
    let mut record = recorder.callback();
    let lock = format!("BEGIN; LOCK TABLE {} IN SHARE MODE", jobs(&schema));
    let mut progress = {
        let side = side.clone();
        move |event: &Progress| {
            record(event);
            if starts(event, is_backfill) {
                side.exec(&lock);
            }
        }
    };
    let mut upgrader = harness::connect().await;
    let err = within(
        Duration::from_secs(20),
        "a backfill behind a SHARE lock",
        upgrade::upgrade(&mut upgrader, &schema, &short(), &mut progress),
    )
    .await
    .unwrap_err();
    let words = err.to_string();
    assert!(
        words.contains(&format!("session {}", side.pid())),
        "{words}"
    );
    assert!(words.contains("100ms"), "{words}");
    let retries = recorder
        .events()
        .iter()
        .filter(|e| matches!(e, Progress::LockRetry { step, .. } if is_backfill(&step.action)))
        .count();
    assert_eq!(retries, 2, "{:?}", recorder.events());
    assert_eq!(
        status(&client, &schema).await.state,
        VersionState::Upgrading
    );
    side.exec("ROLLBACK");
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    ready_is_derived_from_run_at(&client, &schema, false).await;
}

/// A batch runs at most the statement bound: a trigger that sleeps on
/// every row it updates (created as the backfill starts) makes the first
/// batch outlast a 1 s bound, and the upgrade gives up saying so.
#[tokio::test]
async fn a_backfill_batch_runs_at_most_the_statement_bound() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_batch_slow").await;
    // The sleeping function lives in a schema of its own: nothing of the
    // engine schema's but the trigger.
    let functions = harness::unique_schema("upg_sleepy");
    exec(
        &client,
        &format!(
            "CREATE SCHEMA {functions};
             CREATE FUNCTION {functions}.slow() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep(0.5); RETURN NEW; END $$"
        ),
    )
    .await;
    let side = SideSession::start();
    let trigger = format!(
        "CREATE TRIGGER slow BEFORE UPDATE ON {} FOR EACH ROW EXECUTE FUNCTION {functions}.slow()",
        jobs(&schema)
    );
    let mut progress = move |event: &Progress| {
        if starts(event, is_backfill) {
            side.exec(&trigger);
        }
    };
    let options = UpgradeOptions {
        statement_timeout: Duration::from_secs(1),
        ..short()
    };
    let started = Instant::now();
    let mut upgrader = harness::connect().await;
    let err = within(
        Duration::from_secs(20),
        "a backfill batch slowed by a trigger",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("statement timeout"),
        "{err} ({:?})",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

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
        Duration::from_secs(30),
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
        Duration::from_secs(20),
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

/// When the steps are done the catalog is read again: something that
/// changes the schema meanwhile (here another session, between the last
/// step and the end) makes the upgrade fail saying what differs, whether
/// the change is drift (an extra column) or the first step of the contract
/// (a check the contract adds).
#[tokio::test]
async fn the_final_verification_refuses_a_catalog_the_steps_did_not_make() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let ready_check = schema_model::engine_family()
        .into_iter()
        .find(|t| t.name == "jobs")
        .and_then(|t| {
            t.checks
                .into_iter()
                .find(|c| c.name == "jobs_claimed_job_is_ready")
        })
        .map(|c| c.definition)
        .unwrap_or_else(|| panic!("the model has jobs_claimed_job_is_ready"));
    for (prefix, change, words) in [
        (
            "upg_verify_drift",
            "ALTER TABLE {s}.locks ADD COLUMN sneaky integer".to_owned(),
            "sneaky",
        ),
        (
            "upg_verify_early",
            format!(
                "ALTER TABLE {{s}}.jobs ADD CONSTRAINT jobs_claimed_job_is_ready {ready_check} \
                 NOT VALID"
            ),
            "do not say where it stands",
        ),
    ] {
        let schema = harness::unique_schema_name(prefix);
        create_version(&client, &schema, 1).await;
        let change = change.replace("{s}", &format!("\"{}\"", schema.as_str()));
        let side = SideSession::start();
        let mut progress = move |event: &Progress| {
            if matches!(event, Progress::Recorded { version, phase: Phase::Expand } if *version == MODEL_VERSION)
            {
                side.exec(&change);
            }
        };
        let mut upgrader = harness::connect().await;
        let err = within(
            RUN_LIMIT,
            "an upgrade",
            upgrade::upgrade(&mut upgrader, &schema, &short(), &mut progress),
        )
        .await
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("not the shape they should make") && message.contains(words),
            "{message}"
        );
    }
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
        Duration::from_secs(20),
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
        Duration::from_secs(20),
        "a dry run behind ACCESS EXCLUSIVE",
        upgrade::dry_run(&reader, &schema, &options, false),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("150ms"), "{err}");
    exec(&blocker, "ROLLBACK").await;
}

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
    let limit = Duration::from_secs(30);
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
    let ran = psql_within(&url, &plan.script, limit);
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

/// Rows of `schema_versions` that no upgrade could have written (no version
/// contracted, an expand skipped, a contract before its expand) are
/// refused by every door, changing nothing: upgrade, contract, an engine's
/// bootstrap, and `check`, which says the version is unknown.
#[tokio::test]
async fn version_rows_no_upgrade_could_write_are_refused_everywhere() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    for (what, forge) in [
        (
            "no version contracted",
            "UPDATE {v} SET contracted_at = NULL",
        ),
        (
            "an expand skipped",
            "UPDATE {v} SET expanded_at = NULL, contracted_at = NULL;
             INSERT INTO {v} VALUES (1, 'schema-gen 0.1.0', 1, 1, 1)",
        ),
        (
            "a contract before its expand",
            "UPDATE {v} SET expanded_at = NULL",
        ),
    ] {
        let schema = harness::unique_schema_name("upg_rows");
        create_version(&client, &schema, MODEL_VERSION).await;
        let versions = format!("\"{}\".schema_versions", schema.as_str());
        exec(&client, &forge.replace("{v}", &versions)).await;
        let before = (
            harness::dump::dump_schema(&client, schema.as_str()).await,
            dump_rows(&client, &schema).await,
        );
        let err = run_upgrade(&schema, &short()).await.unwrap_err();
        assert!(
            err.to_string().contains("schema_versions rows"),
            "{what}: {err}"
        );
        assert!(run_contract(&schema).await.is_err(), "{what}: contracted");
        assert!(
            schema_gen::bootstrap(&mut client, &schema).await.is_err(),
            "{what}: an engine opened it"
        );
        let found = status(&client, &schema).await;
        assert_eq!(
            found.state,
            VersionState::Unknown,
            "{what}: {}",
            found.message
        );
        assert!(!found.passes(), "{what}");
        let after = (
            harness::dump::dump_schema(&client, schema.as_str()).await,
            dump_rows(&client, &schema).await,
        );
        assert!(after == before, "{what}: something changed");
    }
}

/// While a contract is pending, the catalog is still held to the shapes its
/// position allows: an extra column, or an index made invalid that no
/// pending step builds, is drift for `check`, an engine's bootstrap, the
/// contract and a rerun of the upgrade, none of which changes anything.
#[tokio::test]
async fn drift_is_refused_while_a_contract_is_pending() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_pending_drift");
    create_version(&client, &schema, 1).await;
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status(&client, &schema).await.passes());
    let s = schema.as_str();
    for (what, drift, undo) in [
        (
            "an extra column",
            format!("ALTER TABLE \"{s}\".locks ADD COLUMN x integer"),
            format!("ALTER TABLE \"{s}\".locks DROP COLUMN x"),
        ),
        (
            "an index made invalid",
            format!(
                "UPDATE pg_index SET indisvalid = false \
                 WHERE indexrelid = '\"{s}\".jobs_promote_idx'::regclass"
            ),
            format!(
                "UPDATE pg_index SET indisvalid = true \
                 WHERE indexrelid = '\"{s}\".jobs_promote_idx'::regclass"
            ),
        ),
    ] {
        exec(&client, &drift).await;
        let before = harness::dump::dump_schema(&client, s).await;
        let found = status(&client, &schema).await;
        assert_eq!(found.state, VersionState::ContractPending, "{what}");
        assert!(!found.passes(), "{what}: {}", found.message);
        assert!(
            found.message.contains("differs"),
            "{what}: {}",
            found.message
        );
        let err = schema_gen::bootstrap(&mut client, &schema)
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        let err = run_contract(&schema).await.unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        let err = run_upgrade(&schema, &short()).await.unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        assert_eq!(
            harness::dump::dump_schema(&client, s).await,
            before,
            "{what}"
        );
        exec(&client, &undo).await;
        assert!(status(&client, &schema).await.passes(), "{what} undone");
    }
}

/// Runs `phase` again and again, ending the upgrader's session right after
/// each step is done (before the next is looked at, or the phase recorded),
/// until a run completes; returns how many runs were stopped.
async fn stop_after_each_step(client: &Client, schema: &SchemaName, contract: bool) -> usize {
    let mut stopped = 0;
    // Each step is stopped after once (a backfill runs again on every run).
    let stopped_after: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    loop {
        let mut upgrader = harness::connect().await;
        let pid = backend_pid(&upgrader).await;
        let side = SideSession::start();
        let mut ended = false;
        let stopped_after = stopped_after.clone();
        let mut progress = move |event: &Progress| {
            let Progress::StepDone { step, .. } = event else {
                return;
            };
            let Ok(mut stopped_after) = stopped_after.lock() else {
                return;
            };
            if !ended && !stopped_after.contains(&step.describe()) {
                ended = true;
                stopped_after.push(step.describe());
                side.exec(&format!("SELECT pg_terminate_backend({pid}, 10000)"));
            }
        };
        let options = short();
        let run = async {
            if contract {
                upgrade::contract(&mut upgrader, schema, &options, &mut progress).await
            } else {
                upgrade::upgrade(&mut upgrader, schema, &options, &mut progress).await
            }
        };
        match within(RUN_LIMIT, "a run stopped after a step", run).await {
            Ok(_) => return stopped,
            Err(err) => {
                stopped += 1;
                let found = status(client, schema).await;
                let expected = if contract {
                    VersionState::ContractPending
                } else {
                    VersionState::Upgrading
                };
                assert_eq!(
                    found.state, expected,
                    "after {stopped} stops: {}",
                    found.message
                );
                assert!(stopped < 20, "no end in sight: {err}; {}", found.message);
            }
        }
    }
}

/// An upgrade (and a contract) stopped right after any of its steps, with
/// the step done but not recorded, completes when run again: each rerun
/// finds the steps done so far in the catalog and skips them (a swap or a
/// check added once must not be tried twice), keeping every row.
#[tokio::test]
async fn an_upgrade_stopped_after_any_step_completes_when_run_again() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = version_1(&client, "upg_each_step").await;
    let before = dump_rows(&client, &schema).await;
    let expand_steps = stop_after_each_step(&client, &schema, false).await;
    assert!(expand_steps >= 6, "{expand_steps}");
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;
    let contract_steps = stop_after_each_step(&client, &schema, true).await;
    assert!(contract_steps >= 5, "{contract_steps}");
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Current, "{}", found.message);
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, true).await;
    assert_eq!(
        restricted(&before, &dump_rows(&client, &schema).await),
        before
    );
}

/// A role that may not read `schema_versions` cannot tell the version, so
/// nothing moves: the upgrade and an engine's bootstrap say which grant is
/// missing, and `check` says the version is unreadable.
#[tokio::test]
async fn a_role_that_may_not_read_the_versions_is_told_which_grant_it_lacks() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_unreadable");
    create_version(&client, &schema, MODEL_VERSION).await;
    let role = harness::unique_name("upg_blind");
    exec(
        &client,
        &format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA \"{}\" TO {role}",
            schema.as_str()
        ),
    )
    .await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let mut blind = harness::connect_url(&harness::url_for_role(&role)).await;
    let mut quiet = |_: &Progress| {};
    let err = within(
        RUN_LIMIT,
        "an upgrade by a role that may not read the versions",
        upgrade::upgrade(&mut blind, &schema, &short(), &mut quiet),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("GRANT SELECT"), "{err}");
    let err = schema_gen::bootstrap(&mut blind, &schema)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("GRANT SELECT"), "{err}");
    let found = status(&blind, &schema).await;
    assert_eq!(found.state, VersionState::Unreadable, "{}", found.message);
    assert!(!found.passes());
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
}

/// An engine of this release does not open a schema whose upgrade to this
/// release's version started and did not finish (its shape may be only
/// part of the way there): it says so, and the upgrade's rerun finishes it.
#[tokio::test]
async fn an_engine_waits_for_an_upgrade_to_its_version_to_finish() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_in_progress");
    create_version(&client, &schema, MODEL_VERSION).await;
    let versions = format!("\"{}\".schema_versions", schema.as_str());
    let previous = MODEL_VERSION - 1;
    exec(
        &client,
        &format!(
            "UPDATE {versions} SET expanded_at = NULL, contracted_at = NULL;
             INSERT INTO {versions} VALUES ({previous}, 'schema-gen 0.2.0', 1, 1, 1)"
        ),
    )
    .await;
    let err = schema_gen::bootstrap(&mut client, &schema)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("is being upgraded to version {MODEL_VERSION}")),
        "{err}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    assert!(!found.passes(), "check passes a schema being upgraded");
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(schema_gen::bootstrap(&mut client, &schema).await.is_ok());
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

/// A fabricated version for the planner: `tables` as its description.
fn fabricated(
    number: u32,
    tables: &[schema_model::TableDescription],
    hints: schema_model::history::UpgradeHints,
) -> schema_model::history::SchemaVersion {
    let json = serde_json::json!({ "tables": tables }).to_string();
    schema_model::history::SchemaVersion {
        number,
        release: "a test",
        shipped: Some(schema_model::history::Shipped {
            number,
            release: "a test",
            schema_sql: "",
            describe_json: Box::leak(json.into_boxed_str()),
            statements_json: "",
        }),
        hints,
    }
}

/// The planner refuses, naming why, every change it cannot carry online,
/// every hint that names nothing, and a plan whose steps would not reach
/// the new version exactly (its self-check: here an index whose legacy
/// name is already taken, which the contract would then drop as well);
/// the same model on both sides plans nothing.
#[test]
fn the_planner_refuses_what_it_cannot_carry_online_and_checks_its_plan() {
    use schema_model::history::UpgradeHints;
    let model = schema_model::engine_family();
    let edited = |edit: &dyn Fn(&mut Vec<schema_model::TableDescription>)| {
        let mut tables = model.clone();
        edit(&mut tables);
        tables
    };
    let table = |tables: &mut Vec<schema_model::TableDescription>, name: &str| -> usize {
        tables
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| panic!("no table {name}"))
    };
    let plan = |old: &[schema_model::TableDescription],
                new: &[schema_model::TableDescription],
                hints: UpgradeHints| {
        schema_gen::versions::plan::plan(
            &fabricated(7, old, UpgradeHints::default()),
            &fabricated(8, new, hints),
        )
    };

    let same = plan(&model, &model, UpgradeHints::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        same.expand.is_empty() && same.contract.is_empty(),
        "{same:?}"
    );

    let column = |t: &mut schema_model::TableDescription, name: &str| -> usize {
        t.columns
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let new_column = |nullable: bool, default: Option<&str>, identity: Option<&str>| {
        schema_model::ColumnDescription {
            name: "extra".into(),
            sql_type: "bigint".into(),
            nullable,
            default: default.map(str::to_owned),
            identity: identity.map(str::to_owned),
            generated: None,
            doc: "A test column.".into(),
        }
    };
    let long = "jobs_an_index_whose_name_leaves_no_room_for_a_suffix_of_seven";
    /// What is changed, the old and new tables, the hints, the words expected.
    type Case = (
        &'static str,
        Vec<schema_model::TableDescription>,
        Vec<schema_model::TableDescription>,
        UpgradeHints,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "a changed type",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "priority");
                t[j].columns[c].sql_type = "bigint".into();
            }),
            UpgradeHints::default(),
            "rewrites the table",
        ),
        (
            "a column made NOT NULL",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "expires_at");
                t[j].columns[c].nullable = false;
            }),
            UpgradeHints::default(),
            "becomes NOT NULL",
        ),
        (
            "a changed default",
            model.clone(),
            edited(&|t| {
                let j = table(t, "jobs");
                let c = column(&mut t[j], "attempts");
                t[j].columns[c].default = Some("7".into());
            }),
            UpgradeHints::default(),
            "changes its default",
        ),
        (
            "a new NOT NULL column without a default",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(false, None, None));
            }),
            UpgradeHints::default(),
            "new NOT NULL column without a default",
        ),
        (
            "a new column with a default of its own",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(true, Some("0"), None));
            }),
            UpgradeHints::default(),
            "default of its own",
        ),
        (
            "a new identity column",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].columns.push(new_column(false, None, Some("always")));
            }),
            UpgradeHints::default(),
            "identity or generated",
        ),
        (
            "a changed primary key",
            model.clone(),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].primary_key.definition = "PRIMARY KEY (name, owner)".into();
            }),
            UpgradeHints::default(),
            "primary key changes",
        ),
        (
            "a check deferred to the contract that is not new",
            model.clone(),
            model.clone(),
            UpgradeHints {
                checks_at_contract: vec!["jobs_attempts_not_negative"],
                ..UpgradeHints::default()
            },
            "not a new check",
        ),
        (
            "a replaced index whose legacy name is too long",
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: long.into(),
                    definition: "USING btree (owner)".into(),
                    doc: String::new(),
                });
            }),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: long.into(),
                    definition: "USING btree (owner, name)".into(),
                    doc: String::new(),
                });
            }),
            UpgradeHints::default(),
            "longer than 63 bytes",
        ),
        (
            "a replaced index whose legacy name is taken (the self-check)",
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx".into(),
                    definition: "USING btree (owner)".into(),
                    doc: String::new(),
                });
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx_v7".into(),
                    definition: "USING btree (expires_at, owner)".into(),
                    doc: String::new(),
                });
            }),
            edited(&|t| {
                let j = table(t, "locks");
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx".into(),
                    definition: "USING btree (owner, name)".into(),
                    doc: String::new(),
                });
                t[j].indexes.push(schema_model::IndexDescription {
                    name: "locks_owner_idx_v7".into(),
                    definition: "USING btree (expires_at, owner)".into(),
                    doc: String::new(),
                });
            }),
            UpgradeHints::default(),
            "the planned steps leave",
        ),
    ];
    for (what, old, new, hints, words) in cases {
        match plan(&old, &new, hints) {
            Ok(planned) => panic!("{what}: planned {planned:?}"),
            Err(err) => assert!(err.to_string().contains(words), "{what}: {err}"),
        }
    }
}

/// A pending contract must run before the next version's expand when that
/// expand touches what the contract still changes, and only then.
#[test]
fn a_contract_must_precede_an_expand_that_touches_what_it_changes() {
    let step = |phase, action| Step {
        version: 2,
        phase,
        table: "jobs".into(),
        action,
    };
    let pending = schema_gen::versions::VersionPlan {
        from: 1,
        to: 2,
        expand: Vec::new(),
        contract: vec![step(
            Phase::Contract,
            Action::DropIndex {
                index: "jobs_x_idx".into(),
            },
        )],
    };
    let next = |index: &str| schema_gen::versions::VersionPlan {
        from: 2,
        to: 3,
        expand: vec![step(
            Phase::Expand,
            Action::CreateIndex {
                index: index.into(),
                definition: "USING btree (queue)".into(),
            },
        )],
        contract: Vec::new(),
    };
    assert!(pending.contract_must_precede(&next("jobs_x_idx")));
    assert!(!pending.contract_must_precede(&next("jobs_y_idx")));
}
