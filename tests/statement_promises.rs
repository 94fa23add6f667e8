//! What the statements' docs promise, proven by the rows they act on, with
//! exact expected rows, so a change of behaviour fails here even when the
//! SQL text, its doc-test and the `statements_sql` snapshot are updated
//! with it:
//!
//! - **fences**: an owner name can repeat (a process restarted with the same
//!   id); a holder whose grant lapsed and was granted again to the same name
//!   can neither renew nor release the newer grant with its old fence;
//! - **clocks**: a promoter whose clock runs ahead does not make a job
//!   claimable early (`jobs::claim` checks `run_at <= now` itself);
//! - **order and bounds**: the claim takes the highest priority first, then
//!   the earliest `run_at`, then the lowest id, at most its `limit`;
//!   `promote` flips at most its `limit`, earliest `run_at` first, only due
//!   jobs; the due scan never returns a disabled schedule and goes earliest
//!   boundary first, at most its `limit`.
//!
//! The order cases run twice: as the planner likes (through the claim,
//! promote and due indexes, whose order matches the statements' `ORDER
//! BY`), and with index scans switched off, over a heap whose physical order
//! is the reverse of the expected one. Only the second proves the `ORDER
//! BY` itself: through an index, a statement that lost a trailing sort key
//! still comes out in index order.

use harness::engine::{engine_schema, run};
use harness::{describe_error, exec};
use schema_gen::statements::{FromRow, Statement, jobs, locks, schedules};
use schema_model::{Job, Lock, Schedule, SchemaName};
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

fn job(queue: &str, priority: i32, run_at: i64) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = format!("{queue}/{priority}/{run_at}").into_bytes();
    job.priority = priority;
    job.run_at = run_at;
    job.expires_at = None;
    job.enqueued_at = NOW - 2000;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 5;
    job.opts.backoff_base_s = 1;
    job.opts.dead_letter_retention_s = 60;
    job
}

async fn enqueue(client: &Client, schema: &SchemaName, job: &Job, now: i64) -> i64 {
    run(client, &jobs::enqueue(schema, job, now)).await[0].get(0)
}

async fn count(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), describe_error(&e)))
}

/// The ids a claim returned, sorted (the claim returns its batch as a set).
async fn claim(
    client: &Client,
    schema: &SchemaName,
    queue: &str,
    now: i64,
    limit: u32,
) -> Vec<i64> {
    let mut ids: Vec<i64> = run(client, &jobs::claim(schema, queue, "w", now, limit))
        .await
        .iter()
        .map(|row| Job::from_row(row).unwrap_or_else(|e| panic!("{e}")).id)
        .collect();
    ids.sort_unstable();
    ids
}

/// How the order cases read the table.
#[derive(Debug, Clone, Copy)]
enum Reading {
    /// As the planner likes: through the indexes.
    Planner,
    /// No index scans: a sequential scan of the heap, then the `ORDER BY`.
    HeapThenSort,
}

const READINGS: [Reading; 2] = [Reading::Planner, Reading::HeapThenSort];

async fn session(reading: Reading) -> Client {
    let client = harness::connect().await;
    if let Reading::HeapThenSort = reading {
        exec(
            &client,
            "SET enable_indexscan = off; SET enable_bitmapscan = off; \
             SET enable_indexonlyscan = off",
        )
        .await;
    }
    client
}

