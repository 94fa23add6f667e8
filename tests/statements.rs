//! The product's statements and row mapping against a real server: every
//! value shape round-trips through its write and read statements byte for
//! byte (payloads with 0x00, 0xff, invalid UTF-8 and JSON with duplicate
//! keys included), a row missing a column or holding one of another type is
//! refused naming the column, the declared parameter types are the ones the
//! server infers, and each statement keeps the promise its docs make
//! (claims fenced by their token, retry out of and promotion back into the
//! claim index, reaping, expiry, lock fences, the schedule compare-and-set,
//! the forward-only checkpoint, the dedup ledger).

use harness::engine::{engine_schema, run, until_horizon_passes};
use harness::rows;
use schema_gen::statements::{
    self, FromRow, RowError, Statement, consumed_events, dead_jobs, jobs, locks, schedules, streams,
};
use schema_model::{
    ConsumedEvent, ConsumedEvents, ConsumerOffset, DeadJob, DeadJobs, Job, Jobs, Lock, Locks,
    QueueOpts, Schedule, Schedules, SchemaName, StreamEvent, StreamEvents, StreamOffsets,
    TableModel,
};
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

/// Payloads a careless mapping would corrupt: NUL, 0xff, bytes that are not
/// UTF-8, JSON with a duplicate key (jsonb would fold it), empty.
const PAYLOADS: [&[u8]; 5] = [
    b"\x00\x01\x00",
    b"\xff\xfe\xff",
    b"\xc3\x28 not utf-8 \xa0\xa1",
    br#"{"a": 1, "a": 2,   "b": [1,2]}"#,
    b"",
];

/// The one row a statement returned, decoded.
async fn one<S: FromRow>(client: &Client, statement: &Statement) -> Option<S> {
    let rows = run(client, statement).await;
    assert!(rows.len() <= 1, "{}: {} rows", statement.name(), rows.len());
    rows.first()
        .map(|row| S::from_row(row).unwrap_or_else(|e| panic!("{}: {e}", statement.name())))
}

async fn count(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), harness::describe_error(&e)))
}

fn opts() -> QueueOpts {
    let mut opts = QueueOpts::default();
    opts.visibility_timeout_s = 30;
    opts.max_attempts = 2;
    opts.backoff_base_s = 5;
    opts.dead_letter_retention_s = 600;
    opts
}

fn job(queue: &str, payload: &[u8], priority: i32, run_at: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = payload.to_vec();
    job.priority = priority;
    job.run_at = run_at;
    job.expires_at = Some(NOW + 10_000 + i64::from(priority));
    job.enqueued_at = NOW - 7;
    job.opts = opts();
    job
}

async fn enqueue(client: &Client, schema: &SchemaName, job: &Job) -> i64 {
    run(client, &jobs::enqueue(schema, job, NOW)).await[0].get(0)
}

async fn claim(
    client: &Client,
    schema: &SchemaName,
    queue: &str,
    worker: &str,
    now: i64,
) -> Vec<Job> {
    run(client, &jobs::promote(schema, queue, now, 100)).await;
    run(client, &jobs::claim(schema, queue, worker, now, 100))
        .await
        .iter()
        .map(|row| Job::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[tokio::test]
async fn every_statement_declares_the_parameter_types_the_server_infers() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "param_types").await;
    for statement in statements::all(&schema) {
        let prepared = client
            .prepare(statement.sql())
            .await
            .unwrap_or_else(|e| panic!("{}: {}", statement.name(), harness::describe_error(&e)));
        assert_eq!(
            prepared.params(),
            statement.param_types().as_slice(),
            "{}: the server infers other parameter types than the statement declares",
            statement.name()
        );
    }
}

