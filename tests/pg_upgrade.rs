//! Upgrades in place against a real PostgreSQL server: every shipped
//! version, created exactly as its release created it and filled with rows
//! in every state, reaches the model with `upgrade` then `contract`, every
//! row kept field by field; the previous release's statements and this
//! one's run side by side on the expanded schema; every step takes at most
//! the lock it declares (read from `pg_locks` while it runs); an upgrade
//! killed midway completes when run again; the dry run is a script psql
//! runs; and every refusal fires.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::history::{create_version, dump_rows, restricted};
use harness::{exec, rows};
use schema_gen::check::{self, VersionState};
use schema_gen::upgrade::{self, Action, Phase, Progress, Step, TableLock, UpgradeOptions};
use schema_gen::{ErrorKind, Options, Outcome, bootstrap};
use schema_model::SchemaName;
use schema_model::history::{self, MODEL_VERSION};
use tokio_postgres::Client;

/// The unix second the test runs at: the upgrade's backfill reads the
/// clock, so due and future jobs are due and future by it.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Fills `schema` (at `version`) with rows in every state: due, scheduled,
/// claimed, retrying and expiring jobs (plus a bulk of due ones, so a
/// backfill walks several windows), a dead job, stream events, a consumer
/// offset, an enabled and a disabled schedule, a lock and a dedup entry.
/// Rows go in whole through `jsonb_populate_record`, so one fixture fits
/// every version (`ready` is given where the version has it).
async fn fill(client: &Client, schema: &SchemaName, version: u32) {
    let has_ready = history::version(version)
        .and_then(|v| v.description().ok())
        .is_some_and(|tables| {
            tables
                .iter()
                .any(|t| t.name == "jobs" && t.columns.iter().any(|c| c.name == "ready"))
        });
    let s = schema.as_str();
    let now = now();
    let job = |queue: &str, run_at: i64, ready: bool, extra: &str| {
        let ready = if has_ready {
            format!(r#", "ready": {ready}"#)
        } else {
            String::new()
        };
        format!(
            r#"{{"queue": "{queue}", "payload": "\\x00ff", "priority": 1, "run_at": {run_at},
                "enqueued_at": {}, "visibility_timeout_s": 30, "max_attempts": 3,
                "backoff_base_s": 1, "dead_letter_retention_s": 600, "attempts": 0{ready}{extra}}}"#,
            now - 1000
        )
    };
    let claimed = format!(
        r#", "attempts": 1, "worker_id": "w1", "claimed_at": {}, "claim_expires_at": {}"#,
        now - 5,
        now + 25
    );
    let expiring = format!(r#", "expires_at": {}"#, now + 100);
    let jobs = [
        job("mail", now - 60, true, ""),
        job("mail", now + 3600, false, ""),
        job("mail", now - 100, true, &claimed),
        job(
            "mail",
            now + 30,
            false,
            r#", "attempts": 1, "last_error": "boom""#,
        ),
        job("mail", now - 10, true, &expiring),
    ];
    let mut columns = vec![
        "queue",
        "payload",
        "priority",
        "run_at",
        "expires_at",
        "enqueued_at",
        "visibility_timeout_s",
        "max_attempts",
        "backoff_base_s",
        "dead_letter_retention_s",
        "attempts",
        "worker_id",
        "claimed_at",
        "claim_expires_at",
        "last_error",
    ];
    if has_ready {
        columns.push("ready");
    }
    let insert = |table: &str, columns: &[&str], json: &str| {
        let list = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "INSERT INTO \"{s}\".\"{table}\" ({list}) SELECT {list} FROM \
             jsonb_populate_record(NULL::\"{s}\".\"{table}\", '{}'::jsonb);",
            json.replace('\'', "''")
        )
    };
    let mut sql = String::new();
    for job in &jobs {
        sql.push_str(&insert("jobs", &columns, job));
    }
    let ready = if has_ready { ", true" } else { "" };
    let ready_column = if has_ready { ", \"ready\"" } else { "" };
    sql.push_str(&format!(
        "INSERT INTO \"{s}\".\"jobs\" (\"queue\", \"payload\", \"priority\", \"run_at\",
             \"enqueued_at\", \"visibility_timeout_s\", \"max_attempts\", \"backoff_base_s\",
             \"dead_letter_retention_s\", \"attempts\"{ready_column})
         SELECT 'bulk', int4send(g), g % 7, {} - g, {}, 30, 3, 1, 600, 0{ready}
         FROM generate_series(1, 2500) g;",
        now,
        now - 5000
    ));
    sql.push_str(&insert(
        "dead_jobs",
        &[
            "id",
            "queue",
            "payload",
            "priority",
            "run_at",
            "enqueued_at",
            "visibility_timeout_s",
            "max_attempts",
            "backoff_base_s",
            "dead_letter_retention_s",
            "attempts",
            "worker_id",
            "claimed_at",
            "last_error",
            "died_at",
        ],
        r#"{"id": 99999, "queue": "mail", "payload": "\\x01", "priority": 0, "run_at": 1,
            "enqueued_at": 1, "visibility_timeout_s": 30, "max_attempts": 3,
            "backoff_base_s": 1, "dead_letter_retention_s": 600, "attempts": 3,
            "worker_id": "w9", "claimed_at": 5, "last_error": "gave up", "died_at": 1799999000}"#,
    ));
    for (stream, key) in [("orders", "a"), ("orders", "b"), ("audit", "c")] {
        sql.push_str(&insert(
            "stream_events",
            &["stream", "key", "payload", "created_at"],
            &format!(
                r#"{{"stream": "{stream}", "key": "{key}", "payload": "\\x02", "created_at": 1}}"#
            ),
        ));
    }
    sql.push_str(&insert(
        "stream_offsets",
        &["stream", "consumer", "offset"],
        r#"{"stream": "orders", "consumer": "billing", "offset": 1}"#,
    ));
    for (name, enabled) in [("hourly", true), ("paused", false)] {
        sql.push_str(&insert(
            "schedules",
            &[
                "name",
                "spec",
                "every_s",
                "queue",
                "payload",
                "priority",
                "max_attempts",
                "visibility_timeout_s",
                "backoff_base_s",
                "dead_letter_retention_s",
                "expires_s",
                "next_fire_at",
                "last_fired_at",
                "enabled",
            ],
            &format!(
                r#"{{"name": "{name}", "spec": "@every 1h", "every_s": 3600, "queue": "mail",
                    "payload": "\\x03", "priority": 0, "max_attempts": 3,
                    "visibility_timeout_s": 30, "backoff_base_s": 1,
                    "dead_letter_retention_s": 600, "expires_s": null,
                    "next_fire_at": 1800003600, "last_fired_at": null, "enabled": {enabled}}}"#
            ),
        ));
    }
    sql.push_str(&insert(
        "locks",
        &["name", "owner", "expires_at"],
        r#"{"name": "leader", "owner": "w1", "expires_at": 1800000060}"#,
    ));
    sql.push_str(&insert(
        "consumed_events",
        &["consumer", "event_id", "consumed_at"],
        r#"{"consumer": "billing", "event_id": "e-1", "consumed_at": 1}"#,
    ));
    exec(client, &sql).await;
}

