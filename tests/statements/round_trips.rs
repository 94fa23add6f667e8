//! Types and rows: every statement's parameter types as the server infers
//! them, every table's rows round-tripped byte for byte, and rows missing a
//! column or holding another type refused by name.

use harness::engine::{engine_schema, run, until_horizon_passes};
use harness::rows;
use schema_gen::statements::{
    self, FromRow, RowError, consumed_events, dead_jobs, jobs, locks, schedules, streams,
};
use schema_model::{
    ConsumedEvent, ConsumedEvents, ConsumerOffset, DeadJob, DeadJobs, Job, Jobs, Lock, Locks,
    Schedule, Schedules, SchemaName, StreamEvent, StreamEvents, StreamOffsets, TableModel,
};
use tokio_postgres::Client;

use super::{NOW, PAYLOADS, claim, count, enqueue, job, one};

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
