//! A step's waits: a blocked step retries then gives up naming the holder;
//! a step waits without queueing behind a stronger lock, up to its bound; an
//! upgrade killed midway completes when run again.

use super::*;

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
        Duration::from_secs(6),
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
        Duration::from_secs(5),
        "an upgrade behind a stronger lock",
        run_upgrade(&schema, &options),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
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
