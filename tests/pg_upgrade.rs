//! Upgrades in place against a real PostgreSQL server: every shipped
//! version, created exactly as its release created it and filled with rows
//! in every state, reaches the model with `upgrade` then `contract`, every
//! row kept field by field; the previous release's statements and this
//! one's run side by side on the expanded schema; every step takes at most
//! the lock it declares (read from `pg_locks` while it runs); an upgrade
//! killed midway completes when run again; the dry run is a script psql
//! runs; and every refusal fires.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::history::{create_version, dump_rows, restricted};
use harness::upgrade::{
    RUN_LIMIT, Recorder, bounded, fill, now, psql_within, ready_is_derived_from_run_at,
    run_contract, run_upgrade, status, within,
};
use harness::{exec, rows};
use schema_gen::check::VersionState;
use schema_gen::upgrade::{self, Action, Phase, Progress, Step, TableLock, UpgradeOptions};
use schema_gen::{ErrorKind, Outcome, bootstrap};
use schema_model::SchemaName;
use schema_model::history::{self, MODEL_VERSION};
use tokio_postgres::Client;

#[tokio::test]
async fn every_shipped_version_reaches_the_model_keeping_every_row() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    for version in history::versions()
        .into_iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
    {
        let schema = harness::unique_schema_name(&format!("up_v{version}"));
        create_version(&client, &schema, version).await;
        fill(&client, &schema, version).await;
        let before = dump_rows(&client, &schema).await;

        let found = status(&client, &schema).await;
        assert_eq!(
            (found.state, found.found, found.serves_model),
            (VersionState::Older, Some(version), false),
            "v{version}: {}",
            found.message
        );
        // An engine of this release does not open it, and changes nothing.
        // Versions before the version table are recognised by their shape;
        // the later ones by their rows.
        let by_shape = version < history::FIRST_RECORDED_VERSION;
        let err = bootstrap(&mut client, &schema).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::OlderVersion { found, recognised, model, .. }
                if *found == version && *recognised == by_shape && *model == MODEL_VERSION),
            "v{version}: {err}"
        );
        assert!(
            err.to_string().contains("schema-gen upgrade --schema"),
            "{err}"
        );
        assert_eq!(
            dump_rows(&client, &schema).await,
            before,
            "v{version}: bootstrap wrote"
        );

        let recorder = Recorder::default();
        let mut progress = recorder.callback();
        let outcome = upgrade::upgrade(
            &mut client,
            &schema,
            &UpgradeOptions {
                batch_size: 1000,
                ..bounded()
            },
            &mut progress,
        )
        .await
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(outcome.before.expanded, version);
        assert_eq!(outcome.after.expanded, MODEL_VERSION);
        assert_eq!(outcome.after.contracted, version, "{}", outcome.message());
        assert!(outcome.contract_pending());
        let events = recorder.events();
        assert!(
            events.iter().any(|e| matches!(e, Progress::Recorded { version: v, phase: Phase::Expand } if *v == MODEL_VERSION)),
            "{events:?}"
        );
        if version == 1 {
            // The backfill walked the keys in windows of 1,000.
            let batches = events
                .iter()
                .filter(|e| matches!(e, Progress::Batch { .. }))
                .count();
            assert!(batches >= 3, "{batches} batches");
        }

        let expanded = status(&client, &schema).await;
        assert_eq!(
            (expanded.state, expanded.serves_model),
            (VersionState::ContractPending, true),
            "v{version}: {}",
            expanded.message
        );
        assert!(expanded.passes(), "v{version}: {:?}", expanded.differences);
        assert!(
            matches!(bootstrap(&mut client, &schema).await, Ok(Outcome::ContractPending { oldest_served, .. }) if oldest_served == version),
            "v{version}"
        );
        let after_expand = dump_rows(&client, &schema).await;
        assert_eq!(
            restricted(&before, &after_expand),
            before,
            "v{version}: a row changed"
        );
        if version == 1 {
            ready_is_derived_from_run_at(&client, &schema, false).await;
        }

        let contracted = run_contract(&schema)
            .await
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        if version == 1 {
            ready_is_derived_from_run_at(&client, &schema, true).await;
        }
        assert_eq!(contracted.after.contracted, MODEL_VERSION);
        // Each contract step did its own work: a check added without NOT
        // VALID (validating under ACCESS EXCLUSIVE) would leave its
        // validation step nothing to do.
        assert_eq!(contracted.steps_skipped, 0, "{}", contracted.message());
        let current = status(&client, &schema).await;
        assert_eq!(current.state, VersionState::Current, "{}", current.message);
        assert!(current.passes(), "v{version}: {:?}", current.differences);
        assert!(matches!(
            bootstrap(&mut client, &schema).await,
            Ok(Outcome::AlreadyCurrent { .. })
        ));
        let after_contract = dump_rows(&client, &schema).await;
        assert_eq!(
            restricted(&before, &after_contract),
            before,
            "v{version}: a row changed"
        );
        // A rerun has nothing to do.
        let again = run_upgrade(&schema, &bounded())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (again.steps_run, again.after.contracted),
            (0, MODEL_VERSION)
        );
    }
}

/// The expanded shape of each version is exactly what the model's
/// descriptions and the plan say: a model change without a plan that
/// reaches it fails here (and in the planner's own self-check).
#[tokio::test]
async fn the_model_is_the_newest_version_plus_its_upgrade_steps() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let newest_shipped = history::versions()
        .into_iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
        .max()
        .unwrap_or(0);
    assert_eq!(
        newest_shipped + 1,
        MODEL_VERSION,
        "the model is the next version"
    );
    let upgraded = harness::unique_schema_name("up_tie_a");
    create_version(&client, &upgraded, newest_shipped).await;
    run_upgrade(&upgraded, &bounded())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run_contract(&upgraded)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let fresh = harness::unique_schema_name("up_tie_b");
    create_version(&client, &fresh, MODEL_VERSION).await;
    // Column order aside (an added column comes last), the upgraded schema
    // is the freshly created one, as the catalog reports both.
    let dump = |name: &SchemaName, dump: String| {
        let mut lines: Vec<String> = dump
            .replace(name.as_str(), "<schema>")
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(
        dump(
            &upgraded,
            harness::dump::dump_schema(&client, upgraded.as_str()).await
        ),
        dump(
            &fresh,
            harness::dump::dump_schema(&client, fresh.as_str()).await
        ),
    );
}