/// Per step (by its words): the step and every lock mode it was seen with.
type SeenLocks = BTreeMap<String, (Step, Vec<String>)>;

/// Every progress event of a run, for assertions.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Progress>>>);

impl Recorder {
    fn callback(&self) -> impl FnMut(&Progress) + Send + use<> {
        let events = self.0.clone();
        move |event: &Progress| {
            if let Ok(mut events) = events.lock() {
                events.push(event.clone());
            }
        }
    }

    fn events(&self) -> Vec<Progress> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

async fn run_upgrade(
    schema: &SchemaName,
    options: &UpgradeOptions,
) -> Result<upgrade::UpgradeOutcome, schema_gen::Error> {
    let mut client = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    upgrade::upgrade(&mut client, schema, options, &mut quiet).await
}

async fn run_contract(schema: &SchemaName) -> Result<upgrade::UpgradeOutcome, schema_gen::Error> {
    let mut client = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    upgrade::contract(&mut client, schema, &UpgradeOptions::default(), &mut quiet).await
}

async fn status(client: &Client, schema: &SchemaName) -> check::Status {
    check::status(client, schema, &Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `ready` of each job as the upgrade must leave it: after the expand, every
/// unclaimed job is ready exactly when due (the expand's backfill leaves
/// claimed jobs alone, so that no batch holds a row a worker acks); after
/// the contract, every claimed job is ready too.
async fn ready_is_derived_from_run_at(client: &Client, schema: &SchemaName, contracted: bool) {
    let now = now();
    let rule = if contracted {
        format!("ready <> (claimed_at IS NOT NULL OR run_at <= {now})")
    } else {
        format!("claimed_at IS NULL AND ready <> (run_at <= {now})")
    };
    let wrong = rows(
        client,
        &format!("SELECT id FROM \"{}\".jobs WHERE {rule}", schema.as_str()),
    )
    .await;
    assert!(
        wrong.is_empty(),
        "{} jobs have ready out of step with run_at and the claim ({rule})",
        wrong.len()
    );
}

#[tokio::test]
async fn every_shipped_version_reaches_the_model_keeping_every_row() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    for version in history::versions()
        .into_iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
    {
        let schema = harness::unique_schema_name(&format!("up_v{version}"));
        create_version(&client, &schema, version).await;
        fill(&client, &schema, version).await;
        let before = dump_rows(&client, &schema).await;

        let found = status(&client, &schema).await;
        assert_eq!(
            (found.state, found.found, found.serves_model),
            (VersionState::Older, Some(version), false),
            "v{version}: {}",
            found.message
        );
        // An engine of this release does not open it, and changes nothing.
        // Versions before the version table are recognised by their shape;
        // the later ones by their rows.
        let by_shape = version < history::FIRST_RECORDED_VERSION;
        let err = bootstrap(&mut client, &schema).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::OlderVersion { found, recognised, model, .. }
                if *found == version && *recognised == by_shape && *model == MODEL_VERSION),
            "v{version}: {err}"
        );
        assert!(
            err.to_string().contains("schema-gen upgrade --schema"),
            "{err}"
        );
        assert_eq!(
            dump_rows(&client, &schema).await,
            before,
            "v{version}: bootstrap wrote"
        );

        let recorder = Recorder::default();
        let mut progress = recorder.callback();
        let outcome = upgrade::upgrade(
            &mut client,
            &schema,
            &UpgradeOptions {
                batch_size: 1000,
                ..UpgradeOptions::default()
            },
            &mut progress,
        )
        .await
        .unwrap_or_else(|e| panic!("v{version}: {e}"));
        assert_eq!(outcome.before.expanded, version);
        assert_eq!(outcome.after.expanded, MODEL_VERSION);
        assert_eq!(outcome.after.contracted, version, "{}", outcome.message());
        assert!(outcome.contract_pending());
        let events = recorder.events();
        assert!(
            events.iter().any(|e| matches!(e, Progress::Recorded { version: v, phase: Phase::Expand } if *v == MODEL_VERSION)),
            "{events:?}"
        );
        if version == 1 {
            // The backfill walked the keys in windows of 1,000.
            let batches = events
                .iter()
                .filter(|e| matches!(e, Progress::Batch { .. }))
                .count();
            assert!(batches >= 3, "{batches} batches");
        }

        let expanded = status(&client, &schema).await;
        assert_eq!(
            (expanded.state, expanded.serves_model),
            (VersionState::ContractPending, true),
            "v{version}: {}",
            expanded.message
        );
        assert!(expanded.passes(), "v{version}: {:?}", expanded.differences);
        assert!(
            matches!(bootstrap(&mut client, &schema).await, Ok(Outcome::ContractPending { oldest_served, .. }) if oldest_served == version),
            "v{version}"
        );
        let after_expand = dump_rows(&client, &schema).await;
        assert_eq!(
            restricted(&before, &after_expand),
            before,
            "v{version}: a row changed"
        );
        if version == 1 {
            ready_is_derived_from_run_at(&client, &schema, false).await;
        }

        let contracted = run_contract(&schema)
            .await
            .unwrap_or_else(|e| panic!("v{version}: {e}"));
        if version == 1 {
            ready_is_derived_from_run_at(&client, &schema, true).await;
        }
        assert_eq!(contracted.after.contracted, MODEL_VERSION);
        let current = status(&client, &schema).await;
        assert_eq!(current.state, VersionState::Current, "{}", current.message);
        assert!(current.passes(), "v{version}: {:?}", current.differences);
        assert!(matches!(
            bootstrap(&mut client, &schema).await,
            Ok(Outcome::AlreadyCurrent { .. })
        ));
        let after_contract = dump_rows(&client, &schema).await;
        assert_eq!(
            restricted(&before, &after_contract),
            before,
            "v{version}: a row changed"
        );
        // A rerun has nothing to do.
        let again = run_upgrade(&schema, &UpgradeOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (again.steps_run, again.after.contracted),
            (0, MODEL_VERSION)
        );
    }
}