/// A job round-trips through enqueue and claim, every field and every
/// payload byte, with only the claim's own changes; its retry error comes
/// back with the next claim; a killed job comes back from the sweep as the
/// same dead job.
#[tokio::test]
async fn jobs_and_dead_jobs_round_trip_byte_for_byte() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "job_rows").await;
    let mut written = Vec::new();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let mut job = job("rt", payload, n as i32, NOW - 1);
        if n == 0 {
            job.expires_at = None;
        }
        job.id = enqueue(&client, &schema, &job).await;
        written.push(job);
    }
    let claimed = claim(&client, &schema, "rt", "w1", NOW).await;
    assert_eq!(claimed.len(), written.len());
    for job in &written {
        let expected = {
            let mut job = job.clone();
            job.attempts = 1;
            job.worker_id = Some("w1".into());
            job.claimed_at = Some(NOW);
            job.claim_expires_at = Some(NOW + 30);
            job
        };
        let got = claimed
            .iter()
            .find(|c| c.id == job.id)
            .unwrap_or_else(|| panic!("job {} not claimed", job.id));
        assert_eq!(got, &expected);
    }

    // Retry carries last_error back; the next claim returns it.
    let first = &written[2];
    let error = "boom: \u{1F4A5} ' \" \\ E'\\x00' $1";
    assert_eq!(
        count(
            &client,
            &jobs::retry(&schema, first.id, "w1", 1, NOW, Some(error), NOW)
        )
        .await,
        1
    );
    let again = claim(&client, &schema, "rt", "w2", NOW + 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].last_error.as_deref(), Some(error));
    assert_eq!(again[0].payload, first.payload);
    assert_eq!(again[0].attempts, 2);

    // Kill moves it to dead_jobs with its id; the sweep returns it whole.
    let killed: i64 = run(
        &client,
        &jobs::kill(&schema, first.id, "w2", 2, Some("poison"), NOW + 2),
    )
    .await[0]
        .get(0);
    assert_eq!(killed, first.id);
    let swept: Vec<DeadJob> = run(&client, &dead_jobs::sweep(&schema, NOW + 2 + 601, 10))
        .await
        .iter()
        .map(|row| DeadJob::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(
        swept,
        [{
            let mut dead = DeadJob::default();
            dead.id = first.id;
            dead.queue = first.queue.clone();
            dead.payload = first.payload.clone();
            dead.priority = first.priority;
            dead.run_at = NOW;
            dead.enqueued_at = first.enqueued_at;
            dead.opts = first.opts.clone();
            dead.attempts = 2;
            dead.worker_id = Some("w2".into());
            dead.claimed_at = Some(NOW + 1);
            dead.last_error = Some("poison".into());
            dead.died_at = NOW + 2;
            dead
        }]
    );
}