/// A database that is no known version (nor a step between two) is drift:
/// upgrade lists the differences and changes nothing.
#[tokio::test]
async fn drift_outside_any_known_version_is_refused_and_nothing_changes() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_drift");
    create_version(&client, &schema, 1).await;
    exec(
        &client,
        &format!(
            "ALTER TABLE \"{}\".jobs ADD COLUMN colour text",
            schema.as_str()
        ),
    )
    .await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
    assert!(
        err.to_string().contains("extra column jobs.colour"),
        "{err}"
    );
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Unknown, "{}", found.message);
    assert!(!found.passes());
}

/// A second upgrade of the same schema is refused at once, naming the first.
#[tokio::test]
async fn one_upgrade_at_a_time() {
    if harness::skip_db_tests() {
        return;
    }
    let holder = harness::connect().await;
    let schema = harness::unique_schema_name("up_lock");
    create_version(&holder, &schema, 1).await;
    let key = upgrade::upgrade_lock_key(&schema);
    let pid: i32 = holder
        .query_one("SELECT pg_advisory_lock($1), pg_backend_pid()", &[&key])
        .await
        .unwrap()
        .get(1);
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UpgradeLocked { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("session {pid}")), "{err}");
    let err = run_contract(&schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UpgradeLocked { .. }),
        "{err}"
    );
    // Nothing was recorded: the schema is still version 1, unrecorded.
    let found = status(&holder, &schema).await;
    assert_eq!((found.state, found.found), (VersionState::Older, Some(1)));
    holder
        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    run_upgrade(&schema, &bounded())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The contract runs only on a database expanded to this release's version.
#[tokio::test]
async fn the_contract_waits_for_the_expand() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_early");
    create_version(&client, &schema, 1).await;
    let err = run_contract(&schema).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NotExpanded { .. }), "{err}");
    assert!(
        err.to_string().contains("schema-gen upgrade --schema"),
        "{err}"
    );
}

/// A database at a newer version: an engine of this release opens it while
/// it still serves this version (contract pending), and is refused once it
/// does not; upgrade refuses it either way.
#[tokio::test]
async fn a_newer_version_is_served_until_its_contract_and_never_upgraded() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("up_newer");
    create_version(&client, &schema, MODEL_VERSION).await;
    let next = MODEL_VERSION + 1;
    exec(
        &client,
        &format!(
            "INSERT INTO \"{}\".schema_versions VALUES ({next}, 'schema-gen 9.9.9', 1, 2, NULL)",
            schema.as_str()
        ),
    )
    .await;
    let outcome = bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(outcome, Outcome::ServedByNewer { found, .. } if found == next),
        "{outcome}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(
        (found.state, found.serves_model),
        (VersionState::Newer, true)
    );
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NewerVersion { .. }),
        "{err}"
    );

    exec(
        &client,
        &format!(
            "UPDATE \"{}\".schema_versions SET contracted_at = 3 WHERE version = {next}",
            schema.as_str()
        ),
    )
    .await;
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NewerVersion { found, .. } if *found == next),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "newer than this release's version {MODEL_VERSION}"
        )),
        "{err}"
    );
    assert!(!status(&client, &schema).await.passes());
}

/// A step that needs `ACCESS EXCLUSIVE` waits at most the lock bound per
/// attempt behind a session holding the table, pauses (so the statements
/// queued behind its wait run), tries again, and gives up after its
/// attempts naming that session; the rerun resumes where it stopped.
#[tokio::test]
async fn a_blocked_step_retries_then_gives_up_naming_the_holder() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_blocked");
    create_version(&client, &schema, 1).await;
    let blocker = harness::connect().await;
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!("BEGIN; SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
    )
    .await;

    // A wait bound of its own as well: a step that waited for this reader
    // instead of queueing behind it would fail in seconds, not minutes.
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(50),
        lock_attempts: 3,
        wait_timeout: Duration::from_secs(3),
        ..bounded()
    };
    let mut upgrader = harness::connect().await;
    let recorder = Recorder::default();
    let mut progress = recorder.callback();
    let started = std::time::Instant::now();
    let err = within(
        Duration::from_secs(20),
        "a blocked upgrade",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await
    .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LockTimeout { .. }), "{err}");
    assert!(err.to_string().contains(&format!("session {pid}")), "{err}");
    assert!(err.to_string().contains("50ms"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let retries: Vec<std::time::Instant> = recorder
        .timed()
        .into_iter()
        .filter(|(_, e)| matches!(e, Progress::LockRetry { .. }))
        .map(|(at, _)| at)
        .collect();
    assert_eq!(
        retries.len(),
        2,
        "two retries before the third attempt gave up"
    );
    // Between the two: the pause after the first attempt (200 ms) and the
    // second attempt's wait (50 ms). Without the pause, about 50 ms.
    let gap = retries[1] - retries[0];
    assert!(
        gap >= Duration::from_millis(240),
        "the step tried again {gap:?} after giving up: no pause between attempts"
    );
    // The upgrade stopped before its first step: recorded as expanding.
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    let mut engine = harness::connect().await;
    let err = bootstrap(&mut engine, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::OlderVersion { found: 1, .. }),
        "{err}"
    );

    exec(&blocker, "COMMIT").await;
    let outcome = run_upgrade(&schema, &options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);
}