/// Rewrites the rows of `table` whose `key` is in `expected` (an order the
/// test expects a statement to produce), last first, so the heap holds them
/// in the reverse of that order: a sequential scan then meets them backwards.
/// Checks that it does.
async fn reverse_heap_order<K>(
    client: &Client,
    schema: &SchemaName,
    table: &str,
    key: &str,
    expected: &[K],
) where
    K: tokio_postgres::types::ToSql + Sync + Clone + PartialEq + std::fmt::Debug,
    for<'a> K: tokio_postgres::types::FromSql<'a>,
{
    // A no-op update writes a new row version after the others (on the same
    // page here: a HOT update, which leaves the indexes alone).
    for k in expected.iter().rev() {
        client
            .execute(
                &format!("UPDATE {schema}.{table} SET payload = payload WHERE {key} = $1"),
                &[k],
            )
            .await
            .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    }
    let physical: Vec<K> = client
        .query(
            &format!("SELECT {key} FROM {schema}.{table} WHERE {key} = ANY($1) ORDER BY ctid"),
            &[&expected.to_vec()],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
        .iter()
        .map(|row| row.get(0))
        .collect();
    let reversed: Vec<K> = expected.iter().rev().cloned().collect();
    assert_eq!(
        physical, reversed,
        "the heap is not in the order the test set up"
    );
}

/// A lock granted, lapsed, and granted again to the same owner name (a
/// restart): the old grant's fence neither renews nor releases the new one;
/// the new fence does both.
#[tokio::test]
async fn a_restarted_owner_of_the_same_name_cannot_use_its_old_fence() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "same_owner").await;
    let one = |statement: Statement| {
        let client = &client;
        async move {
            let rows = run(client, &statement).await;
            assert!(rows.len() <= 1, "{}: {} rows", statement.name(), rows.len());
            rows.first()
                .map(|row| Lock::from_row(row).unwrap_or_else(|e| panic!("{e}")))
        }
    };
    let stored = || {
        let client = &client;
        let schema = &schema;
        async move {
            client
                .query(
                    &format!("SELECT name, owner, expires_at, fence FROM {schema}.locks"),
                    &[],
                )
                .await
                .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
                .iter()
                .map(|row| Lock::from_row(row).unwrap_or_else(|e| panic!("{e}")))
                .collect::<Vec<Lock>>()
        }
    };

    let old = one(locks::acquire(&schema, "ticker", "node-a", NOW + 30, NOW))
        .await
        .unwrap_or_else(|| panic!("a free lock is granted"));
    // node-a stalls past its grant, restarts under the same name, and is
    // granted the lapsed lock again.
    let new = one(locks::acquire(
        &schema,
        "ticker",
        "node-a",
        NOW + 100,
        NOW + 30,
    ))
    .await
    .unwrap_or_else(|| panic!("a lapsed lock is granted again"));
    assert_eq!(new.owner, old.owner);
    assert!(
        new.fence > old.fence,
        "a new grant draws a new fence: {old:?} then {new:?}"
    );

    // The stalled process wakes up and acts on its old grant.
    assert_eq!(
        one(locks::renew(
            &schema,
            "ticker",
            "node-a",
            old.fence,
            NOW + 500,
            NOW + 40
        ))
        .await,
        None,
        "the old fence renewed the new grant"
    );
    assert_eq!(
        one(locks::release(&schema, "ticker", "node-a", old.fence)).await,
        None,
        "the old fence released the new grant"
    );
    assert_eq!(
        stored().await,
        std::slice::from_ref(&new),
        "the new grant is untouched"
    );

    // The new grant's own fence renews and releases it.
    let renewed = {
        let mut lock = new.clone();
        lock.expires_at = NOW + 200;
        lock
    };
    assert_eq!(
        one(locks::renew(
            &schema,
            "ticker",
            "node-a",
            new.fence,
            NOW + 200,
            NOW + 40
        ))
        .await,
        Some(renewed.clone())
    );
    assert_eq!(
        one(locks::release(&schema, "ticker", "node-a", new.fence)).await,
        Some(renewed)
    );
    assert_eq!(stored().await, []);
}

/// A promoter whose clock runs an hour ahead flips a job that is due in a
/// minute: a claim by the real clock still does not take it until it is due.
#[tokio::test]
async fn a_promoter_whose_clock_runs_ahead_does_not_make_a_job_claimable_early() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "fast_clock").await;
    let now_due = enqueue(&client, &schema, &job("q", 0, NOW), NOW).await;
    // Due in a minute, at a higher priority: claimed first once due.
    let later = enqueue(&client, &schema, &job("q", 9, NOW + 60), NOW).await;

    assert_eq!(
        count(&client, &jobs::promote(&schema, "q", NOW + 3600, 10)).await,
        1,
        "the fast promoter flips the job for later to ready"
    );
    assert_eq!(claim(&client, &schema, "q", NOW, 10).await, [now_due]);
    assert_eq!(
        claim(&client, &schema, "q", NOW + 59, 10).await,
        Vec::<i64>::new()
    );
    assert_eq!(claim(&client, &schema, "q", NOW + 60, 10).await, [later]);
}

