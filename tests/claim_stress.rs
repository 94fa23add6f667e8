//! The claim path under a mixed load, for a few seconds: claimers,
//! promoters, workers that ack, ack in batches, retry, kill or abandon what
//! they were handed, and a reaper running `reap`, `reap_exhausted` and
//! `expire`, all at once on one queue, each statement in a transaction held
//! open for a moment (as a loaded engine's would be), so the statements meet
//! each other's in-progress updates all the time.
//!
//! Every session reports its own lock waits ([`harness::lock_waits`]): a
//! statement that locks with `SKIP LOCKED` (claim, promote and the sweeps)
//! must never wait for another session's row. The one wait PostgreSQL
//! itself makes such a statement take is allowed and counted: when the
//! row's updater commits between `SKIP LOCKED`'s check and its skip,
//! heapam.c locks the row's newer versions without a wait policy and waits
//! for whoever holds one of them (see [`Path::UpdateChain`]). Any other wait
//! fails the test, naming both sessions, their queries and `pg_locks` rows.
//!
//! And the books must balance: no `(id, attempts)` claim token is handed out
//! twice, and every job enqueued is acked, dead or still live, once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::engine::{engine_schema, run};
use harness::lock_waits::{LockWatch, Path, Role};
use harness::{describe_error, exec};
use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use schema_gen::statements::{FromRow, Statement, jobs};
use schema_model::{Job, QueueOpts, SchemaName};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// How long the load runs.
const LOAD: Duration = Duration::from_secs(4);
/// Real milliseconds per second of the statements' clock (`now`), so claims
/// lapse, retries come due and jobs expire within the run.
const MS_PER_TICK: u128 = 20;
const T0: i64 = 1_700_000_000;
const JOBS: i64 = 1500;
const CLAIMERS: usize = 3;
const PROMOTERS: usize = 2;
const WORKERS: usize = 2;

/// The statements' clock.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(self) -> i64 {
        T0 + i64::try_from(self.0.elapsed().as_millis() / MS_PER_TICK).unwrap_or(i64::MAX - T0)
    }
}