/// The expanded shape of each version is exactly what the model's
/// descriptions and the plan say: a model change without a plan that
/// reaches it fails here (and in the planner's own self-check).
#[tokio::test]
async fn the_model_is_the_newest_version_plus_its_upgrade_steps() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let newest_shipped = history::versions()
        .into_iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
        .max()
        .unwrap_or(0);
    assert_eq!(
        newest_shipped + 1,
        MODEL_VERSION,
        "the model is the next version"
    );
    let upgraded = harness::unique_schema_name("up_tie_a");
    create_version(&client, &upgraded, newest_shipped).await;
    run_upgrade(&upgraded, &UpgradeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run_contract(&upgraded)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let fresh = harness::unique_schema_name("up_tie_b");
    create_version(&client, &fresh, MODEL_VERSION).await;
    // Column order aside (an added column comes last), the upgraded schema
    // is the freshly created one, as the catalog reports both.
    let dump = |name: &SchemaName, dump: String| {
        let mut lines: Vec<String> = dump
            .replace(name.as_str(), "<schema>")
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    };
    assert_eq!(
        dump(
            &upgraded,
            harness::dump::dump_schema(&client, upgraded.as_str()).await
        ),
        dump(
            &fresh,
            harness::dump::dump_schema(&client, fresh.as_str()).await
        ),
    );
}