/// Claims of one job at a time come in the order priority (highest first),
/// then `run_at` (earliest first), then id (lowest first); a claim takes at
/// most its `limit`, only from its queue.
#[tokio::test]
async fn the_claim_goes_by_priority_then_run_at_then_id_up_to_its_limit() {
    if harness::skip_db_tests() {
        return;
    }
    for reading in READINGS {
        let client = session(reading).await;
        let schema = engine_schema(&client, "claim_order").await;
        // Enqueued in this order (so ids ascend in it) ...
        let enqueued = [
            job("q", 5, NOW - 5),
            job("q", 5, NOW - 5),
            // The same priority and an earlier run_at, but a higher id.
            job("q", 5, NOW - 10),
            // A lower priority loses to a higher one, however early.
            job("q", 1, NOW - 100),
            job("q", -3, NOW - 1000),
        ];
        // ... claimed in this one: run_at decides within a priority, the
        // lower id between equal run_ats.
        let claim_order = [2, 0, 1, 3, 4];
        let in_claim_order = |queue: &'static str| {
            let client = &client;
            let schema = &schema;
            let enqueued = &enqueued;
            async move {
                let mut ids = Vec::new();
                for j in enqueued {
                    let j = job(queue, j.priority, j.run_at);
                    ids.push(enqueue(client, schema, &j, NOW).await);
                }
                let ids: Vec<i64> = claim_order.iter().map(|n| ids[*n]).collect();
                reverse_heap_order(client, schema, "jobs", "id", &ids).await;
                ids
            }
        };
        let ids = in_claim_order("q").await;
        // Another queue's job, at a higher priority: never claimed from q.
        enqueue(&client, &schema, &job("other", 100, NOW - 5000), NOW).await;

        let one_at_a_time: Vec<Vec<i64>> = {
            let mut out = Vec::new();
            for _ in 0..=ids.len() {
                out.push(claim(&client, &schema, "q", NOW, 1).await);
            }
            out
        };
        let mut wanted: Vec<Vec<i64>> = ids.iter().map(|id| vec![*id]).collect();
        wanted.push(vec![]);
        assert_eq!(one_at_a_time, wanted, "{reading:?}");

        // The same jobs in another queue, claimed three at a time.
        let mut batch_ids = in_claim_order("b").await;
        batch_ids[..3].sort_unstable();
        batch_ids[3..].sort_unstable();
        assert_eq!(
            claim(&client, &schema, "b", NOW, 3).await,
            batch_ids[..3],
            "{reading:?}"
        );
        assert_eq!(
            claim(&client, &schema, "b", NOW, 3).await,
            batch_ids[3..],
            "{reading:?}"
        );
        assert_eq!(
            claim(&client, &schema, "b", NOW, 3).await,
            Vec::<i64>::new(),
            "{reading:?}"
        );
    }
}

/// Promote flips only jobs due by its `now`, at most `limit` of them, the
/// earliest `run_at` first; the claim then finds exactly those.
#[tokio::test]
async fn promote_flips_at_most_its_limit_of_due_jobs_earliest_first() {
    if harness::skip_db_tests() {
        return;
    }
    for reading in READINGS {
        let client = session(reading).await;
        let schema = engine_schema(&client, "promote_order").await;
        // Enqueued for later (not ready), out of run_at order.
        let run_ats = [NOW + 40, NOW + 10, NOW + 30, NOW + 20, NOW + 50];
        let mut by_run_at = Vec::new();
        for run_at in run_ats {
            let id = enqueue(&client, &schema, &job("q", 0, run_at), NOW).await;
            by_run_at.push((run_at, id));
        }
        by_run_at.sort_unstable();
        let ids: Vec<i64> = by_run_at.iter().map(|(_, id)| *id).collect();
        reverse_heap_order(&client, &schema, "jobs", "id", &ids).await;
        let sorted = |mut v: Vec<i64>| {
            v.sort_unstable();
            v
        };

        // Nothing is due before the earliest run_at.
        assert_eq!(
            count(&client, &jobs::promote(&schema, "q", NOW + 9, 10)).await,
            0
        );
        // Two are due at NOW + 20; a limit of 1 flips the earlier.
        assert_eq!(
            count(&client, &jobs::promote(&schema, "q", NOW + 20, 1)).await,
            1
        );
        assert_eq!(
            claim(&client, &schema, "q", NOW + 100, 10).await,
            [ids[0]],
            "{reading:?}"
        );
        // All are due later; a limit of 2 flips the next two by run_at.
        assert_eq!(
            count(&client, &jobs::promote(&schema, "q", NOW + 100, 2)).await,
            2
        );
        assert_eq!(
            claim(&client, &schema, "q", NOW + 100, 10).await,
            sorted(ids[1..3].to_vec()),
            "{reading:?}"
        );
        assert_eq!(
            count(&client, &jobs::promote(&schema, "q", NOW + 100, 5)).await,
            2
        );
        assert_eq!(
            claim(&client, &schema, "q", NOW + 100, 10).await,
            sorted(ids[3..].to_vec()),
            "{reading:?}"
        );
        assert_eq!(
            count(&client, &jobs::promote(&schema, "q", NOW + 100, 5)).await,
            0
        );
    }
}

fn schedule(name: &str, next_fire_at: i64, enabled: bool) -> Schedule {
    let mut schedule = Schedule::default();
    schedule.name = name.into();
    schedule.spec = "@every 1m".into();
    schedule.every_s = 60;
    schedule.queue = "q".into();
    schedule.payload = name.as_bytes().to_vec();
    schedule.opts.priority = 0;
    schedule.opts.max_attempts = 1;
    schedule.opts.visibility_timeout_s = 10;
    schedule.opts.backoff_base_s = 0;
    schedule.opts.dead_letter_retention_s = 10;
    schedule.opts.expires_s = None;
    schedule.next_fire_at = next_fire_at;
    schedule.last_fired_at = None;
    schedule.enabled = enabled;
    schedule
}

