//! The claim path under concurrency, proven by what the statements do on a
//! real server, not by their text: a claim (or promote) never hands one job
//! to two sessions and never waits behind another session's row locks
//! (`FOR UPDATE SKIP LOCKED`, the promise of `jobs::claim` and
//! `jobs::promote`), but for PostgreSQL's own update-chain wait (see
//! `harness::lock_waits::Path::UpdateChain` and the README).
//!
//! Two methods:
//!
//! - **a held transaction**: one session claims (promotes) in a transaction
//!   it keeps open; another runs the same statement with `lock_timeout` set,
//!   so any wait for a row lock is an error (SQLSTATE 55P03) instead of a
//!   hang. It must return at once without the held rows, and never return
//!   them later, also after the first session commits. `lock_timeout` and
//!   not a short `statement_timeout`: a statement timeout also counts the
//!   time a loaded machine takes to schedule the backend, so it would fail
//!   a correct claim under load; a lock timeout fires only on a lock wait,
//!   which is the thing that must not happen. A probe (`SELECT ... FOR
//!   UPDATE` of the held rows under the same setting) shows the setting does
//!   turn a wait for those rows into that error.
//! - **many claimers at once** over a fixed set of jobs: every job is handed
//!   out exactly once (each returned once, each with `attempts = 1`), and
//!   every session's lock waits are watched (`harness::lock_waits`): a wait
//!   for a held row fails the test, naming both sessions and their queries.

use std::collections::BTreeSet;
use std::sync::Arc;

use harness::engine::{engine_schema, run};
use harness::lock_waits::{LockWatch, Role};
use harness::{describe_error, exec};
use schema_gen::statements::{FromRow, Statement, jobs};
use schema_model::{Job, SchemaName};
use tokio::sync::Barrier;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

const NOW: i64 = 1_700_000_000;

/// The longest a session of these tests may wait for any lock. A claim that
/// skips locked rows never waits for a row; one that does not waits for as
/// long as the holder keeps its transaction open (until the test commits),
/// so the setting fires whatever its value. It is not shorter because a
/// session may wait, briefly, for another's relation extension lock (a
/// heavyweight lock, so `lock_timeout` counts it) while both add pages:
/// seen once in CI on a loaded 2-core machine at 1 s, when the extending
/// session was not scheduled for that long.
const NEVER_WAIT: &str = "SET lock_timeout = '10s'";

fn job(queue: &str, priority: i32, run_at: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = b"p".to_vec();
    job.priority = priority;
    job.run_at = run_at;
    job.expires_at = None;
    job.enqueued_at = NOW - 100;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 5;
    job.opts.backoff_base_s = 1;
    job.opts.dead_letter_retention_s = 60;
    job
}

/// Enqueues `jobs` (as of `now`) with the product's batch statement; their ids.
async fn enqueue(client: &Client, schema: &SchemaName, batch: &[Job], now: i64) -> Vec<i64> {
    run(client, &jobs::enqueue_many(schema, batch, now))
        .await
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Runs `statement`; its rows, or the server's refusal.
async fn try_run(
    client: &Client,
    statement: &Statement,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    client.query(statement.sql(), &statement.args()).await
}

/// The ids of the jobs a claim returned.
fn ids(rows: &[tokio_postgres::Row]) -> BTreeSet<i64> {
    rows.iter()
        .map(|row| {
            Job::from_row(row)
                .unwrap_or_else(|e| panic!("claim row: {e}"))
                .id
        })
        .collect()
}

/// Runs `statement` on a session that may not wait for a lock: it must
/// return without waiting. Its rows.
async fn without_waiting(client: &Client, statement: &Statement) -> Vec<tokio_postgres::Row> {
    try_run(client, statement).await.unwrap_or_else(|e| {
        panic!(
            "{} waited for another session's row locks instead of skipping them: {}",
            statement.name(),
            describe_error(&e)
        )
    })
}

/// Like [`without_waiting`], for the row count.
async fn count_without_waiting(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{} waited for another session's row locks instead of skipping them: {}",
                statement.name(),
                describe_error(&e)
            )
        })
}

