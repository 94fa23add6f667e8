//! The claim path under a mixed load, for a few seconds: claimers,
//! promoters, workers that ack, ack in batches, retry, kill or abandon what
//! they were handed, and two reapers running `reap`, `reap_exhausted` and
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
use schema_model::{Job, SchemaName};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// How long the load runs at least; on a machine so loaded that some
/// statement has not done any work by then, it runs on until each has, up
/// to [`LIMIT`].
const LOAD: Duration = Duration::from_secs(4);
const LIMIT: Duration = Duration::from_secs(60);
/// Real milliseconds per second of the statements' clock (`now`), so claims
/// lapse, retries come due and jobs expire within the run.
const MS_PER_TICK: u128 = 20;
const T0: i64 = 1_700_000_000;
const JOBS: i64 = 1500;
const CLAIMERS: usize = 3;
const PROMOTERS: usize = 2;
const WORKERS: usize = 2;
/// Every engine instance sweeps: two reapers meet on the same lapsed and
/// expired rows.
const REAPERS: usize = 2;

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

/// The jobs: most due at once, the rest due during the run (promote); a
/// third of those expire a tick or two after they come due, at the front of
/// the queue (priority 3), so `expire` meets them while claimers and
/// workers hold them; claims lapse 5 ticks after they are taken (reap), at
/// most 3 attempts (reap_exhausted).
fn batch() -> Vec<Job> {
    let mut rng = rng(0);
    let run_ticks = i64::try_from(LOAD.as_millis() / MS_PER_TICK).unwrap_or(200);
    (0..JOBS)
        .map(|n| {
            let due_later = n % 5 >= 3;
            let run_at = if due_later {
                T0 + rng.random_range(1..run_ticks)
            } else {
                T0 - 10 + n % 7
            };
            let expiring = due_later && n % 3 == 0;
            let mut job = Job::new("q", b"p".to_vec());
            job.priority = if expiring { 3 } else { rng.random_range(0..3) };
            job.run_at = run_at;
            job.expires_at = expiring.then(|| run_at + rng.random_range(1..3));
            job.enqueued_at = T0 - 100;
            job.opts.visibility_timeout_s = 5;
            job.opts.max_attempts = 3;
            job.opts.backoff_base_s = 1;
            job.opts.dead_letter_retention_s = 600;
            job
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
    /// Of `acked`, by `ack_many`.
    acked_in_batches: u64,
    retried: u64,
    killed: u64,
    abandoned: u64,
    reaped: u64,
    reaped_exhausted: u64,
    expired: u64,
    /// Statements the server chose as deadlock victims, in its words.
    deadlocked: Vec<String>,
}

impl Tally {
    /// What each statement did: rows it took, changed or moved.
    fn work(&self) -> [(&'static str, u64); 9] {
        [
            ("claim", self.handed_out.len() as u64),
            ("promote", self.promoted),
            ("ack", self.acked - self.acked_in_batches),
            ("ack_many", self.acked_in_batches),
            ("retry", self.retried),
            ("kill", self.killed),
            ("reap", self.reaped),
            ("reap_exhausted", self.reaped_exhausted),
            ("expire", self.expired),
        ]
    }
}

type Shared = Arc<Mutex<Tally>>;

fn tally(shared: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `statement` (through `run`: its rows or its row count) in a
/// transaction held open for 0 to 2 ms after it, as a loaded engine's would
/// be; what it returned, or `None` when the server chose it as a deadlock
/// victim (recorded). Any other failure fails the test.
async fn held<T>(
    client: &Client,
    statement: &Statement,
    run: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    rng: &mut TestRng,
    shared: &Shared,
) -> Option<T> {
    // BEGIN and the statement in one round trip (pipelined, in this order).
    let (begun, result) = tokio::join!(client.batch_execute("BEGIN"), run);
    begun.unwrap_or_else(|e| panic!("BEGIN: {}", describe_error(&e)));
    match result {
        Ok(result) => {
            let hold = rng.random_range(0..3);
            if hold > 0 {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            exec(client, "COMMIT").await;
            Some(result)
        }
        Err(e) if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) => {
            exec(client, "ROLLBACK").await;
            let context = e.as_db_error().and_then(|d| d.where_()).unwrap_or("");
            tally(shared).deadlocked.push(format!(
                "{}: {} ({context})",
                statement.name(),
                describe_error(&e)
            ));
            None
        }
        Err(e) => panic!("{}: {}", statement.name(), describe_error(&e)),
    }
}

/// [`held`] for a statement that returns rows: how many.
async fn rows(client: &Client, statement: &Statement, rng: &mut TestRng, shared: &Shared) -> u64 {
    let args = statement.args();
    let run = client.query(statement.sql(), &args);
    held(client, statement, run, rng, shared)
        .await
        .map_or(0, |rows| rows.len() as u64)
}

/// [`held`] for a statement without `RETURNING`: its row count.
async fn count(client: &Client, statement: &Statement, rng: &mut TestRng, shared: &Shared) -> u64 {
    let args = statement.args();
    let run = client.execute(statement.sql(), &args);
    held(client, statement, run, rng, shared).await.unwrap_or(0)
}

/// When the sessions stop: set once the load has run for [`LOAD`] and every
/// statement has done some work (or after [`LIMIT`], when the test fails).
#[derive(Clone, Default)]
struct Until(Arc<std::sync::atomic::AtomicBool>);

impl Until {
    fn reached(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A claim token on its way from a claimer to the workers.
struct Token {
    id: i64,
    attempts: i32,
    owner: String,
}

/// Claims hand their jobs to the workers through this; claimers pause while
/// the workers are this far behind, so workers act on claims that still hold.
struct Handoff {
    sender: tokio::sync::mpsc::UnboundedSender<Token>,
    receiver: tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Token>>,
    in_hand: std::sync::atomic::AtomicUsize,
}

const BACKLOG: usize = 4 * WORKERS;

async fn claimer(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Until,
    handoff: Arc<Handoff>,
    shared: Shared,
) {
    let worker = format!("w{n}");
    let mut rng = rng(10 + n as u64);
    while !until.reached() {
        if handoff.in_hand.load(std::sync::atomic::Ordering::SeqCst) > BACKLOG {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let claim = jobs::claim(&schema, "q", &worker, clock.now(), rng.random_range(1..5));
        let args = claim.args();
        let run = client.query(claim.sql(), &args);
        let Some(rows) = held(&client, &claim, run, &mut rng, &shared).await else {
            continue;
        };
        let mut tally = tally(&shared);
        tally.claims += 1;
        for row in &rows {
            let job = Job::from_row(row).unwrap_or_else(|e| panic!("claim row: {e}"));
            tally.handed_out.push((job.id, job.attempts));
            handoff
                .in_hand
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = handoff.sender.send(Token {
                id: job.id,
                attempts: job.attempts,
                owner: worker.clone(),
            });
        }
    }
}

async fn promoter(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Until,
    shared: Shared,
) {
    let mut rng = rng(20 + n as u64);
    while !until.reached() {
        let promote = jobs::promote(&schema, "q", clock.now(), rng.random_range(1..9));
        let promoted = count(&client, &promote, &mut rng, &shared).await;
        tally(&shared).promoted += promoted;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Does with each job it is handed what a worker does, by the job's id so
/// that every path gets work whatever the load: one in twenty is abandoned
/// every time (its claim lapses: `reap`, and on the third attempt
/// `reap_exhausted`), one is killed, three are retried (due again within 3
/// ticks), the rest acked, a quarter of them in batches (`ack_many`).
async fn worker(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Until,
    handoff: Arc<Handoff>,
    shared: Shared,
) {
    let mut rng = rng(30 + n as u64);
    // ack_many takes one claimer's tokens.
    let mut batches: std::collections::BTreeMap<String, Vec<(i64, i32)>> = Default::default();
    while !until.reached() {
        let next = {
            let mut receiver = handoff.receiver.lock().await;
            tokio::time::timeout(Duration::from_millis(5), receiver.recv()).await
        };
        let Ok(Some(Token {
            id,
            attempts,
            owner,
        })) = next
        else {
            continue;
        };
        handoff
            .in_hand
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let now = clock.now();
        match id % 20 {
            0 => tally(&shared).abandoned += 1,
            1 => {
                let kill = jobs::kill(&schema, id, &owner, attempts, Some("poison"), now);
                let killed = rows(&client, &kill, &mut rng, &shared).await;
                tally(&shared).killed += killed;
            }
            2..=4 => {
                let run_at = now + rng.random_range(0..4);
                let retry = jobs::retry(&schema, id, &owner, attempts, run_at, Some("again"), now);
                let retried = count(&client, &retry, &mut rng, &shared).await;
                tally(&shared).retried += retried;
            }
            _ if rng.random_range(0..4) == 0 => {
                let batch = batches.entry(owner.clone()).or_default();
                batch.push((id, attempts));
                if batch.len() >= 4 {
                    let ack_many = jobs::ack_many(&schema, &owner, batch);
                    batch.clear();
                    let acked = count(&client, &ack_many, &mut rng, &shared).await;
                    let mut tally = tally(&shared);
                    tally.acked += acked;
                    tally.acked_in_batches += acked;
                }
            }
            _ => {
                let ack = jobs::ack(&schema, id, &owner, attempts);
                let acked = count(&client, &ack, &mut rng, &shared).await;
                tally(&shared).acked += acked;
            }
        }
    }
}

async fn reaper(
    n: usize,
    client: Client,
    schema: SchemaName,
    clock: Clock,
    until: Until,
    shared: Shared,
) {
    let mut rng = rng(40 + n as u64);
    while !until.reached() {
        let now = clock.now();
        let reaped = rows(&client, &jobs::reap(&schema, now, 5), &mut rng, &shared).await;
        let exhausted = jobs::reap_exhausted(&schema, now, 5);
        let reaped_exhausted = rows(&client, &exhausted, &mut rng, &shared).await;
        let expired = rows(&client, &jobs::expire(&schema, now, 10), &mut rng, &shared).await;
        {
            let mut tally = tally(&shared);
            tally.reaped += reaped;
            tally.reaped_exhausted += reaped_exhausted;
            tally.expired += expired;
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
    let until = Until::default();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let handoff = Arc::new(Handoff {
        sender,
        receiver: tokio::sync::Mutex::new(receiver),
        in_hand: std::sync::atomic::AtomicUsize::new(0),
    });
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
            until.clone(),
            Arc::clone(&handoff),
            Arc::clone(&shared),
        ));
    }
    for n in 0..PROMOTERS {
        let client = watch
            .session(&format!("promoter {n}"), Role::SkipsLocked)
            .await;
        tasks.spawn(promoter(
            n,
            client,
            schema.clone(),
            clock,
            until.clone(),
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
            until.clone(),
            Arc::clone(&handoff),
            Arc::clone(&shared),
        ));
    }
    for n in 0..REAPERS {
        let client = watch
            .session(&format!("reaper {n}"), Role::SkipsLocked)
            .await;
        tasks.spawn(reaper(
            n,
            client,
            schema.clone(),
            clock,
            until.clone(),
            Arc::clone(&shared),
        ));
    }
    let started = Instant::now();
    let (stopper, tallied) = (until.clone(), Arc::clone(&shared));
    tasks.spawn(async move {
        while started.elapsed() < LIMIT
            && (started.elapsed() < LOAD || tally(&tallied).work().iter().any(|(_, n)| *n == 0))
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stopper.0.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
            panic!("a session's task failed: {e}");
        }
    }
    let ran = started.elapsed();
    let waits = watch.stop().await;

    let tally = std::mem::take(&mut *tally(&shared));
    eprintln!(
        "in {ran:.1?}: {} claims handed out {} tokens; promoted {}, acked {}, retried {}, killed {}, abandoned {}, \
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
    for victim in &tally.deadlocked {
        eprintln!("  deadlock victim: {victim}");
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
    for (what, count) in tally.work() {
        assert!(
            count > 0,
            "no {what} did anything in {ran:?}: the load proves nothing about it"
        );
    }
}

/// Polls the watch until `waiter` has reported a wait and the watch has
/// read its sessions (at most a minute: only a failing run waits that
/// long). The caller then ends the wait; ended before that read, the read
/// finds the waiter no longer waiting (seen under a loaded machine).
async fn reported(watch: &LockWatch, waiter: &str) {
    for _ in 0..1200 {
        if watch
            .seen()
            .iter()
            .any(|w| w.waiter == waiter && !w.sessions.is_empty())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{waiter} reported no lock wait within a minute");
}

fn ready_job() -> Job {
    let mut job = Job::new("q", b"p".to_vec());
    job.run_at = T0 - 10;
    job.enqueued_at = T0 - 100;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 5;
    job.opts.backoff_base_s = 1;
    job.opts.dead_letter_retention_s = 60;
    job
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
