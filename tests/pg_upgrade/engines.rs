//! The previous release's engines and this one's share the expanded schema.

use super::*;

/// Shared by the engines of one run: every job enqueued, every job acked
/// (a second ack of one id is a job handed out twice), and every statement
/// that failed.
#[derive(Default)]
struct Ledger {
    enqueued: std::collections::BTreeSet<i64>,
    acked: std::collections::BTreeSet<i64>,
    doubled: Vec<i64>,
    failures: Vec<String>,
    acked_during_upgrade: usize,
}

type Shared = Arc<Mutex<Ledger>>;

fn note_failure(ledger: &Shared, what: &str, err: &tokio_postgres::Error) {
    if let Ok(mut l) = ledger.lock() {
        l.failures
            .push(format!("{what}: {}", harness::describe_error(err)));
    }
}

fn note_ack(ledger: &Shared, id: i64, upgrading: bool) {
    if let Ok(mut l) = ledger.lock() {
        if !l.acked.insert(id) {
            l.doubled.push(id);
        }
        if upgrading {
            l.acked_during_upgrade += 1;
        }
    }
}

/// An engine of shipped `version`: its own statements (from its
/// `statements.json`), enqueueing `enqueues` jobs as it goes and claiming
/// and acking until `stop`.
async fn old_engine(
    version: u32,
    schema: SchemaName,
    worker: String,
    enqueues: usize,
    ledger: Shared,
    upgrading: Arc<std::sync::atomic::AtomicBool>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut client = harness::connect().await;
    let statements = harness::history::old_statements(version, &schema);
    let get = |name: &str| {
        statements
            .get(name)
            .unwrap_or_else(|| panic!("version {version} has no statement {name}"))
            .clone()
    };
    let (enqueue, ack) = (get("enqueue"), get("ack"));
    let mut left = enqueues;
    while !stop.load(SeqCst) {
        let now = now();
        if left > 0 {
            left -= 1;
            let (queue, payload, priority, none) =
                ("mail".to_owned(), vec![7u8], 1i32, None::<i64>);
            let (max_attempts, timeout, backoff, retention) = (3i32, 30i64, 1i64, 600i64);
            match enqueue
                .run(
                    &client,
                    &[
                        ("queue", &queue),
                        ("payload", &payload),
                        ("priority", &priority),
                        ("run_at", &now),
                        ("expires_at", &none),
                        ("enqueued_at", &now),
                        ("now", &now),
                        ("visibility_timeout_s", &timeout),
                        ("max_attempts", &max_attempts),
                        ("backoff_base_s", &backoff),
                        ("dead_letter_retention_s", &retention),
                    ],
                )
                .await
            {
                Ok(rows) => {
                    if let (Ok(mut l), Some(row)) = (ledger.lock(), rows.first()) {
                        l.enqueued.insert(row.get(0));
                    }
                }
                Err(e) => note_failure(&ledger, "old enqueue", &e),
            }
        }
        let queue = "mail".to_owned();
        let limit = 5i64;
        let claimed: Vec<(i64, i32)> = if version == 1 {
            // Its claim: SELECT ... FOR UPDATE SKIP LOCKED, then mark each
            // row, in one transaction.
            let (claim, mark) = (get("claim"), get("claim_mark"));
            let tx = match client.transaction().await {
                Ok(tx) => tx,
                Err(e) => {
                    note_failure(&ledger, "old begin", &e);
                    continue;
                }
            };
            let ids: Vec<i64> = match claim
                .run(&tx, &[("queue", &queue), ("now", &now), ("limit", &limit)])
                .await
            {
                Ok(rows) => rows.iter().map(|r| r.get(0)).collect(),
                Err(e) => {
                    note_failure(&ledger, "old claim", &e);
                    continue;
                }
            };
            let lapses = now + 30;
            let mut marked = Vec::new();
            for id in ids {
                match mark
                    .run(
                        &tx,
                        &[
                            ("worker_id", &worker),
                            ("claimed_at", &now),
                            ("claim_expires_at", &lapses),
                            ("id", &id),
                        ],
                    )
                    .await
                {
                    Ok(_) => marked.push((id, 0)),
                    Err(e) => note_failure(&ledger, "old claim mark", &e),
                }
            }
            if let Err(e) = tx.commit().await {
                note_failure(&ledger, "old commit", &e);
                continue;
            }
            marked
        } else {
            let (promote, claim) = (get("promote"), get("claim"));
            if let Err(e) = promote
                .run(
                    &client,
                    &[("queue", &queue), ("now", &now), ("limit", &limit)],
                )
                .await
            {
                note_failure(&ledger, "old promote", &e);
            }
            match claim
                .run(
                    &client,
                    &[
                        ("worker_id", &worker),
                        ("now", &now),
                        ("queue", &queue),
                        ("limit", &limit),
                    ],
                )
                .await
            {
                Ok(rows) => rows
                    .iter()
                    .map(|r| (r.get::<_, i64>("id"), r.get::<_, i32>("attempts")))
                    .collect(),
                Err(e) => {
                    note_failure(&ledger, "old claim", &e);
                    Vec::new()
                }
            }
        };
        for (id, attempts) in &claimed {
            match ack
                .run(
                    &client,
                    &[("id", id), ("worker_id", &worker), ("attempts", attempts)],
                )
                .await
            {
                Ok(_) => note_ack(&ledger, *id, upgrading.load(SeqCst)),
                Err(e) => note_failure(&ledger, "old ack", &e),
            }
        }
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// An engine of this release: the product's statements.
async fn new_engine(
    schema: SchemaName,
    worker: String,
    enqueues: usize,
    ledger: Shared,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use schema_gen::statements::{FromRow, jobs};
    use std::sync::atomic::Ordering::SeqCst;
    let client = harness::connect().await;
    let mut left = enqueues;
    while !stop.load(SeqCst) {
        let now = now();
        if left > 0 {
            left -= 1;
            let job = {
                let mut job = schema_model::Job::default();
                job.queue = "mail".into();
                job.payload = vec![8];
                job.priority = 1;
                job.run_at = now;
                job.enqueued_at = now;
                job.opts.visibility_timeout_s = 30;
                job.opts.max_attempts = 3;
                job.opts.backoff_base_s = 1;
                job.opts.dead_letter_retention_s = 600;
                job
            };
            let enqueue = jobs::enqueue(&schema, &job, now);
            match client.query(enqueue.sql(), &enqueue.args()).await {
                Ok(rows) => {
                    if let (Ok(mut l), Some(row)) = (ledger.lock(), rows.first()) {
                        l.enqueued.insert(row.get(0));
                    }
                }
                Err(e) => note_failure(&ledger, "new enqueue", &e),
            }
        }
        let promote = jobs::promote(&schema, "mail", now, 100);
        if let Err(e) = client.execute(promote.sql(), &promote.args()).await {
            note_failure(&ledger, "new promote", &e);
        }
        let claim = jobs::claim(&schema, "mail", &worker, now, 5);
        let claimed = match client.query(claim.sql(), &claim.args()).await {
            Ok(rows) => rows
                .iter()
                .filter_map(|r| schema_model::Job::from_row(r).ok())
                .collect::<Vec<_>>(),
            Err(e) => {
                note_failure(&ledger, "new claim", &e);
                Vec::new()
            }
        };
        for job in &claimed {
            let ack = jobs::ack(&schema, job.id, &worker, job.attempts);
            match client.execute(ack.sql(), &ack.args()).await {
                Ok(1) => note_ack(&ledger, job.id, false),
                Ok(n) => {
                    if let Ok(mut l) = ledger.lock() {
                        l.failures
                            .push(format!("new ack of {} changed {n} rows", job.id));
                    }
                }
                Err(e) => note_failure(&ledger, "new ack", &e),
            }
        }
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The previous release's engines run their own statements through the
/// whole upgrade, and this release's engines join them once the expand is
/// done: no statement fails, every job enqueued (by either) is acked
/// exactly once, whoever enqueued it. Then, with the older engines gone,
/// the contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_releases_engines_and_this_ones_share_the_expanded_schema() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    if harness::skip_db_tests() {
        return;
    }
    for version in [1, 2] {
        let client = harness::connect().await;
        let schema = harness::unique_schema_name(&format!("up_share_v{version}"));
        create_version(&client, &schema, version).await;
        let ledger: Shared = Arc::default();
        let upgrading = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        // A backlog the old engines work on while the upgrade runs.
        let seeding = Arc::new(AtomicBool::new(false));
        let seed = tokio::spawn(old_engine(
            version,
            schema.clone(),
            "seeder".into(),
            1500,
            ledger.clone(),
            upgrading.clone(),
            seeding.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Stopped between two loops, so it holds no claim it never acks.
        seeding.store(true, SeqCst);
        seed.await
            .unwrap_or_else(|e| panic!("the seeder panicked: {e}"));
        let old: Vec<_> = (0..2)
            .map(|i| {
                tokio::spawn(old_engine(
                    version,
                    schema.clone(),
                    format!("old-{i}"),
                    200,
                    ledger.clone(),
                    upgrading.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        let outcome = run_upgrade(
            &schema,
            &UpgradeOptions {
                batch_size: 50,
                ..bounded()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
        upgrading.store(false, SeqCst);
        assert!(outcome.contract_pending(), "{}", outcome.message());
        let new: Vec<_> = (0..2)
            .map(|i| {
                tokio::spawn(new_engine(
                    schema.clone(),
                    format!("new-{i}"),
                    200,
                    ledger.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        // Until every job is done (or a minute passes).
        for _ in 0..1200 {
            let left: i64 = client
                .query_one(
                    &format!("SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let enqueued = ledger.lock().map(|l| l.enqueued.len()).unwrap_or(0);
            if left == 0 && enqueued >= 800 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.store(true, SeqCst);
        for task in old.into_iter().chain(new) {
            task.await
                .unwrap_or_else(|e| panic!("an engine panicked: {e}"));
        }
        let ledger = ledger
            .lock()
            .map(|l| {
                (
                    l.enqueued.clone(),
                    l.acked.clone(),
                    l.doubled.clone(),
                    l.failures.clone(),
                    l.acked_during_upgrade,
                )
            })
            .unwrap();
        let (enqueued, acked, doubled, failures, during) = ledger;
        assert!(
            failures.is_empty(),
            "v{version}: {} statements failed: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
        assert!(
            doubled.is_empty(),
            "v{version}: jobs handed out twice: {doubled:?}"
        );
        // The seeder's backlog may outnumber what it acked before it stopped.
        let missing: Vec<_> = enqueued.difference(&acked).collect();
        assert!(
            missing.is_empty(),
            "v{version}: {} jobs enqueued and never acked",
            missing.len()
        );
        assert!(
            during > 0,
            "v{version}: the old engines acked nothing while the upgrade ran"
        );
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "v{version}: jobs left");
        run_contract(&schema)
            .await
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(status(&client, &schema).await.state, VersionState::Current);
    }
}
