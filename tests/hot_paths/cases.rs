//! Every hot path's case: its statement, the mixes it is proven on, the
//! indexes it may use and the rows it may remove.

use harness::engine::run;
use harness::rows;
use schema_gen::statements::{
    FromRow, consumed_events, dead_jobs, jobs, locks, schedules, streams, wake,
};
use schema_model::{ConsumedEvent, ConsumerOffset, Job, Schedule, SchemaName, StreamEvent};
use tokio_postgres::Client;

use super::{BATCH, Case, NOW, PROMOTE_BATCH, READ_BATCH, batch, case, first_i64};

/// Every statement, with parameters that make it do its real work on the
/// seeded data (the same amount of work at both sizes).
pub(super) async fn cases(client: &Client, schema: &SchemaName) -> Vec<Case> {
    let claimed = rows(
        client,
        &format!(
            "SELECT id, attempts FROM \"{schema}\".jobs WHERE queue = 'mostly_claimed' \
             AND claimed_at IS NOT NULL ORDER BY id LIMIT 1 OFFSET 1000"
        ),
    )
    .await;
    let (id, attempts): (i64, i32) = (claimed[0].get(0), claimed[0].get(1));
    let s3 = first_i64(
        client,
        &format!(
            "SELECT (min(id) + max(id)) / 2 FROM \"{schema}\".stream_events WHERE stream = 's3'"
        ),
    )
    .await;
    let horizon: i64 = run(client, &streams::commit_horizon(schema)).await[0].get("horizon");
    let offset_row = run(client, &streams::read_checkpoint(schema, "s7", "c7")).await;
    let checkpoint = ConsumerOffset::from_row(&offset_row[0]).unwrap_or_else(|e| panic!("{e}"));
    let due = run(client, &schedules::due(schema, NOW, 1)).await;
    let due = Schedule::from_row(&due[0]).unwrap_or_else(|e| panic!("{e}"));
    let held = rows(
        client,
        &format!(
            "SELECT name, owner, fence FROM \"{schema}\".locks WHERE expires_at > {NOW} \
             ORDER BY name LIMIT 1"
        ),
    )
    .await;
    let (lock, owner, fence): (String, String, i64) =
        (held[0].get(0), held[0].get(1), held[0].get(2));
    let job = {
        let mut job = Job::default();
        job.queue = "normal".into();
        job.payload = b"\x00payload\xff".to_vec();
        job.priority = 3;
        job.run_at = NOW;
        job.enqueued_at = NOW;
        job.opts.visibility_timeout_s = 30;
        job.opts.max_attempts = 3;
        job.opts.backoff_base_s = 2;
        job.opts.dead_letter_retention_s = 86400;
        job
    };
    let ten: Vec<Job> = (0..BATCH)
        .map(|n| {
            let mut job = job.clone();
            job.run_at = NOW + i64::from(n % 2) * 60;
            job.expires_at = (n % 3 == 0).then_some(NOW + 3600);
            job
        })
        .collect();
    let claimed_ten: Vec<(i64, i32)> = rows(
        client,
        &format!(
            "SELECT id, attempts FROM \"{schema}\".jobs WHERE queue = 'mostly_claimed' \
             AND claimed_at IS NOT NULL ORDER BY id LIMIT {BATCH} OFFSET 2000"
        ),
    )
    .await
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    let mut cases = vec![
        case("enqueue", jobs::enqueue(schema, &job, NOW), None),
        batch(
            BATCH,
            case("enqueue_many", jobs::enqueue_many(schema, &ten, NOW), None),
        ),
        batch(
            BATCH,
            case(
                "ack_many",
                jobs::ack_many(schema, "w", &claimed_ten),
                Some("jobs_pkey"),
            ),
        ),
    ];
    // future_ahead's due jobs are ready already and the rest not yet due:
    // its promotion, like an idle or empty queue's, finds nothing.
    for (queue, idle) in [
        ("promotable", false),
        ("future_ahead", true),
        ("idle_future", true),
        ("empty", true),
    ] {
        cases.push(Case {
            idle,
            ..batch(
                PROMOTE_BATCH,
                case(
                    &format!("promote {queue}"),
                    jobs::promote(schema, queue, NOW, PROMOTE_BATCH),
                    Some("jobs_promote_idx"),
                ),
            )
        });
    }
    for queue in [
        "normal",
        "future_ahead",
        "mostly_claimed",
        "churned",
        "idle_future",
        "empty",
    ] {
        cases.push(Case {
            idle: matches!(queue, "idle_future" | "empty"),
            ..batch(
                BATCH,
                case(
                    &format!("claim {queue}"),
                    jobs::claim(schema, queue, "w2", NOW, BATCH),
                    Some("jobs_claim_idx"),
                ),
            )
        });
    }
    // What an idle worker asks before it waits: the first entry of the
    // promotion index, whether the queue holds future jobs, a backlog of due
    // ones not yet promoted, only ready ones, or nothing.
    for (queue, idle) in [
        ("idle_future", false),
        ("promotable", false),
        ("normal", true),
        ("empty", true),
    ] {
        cases.push(Case {
            idle,
            ..case(
                &format!("next_due {queue}"),
                wake::next_due(schema, queue),
                Some("jobs_promote_idx"),
            )
        });
    }
    cases.extend([
        case(
            "ack",
            jobs::ack(schema, id, "w", attempts),
            Some("jobs_pkey"),
        ),
        case(
            "retry",
            jobs::retry(schema, id, "w", attempts, NOW + 60, Some("boom"), NOW),
            Some("jobs_pkey"),
        ),
        case(
            "kill",
            jobs::kill(schema, id, "w", attempts, Some("poison"), NOW),
            Some("jobs_pkey"),
        ),
        Case {
            // One lapsed claim in ten is on its last attempt: reap skips those.
            max_rows_removed: i64::from(BATCH),
            ..batch(
                BATCH,
                case(
                    "reap",
                    jobs::reap(schema, NOW, BATCH),
                    Some("jobs_claim_expiry_idx"),
                ),
            )
        },
        Case {
            // ... and reap_exhausted skips the nine others.
            max_rows_removed: 10 * i64::from(BATCH),
            ..batch(
                BATCH,
                case(
                    "reap_exhausted",
                    jobs::reap_exhausted(schema, NOW, BATCH),
                    Some("jobs_claim_expiry_idx"),
                ),
            )
        },
        batch(
            BATCH,
            case(
                "expire",
                jobs::expire(schema, NOW, BATCH),
                Some("jobs_expiry_idx"),
            ),
        ),
        batch(
            BATCH,
            case(
                "dead_letter_sweep",
                dead_jobs::sweep(schema, NOW, BATCH),
                Some("dead_jobs_purge_idx"),
            ),
        ),
        case(
            "stream_append",
            streams::append(schema, &{
                let mut event = StreamEvent::default();
                event.stream = "s3".into();
                event.key = Some("k".into());
                event.payload = vec![0, 255];
                event.created_at = NOW;
                event
            }),
            None,
        ),
        batch(
            READ_BATCH,
            case(
                "stream_read",
                streams::read(schema, "s3", s3, READ_BATCH),
                Some("stream_events_stream_id_idx"),
            ),
        ),
        batch(
            READ_BATCH,
            case(
                "stream_read_in_commit_order",
                streams::read_in_commit_order(schema, "s3", s3, READ_BATCH),
                Some("stream_events_commit_order_idx"),
            ),
        ),
        // The Citus layout's gap-free read, with the horizon the engine
        // reads first: the same plan and work as the one above.
        batch(
            READ_BATCH,
            case(
                "stream_read_in_commit_order_below",
                streams::read_in_commit_order_below(schema, "s3", s3, READ_BATCH, horizon),
                Some("stream_events_commit_order_idx"),
            ),
        ),
        case(
            "checkpoint",
            streams::checkpoint(schema, &{
                let mut checkpoint = checkpoint.clone();
                checkpoint.offset += 1;
                checkpoint
            }),
            Some("stream_offsets_pkey"),
        ),
        case(
            "checkpoint_read",
            streams::read_checkpoint(schema, &checkpoint.stream, &checkpoint.consumer),
            Some("stream_offsets_pkey"),
        ),
        case(
            "schedule_register",
            schedules::register(schema, &due),
            Some("schedules_pkey"),
        ),
        batch(
            BATCH,
            case(
                "schedule_due",
                schedules::due(schema, NOW, BATCH),
                Some("schedules_due_idx"),
            ),
        ),
        case(
            "schedule_advance",
            schedules::advance(schema, &due.name, due.next_fire_at, due.next_fire_at + 60),
            Some("schedules_pkey"),
        ),
        case(
            "lock_acquire",
            locks::acquire(schema, "lock1", "newcomer", NOW + 30, NOW),
            Some("locks_pkey"),
        ),
        // The Citus layout's acquire: the lapsed row cleared, then the
        // insert of a free name.
        case(
            "lock_clear_lapsed",
            locks::clear_lapsed(schema, "lock1", NOW),
            Some("locks_pkey"),
        ),
        case(
            "lock_acquire_free",
            locks::acquire_free(schema, "lock-free", "newcomer", NOW + 30),
            Some("locks_pkey"),
        ),
        case(
            "lock_renew",
            locks::renew(schema, &lock, &owner, fence, NOW + 2000, NOW),
            Some("locks_pkey"),
        ),
        case(
            "lock_release",
            locks::release(schema, &lock, &owner, fence),
            Some("locks_pkey"),
        ),
        batch(
            BATCH,
            case(
                "lock_sweep",
                locks::sweep(schema, NOW, BATCH),
                Some("locks_expiry_idx"),
            ),
        ),
        case(
            "dedup_claim",
            consumed_events::claim(schema, &ConsumedEvent::new("c1", "new-event", NOW)),
            Some("consumed_events_pkey"),
        ),
    ]);
    cases
}