/// The due scan: enabled schedules whose boundary has come, earliest first,
/// at most `limit`; a disabled one never, however overdue.
#[tokio::test]
async fn a_disabled_schedule_is_never_due_and_the_due_scan_goes_earliest_first() {
    if harness::skip_db_tests() {
        return;
    }
    for reading in READINGS {
        let client = session(reading).await;
        let schema = engine_schema(&client, "due_order").await;
        // Registered out of boundary order; the earliest one is disabled.
        for s in [
            schedule("c", NOW - 5, true),
            schedule("off", NOW - 1000, false),
            schedule("later", NOW + 5, true),
            schedule("a", NOW - 20, true),
            schedule("b", NOW - 10, true),
        ] {
            run(&client, &schedules::register(&schema, &s)).await;
        }
        let by_boundary = ["off", "a", "b", "c", "later"].map(String::from);
        reverse_heap_order(&client, &schema, "schedules", "name", &by_boundary).await;
        let due = |now: i64, limit: u32| {
            let client = &client;
            let schema = &schema;
            async move {
                run(client, &schedules::due(schema, now, limit))
                    .await
                    .iter()
                    .map(|row| {
                        Schedule::from_row(row)
                            .unwrap_or_else(|e| panic!("{e}"))
                            .name
                    })
                    .collect::<Vec<String>>()
            }
        };
        assert_eq!(due(NOW, 10).await, ["a", "b", "c"], "{reading:?}");
        assert_eq!(due(NOW, 2).await, ["a", "b"], "{reading:?}");
        assert_eq!(
            due(NOW + 5, 10).await,
            ["a", "b", "c", "later"],
            "{reading:?}"
        );
        assert_eq!(
            due(i64::MAX, 10).await,
            ["a", "b", "c", "later"],
            "{reading:?}"
        );
        assert_eq!(due(NOW - 21, 10).await, Vec::<String>::new(), "{reading:?}");
    }
}

/// The lock acquire of the Citus layout (`clear_lapsed`, then
/// `acquire_free`) means on one server what `acquire` means: a free lock is
/// taken, a held one (by anyone) is not, a lapsed or released one is taken
/// with a higher fence.
#[tokio::test]
async fn the_two_statement_acquire_keeps_the_single_statement_promises() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "acquire_pair").await;
    let acquire = async |owner: &str, now: i64| -> Option<Lock> {
        count(&client, &locks::clear_lapsed(&schema, "ticker", now)).await;
        run(
            &client,
            &locks::acquire_free(&schema, "ticker", owner, now + 10),
        )
        .await
        .first()
        .map(|row| Lock::from_row(row).unwrap_or_else(|e| panic!("{e}")))
    };
    let first = acquire("a", NOW).await.unwrap_or_else(|| panic!("free"));
    assert_eq!(acquire("b", NOW + 9).await, None, "held by a");
    assert_eq!(acquire("a", NOW + 9).await, None, "held, by its owner too");
    let second = acquire("b", NOW + 10)
        .await
        .unwrap_or_else(|| panic!("lapsed"));
    assert!(second.fence > first.fence, "{second:?} after {first:?}");
    assert_eq!(
        count(
            &client,
            &locks::release(&schema, "ticker", "b", second.fence)
        )
        .await,
        1
    );
    let third = acquire("a", NOW + 11)
        .await
        .unwrap_or_else(|| panic!("released"));
    assert!(third.fence > second.fence, "{third:?} after {second:?}");
    // Why not one statement with `fence = EXCLUDED.fence` (which Citus would
    // accept): PostgreSQL sets an ALWAYS identity only to DEFAULT.
    let excluded = acquire_sql_with_excluded_fence(&schema);
    let refused = client
        .execute(&excluded, &[])
        .await
        .expect_err("an ALWAYS identity is updated only to DEFAULT");
    assert!(
        describe_error(&refused).contains("can only be updated to DEFAULT"),
        "{}",
        describe_error(&refused)
    );
}

/// `locks::acquire`'s text with its `DO UPDATE SET fence = DEFAULT` turned
/// into `fence = EXCLUDED.fence` and literal values: the alternative the
/// Citus layout could not take.
fn acquire_sql_with_excluded_fence(schema: &SchemaName) -> String {
    let sql = locks::acquire(schema, "ticker", "x", NOW + 10, NOW)
        .sql()
        .replace(r#""fence" = DEFAULT"#, r#""fence" = "excluded"."fence""#)
        .replace("$1", "'ticker'")
        .replace("$2", "'x'")
        .replace("$3", &(NOW + 10).to_string())
        .replace("$4", &(NOW + 100).to_string());
    assert!(sql.contains(r#""excluded"."fence""#), "{sql}");
    sql
}