/// A session holding a lock stronger than the engine's on `jobs` (what an
/// autovacuum takes, held here by `LOCK TABLE`): the step waits for it
/// without asking for its own lock, so it queues no one (a plain read with
/// a short `statement_timeout` still runs), gives up no attempt, and goes
/// on once the holder ends.
#[tokio::test]
async fn a_step_waits_without_queueing_while_another_session_holds_a_stronger_lock() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_waits");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let jobs = format!("\"{}\".jobs", schema.as_str());
    let blocker = harness::connect().await;
    let blocker_pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!("BEGIN; LOCK TABLE {jobs} IN SHARE UPDATE EXCLUSIVE MODE"),
    )
    .await;

    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 2,
        ..bounded()
    };
    let mut upgrader = harness::connect().await;
    let upgrader_pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let recorder = Recorder::default();
    let mut progress = recorder.callback();
    let task_schema = schema.clone();
    let upgrade_task = tokio::spawn(async move {
        upgrade::upgrade(&mut upgrader, &task_schema, &options, &mut progress).await
    });

    let waited_for = |events: &[Progress]| {
        events.iter().find_map(|e| match e {
            Progress::WaitingFor {
                step, pid, mode, ..
            } if step.table == "jobs" => Some((*pid, mode.clone())),
            _ => None,
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (pid, mode) = loop {
        if let Some(found) = waited_for(&recorder.events()) {
            break found;
        }
        assert!(
            !upgrade_task.is_finished(),
            "the upgrade ended without waiting: {:?}",
            recorder.events()
        );
        assert!(std::time::Instant::now() < deadline, "no WaitingFor event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (pid, mode.as_str()),
        (blocker_pid, "ShareUpdateExclusiveLock")
    );

    // Several lock bounds later: still waiting, no attempt made or given
    // up, no lock request of the upgrader's in the queue, and a plain read
    // (which would queue behind a waiting ACCESS EXCLUSIVE) runs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!upgrade_task.is_finished(), "{:?}", recorder.events());
    let queued: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted",
            &[&upgrader_pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(queued, 0, "the upgrader queued a lock request");
    let reader = harness::connect().await;
    exec(&reader, "SET statement_timeout = '2s'").await;
    reader
        .query_one(&format!("SELECT count(*) FROM {jobs}"), &[])
        .await
        .unwrap_or_else(|e| panic!("a plain read queued behind the upgrade: {e}"));
    assert!(
        !recorder
            .events()
            .iter()
            .any(|e| matches!(e, Progress::LockRetry { .. })),
        "{:?}",
        recorder.events()
    );

    exec(&blocker, "COMMIT").await;
    let outcome = within(RUN_LIMIT, "the upgrade once the holder ended", upgrade_task)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);

    // The backfill changed rows (the fill's due jobs became ready), so the
    // table was vacuumed after it, by the upgrade itself (not autovacuum).
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| matches!(e, Progress::Vacuumed { step } if step.table == "jobs")),
        "{:?}",
        recorder.events()
    );
    let vacuums: i64 = client
        .query_one(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'",
            &[&schema.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(vacuums >= 1, "jobs was not vacuumed after the backfill");
}

/// The wait for a stronger lock's holder is bounded: at the bound the
/// upgrade gives up naming the session and the lock, changing nothing of
/// the step.
#[tokio::test]
async fn the_wait_for_a_stronger_lock_gives_up_at_its_bound_naming_the_holder() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_wait_bound");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = dump_rows(&client, &schema).await["jobs"].clone();
    let blocker = harness::connect().await;
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!(
            "BEGIN; LOCK TABLE \"{}\".jobs IN SHARE UPDATE EXCLUSIVE MODE",
            schema.as_str()
        ),
    )
    .await;
    let options = UpgradeOptions {
        wait_timeout: Duration::from_millis(300),
        ..bounded()
    };
    let started = std::time::Instant::now();
    let err = within(
        Duration::from_secs(20),
        "an upgrade behind a stronger lock",
        run_upgrade(&schema, &options),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let words = err.to_string();
    assert!(words.contains(&format!("session {pid}")), "{words}");
    assert!(words.contains("holds SHARE UPDATE EXCLUSIVE"), "{words}");
    exec(&blocker, "ROLLBACK").await;
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    assert_eq!(dump_rows(&client, &schema).await["jobs"], before);
}

/// The upgrade's connection is killed while an index builds `CONCURRENTLY`
/// (it waits for an open write transaction, leaving an invalid index), and
/// again in the middle of a backfill: each time the next run completes the
/// upgrade, dropping the invalid index and building it again.
#[tokio::test]
async fn an_upgrade_killed_midway_completes_when_run_again() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_killed");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = dump_rows(&client, &schema).await;

    // Killed during the backfill, after its first batch.
    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let killer = harness::connect().await;
    let (batched, mut first_batch) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut progress = move |event: &Progress| {
        if matches!(event, Progress::Batch { .. }) {
            let _ = batched.send(());
        }
    };
    let options = UpgradeOptions {
        batch_size: 100,
        ..bounded()
    };
    // The run owns the callback: when it ends, the channel closes, and the
    // killer stops waiting for a batch that will not come.
    let run_schema = schema.clone();
    let run =
        async move { upgrade::upgrade(&mut upgrader, &run_schema, &options, &mut progress).await };
    let kill = async {
        if first_batch.recv().await.is_some() {
            killer
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
        }
    };
    let (result, ()) = within(
        Duration::from_secs(60),
        "an upgrade killed after its first batch",
        async { tokio::join!(run, kill) },
    )
    .await;
    let err = result.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Connection { .. } | ErrorKind::Query { .. }
        ),
        "{err}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);

    // Killed while jobs_claim_idx_next waits for an open write transaction.
    let writer = harness::connect().await;
    exec(
        &writer,
        &format!(
            "BEGIN; UPDATE \"{}\".jobs SET priority = priority WHERE id = 1",
            schema.as_str()
        ),
    )
    .await;
    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let mut quiet = |_: &Progress| {};
    // The build waits for the writer until killed. A build that does not
    // wait where it should, or waits elsewhere (a regression that builds
    // without CONCURRENTLY, taking SHARE on jobs behind the writer), gives
    // up at this run's own 3 s wait bound, and the killer stops looking
    // when the run ends: the test fails in seconds, not at the product's
    // 10 minutes.
    let build_bound = UpgradeOptions {
        wait_timeout: Duration::from_secs(3),
        ..bounded()
    };
    let finished = AtomicBool::new(false);
    let run = async {
        let result = upgrade::upgrade(&mut upgrader, &schema, &build_bound, &mut quiet).await;
        finished.store(true, SeqCst);
        result
    };
    let kill = async {
        while !finished.load(SeqCst) {
            let waiting = killer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE pid = $1 AND query LIKE 'CREATE INDEX CONCURRENTLY%'
                       AND wait_event_type = 'Lock'",
                    &[&pid],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
            if waiting == 1 {
                killer
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .unwrap();
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    };
    let (result, killed) = within(
        Duration::from_secs(60),
        "an upgrade killed in an index build",
        async { tokio::join!(run, kill) },
    )
    .await;
    assert!(killed, "the index build never waited: {result:?}");
    assert!(result.is_err());
    let invalid = rows(
        &client,
        &format!(
            "SELECT c.relname::text FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = '{}' AND NOT x.indisvalid",
            schema.as_str()
        ),
    )
    .await;
    assert_eq!(invalid.len(), 1, "the kill leaves one invalid index");
    exec(&writer, "ROLLBACK").await;

    let outcome = run_upgrade(&schema, &bounded())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);
    assert!(outcome.steps_skipped > 0, "{}", outcome.message());
    let found = status(&client, &schema).await;
    assert!(found.passes(), "{} {:?}", found.message, found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;
    assert_eq!(
        restricted(&before, &dump_rows(&client, &schema).await),
        before
    );
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}

/// The dry run is a script psql runs: piped in, it expands a version 1
/// schema (check: contract pending), and the contract's dry run contracts it.
#[tokio::test]
async fn the_dry_run_is_a_plan_psql_runs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_psql");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let plan = upgrade::dry_run(&client, &schema, &bounded(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Reading it changed nothing.
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
    assert!(
        plan.steps
            .iter()
            .any(|s| matches!(s.action, Action::CreateIndex { .. }))
    );
    assert!(
        plan.script
            .contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS")
    );
    let ran = psql_within(&harness::database_url(), &plan.script, RUN_LIMIT);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;

    let plan = upgrade::dry_run(&client, &schema, &bounded(), true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ran = psql_within(&harness::database_url(), &plan.script, RUN_LIMIT);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Current, "{}", found.message);
    assert!(found.passes(), "{:?}", found.differences);
    // Nothing left to plan.
    let plan = upgrade::dry_run(&client, &schema, &bounded(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.steps.is_empty(), "{:?}", plan.steps);
}

/// PostgreSQL's table lock modes, weakest first: a mode conflicts with a
/// held one by this table of PostgreSQL's, and a step that declares a level
/// may take any mode up to it.
const MODES: [&str; 8] = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
];

/// A mode's strength (1 for `ACCESS SHARE` to 8 for `ACCESS EXCLUSIVE`).
fn strength(mode: &str) -> usize {
    MODES
        .iter()
        .position(|m| *m == mode)
        .map_or(usize::MAX, |i| i + 1)
}

/// The strongest mode a declared level allows.
fn allowed(level: TableLock) -> usize {
    match level {
        TableLock::None => strength("AccessShareLock"),
        TableLock::RowExclusive => strength("RowExclusiveLock"),
        TableLock::ShareUpdateExclusive => strength("ShareUpdateExclusiveLock"),
        TableLock::AccessExclusive => strength("AccessExclusiveLock"),
    }
}

/// What the watcher holds on the step's table while the step runs: the
/// weakest mode that conflicts with every mode stronger than the step
/// declares, and with none it declares. A stronger request then waits
/// behind the watcher, which sees it waiting before it lets it through:
/// a stronger lock than declared is seen however brief the step.
fn held_against(level: TableLock) -> &'static str {
    match level {
        // ROW EXCLUSIVE conflicts with SHARE and up, not with SHARE UPDATE
        // EXCLUSIVE and below.
        TableLock::ShareUpdateExclusive => "ROW EXCLUSIVE",
        // ACCESS SHARE conflicts with ACCESS EXCLUSIVE only: the step waits,
        // visibly, and is let through.
        TableLock::AccessExclusive => "ACCESS SHARE",
        // SHARE UPDATE EXCLUSIVE conflicts with itself and up.
        TableLock::None | TableLock::RowExclusive => "SHARE UPDATE EXCLUSIVE",
    }
}

