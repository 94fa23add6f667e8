//! Upgrades in place against a real PostgreSQL server: every shipped
//! version, created exactly as its release created it and filled with rows
//! in every state, reaches the model with `upgrade` then `contract`, every
//! row kept field by field; the previous release's statements and this
//! one's run side by side on the expanded schema; every step takes at most
//! the lock it declares (read from `pg_locks` while it runs); an upgrade
//! killed midway completes when run again; the dry run is a script psql
//! runs; and every refusal fires.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::history::{create_version, dump_rows, restricted};
use harness::upgrade::{
    RUN_LIMIT, Recorder, bounded, fill, now, psql_within, ready_is_derived_from_run_at,
    run_contract, run_upgrade, status, within,
};
use harness::{exec, rows};
use schema_gen::check::VersionState;
use schema_gen::upgrade::{self, Action, Phase, Progress, Step, TableLock, UpgradeOptions};
use schema_gen::{ErrorKind, Outcome, bootstrap};
use schema_model::SchemaName;
use schema_model::history::{self, MODEL_VERSION};
use tokio_postgres::Client;

mod cli;
mod engines;
mod locks;
mod waits;

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
                ..bounded()
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
        // Each contract step did its own work: a check added without NOT
        // VALID (validating under ACCESS EXCLUSIVE) would leave its
        // validation step nothing to do.
        assert_eq!(contracted.steps_skipped, 0, "{}", contracted.message());
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
        let again = run_upgrade(&schema, &bounded())
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
    run_upgrade(&upgraded, &bounded())
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
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
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
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
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
    run_upgrade(&schema, &bounded())
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
    let err = run_upgrade(&schema, &bounded()).await.unwrap_err();
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