#[tokio::test]
async fn stream_events_checkpoints_schedules_locks_and_ledger_entries_round_trip() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "other_rows").await;

    let mut events = Vec::new();
    for (n, payload) in PAYLOADS.iter().enumerate() {
        let mut event = {
            let mut event = StreamEvent::default();
            event.stream = "orders".into();
            event.key = (n % 2 == 0).then(|| format!("key-{n}"));
            event.payload = payload.to_vec();
            event.created_at = NOW + n as i64;
            event
        };
        event.id = run(&client, &streams::append(&schema, &event)).await[0].get(0);
        events.push(event);
    }
    let read: Vec<StreamEvent> = run(&client, &streams::read(&schema, "orders", 0, 100))
        .await
        .iter()
        .map(|row| StreamEvent::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(read, events);
    let in_commit_order: Vec<StreamEvent> = until_horizon_passes(
        async || {
            run(
                &client,
                &streams::read_in_commit_order(&schema, "orders", 0, 100),
            )
            .await
            .iter()
            .map(|row| StreamEvent::from_row(row).unwrap_or_else(|e| panic!("{e}")))
            .collect()
        },
        |read: &Vec<StreamEvent>| read.len() == events.len(),
    )
    .await;
    assert_eq!(in_commit_order, events);

    let offset = ConsumerOffset::new("orders", "billing", events[2].id);
    assert_eq!(
        count(&client, &streams::checkpoint(&schema, &offset)).await,
        1
    );
    let stored: Option<ConsumerOffset> = one(
        &client,
        &streams::read_checkpoint(&schema, "orders", "billing"),
    )
    .await;
    assert_eq!(stored, Some(offset));

    let schedule = {
        let mut schedule = Schedule::default();
        schedule.name = "nightly".into();
        schedule.spec = "@every 24h".into();
        schedule.every_s = 86_400;
        schedule.queue = "reports".into();
        schedule.payload = PAYLOADS[2].to_vec();
        schedule.opts.priority = 4;
        schedule.opts.max_attempts = 3;
        schedule.opts.visibility_timeout_s = 60;
        schedule.opts.backoff_base_s = 10;
        schedule.opts.dead_letter_retention_s = 3600;
        schedule.opts.expires_s = Some(900);
        schedule.next_fire_at = NOW;
        schedule.last_fired_at = None;
        schedule.enabled = true;
        schedule
    };
    let registered: Option<Schedule> = one(&client, &schedules::register(&schema, &schedule)).await;
    assert_eq!(registered.as_ref(), Some(&schedule));
    let due: Option<Schedule> = one(&client, &schedules::due(&schema, NOW, 10)).await;
    assert_eq!(due.as_ref(), Some(&schedule));

    let lock: Option<Lock> = one(
        &client,
        &locks::acquire(&schema, "ticker", "node-a", NOW + 30, NOW),
    )
    .await;
    let lock = lock.unwrap_or_else(|| panic!("a free lock is acquired"));
    assert_eq!(
        (lock.name.as_str(), lock.owner.as_str(), lock.expires_at),
        ("ticker", "node-a", NOW + 30)
    );

    let entry = ConsumedEvent::new("billing", "evt-\u{e9}-1", NOW);
    let first: Option<ConsumedEvent> = one(&client, &consumed_events::claim(&schema, &entry)).await;
    assert_eq!(first.as_ref(), Some(&entry), "a new event is claimed");
    let later = {
        let mut entry = entry.clone();
        entry.consumed_at = NOW + 5;
        entry
    };
    let duplicate: Option<ConsumedEvent> =
        one(&client, &consumed_events::claim(&schema, &later)).await;
    assert_eq!(duplicate, None, "a duplicate is reported as not new");
    let kept: i64 = rows(
        &client,
        &format!("SELECT consumed_at FROM \"{schema}\".consumed_events"),
    )
    .await[0]
        .get(0);
    assert_eq!(kept, NOW, "the duplicate left the first entry as it was");
}

/// `columns`, each as `select(column)` gives it (`None`: left out), from
/// the table's one row.
fn select_each<T: TableModel>(
    schema: &SchemaName,
    columns: &[T],
    select: impl Fn(T) -> Option<String>,
) -> String {
    let list: Vec<String> = columns.iter().filter_map(|c| select(*c)).collect();
    format!(
        "SELECT {} FROM \"{schema}\".\"{}\" LIMIT 1",
        list.join(", "),
        T::table_name()
    )
}

/// Every column but `missing`, each as itself, from the table's one row.
fn select_without<T: TableModel>(schema: &SchemaName, columns: &[T], missing: T) -> String {
    select_each(schema, columns, |c| {
        (c != missing).then(|| format!("\"{}\"", c.as_str()))
    })
}

