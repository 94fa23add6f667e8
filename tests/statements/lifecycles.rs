//! What the statements do to rows over a job's, a lock's, a schedule's and a
//! checkpoint's life: stale acks refused, backoff, reaping and expiry, fences,
//! schedule boundaries, checkpoints, and batches that match single calls.

use harness::engine::{engine_schema, run};
use schema_gen::statements::{FromRow, dead_jobs, jobs, locks, schedules, streams};
use schema_model::{ConsumerOffset, DeadJob, Job, Lock, Schedule};

use super::{NOW, PAYLOADS, claim, count, enqueue, job, one};

/// A claim is named by (id, worker_id, attempts): once it lapsed and was
/// reaped, the stale worker can neither ack, retry nor kill the job, even
/// after the same worker claims it again.
#[tokio::test]
async fn a_lapsed_claim_cannot_be_acked_by_its_stale_worker() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "fenced").await;
    let mut j = job("q", b"x", 0, NOW);
    j.opts.max_attempts = 5;
    j.id = enqueue(&client, &schema, &j).await;
    let first = claim(&client, &schema, "q", "w", NOW).await;
    assert_eq!(first[0].attempts, 1);
    // Not lapsed yet: reap leaves it alone.
    assert_eq!(
        run(&client, &jobs::reap(&schema, NOW + 29, 10)).await.len(),
        0
    );
    // Lapsed at claim_expires_at: reap releases it, claimable at once.
    let reaped = run(&client, &jobs::reap(&schema, NOW + 30, 10)).await;
    assert_eq!(reaped.len(), 1);
    let second = claim(&client, &schema, "q", "w", NOW + 31).await;
    assert_eq!((second[0].id, second[0].attempts), (j.id, 2));

    let stale = [
        jobs::ack(&schema, j.id, "w", 1),
        jobs::retry(&schema, j.id, "w", 1, NOW, None, NOW),
        jobs::kill(&schema, j.id, "w", 1, None, NOW),
        jobs::ack(&schema, j.id, "someone-else", 2),
    ];
    for statement in &stale {
        assert_eq!(
            count(&client, statement).await,
            0,
            "{} with a stale token",
            statement.name()
        );
    }
    assert_eq!(count(&client, &jobs::ack(&schema, j.id, "w", 2)).await, 1);
    assert_eq!(count(&client, &jobs::ack(&schema, j.id, "w", 2)).await, 0);
}

/// A retry backing off leaves the claim index: claims do not see it until
/// it is due and promoted, whatever its priority.
#[tokio::test]
async fn a_retry_waits_out_its_backoff_and_promotion_brings_it_back() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "backoff").await;
    let mut urgent = job("q", b"urgent", 9, NOW);
    urgent.id = enqueue(&client, &schema, &urgent).await;
    let claimed = claim(&client, &schema, "q", "w", NOW).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        count(
            &client,
            &jobs::retry(&schema, urgent.id, "w", 1, NOW + 60, Some("later"), NOW)
        )
        .await,
        1
    );
    // A due job of lower priority is claimed; the retry is not, until due.
    let mut low = job("q", b"low", 0, NOW);
    low.id = enqueue(&client, &schema, &low).await;
    let next = claim(&client, &schema, "q", "w", NOW + 1).await;
    assert_eq!(next.iter().map(|j| j.id).collect::<Vec<_>>(), [low.id]);
    assert!(claim(&client, &schema, "q", "w", NOW + 59).await.is_empty());
    // Without promotion a due job stays out of the claim index.
    let unpromoted = run(&client, &jobs::claim(&schema, "q", "w", NOW + 60, 10)).await;
    assert!(
        unpromoted.is_empty(),
        "claimed a job that was never promoted"
    );
    assert_eq!(
        count(&client, &jobs::promote(&schema, "q", NOW + 60, 10)).await,
        1
    );
    let back = run(&client, &jobs::claim(&schema, "q", "w", NOW + 60, 10)).await;
    let back = Job::from_row(&back[0]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (back.id, back.attempts, back.last_error.as_deref()),
        (urgent.id, 2, Some("later"))
    );

    // A job enqueued for later is not ready either.
    let mut scheduled = job("later", b"s", 0, NOW + 100);
    scheduled.id = enqueue(&client, &schema, &scheduled).await;
    assert!(
        claim(&client, &schema, "later", "w", NOW + 99)
            .await
            .is_empty()
    );
    assert_eq!(
        claim(&client, &schema, "later", "w", NOW + 100).await.len(),
        1
    );
}