/// A database that is no known version (nor a step between two) is drift:
/// upgrade lists the differences and changes nothing. (A DBA's column with
/// a default is drift: the engine's inserts evaluate it. Without one it is
/// foreign, and the upgrade plans around it: `pg_foreign.rs`.)
#[tokio::test]
async fn drift_outside_any_known_version_is_refused_and_nothing_changes() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_drift");
    create_version(&client, &schema, 1).await;
    exec(
        &client,
        &format!(
            "ALTER TABLE \"{}\".jobs ADD COLUMN colour text DEFAULT 'red'",
            schema.as_str()
        ),
    )
    .await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let err = run_upgrade(&schema, &UpgradeOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
    assert!(
        err.to_string().contains("extra column jobs.colour"),
        "{err}"
    );
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Unknown, "{}", found.message);
    assert!(!found.passes());
}

/// A second upgrade of the same schema is refused at once, naming the first.
#[tokio::test]
async fn one_upgrade_at_a_time() {
    if harness::skip_db_tests() {
        return;
    }
    let holder = harness::connect().await;
    let schema = harness::unique_schema_name("up_lock");
    create_version(&holder, &schema, 1).await;
    let key = upgrade::upgrade_lock_key(&schema);
    let pid: i32 = holder
        .query_one("SELECT pg_advisory_lock($1), pg_backend_pid()", &[&key])
        .await
        .unwrap()
        .get(1);
    let err = run_upgrade(&schema, &UpgradeOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UpgradeLocked { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("session {pid}")), "{err}");
    let err = run_contract(&schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::UpgradeLocked { .. }),
        "{err}"
    );
    // Nothing was recorded: the schema is still version 1, unrecorded.
    let found = status(&holder, &schema).await;
    assert_eq!((found.state, found.found), (VersionState::Older, Some(1)));
    holder
        .query_one("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    run_upgrade(&schema, &UpgradeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The contract runs only on a database expanded to this release's version.
#[tokio::test]
async fn the_contract_waits_for_the_expand() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_early");
    create_version(&client, &schema, 1).await;
    let err = run_contract(&schema).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NotExpanded { .. }), "{err}");
    assert!(
        err.to_string().contains("schema-gen upgrade --schema"),
        "{err}"
    );
}

/// A database at a newer version: an engine of this release opens it while
/// it still serves this version (contract pending), and is refused once it
/// does not; upgrade refuses it either way.
#[tokio::test]
async fn a_newer_version_is_served_until_its_contract_and_never_upgraded() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("up_newer");
    create_version(&client, &schema, MODEL_VERSION).await;
    let next = MODEL_VERSION + 1;
    exec(
        &client,
        &format!(
            "INSERT INTO \"{}\".schema_versions VALUES ({next}, 'schema-gen 9.9.9', 1, 2, NULL)",
            schema.as_str()
        ),
    )
    .await;
    let outcome = bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(outcome, Outcome::ServedByNewer { found, .. } if found == next),
        "{outcome}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(
        (found.state, found.serves_model),
        (VersionState::Newer, true)
    );
    let err = run_upgrade(&schema, &UpgradeOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NewerVersion { .. }),
        "{err}"
    );

    exec(
        &client,
        &format!(
            "UPDATE \"{}\".schema_versions SET contracted_at = 3 WHERE version = {next}",
            schema.as_str()
        ),
    )
    .await;
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NewerVersion { found, .. } if *found == next),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "newer than this release's version {MODEL_VERSION}"
        )),
        "{err}"
    );
    assert!(!status(&client, &schema).await.passes());
}

/// A step that needs `ACCESS EXCLUSIVE` waits at most the lock bound per
/// attempt behind a session holding the table, tries again, and gives up
/// after its attempts naming that session; the rerun resumes where it
/// stopped.
#[tokio::test]
async fn a_blocked_step_retries_then_gives_up_naming_the_holder() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_blocked");
    create_version(&client, &schema, 1).await;
    let blocker = harness::connect().await;
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!("BEGIN; SELECT count(*) FROM \"{}\".jobs", schema.as_str()),
    )
    .await;

    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 3,
        ..UpgradeOptions::default()
    };
    let mut upgrader = harness::connect().await;
    let recorder = Recorder::default();
    let mut progress = recorder.callback();
    let started = std::time::Instant::now();
    let err = upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress)
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LockTimeout { .. }), "{err}");
    assert!(err.to_string().contains(&format!("session {pid}")), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let retries = recorder
        .events()
        .into_iter()
        .filter(|e| matches!(e, Progress::LockRetry { .. }))
        .count();
    assert_eq!(retries, 2, "two retries before the third attempt gave up");
    // The upgrade stopped before its first step: recorded as expanding.
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    let mut engine = harness::connect().await;
    let err = bootstrap(&mut engine, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::OlderVersion { found: 1, .. }),
        "{err}"
    );

    exec(&blocker, "COMMIT").await;
    let outcome = run_upgrade(&schema, &options)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);
}