/// For each column the shape reads: a row without it, and a row with it
/// cast to another type, are refused naming that column.
async fn refuses_rows_missing_a_column<S: FromRow + std::fmt::Debug, T: TableModel>(
    client: &Client,
    schema: &SchemaName,
    columns: &[T],
) {
    let all = rows(client, &select_without(schema, columns, T::TABLE)).await;
    S::from_row(&all[0])
        .unwrap_or_else(|e| panic!("{}: the full row must decode: {e}", T::table_name()));
    for &column in columns {
        let without = rows(client, &select_without(schema, columns, column)).await;
        let err: RowError = S::from_row(&without[0]).expect_err(&format!(
            "{}: a row without {} decoded",
            T::table_name(),
            column.as_str()
        ));
        assert_eq!(err.column(), column.as_str(), "{err}");
        assert_eq!(err.table(), T::table_name());

        // The same column as another type (text where it is not, else bigint).
        let other = if column.column().map(|c| c.sql_type) == Some(schema_model::SqlType::Text) {
            "42::bigint"
        } else {
            "'x'::text"
        };
        let wrong = rows(
            client,
            &select_each(schema, columns, |c| {
                Some(if c == column {
                    format!("{other} AS \"{}\"", c.as_str())
                } else {
                    format!("\"{}\"", c.as_str())
                })
            }),
        )
        .await;
        let err = S::from_row(&wrong[0]).expect_err(&format!(
            "{}: {} of another type decoded",
            T::table_name(),
            column.as_str()
        ));
        assert_eq!(err.column(), column.as_str(), "{err}");
    }
}

#[tokio::test]
async fn a_row_missing_a_column_or_holding_another_type_is_refused_naming_it() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "row_errors").await;
    let mut j = job("q", b"\x00", 1, NOW);
    j.id = enqueue(&client, &schema, &j).await;
    claim(&client, &schema, "q", "w", NOW).await;
    run(&client, &jobs::kill(&schema, j.id, "w", 1, None, NOW)).await;
    enqueue(&client, &schema, &j).await;
    run(
        &client,
        &streams::append(&schema, &{
            let mut event = StreamEvent::default();
            event.stream = "s".into();
            event
        }),
    )
    .await;
    run(
        &client,
        &streams::checkpoint(&schema, &ConsumerOffset::new("s", "c", 1)),
    )
    .await;
    run(
        &client,
        &schedules::register(&schema, &{
            let mut schedule = Schedule::default();
            schedule.name = "n".into();
            schedule.spec = "@every 1s".into();
            schedule.every_s = 1;
            schedule.queue = "q".into();
            schedule.opts.max_attempts = 1;
            schedule.opts.visibility_timeout_s = 1;
            schedule.opts.dead_letter_retention_s = 1;
            schedule
        }),
    )
    .await;
    run(&client, &locks::acquire(&schema, "l", "o", NOW, NOW)).await;
    run(
        &client,
        &consumed_events::claim(&schema, &ConsumedEvent::new("c", "e", 1)),
    )
    .await;

    refuses_rows_missing_a_column::<Job, Jobs>(&client, &schema, &jobs::job_columns()).await;
    refuses_rows_missing_a_column::<DeadJob, DeadJobs>(
        &client,
        &schema,
        &dead_jobs::dead_job_columns(),
    )
    .await;
    refuses_rows_missing_a_column::<StreamEvent, StreamEvents>(
        &client,
        &schema,
        &streams::event_columns(),
    )
    .await;
    refuses_rows_missing_a_column::<ConsumerOffset, StreamOffsets>(
        &client,
        &schema,
        &[
            StreamOffsets::Stream,
            StreamOffsets::Consumer,
            StreamOffsets::Offset,
        ],
    )
    .await;
    refuses_rows_missing_a_column::<Schedule, Schedules>(
        &client,
        &schema,
        &schedules::schedule_columns(),
    )
    .await;
    refuses_rows_missing_a_column::<Lock, Locks>(
        &client,
        &schema,
        &[Locks::Name, Locks::Owner, Locks::ExpiresAt, Locks::Fence],
    )
    .await;
    refuses_rows_missing_a_column::<ConsumedEvent, ConsumedEvents>(
        &client,
        &schema,
        &[
            ConsumedEvents::Consumer,
            ConsumedEvents::EventId,
            ConsumedEvents::ConsumedAt,
        ],
    )
    .await;
}

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