/// Whose a relation the upgrader locked is, for one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// The step's table: held to the step's level.
    Table,
    /// An index of the step's table: held to the step's level.
    TableIndex,
    /// The index the step builds or drops, while no engine statement can
    /// reach it (not yet committed, or already dead): any mode blocks no one.
    OwnUnreachable,
    /// A relation not yet committed (the step is creating it).
    Unborn,
    /// Another engine table or its index: at most `ACCESS SHARE`.
    Other,
}

/// One lock of the upgrader's seen while a step ran.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenLock {
    relation: String,
    mode: String,
    granted: bool,
    whose: Whose,
}

/// What the watcher saw of one step.
#[derive(Debug, Clone)]
struct StepWatch {
    step: Step,
    locks: Vec<SeenLock>,
    /// The upgrader was seen waiting behind the watcher's hold, for these
    /// modes on these relations (then let through).
    waited_for: Vec<SeenLock>,
}

enum ToWatcher {
    /// A step is about to run: hold its table, then say so.
    Step(Box<Step>, std::sync::mpsc::Sender<()>),
    /// The upgrade is over.
    Finish,
}

#[derive(Debug, Clone)]
struct Relation {
    name: String,
    table: Option<String>,
    live: bool,
}

/// The schema's relations by oid: name, the table of an index, and whether
/// an index is live (engine statements open it).
async fn relations(watcher: &Client, schema: &str) -> BTreeMap<u32, Relation> {
    watcher
        .query(
            "SELECT c.oid, c.relname::text, t.relname::text, COALESCE(x.indislive, true)
             FROM pg_class c
             LEFT JOIN pg_index x ON x.indexrelid = c.oid
             LEFT JOIN pg_class t ON t.oid = x.indrelid
             WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
        .iter()
        .map(|r| {
            (
                r.get::<_, u32>(0),
                Relation {
                    name: r.get(1),
                    table: r.get(2),
                    live: r.get(3),
                },
            )
        })
        .collect()
}

/// Takes the hold for `step`: its table in [`held_against`] its level, every
/// other engine table in `SHARE UPDATE EXCLUSIVE` (a step takes nothing
/// stronger than `ACCESS SHARE` there). `NOWAIT`, so the hold never queues
/// ahead of the step; `false` when a lock is not free right now.
async fn hold(blocker: &Client, schema: &str, step: &Step) -> bool {
    let tables: Vec<String> = blocker
        .query(
            "SELECT relname::text FROM pg_class
             WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
               AND relkind = 'r' AND relname <> 'schema_versions'",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    let quoted = |t: &str| format!("\"{schema}\".\"{t}\"");
    let mut sql = String::from("BEGIN;");
    let others: Vec<String> = tables
        .iter()
        .filter(|t| **t != step.table)
        .map(|t| quoted(t))
        .collect();
    if !others.is_empty() {
        sql.push_str(&format!(
            " LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;",
            others.join(", ")
        ));
    }
    if tables.contains(&step.table) {
        sql.push_str(&format!(
            " LOCK TABLE {} IN {} MODE NOWAIT;",
            quoted(&step.table),
            held_against(step.lock())
        ));
    }
    if blocker.batch_execute(&sql).await.is_ok() {
        return true;
    }
    let _ = blocker.batch_execute("ROLLBACK").await;
    false
}

/// The watcher: on its own thread and runtime, beside the upgrade. Before
/// each step runs it takes the step's hold (the step waits for the
/// handshake); while the step runs it reads `pg_locks` for the upgrader,
/// and lets the upgrader through whenever it waits behind the hold, taking
/// the hold again as soon as it is free.
fn watch(
    schema: SchemaName,
    upgrader: i32,
    commands: std::sync::mpsc::Receiver<ToWatcher>,
) -> Vec<StepWatch> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("the watcher's runtime: {e}"));
    runtime.block_on(async move {
        let schema = schema.as_str();
        let watcher = harness::connect().await;
        let blocker = harness::connect().await;
        exec(&blocker, "SET lock_timeout = '30s'").await;
        let blocker_pid = harness::upgrade::backend_pid(&blocker).await;
        let mut watches: Vec<StepWatch> = Vec::new();
        let mut holding = false;
        loop {
            match commands.try_recv() {
                Ok(ToWatcher::Step(step, ack)) => {
                    if holding {
                        exec(&blocker, "COMMIT").await;
                    }
                    // The upgrader holds nothing between two steps: the
                    // hold is free but for an autovacuum, which yields.
                    let deadline = std::time::Instant::now() + Duration::from_secs(30);
                    while !hold(&blocker, schema, &step).await {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "the watcher could not take its hold before {}",
                            step.describe()
                        );
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    holding = true;
                    watches.push(StepWatch {
                        step: *step,
                        locks: Vec::new(),
                        waited_for: Vec::new(),
                    });
                    let _ = ack.send(());
                }
                Ok(ToWatcher::Finish) | Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            let Some(current) = watches.last_mut() else {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            };
            if !holding {
                holding = hold(&blocker, schema, &current.step).await;
            }
            // Before, the locks, after: an index the step builds is not
            // committed before a lock on it is seen; one it drops is dead
            // after.
            // Whether it waits behind the hold first, its locks next: a
            // request that waits behind the hold stays in pg_locks until the
            // hold goes, so the locks read next show it.
            let behind_us: bool = watcher
                .query_one(
                    "SELECT $2 = ANY(pg_blocking_pids($1))",
                    &[&upgrader, &blocker_pid],
                )
                .await
                .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
                .get(0);
            let before = relations(&watcher, schema).await;
            let locks = watcher
                .query(
                    "SELECT l.relation, l.mode, l.granted FROM pg_locks l
                     WHERE l.pid = $1 AND l.locktype = 'relation'
                       AND l.database = (SELECT oid FROM pg_database
                                         WHERE datname = current_database())",
                    &[&upgrader],
                )
                .await
                .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)));
            let after = relations(&watcher, schema).await;
            let own_index = match &current.step.action {
                Action::CreateIndex { index, .. } | Action::DropIndex { index } => Some(index),
                _ => None,
            };
            let mut unknown = Vec::new();
            for row in &locks {
                let (oid, mode, granted): (u32, String, bool) =
                    (row.get(0), row.get(1), row.get(2));
                let Some(relation) = before.get(&oid).or_else(|| after.get(&oid)) else {
                    unknown.push((oid, mode, granted));
                    continue;
                };
                let table = relation.table.as_deref().unwrap_or(&relation.name);
                if table == "schema_versions" {
                    continue;
                }
                let whose = if relation.name == current.step.table {
                    Whose::Table
                } else if table == current.step.table {
                    let live =
                        |rels: &BTreeMap<u32, Relation>| rels.get(&oid).is_some_and(|r| r.live);
                    if own_index == Some(&relation.name) && !(live(&before) && live(&after)) {
                        Whose::OwnUnreachable
                    } else {
                        Whose::TableIndex
                    }
                } else {
                    Whose::Other
                };
                let seen = SeenLock {
                    relation: relation.name.clone(),
                    mode,
                    granted,
                    whose,
                };
                if behind_us && !seen.granted && !current.waited_for.contains(&seen) {
                    current.waited_for.push(seen.clone());
                }
                if !current.locks.contains(&seen) {
                    current.locks.push(seen);
                }
            }
            // A relation in no schema's catalog yet is one the step creates;
            // one in another schema (pg_catalog, pg_toast) is not watched.
            if !unknown.is_empty() {
                let oids: Vec<u32> = unknown.iter().map(|(o, _, _)| *o).collect();
                let visible: Vec<u32> = watcher
                    .query("SELECT oid FROM pg_class WHERE oid = ANY($1)", &[&oids])
                    .await
                    .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                for (oid, mode, granted) in unknown {
                    if visible.contains(&oid) {
                        continue;
                    }
                    let seen = SeenLock {
                        relation: format!("uncommitted relation {oid}"),
                        mode,
                        granted,
                        whose: Whose::Unborn,
                    };
                    if !current.locks.contains(&seen) {
                        current.locks.push(seen);
                    }
                }
            }
            if behind_us && holding {
                // Seen waiting behind the hold: let it through.
                if !locks.iter().any(|row| !row.get::<_, bool>(2)) {
                    // Waiting for the hold's transaction itself (an index
                    // build or drop waits for the older lockers of its table).
                    current.waited_for.push(SeenLock {
                        relation: "the watcher's transaction".into(),
                        mode: String::new(),
                        granted: false,
                        whose: Whose::Table,
                    });
                }
                exec(&blocker, "COMMIT").await;
                holding = false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if holding {
            let _ = blocker.batch_execute("ROLLBACK").await;
        }
        watches
    })
}