/// A session holding a lock stronger than the engine's on `jobs` (what an
/// autovacuum takes, held here by `LOCK TABLE`): the step waits for it
/// without asking for its own lock, so it queues no one (a plain read with
/// a short `statement_timeout` still runs), gives up no attempt, and goes
/// on once the holder ends.
#[tokio::test]
async fn a_step_waits_without_queueing_while_another_session_holds_a_stronger_lock() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_waits");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let jobs = format!("\"{}\".jobs", schema.as_str());
    let blocker = harness::connect().await;
    let blocker_pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!("BEGIN; LOCK TABLE {jobs} IN SHARE UPDATE EXCLUSIVE MODE"),
    )
    .await;

    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 2,
        ..UpgradeOptions::default()
    };
    let mut upgrader = harness::connect().await;
    let upgrader_pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let recorder = Recorder::default();
    let mut progress = recorder.callback();
    let task_schema = schema.clone();
    let upgrade_task = tokio::spawn(async move {
        upgrade::upgrade(&mut upgrader, &task_schema, &options, &mut progress).await
    });

    let waited_for = |events: &[Progress]| {
        events.iter().find_map(|e| match e {
            Progress::WaitingFor {
                step, pid, mode, ..
            } if step.table == "jobs" => Some((*pid, mode.clone())),
            _ => None,
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (pid, mode) = loop {
        if let Some(found) = waited_for(&recorder.events()) {
            break found;
        }
        assert!(
            !upgrade_task.is_finished(),
            "the upgrade ended without waiting: {:?}",
            recorder.events()
        );
        assert!(std::time::Instant::now() < deadline, "no WaitingFor event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (pid, mode.as_str()),
        (blocker_pid, "ShareUpdateExclusiveLock")
    );

    // Several lock bounds later: still waiting, no attempt made or given
    // up, no lock request of the upgrader's in the queue, and a plain read
    // (which would queue behind a waiting ACCESS EXCLUSIVE) runs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!upgrade_task.is_finished(), "{:?}", recorder.events());
    let queued: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted",
            &[&upgrader_pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(queued, 0, "the upgrader queued a lock request");
    let reader = harness::connect().await;
    exec(&reader, "SET statement_timeout = '2s'").await;
    reader
        .query_one(&format!("SELECT count(*) FROM {jobs}"), &[])
        .await
        .unwrap_or_else(|e| panic!("a plain read queued behind the upgrade: {e}"));
    assert!(
        !recorder
            .events()
            .iter()
            .any(|e| matches!(e, Progress::LockRetry { .. })),
        "{:?}",
        recorder.events()
    );

    exec(&blocker, "COMMIT").await;
    let outcome = upgrade_task
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);

    // The backfill changed rows (the fill's due jobs became ready), so the
    // table was vacuumed after it, by the upgrade itself (not autovacuum).
    assert!(
        recorder
            .events()
            .iter()
            .any(|e| matches!(e, Progress::Vacuumed { step } if step.table == "jobs")),
        "{:?}",
        recorder.events()
    );
    let vacuums: i64 = client
        .query_one(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'",
            &[&schema.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert!(vacuums >= 1, "jobs was not vacuumed after the backfill");
}

/// The wait for a stronger lock's holder is bounded: at the bound the
/// upgrade gives up naming the session and the lock, changing nothing of
/// the step.
#[tokio::test]
async fn the_wait_for_a_stronger_lock_gives_up_at_its_bound_naming_the_holder() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_wait_bound");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = dump_rows(&client, &schema).await["jobs"].clone();
    let blocker = harness::connect().await;
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    exec(
        &blocker,
        &format!(
            "BEGIN; LOCK TABLE \"{}\".jobs IN SHARE UPDATE EXCLUSIVE MODE",
            schema.as_str()
        ),
    )
    .await;
    let options = UpgradeOptions {
        wait_timeout: Duration::from_millis(300),
        ..UpgradeOptions::default()
    };
    let started = std::time::Instant::now();
    let err = run_upgrade(&schema, &options).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let words = err.to_string();
    assert!(words.contains(&format!("session {pid}")), "{words}");
    assert!(words.contains("holds SHARE UPDATE EXCLUSIVE"), "{words}");
    exec(&blocker, "ROLLBACK").await;
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    assert_eq!(dump_rows(&client, &schema).await["jobs"], before);
}

/// The upgrade's connection is killed while an index builds `CONCURRENTLY`
/// (it waits for an open write transaction, leaving an invalid index), and
/// again in the middle of a backfill: each time the next run completes the
/// upgrade, dropping the invalid index and building it again.
#[tokio::test]
async fn an_upgrade_killed_midway_completes_when_run_again() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_killed");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = dump_rows(&client, &schema).await;

    // Killed during the backfill, after its first batch.
    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let killer = harness::connect().await;
    let (batched, mut first_batch) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut progress = move |event: &Progress| {
        if matches!(event, Progress::Batch { .. }) {
            let _ = batched.send(());
        }
    };
    let options = UpgradeOptions {
        batch_size: 100,
        ..UpgradeOptions::default()
    };
    let kill = async {
        first_batch.recv().await;
        killer
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
    };
    let (result, ()) = tokio::join!(
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
        kill
    );
    let err = result.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Connection { .. } | ErrorKind::Query { .. }
        ),
        "{err}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);

    // Killed while jobs_claim_idx_next waits for an open write transaction.
    let writer = harness::connect().await;
    exec(
        &writer,
        &format!(
            "BEGIN; UPDATE \"{}\".jobs SET priority = priority WHERE id = 1",
            schema.as_str()
        ),
    )
    .await;
    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let mut quiet = |_: &Progress| {};
    let kill = async {
        for _ in 0..400 {
            let waiting = killer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE pid = $1 AND query LIKE 'CREATE INDEX CONCURRENTLY%'
                       AND wait_event_type = 'Lock'",
                    &[&pid],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
            if waiting == 1 {
                killer
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .unwrap();
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    };
    let defaults = UpgradeOptions::default();
    let (result, killed) = tokio::join!(
        upgrade::upgrade(&mut upgrader, &schema, &defaults, &mut quiet),
        kill
    );
    assert!(killed, "the index build never waited: {result:?}");
    assert!(result.is_err());
    let invalid = rows(
        &client,
        &format!(
            "SELECT c.relname::text FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = '{}' AND NOT x.indisvalid",
            schema.as_str()
        ),
    )
    .await;
    assert_eq!(invalid.len(), 1, "the kill leaves one invalid index");
    exec(&writer, "ROLLBACK").await;

    let outcome = run_upgrade(&schema, &UpgradeOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, MODEL_VERSION);
    assert!(outcome.steps_skipped > 0, "{}", outcome.message());
    let found = status(&client, &schema).await;
    assert!(found.passes(), "{} {:?}", found.message, found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;
    assert_eq!(
        restricted(&before, &dump_rows(&client, &schema).await),
        before
    );
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}

/// The dry run is a script psql runs: piped in, it expands a version 1
/// schema (check: contract pending), and the contract's dry run contracts it.
#[tokio::test]
async fn the_dry_run_is_a_plan_psql_runs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_psql");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let plan = upgrade::dry_run(&client, &schema, &UpgradeOptions::default(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Reading it changed nothing.
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
    assert!(
        plan.steps
            .iter()
            .any(|s| matches!(s.action, Action::CreateIndex { .. }))
    );
    assert!(
        plan.script
            .contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS")
    );
    let ran = harness::psql_script(&harness::database_url(), &plan.script);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;

    let plan = upgrade::dry_run(&client, &schema, &UpgradeOptions::default(), true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ran = harness::psql_script(&harness::database_url(), &plan.script);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Current, "{}", found.message);
    assert!(found.passes(), "{:?}", found.differences);
    // Nothing left to plan.
    let plan = upgrade::dry_run(&client, &schema, &UpgradeOptions::default(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.steps.is_empty(), "{:?}", plan.steps);
}

/// The strongest lock each step holds or asks for on an engine relation,
/// read from `pg_locks` while it runs, is at most the one it declares. A
/// session holding `ACCESS SHARE` on every table, let go for a moment now
/// and then, makes each brief `ACCESS EXCLUSIVE` step wait visibly (and
/// retry) so the reading catches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_step_takes_at_most_the_lock_it_declares() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_locks");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;

    let mut upgrader = harness::connect().await;
    let pid: i32 = upgrader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let current: Arc<Mutex<Option<Step>>> = Arc::default();
    let seen: Arc<Mutex<SeenLocks>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // Before each step runs, the watcher takes hold of the tables again and
    // says so: then a step that needs ACCESS EXCLUSIVE always waits, and is
    // seen waiting, however brief it is.
    let (started, starts) = std::sync::mpsc::channel::<()>();
    let (held, holds) = std::sync::mpsc::channel::<()>();
    let step_slot = current.clone();
    let mut progress = move |event: &Progress| {
        if let Progress::StepStarted { step, .. } = event {
            if let Ok(mut slot) = step_slot.lock() {
                *slot = Some(step.clone());
            }
            let _ = started.send(());
            // A blocking wait on a worker thread of its own (multi_thread).
            let _ = holds.recv_timeout(Duration::from_secs(10));
        }
    };
    let watch = {
        let current = current.clone();
        let seen = seen.clone();
        let done = done.clone();
        let schema = schema.clone();
        async move {
            let watcher = harness::connect().await;
            let blocker = harness::connect().await;
            let tables: Vec<String> = history::version(MODEL_VERSION)
                .and_then(|v| v.description().ok())
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("\"{}\".\"{}\"", schema.as_str(), t.name))
                .filter(|t| !t.ends_with("\"schema_versions\""))
                .collect();
            let lock_all = format!(
                "BEGIN; SET LOCAL lock_timeout = '5s'; LOCK TABLE {} IN ACCESS SHARE MODE",
                tables.join(", ")
            );
            exec(&blocker, &lock_all).await;
            let mut holding = true;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if starts.try_recv().is_ok() {
                    if !holding {
                        exec(&blocker, &lock_all).await;
                        holding = true;
                    }
                    let _ = held.send(());
                }
                // One reading of pg_locks: the relation locks on engine
                // relations, and whether the session waits for anything
                // (ACCESS EXCLUSIVE on a table, or, for DROP INDEX
                // CONCURRENTLY, the end of every transaction that touched it).
                let locks: Vec<(Option<String>, bool)> = watcher
                    .query(
                        "SELECT CASE WHEN l.locktype = 'relation' AND n.nspname = $2
                                      AND c.relname <> 'schema_versions' THEN l.mode END,
                                l.granted
                         FROM pg_locks l
                         LEFT JOIN pg_class c ON c.oid = l.relation
                         LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE l.pid = $1",
                        &[&pid, &schema.as_str()],
                    )
                    .await
                    .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
                    .unwrap_or_default();
                let modes: Vec<(String, bool)> = locks
                    .iter()
                    .filter_map(|(mode, granted)| mode.clone().map(|m| (m, *granted)))
                    .collect();
                let waiting = locks.iter().any(|(_, granted)| !granted);
                let step = current.lock().ok().and_then(|s| s.clone());
                if let Some(step) = &step
                    && let Ok(mut seen) = seen.lock()
                {
                    let entry = seen
                        .entry(step.describe())
                        .or_insert_with(|| (step.clone(), Vec::new()));
                    for (mode, _) in &modes {
                        if !entry.1.contains(mode) {
                            entry.1.push(mode.clone());
                        }
                    }
                }
                if holding && waiting {
                    // Seen: let this step through.
                    exec(&blocker, "COMMIT").await;
                    holding = false;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let _ = blocker.batch_execute("ROLLBACK").await;
        }
    };
    let options = UpgradeOptions {
        lock_timeout: Duration::from_millis(30),
        lock_attempts: 200,
        batch_size: 200,
        ..UpgradeOptions::default()
    };
    let work = async {
        let expanded = upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress).await;
        let contracted = upgrade::contract(&mut upgrader, &schema, &options, &mut progress).await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (expanded, contracted)
    };
    let ((expanded, contracted), ()) = tokio::join!(work, watch);
    expanded.unwrap_or_else(|e| panic!("{e}"));
    contracted.unwrap_or_else(|e| panic!("{e}"));

    let rank = |mode: &str| match mode {
        "AccessShareLock" => Some(TableLock::None),
        "RowShareLock" | "RowExclusiveLock" => Some(TableLock::RowExclusive),
        "ShareUpdateExclusiveLock" => Some(TableLock::ShareUpdateExclusive),
        "AccessExclusiveLock" => Some(TableLock::AccessExclusive),
        _ => None,
    };
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let mut exclusive_seen = 0;
    for (what, (step, modes)) in &seen {
        for mode in modes {
            let level =
                rank(mode).unwrap_or_else(|| panic!("{what}: took {mode}, which no step declares"));
            assert!(
                level <= step.lock(),
                "{what}: took {mode}, declares {:?}",
                step.lock()
            );
            if level == TableLock::AccessExclusive {
                exclusive_seen += 1;
            }
        }
    }
    let declared_exclusive = seen
        .values()
        .filter(|(s, _)| s.lock() == TableLock::AccessExclusive)
        .count();
    assert!(declared_exclusive >= 3, "{seen:?}");
    assert_eq!(
        exclusive_seen, declared_exclusive,
        "each ACCESS EXCLUSIVE step was seen waiting: {seen:?}"
    );
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}

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
                ..UpgradeOptions::default()
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

/// `schema-gen upgrade` as an operator runs it: the dry run prints a script
/// and changes nothing, the upgrade reports progress on stderr and the
/// outcome (text or JSON) on stdout, `check` then says the contract is
/// pending (4), and the exit codes say needs upgrade (3) and drift (1).
#[test]
fn the_upgrade_command_line() {
    use harness::cli::{run as cli, runtime};
    use std::process::ExitCode;
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    let schema = harness::unique_schema_name("up_cli");
    rt.block_on(create_version(&client, &schema, 1));
    let url = harness::database_url();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec![
            "upgrade",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect()
    };
    let run = |args: Vec<String>| cli(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::from(3), "{}", check.stderr);
    assert!(
        check
            .stdout
            .contains("is at version 1 (recognised by its shape"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("`schema-gen upgrade --schema"),
        "{}",
        check.stdout
    );

    let dry = run(args(&["--dry-run"]));
    assert_eq!(dry.code, ExitCode::SUCCESS, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("CREATE INDEX CONCURRENTLY"),
        "{}",
        dry.stdout
    );
    let dry_json = run(args(&["--dry-run", "--format", "json"]));
    let plan: serde_json::Value = serde_json::from_str(&dry_json.stdout).unwrap();
    assert_eq!(plan["outcome"], "plan");
    assert!(
        plan["steps"].as_array().is_some_and(|s| s.len() >= 6),
        "{plan}"
    );
    assert!(plan["steps"][0]["action"].is_string(), "{plan}");

    let ran = run(args(&["--format", "json"]));
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    let outcome: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(outcome["outcome"], "upgraded");
    assert_eq!(outcome["contract_pending"], true);
    assert_eq!(outcome["after"]["expanded"], MODEL_VERSION);
    assert!(
        ran.stderr.contains("version 2 expand step 1/"),
        "{}",
        ran.stderr
    );

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::from(4), "{}", check.stdout);
    assert!(
        check.stdout.contains("with its contract pending"),
        "{}",
        check.stdout
    );

    let contract = run(args(&["--contract"]));
    assert_eq!(contract.code, ExitCode::SUCCESS, "{}", contract.stderr);
    assert!(
        contract
            .stdout
            .contains(&format!("is at version {MODEL_VERSION}")),
        "{}",
        contract.stdout
    );

    // Drift outside any version: exit 1, the differences listed.
    let drifted = harness::unique_schema_name("up_cli_drift");
    rt.block_on(create_version(&client, &drifted, 2));
    rt.block_on(exec(
        &client,
        &format!(
            "ALTER TABLE \"{}\".locks ADD COLUMN x int DEFAULT 0",
            drifted.as_str()
        ),
    ));
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    assert!(
        refused.stderr.contains("extra column locks.x"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
        "--format",
        "json",
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    let json: serde_json::Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(json["outcome"], "refused");

    // The contract before the expand: needs upgrade (3).
    let early = harness::unique_schema_name("up_cli_early");
    rt.block_on(create_version(&client, &early, 1));
    let err = cli(&[
        "upgrade",
        "--contract",
        "--database-url",
        &url,
        "--schema",
        early.as_str(),
    ]);
    assert_eq!(err.code, ExitCode::from(3), "{}", err.stdout);
    assert!(
        err.stderr.contains("cannot be contracted"),
        "{}",
        err.stderr
    );
}

/// Every upgrade statement, expand and contract, from each shipped version,
/// passes squawk's PostgreSQL migration rules, but for the ones waived here,
/// each with why; a waiver no statement needs any more fails too.
#[tokio::test]
async fn every_upgrade_statement_passes_squawk() {
    if harness::skip_db_tests() {
        return;
    }
    const WAIVED: &[(&str, &str)] = &[
        (
            "prefer-bigint-over-int",
            "schema_versions.version counts schema versions: 2^31 of them will not come",
        ),
        (
            "renaming-object",
            "the swap renames indexes only; no engine statement names an index (the planner \
             picks it by predicate), so a rename breaks no client",
        ),
        (
            "ban-drop-default",
            "the contract drops a transitional default once the older engines that inserted \
             without the column are gone, which is what the contract is for",
        ),
    ];
    let client = harness::connect().await;
    let version = harness::server_version_num().await;
    let pg_version = format!("{}.0", version / 10000);
    let mut fired = std::collections::BTreeSet::new();
    for from in history::versions()
        .iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
    {
        let schema = harness::unique_schema_name(&format!("up_squawk_v{from}"));
        create_version(&client, &schema, from).await;
        let options = UpgradeOptions::default();
        let expand = upgrade::dry_run(&client, &schema, &options, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        run_upgrade(&schema, &options)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let contract = upgrade::dry_run(&client, &schema, &options, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for (phase, plan) in [("expand", expand), ("contract", contract)] {
            for finding in
                harness::squawk::lint(&plan.script, &format!("v{from}-{phase}"), &pg_version)
            {
                let line = plan
                    .script
                    .lines()
                    .nth((finding.line as usize).saturating_sub(1))
                    .unwrap_or("");
                assert!(
                    WAIVED.iter().any(|(rule, _)| *rule == finding.rule_name),
                    "v{from} {phase}: squawk's {} fires on line {}: {line}\n({})",
                    finding.rule_name,
                    finding.line,
                    finding.message
                );
                fired.insert(finding.rule_name);
            }
        }
    }
    let waived: std::collections::BTreeSet<String> =
        WAIVED.iter().map(|(r, _)| (*r).to_owned()).collect();
    assert_eq!(
        fired, waived,
        "a waiver no statement needs any more: drop it"
    );
}
