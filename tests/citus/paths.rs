//! The engine's statements on the cluster: every hot path one task, the
//! maintenance statements at work, commit-order reads, fences, and the
//! statements that move rows.

use std::collections::BTreeSet;

use harness::citus::{cluster, task_counts};
use harness::engine::{run, until_horizon_passes};
use harness::{describe_error, exec, rows};
use schema_gen::statements::{
    FromRow, Session, Statement, all_for, dead_jobs, jobs, locks, schedules, streams,
};
use schema_model::{Job, Layout, Lock, Schedule, SchemaName, StreamEvent};
use tokio_postgres::Client;

use super::{NOW, citus_schema, count, event, hot_paths, job, shard_worker};

#[tokio::test]
async fn every_hot_path_is_one_task_on_the_schemas_node() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_routes").await;
    run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await;
    let claimed = Job::from_row(&run(&client, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
        .unwrap_or_else(|e| panic!("{e}"));
    run(&client, &streams::append(&schema, &event("s", "k"))).await;
    for statement in hot_paths(&schema, &claimed) {
        let (counts, plan) = task_counts(&client, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must be one task:\n{plan}",
            statement.name()
        );
        assert!(
            plan.contains("Custom Scan (Citus Adaptive)")
                || plan.contains("Custom Scan (Citus Router)"),
            "{}: not planned by Citus:\n{plan}",
            statement.name()
        );
    }
    // The batch enqueue is an INSERT ... SELECT from its arrays, which
    // Citus runs by pulling the rows to the coordinator and copying them to
    // the schema's one shard: not one task, still one node, and it works.
    let batch = jobs::enqueue_many(&schema, &[job("mail"), job("mail")], NOW);
    let (counts, plan) = task_counts(&client, &batch).await;
    assert!(
        counts.is_empty() && plan.contains("INSERT/SELECT method: pull to coordinator"),
        "enqueue_many:\n{plan}"
    );
    assert_eq!(run(&client, &batch).await.len(), 2, "enqueue_many");
    // The horizon reads no table: it runs on the coordinator, no task.
    let (counts, plan) = task_counts(&client, &streams::commit_horizon(&schema)).await;
    assert!(counts.is_empty() && !plan.contains("Citus"), "{plan}");
    // The maintenance statements, which name no queue or stream: under
    // schema sharding they too are one task (every row of the schema is
    // on its node).
    for statement in [
        jobs::reap(&schema, NOW, 10),
        jobs::reap_exhausted(&schema, NOW, 10),
        jobs::expire(&schema, NOW, 10),
        dead_jobs::sweep(&schema, NOW, 10),
        locks::sweep(&schema, NOW, 10),
        schedules::due(&schema, NOW, 10),
    ] {
        let (counts, plan) = task_counts(&client, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must be one task:\n{plan}",
            statement.name()
        );
    }
    // And every statement the engine runs on this layout, as `schema-gen
    // statements --layout citus` lists it: none is left out.
    for statement in all_for(&schema, Layout::CitusSchemaSharding) {
        let (counts, plan) = task_counts(&client, &statement).await;
        match statement.name() {
            "enqueue_many" => assert!(counts.is_empty(), "{plan}"),
            "commit_horizon" | "wake" => assert!(counts.is_empty(), "{plan}"),
            name => assert_eq!(counts, [1], "{name} must be one task:\n{plan}"),
        }
    }
}

#[tokio::test]
async fn the_maintenance_statements_do_their_work_on_the_cluster() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_maint").await;
    // One job of each kind: a claim that lapsed with attempts left, one that
    // lapsed on its last attempt, one that expired.
    let mut one_attempt = job("last");
    one_attempt.opts.max_attempts = 1;
    let expiring = {
        let mut job = job("exp");
        job.expires_at = Some(NOW - 1);
        job
    };
    for (queue, job) in [("q", job("q")), ("last", one_attempt), ("exp", expiring)] {
        run(&client, &jobs::enqueue(&schema, &job, NOW)).await;
        if queue != "exp" {
            assert_eq!(
                run(&client, &jobs::claim(&schema, queue, "w", NOW, 1))
                    .await
                    .len(),
                1
            );
        }
    }
    let later = NOW + 31;
    assert_eq!(
        count(&client, &jobs::reap(&schema, later, 10)).await,
        1,
        "reap"
    );
    assert_eq!(
        count(&client, &jobs::reap_exhausted(&schema, later, 10)).await,
        1,
        "reap_exhausted"
    );
    assert_eq!(
        count(&client, &jobs::expire(&schema, later, 10)).await,
        1,
        "expire"
    );
    let dead = rows(
        &client,
        &format!("SELECT count(*) FROM \"{schema}\".dead_jobs"),
    )
    .await;
    assert_eq!(dead[0].get::<_, i64>(0), 2, "two jobs moved to dead_jobs");
    // Their retention (60 s) lapses.
    assert_eq!(
        count(&client, &dead_jobs::sweep(&schema, later + 61, 10)).await,
        2,
        "dead-letter sweep"
    );
    // A lock that lapsed.
    assert!(
        run(&client, &locks::acquire_free(&schema, "l", "o", NOW + 1))
            .await
            .len()
            == 1
    );
    assert_eq!(
        count(&client, &locks::sweep(&schema, NOW + 2, 10)).await,
        1,
        "lock sweep"
    );
    // A due schedule, locked for the tick's transaction.
    let schedule = {
        let mut schedule = Schedule::default();
        schedule.name = "tick".into();
        schedule.spec = "@every 60s".into();
        schedule.every_s = 60;
        schedule.queue = "q".into();
        schedule.payload = b"t".to_vec();
        schedule.opts.priority = 0;
        schedule.opts.max_attempts = 1;
        schedule.opts.visibility_timeout_s = 30;
        schedule.opts.backoff_base_s = 1;
        schedule.opts.dead_letter_retention_s = 60;
        schedule.opts.expires_s = None;
        schedule.next_fire_at = NOW;
        schedule.last_fired_at = None;
        schedule.enabled = true;
        schedule
    };
    run(&client, &schedules::register(&schema, &schedule)).await;
    exec(&client, "BEGIN").await;
    assert_eq!(
        run(&client, &schedules::due(&schema, NOW, 10)).await.len(),
        1,
        "due"
    );
    exec(&client, "COMMIT").await;
}