/// The probe: on `client` (which has [`NEVER_WAIT`]), locking `held` waits
/// for the holder, and the setting turns that wait into SQLSTATE 55P03. So
/// a statement that waited for these rows would fail the same way.
async fn a_wait_for_them_is_refused(client: &Client, schema: &SchemaName, held: &BTreeSet<i64>) {
    let held: Vec<i64> = held.iter().copied().collect();
    let err = client
        .query(
            &format!("SELECT id FROM {schema}.jobs WHERE id = ANY($1) FOR UPDATE"),
            &[&held],
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("the rows {held:?} are not locked: this test proves nothing"));
    assert_eq!(
        err.code(),
        Some(&SqlState::LOCK_NOT_AVAILABLE),
        "{}",
        describe_error(&err)
    );
}

/// Who holds each job of `queue` now, and on which attempt, as committed.
async fn claims_of(client: &Client, schema: &SchemaName) -> Vec<(i64, Option<String>, i32)> {
    client
        .query(
            &format!("SELECT id, worker_id, attempts FROM {schema}.jobs ORDER BY id"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

#[tokio::test]
async fn a_claim_skips_the_jobs_an_open_claim_holds_without_waiting_and_never_returns_them() {
    if harness::skip_db_tests() {
        return;
    }
    let first = harness::connect().await;
    let schema = engine_schema(&first, "claim_skips").await;
    let batch: Vec<Job> = (0..6).map(|n| job("q", 0, NOW - 10 + n)).collect();
    let all: BTreeSet<i64> = enqueue(&first, &schema, &batch, NOW)
        .await
        .into_iter()
        .collect();

    // The first worker claims two in a transaction it keeps open.
    exec(&first, "BEGIN").await;
    let held = ids(&run(&first, &jobs::claim(&schema, "q", "a", NOW, 2)).await);
    assert_eq!(held.len(), 2, "{held:?}");

    let second = harness::connect().await;
    exec(&second, NEVER_WAIT).await;
    a_wait_for_them_is_refused(&second, &schema, &held).await;

    // The second takes the rest at once, none of the held ones ...
    let taken = ids(&without_waiting(&second, &jobs::claim(&schema, "q", "b", NOW, 10)).await);
    let rest: BTreeSet<i64> = all.difference(&held).copied().collect();
    assert_eq!(taken, rest, "held by the first worker: {held:?}");
    // ... and finds nothing while they are held ...
    let again = without_waiting(&second, &jobs::claim(&schema, "q", "b", NOW, 10)).await;
    assert_eq!(ids(&again), BTreeSet::new());
    // ... nor once the first worker's claim is committed.
    exec(&first, "COMMIT").await;
    let after = without_waiting(&second, &jobs::claim(&schema, "q", "c", NOW + 1, 10)).await;
    assert_eq!(ids(&after), BTreeSet::new());

    let expected: Vec<(i64, Option<String>, i32)> = all
        .iter()
        .map(|id| {
            let worker = if held.contains(id) { "a" } else { "b" };
            (*id, Some(worker.to_owned()), 1)
        })
        .collect();
    assert_eq!(claims_of(&second, &schema).await, expected);
}

#[tokio::test]
async fn a_promote_skips_the_jobs_an_open_promote_holds_without_waiting() {
    if harness::skip_db_tests() {
        return;
    }
    let first = harness::connect().await;
    let schema = engine_schema(&first, "promote_skips").await;
    // Six jobs for later: not ready when enqueued.
    let batch: Vec<Job> = (0..6).map(|n| job("q", 0, NOW + 10 + n)).collect();
    let all: BTreeSet<i64> = enqueue(&first, &schema, &batch, NOW)
        .await
        .into_iter()
        .collect();
    let due = NOW + 100;

    exec(&first, "BEGIN").await;
    let promoted = first
        .execute(
            jobs::promote(&schema, "q", due, 2).sql(),
            &jobs::promote(&schema, "q", due, 2).args(),
        )
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    assert_eq!(promoted, 2);
    // The two it holds are the two due first (oldest run_at first).
    let held: BTreeSet<i64> = all.iter().take(2).copied().collect();

    let second = harness::connect().await;
    exec(&second, NEVER_WAIT).await;
    a_wait_for_them_is_refused(&second, &schema, &held).await;

    assert_eq!(
        count_without_waiting(&second, &jobs::promote(&schema, "q", due, 10)).await,
        4,
        "the second promoter flips the four the first does not hold"
    );
    assert_eq!(
        count_without_waiting(&second, &jobs::promote(&schema, "q", due, 10)).await,
        0,
        "while the first holds its two, there is nothing left to promote"
    );
    exec(&first, "COMMIT").await;
    assert_eq!(
        count_without_waiting(&second, &jobs::promote(&schema, "q", due, 10)).await,
        0,
        "committed by the first: promoted once, not again"
    );
    // All six are claimable now, each once.
    let claimed = without_waiting(&second, &jobs::claim(&schema, "q", "w", due, 10)).await;
    assert_eq!(claimed.len(), 6);
    assert_eq!(ids(&claimed), all);
}

const WORKERS: usize = 8;
const ROUNDS: usize = 10;
const BATCH: u32 = 3;
/// Exactly what the workers take: each round, each takes one batch.
const JOBS: usize = WORKERS * ROUNDS * BATCH as usize;

/// How long a step may wait for a row before the watch cancels it. The
/// sessions of [`in_overlapping_rounds`] wait for each other at a barrier
/// while they hold their rows, so a wait for a row that another session of
/// the round holds never ends by itself; one for a row a late session of the
/// previous round holds ends when it commits (well within this, unless the
/// machine is very loaded: then the step is redone, which is harmless).
const CANCEL_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `step` on `WORKERS` sessions in `ROUNDS` rounds. In each round
/// every session opens a transaction, runs `step`, and keeps its
/// transaction open until every session has run its step of the round;
/// then it commits. So every step runs while the other sessions' steps of
/// the round hold their rows, whatever the scheduling.
///
/// Every session is watched ([`LockWatch`]): no step may wait for another
/// session's row, except in PostgreSQL's update-chain step
/// ([`harness::lock_waits::Path::UpdateChain`]): there a step that found a row being updated by a
/// transaction which committed while it decided to skip the row waits for
/// the session holding the row's newer version, here one that waits at the
/// barrier. The watch cancels such a step; it is then redone in a fresh
/// transaction, beside the same held rows. Returns what each step returned,
/// per session and round.
async fn in_overlapping_rounds<T, F, Fut>(step: F) -> Vec<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize, Arc<Client>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send + 'static,
{
    // Only a failing run waits this long: a worker that panicked never
    // reaches the barrier again.
    async fn together(barrier: &Barrier) {
        tokio::time::timeout(std::time::Duration::from_secs(120), barrier.wait())
            .await
            .unwrap_or_else(|_| panic!("another worker failed (see its panic above)"));
    }
    let watch = LockWatch::start(Some(CANCEL_AFTER)).await;
    let barrier = Arc::new(Barrier::new(WORKERS));
    let step = Arc::new(step);
    let redone = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..WORKERS {
        let client = Arc::new(
            watch
                .session(&format!("w{worker}"), Role::SkipsLocked)
                .await,
        );
        let (barrier, step, redone) =
            (Arc::clone(&barrier), Arc::clone(&step), Arc::clone(&redone));
        tasks.spawn(async move {
            let mut got = Vec::new();
            for _ in 0..ROUNDS {
                exec(&client, "BEGIN").await;
                for attempt in 1.. {
                    match step(worker, Arc::clone(&client)).await {
                        Ok(result) => {
                            got.push(result);
                            break;
                        }
                        // Cancelled by the watch: redone if it was waiting in
                        // the update-chain step (or no longer waiting when
                        // the cancel came); any other wait fails the test
                        // (the watch's report says which).
                        Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
                            let context = e.as_db_error().and_then(|d| d.where_()).unwrap_or("");
                            let chain = context.contains("while locking updated version");
                            assert!(
                                (chain || !context.contains("while ")) && attempt < 20,
                                "w{worker}'s step waited for another session's row ({context}), \
                                 attempt {attempt}"
                            );
                            redone.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            exec(&client, "ROLLBACK; BEGIN").await;
                        }
                        Err(e) => panic!("w{worker}: {}", describe_error(&e)),
                    }
                }
                together(&barrier).await;
                exec(&client, "COMMIT").await;
            }
            (worker, got)
        });
    }
    let mut out: Vec<Option<Vec<T>>> = (0..WORKERS).map(|_| None).collect();
    let mut failure = None;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((worker, got)) => out[worker] = Some(got),
            // The first failure ends the others (they would wait for it at
            // the barrier) and fails the test with its own panic.
            Err(e) if e.is_panic() => {
                tasks.abort_all();
                failure = Some(e.into_panic());
                break;
            }
            Err(e) => panic!("a worker failed: {e}"),
        }
    }
    let waits = watch.stop().await;
    eprintln!(
        "lock waits: {}; steps cancelled and redone: {}",
        waits.summary(),
        redone.load(std::sync::atomic::Ordering::SeqCst)
    );
    for wait in &waits.all {
        eprintln!("  {wait}");
    }
    waits.assert_none_forbidden();
    if let Some(panic) = failure {
        std::panic::resume_unwind(panic);
    }
    out.into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_claimers_hand_out_every_job_exactly_once() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "claimers").await;
    let batch: Vec<Job> = (0..JOBS as i64)
        .map(|n| job("q", (n % 4) as i32, NOW - 1000 + n))
        .collect();
    let all: BTreeSet<i64> = enqueue(&admin, &schema, &batch, NOW)
        .await
        .into_iter()
        .collect();

    let claimer = schema.clone();
    let claimed: Vec<Vec<BTreeSet<i64>>> = in_overlapping_rounds(move |worker, client| {
        let claim = jobs::claim(&claimer, "q", &format!("w{worker}"), NOW, BATCH);
        async move { try_run(&client, &claim).await.map(|rows| ids(&rows)) }
    })
    .await;

    // Every claim found a full batch beside the others' held ones ...
    for (worker, rounds) in claimed.iter().enumerate() {
        for (round, got) in rounds.iter().enumerate() {
            assert_eq!(
                got.len(),
                BATCH as usize,
                "w{worker}, round {round}: {got:?}"
            );
        }
    }
    // ... and no job went to two of them.
    let handed_out: Vec<i64> = claimed.iter().flatten().flatten().copied().collect();
    let distinct: BTreeSet<i64> = handed_out.iter().copied().collect();
    assert_eq!(
        handed_out.len(),
        distinct.len(),
        "a job was handed to two claims"
    );
    assert_eq!(distinct, all, "every job is handed out");
    // The server's record agrees: each claimed once, by the worker that got it.
    let by_worker: std::collections::BTreeMap<i64, String> = claimed
        .iter()
        .enumerate()
        .flat_map(|(worker, rounds)| {
            rounds
                .iter()
                .flatten()
                .map(move |id| (*id, format!("w{worker}")))
        })
        .collect();
    for (id, worker, attempts) in claims_of(&admin, &schema).await {
        assert_eq!(
            (worker.as_deref(), attempts),
            (by_worker.get(&id).map(String::as_str), 1),
            "job {id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_promoters_flip_every_job_exactly_once() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "promoters").await;
    // Not due when enqueued; all due at `due`.
    let batch: Vec<Job> = (0..JOBS as i64).map(|n| job("q", 0, NOW + 1 + n)).collect();
    let all: BTreeSet<i64> = enqueue(&admin, &schema, &batch, NOW)
        .await
        .into_iter()
        .collect();
    let due = NOW + JOBS as i64 + 1;

    let promoter = schema.clone();
    let flipped: Vec<Vec<u64>> = in_overlapping_rounds(move |_, client| {
        let promote = jobs::promote(&promoter, "q", due, BATCH);
        async move { client.execute(promote.sql(), &promote.args()).await }
    })
    .await;
    for (worker, rounds) in flipped.iter().enumerate() {
        assert_eq!(
            rounds,
            &vec![u64::from(BATCH); ROUNDS],
            "promoter {worker}: each promote flips a full batch beside the others' held ones"
        );
    }
    let promote = jobs::promote(&schema, "q", due, 1000);
    assert_eq!(
        count_without_waiting(&admin, &promote).await,
        0,
        "all promoted"
    );
    let claimed = run(&admin, &jobs::claim(&schema, "q", "w", due, 1000)).await;
    assert_eq!(claimed.len(), JOBS, "each job once");
    assert_eq!(ids(&claimed), all);
}