/// The strongest lock each step holds or asks for, read from `pg_locks`
/// while it runs, is at most the one it declares: on its own table and that
/// table's indexes, the declared level; on the index it builds or drops,
/// anything while no engine statement can reach it (before the build
/// commits, after the drop has made it dead: `DROP INDEX CONCURRENTLY`
/// ends with a brief `ACCESS EXCLUSIVE` on the dead index); on every other
/// engine table, nothing beyond `ACCESS SHARE`.
///
/// The watcher runs beside the upgrade on a thread of its own. Before each
/// step runs (the progress callback waits for the handshake) it holds the
/// step's table in the weakest mode that conflicts with every mode stronger
/// than the declared one, and every other table in `SHARE UPDATE
/// EXCLUSIVE`: a stronger request waits behind the hold, so it is seen
/// however brief the step, before the watcher lets it through. An `ACCESS
/// EXCLUSIVE` step waits behind the hold (`ACCESS SHARE`) every time: each
/// is seen waiting.
///
/// Mutations this test catches (run by hand, then reverted): `CREATE INDEX`
/// without `CONCURRENTLY` (`ShareLock` on `jobs`, seen waiting), `DROP
/// INDEX` without `CONCURRENTLY` (`AccessExclusiveLock` on `jobs`).
#[tokio::test]
async fn each_step_takes_at_most_the_lock_it_declares() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_locks");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;

    let mut upgrader = harness::connect().await;
    let pid = harness::upgrade::backend_pid(&upgrader).await;
    let (to_watcher, commands) = std::sync::mpsc::channel::<ToWatcher>();
    let watcher = {
        let schema = schema.clone();
        std::thread::spawn(move || watch(schema, pid, commands))
    };
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut progress = {
        let to_watcher = to_watcher.clone();
        let started = started.clone();
        move |event: &Progress| {
            if let Progress::StepStarted { step, .. } = event {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (ack, acked) = std::sync::mpsc::channel();
                to_watcher
                    .send(ToWatcher::Step(Box::new(step.clone()), ack))
                    .unwrap_or_else(|e| panic!("the watcher is gone: {e}"));
                // Blocks this thread only: the watcher has its own, and the
                // upgrader is idle between two steps.
                acked
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|e| {
                        panic!(
                            "the watcher did not hold {} before it ran: {e}",
                            step.describe()
                        )
                    });
            }
        }
    };
    // An ACCESS EXCLUSIVE attempt waits up to 2 s behind the hold: the
    // watcher sees it and lets it through long before.
    let options = UpgradeOptions {
        lock_timeout: Duration::from_secs(2),
        lock_attempts: 20,
        batch_size: 200,
        wait_timeout: Duration::from_secs(30),
        ..bounded()
    };
    let expanded = within(
        RUN_LIMIT,
        "the watched upgrade",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await;
    let contracted = within(
        RUN_LIMIT,
        "the watched contract",
        upgrade::contract(&mut upgrader, &schema, &options, &mut progress),
    )
    .await;
    let _ = to_watcher.send(ToWatcher::Finish);
    let watches = watcher
        .join()
        .unwrap_or_else(|_| panic!("the watcher panicked"));
    expanded.unwrap_or_else(|e| panic!("{e}"));
    contracted.unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(
        watches.len(),
        started.load(std::sync::atomic::Ordering::SeqCst),
        "every step that ran was held and watched"
    );
    let mut wrong = Vec::new();
    for watch in &watches {
        let declared = watch.step.lock();
        for seen in &watch.locks {
            let limit = match seen.whose {
                Whose::Table | Whose::TableIndex => allowed(declared),
                Whose::Other => allowed(TableLock::None),
                Whose::OwnUnreachable | Whose::Unborn => strength("AccessExclusiveLock"),
            };
            if strength(&seen.mode) > limit {
                wrong.push(format!(
                    "{}: took {} on {} ({:?}{}), declares {declared:?}",
                    watch.step.describe(),
                    seen.mode,
                    seen.relation,
                    seen.whose,
                    if seen.granted { "" } else { ", waiting" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let exclusive: Vec<&StepWatch> = watches
        .iter()
        .filter(|w| w.step.lock() == TableLock::AccessExclusive)
        .collect();
    assert!(exclusive.len() >= 3, "{watches:?}");
    for watch in exclusive {
        assert!(
            watch
                .waited_for
                .iter()
                .any(|s| s.whose == Whose::Table && s.mode == "AccessExclusiveLock"),
            "{} declares ACCESS EXCLUSIVE and was not seen waiting for it behind the hold: {:?}",
            watch.step.describe(),
            watch.waited_for
        );
    }
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}

/// Shared by the engines of one run: every job enqueued, every job acked
/// (a second ack of one id is a job handed out twice), and every statement
/// that failed.
#[derive(Default)]
struct Ledger {
    enqueued: std::collections::BTreeSet<i64>,
    acked: std::collections::BTreeSet<i64>,
    doubled: Vec<i64>,
    failures: Vec<String>,
    acked_during_upgrade: usize,
}

type Shared = Arc<Mutex<Ledger>>;

fn note_failure(ledger: &Shared, what: &str, err: &tokio_postgres::Error) {
    if let Ok(mut l) = ledger.lock() {
        l.failures
            .push(format!("{what}: {}", harness::describe_error(err)));
    }
}

fn note_ack(ledger: &Shared, id: i64, upgrading: bool) {
    if let Ok(mut l) = ledger.lock() {
        if !l.acked.insert(id) {
            l.doubled.push(id);
        }
        if upgrading {
            l.acked_during_upgrade += 1;
        }
    }
}

/// An engine of shipped `version`: its own statements (from its
/// `statements.json`), enqueueing `enqueues` jobs as it goes and claiming
/// and acking until `stop`.
async fn old_engine(
    version: u32,
    schema: SchemaName,
    worker: String,
    enqueues: usize,
    ledger: Shared,
    upgrading: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut client = harness::connect().await;
    let statements = harness::history::old_statements(version, &schema);
    let get = |name: &str| {
        statements
            .get(name)
            .unwrap_or_else(|| panic!("version {version} has no statement {name}"))
            .clone()
    };
    let (enqueue, ack) = (get("enqueue"), get("ack"));
    let mut left = enqueues;
    while !stop.load(SeqCst) {
        let now = now();
        if left > 0 {
            left -= 1;
            let (queue, payload, priority, none) =
                ("mail".to_owned(), vec![7u8], 1i32, None::<i64>);
            let (max_attempts, timeout, backoff, retention) = (3i32, 30i64, 1i64, 600i64);
            match enqueue
                .run(
                    &client,
                    &[
                        ("queue", &queue),
                        ("payload", &payload),
                        ("priority", &priority),
                        ("run_at", &now),
                        ("expires_at", &none),
                        ("enqueued_at", &now),
                        ("now", &now),
                        ("visibility_timeout_s", &timeout),
                        ("max_attempts", &max_attempts),
                        ("backoff_base_s", &backoff),
                        ("dead_letter_retention_s", &retention),
                    ],
                )
                .await
            {
                Ok(rows) => {
                    if let (Ok(mut l), Some(row)) = (ledger.lock(), rows.first()) {
                        l.enqueued.insert(row.get(0));
                    }
                }
                Err(e) => note_failure(&ledger, "old enqueue", &e),
            }
        }
        let queue = "mail".to_owned();
        let limit = 5i64;
        let claimed: Vec<(i64, i32)> = if version == 1 {
            // Its claim: SELECT ... FOR UPDATE SKIP LOCKED, then mark each
            // row, in one transaction.
            let (claim, mark) = (get("claim"), get("claim_mark"));
            let tx = match client.transaction().await {
                Ok(tx) => tx,
                Err(e) => {
                    note_failure(&ledger, "old begin", &e);
                    continue;
                }
            };
            let ids: Vec<i64> = match claim
                .run(&tx, &[("queue", &queue), ("now", &now), ("limit", &limit)])
                .await
            {
                Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                Err(e) => {
                    note_failure(&ledger, "old claim", &e);
                    continue;
                }
            };
            let lapses = now + 30;
            let mut marked = Vec::new();
            for id in ids {
                match mark
                    .run(
                        &tx,
                        &[
                            ("worker_id", &worker),
                            ("claimed_at", &now),
                            ("claim_expires_at", &lapses),
                            ("id", &id),
                        ],
                    )
                    .await
                {
                    Ok(_) => marked.push((id, 0)),
                    Err(e) => note_failure(&ledger, "old claim mark", &e),
                }
            }
            if let Err(e) = tx.commit().await {
                note_failure(&ledger, "old commit", &e);
                continue;
            }
            marked
        } else {
            let (promote, claim) = (get("promote"), get("claim"));
            if let Err(e) = promote
                .run(
                    &client,
                    &[("queue", &queue), ("now", &now), ("limit", &limit)],
                )
                .await
            {
                note_failure(&ledger, "old promote", &e);
            }
            match claim
                .run(
                    &client,
                    &[
                        ("worker_id", &worker),
                        ("now", &now),
                        ("queue", &queue),
                        ("limit", &limit),
                    ],
                )
                .await
            {
                Ok(rows) => rows
                    .iter()
                    .map(|r| (r.get::<_, i64>("id"), r.get::<_, i32>("attempts")))
                    .collect(),
                Err(e) => {
                    note_failure(&ledger, "old claim", &e);
                    Vec::new()
                }
            }
        };
        for (id, attempts) in &claimed {
            match ack
                .run(
                    &client,
                    &[("id", id), ("worker_id", &worker), ("attempts", attempts)],
                )
                .await
            {
                Ok(_) => note_ack(&ledger, *id, upgrading.load(SeqCst)),
                Err(e) => note_failure(&ledger, "old ack", &e),
            }
        }
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An engine of this release: the product's statements.
async fn new_engine(
    schema: SchemaName,
    worker: String,
    enqueues: usize,
    ledger: Shared,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use schema_gen::statements::{FromRow, jobs};
    use std::sync::atomic::Ordering::SeqCst;
    let client = harness::connect().await;
    let mut left = enqueues;
    while !stop.load(SeqCst) {
        let now = now();
        if left > 0 {
            left -= 1;
            let job = {
                let mut job = schema_model::Job::default();
                job.queue = "mail".into();
                job.payload = vec![8];
                job.priority = 1;
                job.run_at = now;
                job.enqueued_at = now;
                job.opts.visibility_timeout_s = 30;
                job.opts.max_attempts = 3;
                job.opts.backoff_base_s = 1;
                job.opts.dead_letter_retention_s = 600;
                job
            };
            let enqueue = jobs::enqueue(&schema, &job, now);
            match client.query(enqueue.sql(), &enqueue.args()).await {
                Ok(rows) => {
                    if let (Ok(mut l), Some(row)) = (ledger.lock(), rows.first()) {
                        l.enqueued.insert(row.get(0));
                    }
                }
                Err(e) => note_failure(&ledger, "new enqueue", &e),
            }
        }
        let promote = jobs::promote(&schema, "mail", now, 100);
        if let Err(e) = client.execute(promote.sql(), &promote.args()).await {
            note_failure(&ledger, "new promote", &e);
        }
        let claim = jobs::claim(&schema, "mail", &worker, now, 5);
        let claimed = match client.query(claim.sql(), &claim.args()).await {
            Ok(rows) => rows
                .iter()
                .filter_map(|r| schema_model::Job::from_row(r).ok())
                .collect::<Vec<_>>(),
            Err(e) => {
                note_failure(&ledger, "new claim", &e);
                Vec::new()
            }
        };
        for job in &claimed {
            let ack = jobs::ack(&schema, job.id, &worker, job.attempts);
            match client.execute(ack.sql(), &ack.args()).await {
                Ok(1) => note_ack(&ledger, job.id, false),
                Ok(n) => {
                    if let Ok(mut l) = ledger.lock() {
                        l.failures
                            .push(format!("new ack of {} changed {n} rows", job.id));
                    }
                }
                Err(e) => note_failure(&ledger, "new ack", &e),
            }
        }
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The previous release's engines run their own statements through the
/// whole upgrade, and this release's engines join them once the expand is
/// done: no statement fails, every job enqueued (by either) is acked
/// exactly once, whoever enqueued it. Then, with the older engines gone,
/// the contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_releases_engines_and_this_ones_share_the_expanded_schema() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    if harness::skip_db_tests() {
        return;
    }
    for version in [1, 2] {
        let client = harness::connect().await;
        let schema = harness::unique_schema_name(&format!("up_share_v{version}"));
        create_version(&client, &schema, version).await;
        let ledger: Shared = Arc::default();
        let upgrading = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        // A backlog the old engines work on while the upgrade runs.
        let seeding = Arc::new(AtomicBool::new(false));
        let seed = tokio::spawn(old_engine(
            version,
            schema.clone(),
            "seeder".into(),
            1500,
            ledger.clone(),
            upgrading.clone(),
            seeding.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Stopped between two loops, so it holds no claim it never acks.
        seeding.store(true, SeqCst);
        seed.await
            .unwrap_or_else(|e| panic!("the seeder panicked: {e}"));
        let old: Vec<_> = (0..2)
            .map(|i| {
                tokio::spawn(old_engine(
                    version,
                    schema.clone(),
                    format!("old-{i}"),
                    200,
                    ledger.clone(),
                    upgrading.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        let outcome = run_upgrade(
            &schema,
            &UpgradeOptions {
                batch_size: 50,
                ..bounded()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
        upgrading.store(false, SeqCst);
        assert!(outcome.contract_pending(), "{}", outcome.message());
        let new: Vec<_> = (0..2)
            .map(|i| {
                tokio::spawn(new_engine(
                    schema.clone(),
                    format!("new-{i}"),
                    200,
                    ledger.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        // Until every job is done (or a minute passes).
        for _ in 0..1200 {
            let left: i64 = client
                .query_one(
                    &format!("SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let enqueued = ledger.lock().map(|l| l.enqueued.len()).unwrap_or(0);
            if left == 0 && enqueued >= 800 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.store(true, SeqCst);
        for task in old.into_iter().chain(new) {
            task.await
                .unwrap_or_else(|e| panic!("an engine panicked: {e}"));
        }
        let ledger = ledger
            .lock()
            .map(|l| {
                (
                    l.enqueued.clone(),
                    l.acked.clone(),
                    l.doubled.clone(),
                    l.failures.clone(),
                    l.acked_during_upgrade,
                )
            })
            .unwrap();
        let (enqueued, acked, doubled, failures, during) = ledger;
        assert!(
            failures.is_empty(),
            "v{version}: {} statements failed: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
        assert!(
            doubled.is_empty(),
            "v{version}: jobs handed out twice: {doubled:?}"
        );
        // The seeder's backlog may outnumber what it acked before it stopped.
        let missing: Vec<_> = enqueued.difference(&acked).collect();
        assert!(
            missing.is_empty(),
            "v{version}: {} jobs enqueued and never acked",
            missing.len()
        );
        assert!(
            during > 0,
            "v{version}: the old engines acked nothing while the upgrade ran"
        );
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "v{version}: jobs left");
        run_contract(&schema)
            .await
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(status(&client, &schema).await.state, VersionState::Current);
    }
}

/// `schema-gen upgrade` as an operator runs it: the dry run prints a script
/// and changes nothing, the upgrade reports progress on stderr and the
/// outcome (text or JSON) on stdout, `check` then passes with the contract
/// pending, and the exit codes say drift (1) and errors (2).
#[test]
fn the_upgrade_command_line() {
    use harness::cli::{run as cli, runtime};
    use std::process::ExitCode;
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    let schema = harness::unique_schema_name("up_cli");
    rt.block_on(create_version(&client, &schema, 1));
    let url = harness::database_url();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec![
            "upgrade",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect()
    };
    let run = |args: Vec<String>| cli(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::from(1), "{}", check.stderr);
    assert!(
        check
            .stdout
            .contains("is at version 1 (recognised by its shape"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("`schema-gen upgrade --schema"),
        "{}",
        check.stdout
    );

    let dry = run(args(&["--dry-run"]));
    assert_eq!(dry.code, ExitCode::SUCCESS, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("CREATE INDEX CONCURRENTLY"),
        "{}",
        dry.stdout
    );
    let dry_json = run(args(&["--dry-run", "--format", "json"]));
    let plan: serde_json::Value = serde_json::from_str(&dry_json.stdout).unwrap();
    assert_eq!(plan["outcome"], "plan");
    assert!(
        plan["steps"].as_array().is_some_and(|s| s.len() >= 6),
        "{plan}"
    );
    assert!(plan["steps"][0]["action"].is_string(), "{plan}");

    let ran = run(args(&["--format", "json"]));
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    let outcome: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(outcome["outcome"], "upgraded");
    assert_eq!(outcome["contract_pending"], true);
    assert_eq!(outcome["after"]["expanded"], MODEL_VERSION);
    assert!(
        ran.stderr.contains("version 2 expand step 1/"),
        "{}",
        ran.stderr
    );

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::SUCCESS, "{}", check.stdout);
    assert!(
        check.stdout.contains("with its contract pending"),
        "{}",
        check.stdout
    );

    let contract = run(args(&["--contract"]));
    assert_eq!(contract.code, ExitCode::SUCCESS, "{}", contract.stderr);
    assert!(
        contract
            .stdout
            .contains(&format!("is at version {MODEL_VERSION}")),
        "{}",
        contract.stdout
    );

    // Drift outside any version: exit 1, the differences listed.
    let drifted = harness::unique_schema_name("up_cli_drift");
    rt.block_on(create_version(&client, &drifted, 2));
    rt.block_on(exec(
        &client,
        &format!(
            "ALTER TABLE \"{}\".locks ADD COLUMN x int",
            drifted.as_str()
        ),
    ));
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    assert!(
        refused.stderr.contains("extra column locks.x"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
        "--format",
        "json",
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    let json: serde_json::Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(json["outcome"], "refused");

    // An error: the contract before the expand.
    let early = harness::unique_schema_name("up_cli_early");
    rt.block_on(create_version(&client, &early, 1));
    let err = cli(&[
        "upgrade",
        "--contract",
        "--database-url",
        &url,
        "--schema",
        early.as_str(),
    ]);
    assert_eq!(err.code, ExitCode::from(2), "{}", err.stdout);
    assert!(
        err.stderr.contains("cannot be contracted"),
        "{}",
        err.stderr
    );
}

/// Every upgrade statement, expand and contract, from each shipped version,
/// passes squawk's PostgreSQL migration rules, but for the ones waived here,
/// each with why; a waiver no statement needs any more fails too.
#[tokio::test]
async fn every_upgrade_statement_passes_squawk() {
    if harness::skip_db_tests() {
        return;
    }
    const WAIVED: &[(&str, &str)] = &[
        (
            "prefer-bigint-over-int",
            "schema_versions.version counts schema versions: 2^31 of them will not come",
        ),
        (
            "renaming-object",
            "the swap renames indexes only; no engine statement names an index (the planner \
             picks it by predicate), so a rename breaks no client",
        ),
        (
            "ban-drop-default",
            "the contract drops a transitional default once the older engines that inserted \
             without the column are gone, which is what the contract is for",
        ),
    ];
    let client = harness::connect().await;
    let version = harness::server_version_num().await;
    let pg_version = format!("{}.0", version / 10000);
    let mut fired = std::collections::BTreeSet::new();
    for from in history::versions()
        .iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
    {
        let schema = harness::unique_schema_name(&format!("up_squawk_v{from}"));
        create_version(&client, &schema, from).await;
        let options = UpgradeOptions::default();
        let expand = upgrade::dry_run(&client, &schema, &options, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        run_upgrade(&schema, &options)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let contract = upgrade::dry_run(&client, &schema, &options, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for (phase, plan) in [("expand", expand), ("contract", contract)] {
            for finding in
                harness::squawk::lint(&plan.script, &format!("v{from}-{phase}"), &pg_version)
            {
                let line = plan
                    .script
                    .lines()
                    .nth((finding.line as usize).saturating_sub(1))
                    .unwrap_or("");
                assert!(
                    WAIVED.iter().any(|(rule, _)| *rule == finding.rule_name),
                    "v{from} {phase}: squawk's {} fires on line {}: {line}\n({})",
                    finding.rule_name,
                    finding.line,
                    finding.message
                );
                fired.insert(finding.rule_name);
            }
        }
    }
    let waived: std::collections::BTreeSet<String> =
        WAIVED.iter().map(|(r, _)| (*r).to_owned()).collect();
    assert_eq!(
        fired, waived,
        "a waiver no statement needs any more: drop it"
    );
}