/// Makes `ahead`'s transaction counter at least `by` ids past `behind`'s,
/// by committing empty transactions that draw an id.
async fn counter_ahead(ahead: &Client, behind: &Client, by: i64) {
    let next = async |client: &Client| -> i64 {
        rows(client, "SELECT pg_current_xact_id()::text::bigint").await[0].get(0)
    };
    let gap = next(behind).await + by - next(ahead).await;
    if gap > 0 {
        exec(
            ahead,
            &format!("DO $$ BEGIN FOR i IN 1..{gap} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"),
        )
        .await;
    }
}

/// The gap-free read on the Citus layout, as an engine runs it: the
/// horizon from the coordinator, then the read below it.
async fn read_in_commit_order(session: &Session<Client>, stream: &str, offset: i64) -> Vec<i64> {
    let horizon = session
        .run(&streams::CommitHorizon)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    session
        .run(&streams::ReadInCommitOrderBelow {
            stream,
            offset,
            limit: 100,
            horizon,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|e| e.id)
        .collect()
}

/// The single-server reader on the cluster, for contrast.
async fn single_server_read(client: &Client, schema: &SchemaName, stream: &str) -> Vec<i64> {
    run(
        client,
        &streams::read_in_commit_order(schema, stream, 0, 100),
    )
    .await
    .iter()
    .map(|row| {
        StreamEvent::from_row(row)
            .unwrap_or_else(|e| panic!("{e}"))
            .id
    })
    .collect()
}

/// Interleaving: an append stays open while a later one commits. The
/// reader must deliver neither until the first commits, then both, in
/// commit order of their transactions (the first one's first), and never
/// skip the first once it has checkpointed.
async fn open_append_then_later_append(schema: &SchemaName, stream: &str, worker_ahead: bool) {
    let cluster = cluster();
    let reader = Session::with_layout(
        cluster.connect_coordinator().await,
        schema.clone(),
        Layout::CitusSchemaSharding,
    );
    let first = cluster.connect_coordinator().await;
    let second = cluster.connect_coordinator().await;
    let contrast = cluster.connect_coordinator().await;

    exec(&first, "BEGIN").await;
    let early: i64 = run(&first, &streams::append(schema, &event(stream, "early"))).await[0].get(0);
    let late: i64 = run(&second, &streams::append(schema, &event(stream, "late"))).await[0].get(0);
    assert!(early < late);
    let while_open = read_in_commit_order(&reader, stream, 0).await;
    assert_eq!(
        while_open,
        Vec::<i64>::new(),
        "delivered while an earlier append was open"
    );
    if worker_ahead {
        // The single-server reader compares the coordinator's tx_id with
        // the worker's horizon: it delivers the later event now, and would
        // never deliver the earlier one after that checkpoint.
        assert_eq!(single_server_read(&contrast, schema, stream).await, [late]);
    }
    exec(&first, "COMMIT").await;
    let both = until_horizon_passes(
        async || read_in_commit_order(&reader, stream, 0).await,
        |ids| ids.len() == 2,
    )
    .await;
    assert_eq!(
        both,
        [early, late],
        "commit order of the appending transactions"
    );
    assert_eq!(
        read_in_commit_order(&reader, stream, late).await,
        Vec::<i64>::new()
    );
    if !worker_ahead {
        // The coordinator is ahead: the worker's horizon stays below every
        // tx_id, so the single-server reader delivers nothing at all.
        assert_eq!(
            single_server_read(&contrast, schema, stream).await,
            Vec::<i64>::new()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_order_reads_never_skip_or_stall_with_the_counters_either_way_round() {
    if harness::skip_db_tests() {
        return;
    }
    let (coordinator, schema) = citus_schema("citus_order").await;
    let worker = cluster()
        .connect_worker(shard_worker(&coordinator, &schema).await)
        .await;
    counter_ahead(&worker, &coordinator, 2_000).await;
    open_append_then_later_append(&schema, "worker_ahead", true).await;
    counter_ahead(&coordinator, &worker, 2_000).await;
    open_append_then_later_append(&schema, "coordinator_ahead", false).await;
}

#[tokio::test]
async fn fences_only_grow_per_name_and_the_single_server_acquire_is_refused() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_fence").await;
    // Why the two-statement acquire: Citus refuses the single-server one.
    let refused = client
        .query(
            locks::acquire(&schema, "x", "o", NOW + 30, NOW).sql(),
            &locks::acquire(&schema, "x", "o", NOW + 30, NOW).args(),
        )
        .await
        .expect_err("Citus refuses fence = DEFAULT in DO UPDATE SET");
    assert!(
        describe_error(&refused).contains("must be marked IMMUTABLE"),
        "{}",
        describe_error(&refused)
    );

    // A Citus session prepares its layout's statements: the two-statement
    // acquire, never the refused one.
    let session = Session::with_layout(client, schema.clone(), Layout::CitusSchemaSharding);
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let texts = |layout| -> BTreeSet<String> {
        all_for(&schema, layout)
            .iter()
            .map(|s| s.sql().to_owned())
            .collect()
    };
    let every_layout: BTreeSet<String> = Layout::ALL.into_iter().flat_map(texts).collect();
    let prepared: BTreeSet<String> = session
        .client()
        .query("SELECT statement FROM pg_prepared_statements", &[])
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .filter(|sql| every_layout.contains(sql))
        .collect();
    assert_eq!(
        prepared,
        texts(Layout::CitusSchemaSharding),
        "prepare_all on a Citus session"
    );
    assert!(!prepared.contains(locks::acquire(&schema, "x", "o", 0, 0).sql()));
    let acquire = async |owner: &str, now: i64| -> Option<Lock> {
        let (_, lock) = session
            .run_pipelined(
                &locks::ClearLapsed {
                    name: "ticker",
                    now,
                },
                &locks::AcquireFree {
                    name: "ticker",
                    owner,
                    expires_at: now + 10,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        lock
    };
    let first = acquire("a", NOW)
        .await
        .unwrap_or_else(|| panic!("a free lock is taken"));
    assert_eq!(acquire("b", NOW + 5).await, None, "held");
    assert_eq!(acquire("a", NOW + 5).await, None, "held, by the owner too");
    // Lapsed: taken over with a higher fence; the old holder cannot renew.
    let second = acquire("b", NOW + 10)
        .await
        .unwrap_or_else(|| panic!("a lapsed lock is taken"));
    assert!(second.fence > first.fence, "{second:?} after {first:?}");
    let renewed = session
        .run(&locks::Renew {
            name: "ticker",
            owner: "a",
            fence: first.fence,
            expires_at: NOW + 30,
            now: NOW + 11,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(renewed, None, "the stale holder renewed");
    // Released, taken again: higher still.
    let released = session
        .run(&locks::Release {
            name: "ticker",
            owner: "b",
            fence: second.fence,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(released.map(|l| l.fence), Some(second.fence));
    let third = acquire("a", NOW + 12)
        .await
        .unwrap_or_else(|| panic!("a released lock is taken"));
    assert!(third.fence > second.fence, "{third:?} after {second:?}");
    // Fences come from the coordinator's sequence, not a worker's
    // (which starts at 2^48 + 1).
    assert!(third.fence < 1 << 48, "{third:?}");
}

/// What Citus sends to the worker for each statement, seen through
/// `citus.log_remote_commands`: the row-moving statements (a CTE over two
/// shards of the schema's node) are committed in two phases, every other
/// write in one. A two-phase commit ends on the worker after the
/// coordinator's own commit, which is why the README keeps appends out of
/// such transactions (the gap-free reader's horizon could pass first).
#[tokio::test]
async fn the_row_moving_statements_commit_in_two_phases_and_an_append_in_one() {
    if harness::skip_db_tests() {
        return;
    }
    let (setup, schema) = citus_schema("citus_2pc").await;
    run(&setup, &jobs::enqueue(&schema, &job("mail"), NOW)).await;
    let claimed = Job::from_row(&run(&setup, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
        .unwrap_or_else(|e| panic!("{e}"));
    let (client, notices) =
        harness::pg::connect_url_with_notices(&cluster().coordinator_url()).await;
    exec(&client, "SET citus.log_remote_commands = on").await;
    let two_phase = async |statement: &Statement| -> bool {
        notices.take();
        count(&client, statement).await;
        let sent: Vec<String> = notices
            .take()
            .into_iter()
            .map(|n| n.message().to_owned())
            .collect();
        assert!(
            sent.iter().any(|m| m.starts_with("issuing ")),
            "{}: nothing logged, the test proves nothing: {sent:?}",
            statement.name()
        );
        sent.iter().any(|m| m.contains("PREPARE TRANSACTION"))
    };
    for statement in [
        jobs::kill(&schema, claimed.id, "w", claimed.attempts, Some("e"), NOW),
        jobs::reap_exhausted(&schema, NOW, 10),
        jobs::expire(&schema, NOW, 10),
    ] {
        assert!(
            two_phase(&statement).await,
            "{} in one phase",
            statement.name()
        );
    }
    for statement in [
        streams::append(&schema, &event("s", "k")),
        jobs::enqueue(&schema, &job("mail"), NOW),
        jobs::claim(&schema, "mail", "w", NOW, 1),
        locks::acquire_free(&schema, "l", "o", NOW + 10),
        jobs::reap(&schema, NOW, 10),
    ] {
        assert!(
            !two_phase(&statement).await,
            "{} in two phases",
            statement.name()
        );
    }
}