fn rng(seed: u64) -> TestRng {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..12].copy_from_slice(&nanos.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// The jobs: most due at once, the rest due during the run (promote), a
/// tenth expiring during the run (expire), lapsing 2 ticks after a claim
/// (reap), at most 3 attempts (reap_exhausted).
fn batch() -> Vec<Job> {
    let mut rng = rng(0);
    let run_ticks = i64::try_from(LOAD.as_millis() / MS_PER_TICK).unwrap_or(200);
    (0..JOBS)
        .map(|n| Job {
            queue: "q".into(),
            payload: b"p".to_vec(),
            priority: rng.random_range(0..4),
            run_at: if n % 5 < 3 {
                T0 - 10 + n % 7
            } else {
                T0 + rng.random_range(1..run_ticks)
            },
            expires_at: (n % 10 == 0).then(|| T0 + rng.random_range(5..run_ticks)),
            enqueued_at: T0 - 100,
            opts: QueueOpts {
                visibility_timeout_s: 2,
                max_attempts: 3,
                backoff_base_s: 1,
                dead_letter_retention_s: 600,
            },
            ..Job::default()
        })
        .collect()
}

/// What the sessions did, for the books and the report.
#[derive(Default)]
struct Tally {
    /// Every `(id, attempts)` a claim handed out.
    handed_out: Vec<(i64, i32)>,
    claims: u64,
    promoted: u64,
    acked: u64,
    retried: u64,
    killed: u64,
    abandoned: u64,
    reaped: u64,
    reaped_exhausted: u64,
    expired: u64,
    /// Statements that failed with a deadlock or were cancelled: which, and
    /// the server's words.
    failed: Vec<String>,
}

type Shared = Arc<Mutex<Tally>>;

fn tally(shared: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `statement` in a transaction held open for 0 to 2 ms after it; its
/// rows and row count, or `None` when the server chose it as a deadlock
/// victim (recorded). Any other failure fails the test.
async fn held(
    client: &Client,
    statement: &Statement,
    rng: &mut TestRng,
    shared: &Shared,
) -> Option<(Vec<tokio_postgres::Row>, u64)> {
    exec(client, "BEGIN").await;
    let result = client.query(statement.sql(), &statement.args()).await;
    match result {
        Ok(rows) => {
            let hold = rng.random_range(0..3);
            if hold > 0 {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            exec(client, "COMMIT").await;
            let count = rows.len() as u64;
            Some((rows, count))
        }
        Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
            exec(client, "ROLLBACK").await;
            let context = e.as_db_error().and_then(|d| d.where_()).unwrap_or("");
            tally(shared).failed.push(format!(
                "{}: {} ({context})",
                statement.name(),
                describe_error(&e)
            ));
            None
        }
        Err(e) => panic!("{}: {}", statement.name(), describe_error(&e)),
    }
}

/// Like [`held`] for a statement without `RETURNING`: its row count.
async fn held_count(
    client: &Client,
    statement: &Statement,
    rng: &mut TestRng,
    shared: &Shared,
) -> Option<u64> {
    exec(client, "BEGIN").await;
    match client.execute(statement.sql(), &statement.args()).await {
        Ok(count) => {
            let hold = rng.random_range(0..3);
            if hold > 0 {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            exec(client, "COMMIT").await;
            Some(count)
        }
        Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
            exec(client, "ROLLBACK").await;
            let context = e.as_db_error().and_then(|d| d.where_()).unwrap_or("");
            tally(shared).failed.push(format!(
                "{}: {} ({context})",
                statement.name(),
                describe_error(&e)
            ));
            None
        }
        Err(e) => panic!("{}: {}", statement.name(), describe_error(&e)),
    }
}

type Handed = tokio::sync::mpsc::UnboundedSender<(i64, i32, String)>;

async fn claimer(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Instant,
    handed: Handed,
    shared: Shared,
) {
    let worker = format!("w{n}");
    let mut rng = rng(10 + n as u64);
    while Instant::now() < until {
        let claim = jobs::claim(&schema, "q", &worker, clock.now(), rng.random_range(1..5));
        let Some((rows, _)) = held(&client, &claim, &mut rng, &shared).await else {
            continue;
        };
        let got: Vec<Job> = rows
            .iter()
            .map(|row| Job::from_row(row).unwrap_or_else(|e| panic!("claim row: {e}")))
            .collect();
        let mut tally = tally(&shared);
        tally.claims += 1;
        for job in got {
            tally.handed_out.push((job.id, job.attempts));
            let _ = handed.send((job.id, job.attempts, worker.clone()));
        }
    }
}

async fn promoter(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Instant,
    shared: Shared,
) {
    let mut rng = rng(20 + n as u64);
    while Instant::now() < until {
        let promote = jobs::promote(&schema, "q", clock.now(), rng.random_range(1..9));
        if let Some(count) = held_count(&client, &promote, &mut rng, &shared).await {
            tally(&shared).promoted += count;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Does what a worker does with each job it was handed: ack (some in
/// batches), retry, kill, or nothing (the claim lapses: the reaper's).
async fn worker(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Instant,
    handed: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<(i64, i32, String)>>>,
    shared: Shared,
) {
    let mut rng = rng(30 + n as u64);
    // ack_many takes one worker's tokens.
    let mut batches: std::collections::BTreeMap<String, Vec<(i64, i32)>> = Default::default();
    while Instant::now() < until {
        let next = {
            let mut handed = handed.lock().await;
            tokio::time::timeout(Duration::from_millis(5), handed.recv()).await
        };
        let Ok(Some((id, attempts, owner))) = next else {
            continue;
        };
        let now = clock.now();
        match rng.random_range(0..100) {
            0..55 => {
                let ack = jobs::ack(&schema, id, &owner, attempts);
                if let Some(count) = held_count(&client, &ack, &mut rng, &shared).await {
                    tally(&shared).acked += count;
                }
            }
            55..70 => {
                let batch = batches.entry(owner.clone()).or_default();
                batch.push((id, attempts));
                if batch.len() >= 4 {
                    let ack_many = jobs::ack_many(&schema, &owner, batch);
                    batch.clear();
                    if let Some(count) = held_count(&client, &ack_many, &mut rng, &shared).await {
                        tally(&shared).acked += count;
                    }
                }
            }
            70..85 => {
                let run_at = now + rng.random_range(0..4);
                let retry = jobs::retry(&schema, id, &owner, attempts, run_at, Some("again"), now);
                if let Some(count) = held_count(&client, &retry, &mut rng, &shared).await {
                    tally(&shared).retried += count;
                }
            }
            85..90 => {
                let kill = jobs::kill(&schema, id, &owner, attempts, Some("poison"), now);
                if let Some((_, count)) = held(&client, &kill, &mut rng, &shared).await {
                    tally(&shared).killed += count;
                }
            }
            _ => tally(&shared).abandoned += 1,
        }
    }
}

async fn reaper(client: Client, schema: SchemaName, clock: Clock, until: Instant, shared: Shared) {
    let mut rng = rng(40);
    while Instant::now() < until {
        let now = clock.now();
        if let Some((_, count)) =
            held(&client, &jobs::reap(&schema, now, 5), &mut rng, &shared).await
        {
            tally(&shared).reaped += count;
        }
        let exhausted = jobs::reap_exhausted(&schema, now, 5);
        if let Some((_, count)) = held(&client, &exhausted, &mut rng, &shared).await {
            tally(&shared).reaped_exhausted += count;
        }
        if let Some((_, count)) =
            held(&client, &jobs::expire(&schema, now, 5), &mut rng, &shared).await
        {
            tally(&shared).expired += count;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claimers_promoters_workers_and_the_reaper_never_wait_for_a_held_row() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "claim_stress").await;
    let enqueued = run(&admin, &jobs::enqueue_many(&schema, &batch(), T0))
        .await
        .len();

    let watch = LockWatch::start(None).await;
    let shared: Shared = Arc::default();
    let clock = Clock(Instant::now());
    let until = Instant::now() + LOAD;
    let (handed, received) = tokio::sync::mpsc::unbounded_channel();
    let received = Arc::new(tokio::sync::Mutex::new(received));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..CLAIMERS {
        let client = watch
            .session(&format!("claimer {n}"), Role::SkipsLocked)
            .await;
        tasks.spawn(claimer(
            n,
            client,
            schema.clone(),
            clock,
            until,
            handed.clone(),
            Arc::clone(&shared),
        ));
    }
    drop(handed);
    for n in 0..PROMOTERS {
        let client = watch
            .session(&format!("promoter {n}"), Role::SkipsLocked)
            .await;
        tasks.spawn(promoter(
            n,
            client,
            schema.clone(),
            clock,
            until,
            Arc::clone(&shared),
        ));
    }
    for n in 0..WORKERS {
        let client = watch.session(&format!("worker {n}"), Role::Owner).await;
        tasks.spawn(worker(
            n,
            client,
            schema.clone(),
            clock,
            until,
            Arc::clone(&received),
            Arc::clone(&shared),
        ));
    }
    let client = watch.session("reaper", Role::SkipsLocked).await;
    tasks.spawn(reaper(
        client,
        schema.clone(),
        clock,
        until,
        Arc::clone(&shared),
    ));
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
            panic!("a session's task failed: {e}");
        }
    }
    let waits = watch.stop().await;

    let tally = tally(&shared);
    eprintln!(
        "{} claims handed out {} tokens; promoted {}, acked {}, retried {}, killed {}, abandoned {}, \
         reaped {}, reaped exhausted {}, expired {}; lock waits: {}",
        tally.claims,
        tally.handed_out.len(),
        tally.promoted,
        tally.acked,
        tally.retried,
        tally.killed,
        tally.abandoned,
        tally.reaped,
        tally.reaped_exhausted,
        tally.expired,
        waits.summary()
    );
    for wait in waits
        .all
        .iter()
        .filter(|w| w.path == Path::UpdateChain)
        .take(3)
    {
        eprintln!("  PostgreSQL's update-chain step: {wait}");
    }
    for failed in &tally.failed {
        eprintln!("  deadlock victim: {failed}");
    }
    waits.assert_none_forbidden();

    // No claim token twice.
    let tokens: BTreeSet<(i64, i32)> = tally.handed_out.iter().copied().collect();
    assert_eq!(
        tokens.len(),
        tally.handed_out.len(),
        "a claim token was handed out twice"
    );
    // Every job once: acked, dead, or still live.
    let live = harness::rows(&admin, &format!("SELECT id FROM {schema}.jobs"))
        .await
        .len();
    let dead = harness::rows(&admin, &format!("SELECT id FROM {schema}.dead_jobs"))
        .await
        .len();
    assert_eq!(
        enqueued as u64,
        tally.acked + dead as u64 + live as u64,
        "enqueued = acked + dead + live (acked {}, dead {dead}, live {live})",
        tally.acked
    );
    assert_eq!(
        dead as u64,
        tally.killed + tally.reaped_exhausted + tally.expired,
        "every dead job was killed, reaped on its last attempt or expired"
    );
    // The mix did what it is for: every statement had work.
    for (what, count) in [
        ("claim", tally.handed_out.len() as u64),
        ("promote", tally.promoted),
        ("ack / ack_many", tally.acked),
        ("retry", tally.retried),
        ("kill", tally.killed),
        ("reap", tally.reaped),
        ("reap_exhausted", tally.reaped_exhausted),
        ("expire", tally.expired),
    ] {
        assert!(
            count > 0,
            "no {what} did anything in {LOAD:?}: the load proves nothing about it"
        );
    }
}

/// Polls the watch until `waiter` has reported a wait (at most a minute:
/// only a failing run waits that long).
async fn reported(watch: &LockWatch, waiter: &str) {
    for _ in 0..1200 {
        if watch.seen().iter().any(|w| w.waiter == waiter) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{waiter} reported no lock wait within a minute");
}

fn ready_job() -> Job {
    Job {
        queue: "q".into(),
        payload: b"p".to_vec(),
        run_at: T0 - 10,
        enqueued_at: T0 - 100,
        opts: QueueOpts {
            visibility_timeout_s: 30,
            max_attempts: 5,
            backoff_base_s: 1,
            dead_letter_retention_s: 60,
        },
        ..Job::default()
    }
}

/// The watch's other half: a wait for a row another session holds is
/// reported, forbidden for a [`Role::SkipsLocked`] session, and names both
/// sessions, their queries and their `pg_locks` rows. (The waiter locks
/// without `SKIP LOCKED`, as a claim that lost it would.)
#[tokio::test]
async fn the_watch_names_a_wait_for_a_held_row_with_both_sessions() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "watch_held").await;
    let id: i64 = run(&admin, &jobs::enqueue(&schema, &ready_job(), T0)).await[0].get(0);
    let watch = LockWatch::start(None).await;
    let holder = watch.session("holder", Role::Owner).await;
    let waiter = watch.session("waiter", Role::SkipsLocked).await;

    exec(&holder, "BEGIN").await;
    assert_eq!(
        run(&holder, &jobs::claim(&schema, "q", "h", T0, 1))
            .await
            .len(),
        1
    );
    let blocking = format!("SELECT id FROM {schema}.jobs WHERE id = {id} FOR UPDATE");
    let (waited, ()) = tokio::join!(waiter.query(&blocking, &[]), async {
        reported(&watch, "waiter").await;
        exec(&holder, "COMMIT").await;
    });
    waited.unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    let waits = watch.stop().await;
    assert_eq!(waits.all.len(), 1, "{}", waits.summary());
    let wait = &waits.all[0];

    assert_eq!(wait.path, Path::Row, "{wait}");
    assert!(wait.is_forbidden(), "{wait}");
    assert!(wait.context.starts_with("while locking tuple"), "{wait}");
    let words = wait.to_string();
    for part in [
        "waiter: session waiter",
        &blocking,
        "holder: session holder",
        "UPDATE", // the holder's claim
        &format!(
            "transactionid ShareLock on {} (waiting)",
            wait.lock.replace("ShareLock on ", "")
        ),
        &format!(
            "transactionid ExclusiveLock on {} (granted)",
            wait.lock.replace("ShareLock on ", "")
        ),
    ] {
        assert!(words.contains(part), "{part:?} missing from: {words}");
    }
    assert_eq!(waits.forbidden().len(), 1, "{}", waits.summary());
}

/// The one wait PostgreSQL makes a `SKIP LOCKED` claim take, made to happen
/// without a debugger: the claimer's own `FOR KEY SHARE` lock (in a
/// repeatable-read snapshot taken before another session's committed
/// update of the job) makes the job's old version "being modified" to
/// heap_lock_tuple; its conditional wait for the committed updater
/// succeeds, so it walks the update chain, which waits for the session
/// holding the newer version, `SKIP LOCKED` or not. The watch tells it apart
/// ([`Path::UpdateChain`]) and allows it. (In production the same step is
/// reached when the updater commits in the microseconds between the skip
/// check and the conditional wait; the tests' `scenario` reproduction pauses
/// the backend there.) Should PostgreSQL ever honour `SKIP LOCKED` there,
/// this test fails: the README's caveat can then go.
#[tokio::test]
async fn postgresql_makes_a_skip_locked_claim_wait_in_its_update_chain_step() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "watch_chain").await;
    let id: i64 = run(&admin, &jobs::enqueue(&schema, &ready_job(), T0)).await[0].get(0);
    let watch = LockWatch::start(None).await;
    let holder = watch.session("holder", Role::Owner).await;
    let claimer = watch.session("claimer", Role::SkipsLocked).await;

    exec(&claimer, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").await;
    // An operator bumps the job's priority (a committed update the claimer's
    // snapshot does not see); the holder then holds the new version.
    exec(
        &admin,
        &format!("UPDATE {schema}.jobs SET priority = 1 WHERE id = {id}"),
    )
    .await;
    exec(&holder, "BEGIN").await;
    exec(
        &holder,
        &format!("SELECT id FROM {schema}.jobs WHERE id = {id} FOR NO KEY UPDATE"),
    )
    .await;
    exec(
        &claimer,
        &format!("SELECT id FROM {schema}.jobs WHERE id = {id} FOR KEY SHARE"),
    )
    .await;
    let claim = jobs::claim(&schema, "q", "c", T0, 1);
    let (claimed, ()) = tokio::join!(try_claim(&claimer, &claim), async {
        reported(&watch, "claimer").await;
        exec(&holder, "COMMIT").await;
    });
    // Repeatable read: the job changed since the snapshot.
    let refused = claimed
        .err()
        .unwrap_or_else(|| panic!("the claim took the job"));
    assert_eq!(
        refused.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE),
        "{}",
        describe_error(&refused)
    );
    exec(&claimer, "ROLLBACK").await;
    let waits = watch.stop().await;
    assert_eq!(waits.all.len(), 1, "{}", waits.summary());
    let wait = &waits.all[0];

    assert_eq!(wait.path, Path::UpdateChain, "{wait}");
    assert!(!wait.is_forbidden(), "{wait}");
    let words = wait.to_string();
    assert!(
        words.contains("holder: session holder") && words.contains("FOR NO KEY UPDATE"),
        "{words}"
    );
    waits.assert_none_forbidden();
}

async fn try_claim(
    client: &Client,
    claim: &Statement,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    client.query(claim.sql(), &claim.args()).await
}