/// Lapsed claims on their last attempt and expired jobs die, ids kept, with
/// the reason in last_error; lapsed claims with attempts left do not.
#[tokio::test]
async fn reap_exhausted_and_expire_move_jobs_to_dead_jobs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "dying").await;
    let mut last = job("q", b"last", 1, NOW);
    last.opts.max_attempts = 1;
    last.expires_at = None;
    last.id = enqueue(&client, &schema, &last).await;
    let mut spare = job("q", b"spare", 0, NOW);
    spare.opts.max_attempts = 3;
    spare.expires_at = None;
    spare.id = enqueue(&client, &schema, &spare).await;
    assert_eq!(claim(&client, &schema, "q", "w", NOW).await.len(), 2);
    let buried: Vec<i64> = run(&client, &jobs::reap_exhausted(&schema, NOW + 30, 10))
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(buried, [last.id]);
    let reaped: Vec<i64> = run(&client, &jobs::reap(&schema, NOW + 30, 10))
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(reaped, [spare.id]);

    let mut expiring = job("q", b"exp", 0, NOW);
    expiring.expires_at = Some(NOW + 5);
    expiring.id = enqueue(&client, &schema, &expiring).await;
    assert!(
        run(&client, &jobs::expire(&schema, NOW + 5, 10))
            .await
            .is_empty(),
        "not yet expired"
    );
    let expired: Vec<i64> = run(&client, &jobs::expire(&schema, NOW + 6, 10))
        .await
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(expired, [expiring.id]);

    let dead: Vec<DeadJob> = run(&client, &dead_jobs::sweep(&schema, i64::MAX / 2, 10))
        .await
        .iter()
        .map(|row| DeadJob::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let reason = |id: i64| {
        dead.iter()
            .find(|d| d.id == id)
            .and_then(|d| d.last_error.clone())
    };
    assert_eq!(
        reason(last.id).as_deref(),
        Some(jobs::LAPSED_ON_LAST_ATTEMPT)
    );
    assert_eq!(reason(expiring.id).as_deref(), Some(jobs::EXPIRED));
    assert_eq!(dead.len(), 2);
}

/// Acquire reports "held" as no row; a lapsed lock is taken over with a
/// higher fence; renew and release refuse a stale fence; fences only grow,
/// even across a release, and cannot be written by hand.
#[tokio::test]
async fn locks_are_fenced_and_fences_only_grow() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "fences").await;
    let a: Lock = one(&client, &locks::acquire(&schema, "l", "a", NOW + 30, NOW))
        .await
        .unwrap_or_else(|| panic!("free lock"));
    let held: Option<Lock> = one(
        &client,
        &locks::acquire(&schema, "l", "b", NOW + 60, NOW + 29),
    )
    .await;
    assert_eq!(held, None, "held by a: b gets nothing");
    let again: Option<Lock> = one(
        &client,
        &locks::acquire(&schema, "l", "a", NOW + 60, NOW + 29),
    )
    .await;
    assert_eq!(again, None, "held: even its owner renews instead");
    let renewed: Option<Lock> = one(
        &client,
        &locks::renew(&schema, "l", "a", a.fence, NOW + 40, NOW + 29),
    )
    .await;
    assert_eq!(renewed.map(|l| l.expires_at), Some(NOW + 40));
    let b: Lock = one(
        &client,
        &locks::acquire(&schema, "l", "b", NOW + 100, NOW + 40),
    )
    .await
    .unwrap_or_else(|| panic!("lapsed at expires_at: b takes it over"));
    assert!(b.fence > a.fence);
    let stale: Option<Lock> = one(
        &client,
        &locks::renew(&schema, "l", "a", a.fence, NOW + 200, NOW + 41),
    )
    .await;
    assert_eq!(stale, None, "a lost it");
    assert_eq!(
        count(&client, &locks::release(&schema, "l", "a", a.fence)).await,
        0
    );
    let lapsed_renew: Option<Lock> = one(
        &client,
        &locks::renew(&schema, "l", "b", b.fence, NOW + 200, NOW + 100),
    )
    .await;
    assert_eq!(lapsed_renew, None, "a lapsed lock is not renewed");
    assert_eq!(
        count(&client, &locks::release(&schema, "l", "b", b.fence)).await,
        1
    );
    let c: Lock = one(
        &client,
        &locks::acquire(&schema, "l", "c", NOW + 300, NOW + 200),
    )
    .await
    .unwrap_or_else(|| panic!("released: c takes it"));
    assert!(c.fence > b.fence, "fences grow across a release");
    run(&client, &locks::acquire(&schema, "gone", "x", NOW, NOW)).await;
    let swept: Vec<Lock> = run(&client, &locks::sweep(&schema, NOW, 10))
        .await
        .iter()
        .map(|r| Lock::from_row(r).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(
        swept.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["gone"]
    );

    let forged = client
        .batch_execute(&format!(
            "UPDATE \"{schema}\".locks SET fence = 1000000 WHERE name = 'l'"
        ))
        .await
        .err()
        .map(|e| harness::describe_error(&e))
        .unwrap_or_default();
    assert!(
        forged.contains("fence"),
        "writing a fence by hand must be refused: {forged:?}"
    );
}

