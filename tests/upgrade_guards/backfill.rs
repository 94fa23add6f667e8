//! The backfill's guards: rows an engine holds are skipped and claimed jobs
//! left alone; one transaction per window of keys; each batch under the lock
//! bound (retried, then given up) and the statement bound.

use super::*;

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
    // A wait bound of 2 s: a batch that waited it instead of the lock
    // bound, or retried without end, runs past the 8 s outer bound.
    let options = UpgradeOptions {
        wait_timeout: Duration::from_secs(2),
        ..short()
    };
    let mut upgrader = harness::connect().await;
    let err = within(
        Duration::from_secs(8),
        "a backfill behind a SHARE lock",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
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
        Duration::from_secs(8),
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