/// Two tickers read the same due boundary; only the first advance fires it.
#[tokio::test]
async fn a_schedule_boundary_is_advanced_once() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "ticks").await;
    let schedule = {
        let mut schedule = Schedule::default();
        schedule.name = "s".into();
        schedule.spec = "@every 1m".into();
        schedule.every_s = 60;
        schedule.queue = "q".into();
        schedule.payload = b"p".to_vec();
        schedule.opts.priority = 0;
        schedule.opts.max_attempts = 1;
        schedule.opts.visibility_timeout_s = 10;
        schedule.opts.backoff_base_s = 0;
        schedule.opts.dead_letter_retention_s = 10;
        schedule.opts.expires_s = None;
        schedule.next_fire_at = NOW;
        schedule.last_fired_at = None;
        schedule.enabled = true;
        schedule
    };
    run(&client, &schedules::register(&schema, &schedule)).await;
    let seen: Schedule = one(&client, &schedules::due(&schema, NOW, 10))
        .await
        .unwrap_or_else(|| panic!("due"));
    let first: Option<Schedule> = one(
        &client,
        &schedules::advance(&schema, "s", seen.next_fire_at, seen.next_fire_at + 60),
    )
    .await;
    assert_eq!(
        first,
        Some({
            let mut schedule = schedule.clone();
            schedule.next_fire_at = NOW + 60;
            schedule.last_fired_at = Some(NOW);
            schedule
        })
    );
    let second: Option<Schedule> = one(
        &client,
        &schedules::advance(&schema, "s", seen.next_fire_at, seen.next_fire_at + 60),
    )
    .await;
    assert_eq!(second, None, "the boundary was already fired");
    assert!(
        run(&client, &schedules::due(&schema, NOW + 59, 10))
            .await
            .is_empty()
    );

    // Registering again replaces the definition and keeps the firing state.
    let changed = {
        let mut schedule = schedule.clone();
        schedule.spec = "@every 2m".into();
        schedule.every_s = 120;
        schedule.next_fire_at = 0;
        schedule
    };
    let stored: Option<Schedule> = one(&client, &schedules::register(&schema, &changed)).await;
    assert_eq!(
        stored,
        Some({
            let mut schedule = changed;
            schedule.next_fire_at = NOW + 60;
            schedule.last_fired_at = Some(NOW);
            schedule
        })
    );
}

/// The checkpoint only moves forward; a negative offset is refused by name.
#[tokio::test]
async fn the_checkpoint_only_moves_forward() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "offsets").await;
    let at = |offset| ConsumerOffset::new("s", "c", offset);
    for (offset, moved) in [(5_i64, 1), (9, 1), (3, 0), (9, 0), (12, 1), (1, 0)] {
        assert_eq!(
            count(&client, &streams::checkpoint(&schema, &at(offset))).await,
            moved,
            "to {offset}"
        );
    }
    let stored: Option<ConsumerOffset> =
        one(&client, &streams::read_checkpoint(&schema, "s", "c")).await;
    assert_eq!(stored, Some(at(12)));
    let negative = streams::checkpoint(&schema, &at(-1));
    let refused = client
        .execute(negative.sql(), &negative.args())
        .await
        .err()
        .map(|e| harness::describe_error(&e))
        .unwrap_or_default();
    assert!(
        refused.contains("stream_offsets_offset_not_negative"),
        "{refused}"
    );
}

/// A batch enqueues every job with every field (NULL expiries included) in
/// one statement, ids in order; a batch ack deletes only the claims the
/// worker still holds.
#[tokio::test]
async fn batches_enqueue_and_ack_like_their_single_job_statements() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "batches").await;
    let mut batch: Vec<Job> = PAYLOADS
        .iter()
        .enumerate()
        .map(|(n, payload)| {
            let mut job = job("b", payload, n as i32, NOW - n as i64);
            job.expires_at = (n % 2 == 0).then_some(NOW + n as i64);
            job
        })
        .collect();
    batch.push(job("b", b"later", 9, NOW + 60));
    let ids: Vec<i64> = run(&client, &jobs::enqueue_many(&schema, &batch, NOW))
        .await
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(ids.len(), batch.len());
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "ids in batch order: {ids:?}"
    );
    for (job, id) in batch.iter_mut().zip(&ids) {
        job.id = *id;
    }
    // The job for later is not ready: the claim gets the five due ones.
    let claimed = claim(&client, &schema, "b", "w", NOW).await;
    assert_eq!(claimed.len(), PAYLOADS.len());
    for job in &batch[..PAYLOADS.len()] {
        let got = claimed
            .iter()
            .find(|c| c.id == job.id)
            .unwrap_or_else(|| panic!("job {} not claimed", job.id));
        assert_eq!(got, &{
            let mut job = job.clone();
            job.attempts = 1;
            job.worker_id = Some("w".into());
            job.claimed_at = Some(NOW);
            job.claim_expires_at = Some(NOW + 30);
            job
        });
    }
    // One token is stale (wrong attempts): the batch ack leaves that job.
    let mut tokens: Vec<(i64, i32)> = claimed.iter().map(|j| (j.id, j.attempts)).collect();
    tokens[0].1 = 7;
    assert_eq!(
        count(&client, &jobs::ack_many(&schema, "someone-else", &tokens)).await,
        0
    );
    assert_eq!(
        count(&client, &jobs::ack_many(&schema, "w", &tokens)).await,
        tokens.len() as u64 - 1
    );
    assert_eq!(
        count(&client, &jobs::ack(&schema, tokens[0].0, "w", 1)).await,
        1
    );
}
