//! What the upgrade, the contract, an engine's bootstrap and `check` refuse:
//! version rows no upgrade wrote, drift while a contract is pending,
//! unreadable versions, an unfinished upgrade; and the final verification.

use super::*;

/// When the steps are done the catalog is read again: something that changes
/// the schema meanwhile (here another session, between the last step and the
/// end) makes the upgrade fail saying what differs, whether the change is drift
/// (an extra column with a default, which the engine's inserts evaluate) or the
/// first step of the contract (a check the contract adds).
#[tokio::test]
async fn the_final_verification_refuses_a_catalog_the_steps_did_not_make() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let ready_check = schema_model::engine_family()
        .into_iter()
        .find(|t| t.name == "jobs")
        .and_then(|t| {
            t.checks
                .into_iter()
                .find(|c| c.name == "jobs_claimed_job_is_ready")
        })
        .map(|c| c.definition)
        .unwrap_or_else(|| panic!("the model has jobs_claimed_job_is_ready"));
    for (prefix, change, words) in [
        (
            "upg_verify_drift",
            "ALTER TABLE {s}.locks ADD COLUMN sneaky integer DEFAULT 0".to_owned(),
            "sneaky",
        ),
        (
            "upg_verify_early",
            format!(
                "ALTER TABLE {{s}}.jobs ADD CONSTRAINT jobs_claimed_job_is_ready {ready_check} \
                 NOT VALID"
            ),
            "do not say where it stands",
        ),
    ] {
        let schema = harness::unique_schema_name(prefix);
        create_version(&client, &schema, 1).await;
        let change = change.replace("{s}", &format!("\"{}\"", schema.as_str()));
        let side = SideSession::start();
        let mut progress = move |event: &Progress| {
            if matches!(event, Progress::Recorded { version, phase: Phase::Expand } if *version == MODEL_VERSION)
            {
                side.exec(&change);
            }
        };
        let mut upgrader = harness::connect().await;
        let err = within(
            RUN_LIMIT,
            "an upgrade",
            upgrade::upgrade(&mut upgrader, &schema, &short(), &mut progress),
        )
        .await
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("not the shape they should make") && message.contains(words),
            "{message}"
        );
    }
}

/// Rows of `schema_versions` that no upgrade could have written (no version
/// contracted, an expand skipped, a contract before its expand) are
/// refused by every door, changing nothing: upgrade, contract, an engine's
/// bootstrap, and `check`, which says the version is unknown.
#[tokio::test]
async fn version_rows_no_upgrade_could_write_are_refused_everywhere() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    for (what, forge) in [
        (
            "no version contracted",
            "UPDATE {v} SET contracted_at = NULL",
        ),
        (
            "an expand skipped",
            "UPDATE {v} SET expanded_at = NULL, contracted_at = NULL;
             INSERT INTO {v} VALUES (1, 'schema-gen 0.1.0', 1, 1, 1)",
        ),
        (
            "a contract before its expand",
            "UPDATE {v} SET expanded_at = NULL",
        ),
    ] {
        let schema = harness::unique_schema_name("upg_rows");
        create_version(&client, &schema, MODEL_VERSION).await;
        let versions = format!("\"{}\".schema_versions", schema.as_str());
        exec(&client, &forge.replace("{v}", &versions)).await;
        let before = (
            harness::dump::dump_schema(&client, schema.as_str()).await,
            dump_rows(&client, &schema).await,
        );
        let err = run_upgrade(&schema, &short()).await.unwrap_err();
        assert!(
            err.to_string().contains("schema_versions rows"),
            "{what}: {err}"
        );
        assert!(run_contract(&schema).await.is_err(), "{what}: contracted");
        assert!(
            schema_gen::bootstrap(&mut client, &schema).await.is_err(),
            "{what}: an engine opened it"
        );
        let found = status(&client, &schema).await;
        assert_eq!(
            found.state,
            VersionState::Unknown,
            "{what}: {}",
            found.message
        );
        assert!(!found.passes(), "{what}");
        let after = (
            harness::dump::dump_schema(&client, schema.as_str()).await,
            dump_rows(&client, &schema).await,
        );
        assert!(after == before, "{what}: something changed");
    }
}

/// While a contract is pending, the catalog is still held to the shapes its
/// position allows: an extra column with a default (one without is foreign), or
/// an index made invalid that no pending step builds, is drift for `check`, an
/// engine's bootstrap, the contract and a rerun of the upgrade, none of which
/// changes anything.
#[tokio::test]
async fn drift_is_refused_while_a_contract_is_pending() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_pending_drift");
    create_version(&client, &schema, 1).await;
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status(&client, &schema).await.passes());
    let s = schema.as_str();
    for (what, drift, undo) in [
        (
            "an extra column",
            format!("ALTER TABLE \"{s}\".locks ADD COLUMN x integer DEFAULT 0"),
            format!("ALTER TABLE \"{s}\".locks DROP COLUMN x"),
        ),
        (
            "an index made invalid",
            format!(
                "UPDATE pg_index SET indisvalid = false \
                 WHERE indexrelid = '\"{s}\".jobs_promote_idx'::regclass"
            ),
            format!(
                "UPDATE pg_index SET indisvalid = true \
                 WHERE indexrelid = '\"{s}\".jobs_promote_idx'::regclass"
            ),
        ),
    ] {
        exec(&client, &drift).await;
        let before = harness::dump::dump_schema(&client, s).await;
        let found = status(&client, &schema).await;
        assert_eq!(found.state, VersionState::ContractPending, "{what}");
        assert!(!found.passes(), "{what}: {}", found.message);
        assert!(
            found.message.contains("differs"),
            "{what}: {}",
            found.message
        );
        let err = schema_gen::bootstrap(&mut client, &schema)
            .await
            .unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        let err = run_contract(&schema).await.unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        let err = run_upgrade(&schema, &short()).await.unwrap_err();
        assert!(
            matches!(err.kind(), schema_gen::ErrorKind::Drift { .. }),
            "{what}: {err}"
        );
        assert_eq!(
            harness::dump::dump_schema(&client, s).await,
            before,
            "{what}"
        );
        exec(&client, &undo).await;
        assert!(status(&client, &schema).await.passes(), "{what} undone");
    }
}

/// A role that may not read `schema_versions` cannot tell the version, so
/// nothing moves: the upgrade and an engine's bootstrap say which grant is
/// missing, and `check` says the version is unreadable.
#[tokio::test]
async fn a_role_that_may_not_read_the_versions_is_told_which_grant_it_lacks() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_unreadable");
    create_version(&client, &schema, MODEL_VERSION).await;
    let role = harness::unique_name("upg_blind");
    exec(
        &client,
        &format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA \"{}\" TO {role}",
            schema.as_str()
        ),
    )
    .await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let mut blind = harness::connect_url(&harness::url_for_role(&role)).await;
    let mut quiet = |_: &Progress| {};
    let err = within(
        RUN_LIMIT,
        "an upgrade by a role that may not read the versions",
        upgrade::upgrade(&mut blind, &schema, &short(), &mut quiet),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("GRANT SELECT"), "{err}");
    let err = schema_gen::bootstrap(&mut blind, &schema)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("GRANT SELECT"), "{err}");
    let found = status(&blind, &schema).await;
    assert_eq!(found.state, VersionState::Unreadable, "{}", found.message);
    assert!(!found.passes());
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
}

/// An engine of this release does not open a schema whose upgrade to this
/// release's version started and did not finish (its shape may be only
/// part of the way there): it says so, and the upgrade's rerun finishes it.
#[tokio::test]
async fn an_engine_waits_for_an_upgrade_to_its_version_to_finish() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("upg_in_progress");
    create_version(&client, &schema, MODEL_VERSION).await;
    let versions = format!("\"{}\".schema_versions", schema.as_str());
    let previous = MODEL_VERSION - 1;
    exec(
        &client,
        &format!(
            "UPDATE {versions} SET expanded_at = NULL, contracted_at = NULL;
             INSERT INTO {versions} VALUES ({previous}, 'schema-gen 0.2.0', 1, 1, 1)"
        ),
    )
    .await;
    let err = schema_gen::bootstrap(&mut client, &schema)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("is being upgraded to version {MODEL_VERSION}")),
        "{err}"
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Upgrading, "{}", found.message);
    assert!(!found.passes(), "check passes a schema being upgraded");
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(schema_gen::bootstrap(&mut client, &schema).await.is_ok());
}

/// A version after the model whose expand changes what a pending contract
/// still changes (here the doc of `jobs.ready`, which version 2's contract
/// backfills and whose default it drops) is refused until that contract has
/// run, naming it, and nothing is changed; once contracted, it expands.
#[tokio::test]
async fn an_expand_that_touches_what_a_pending_contract_changes_waits_for_it() {
    use schema_gen::upgrade::Upgrader;
    use schema_gen::versions::History;
    use schema_model::history::{SchemaVersion, Shipped, UpgradeHints, versions};
    if harness::skip_db_tests() {
        return;
    }
    let doc = "Whether the job may be claimed now (a throwaway version's words).";
    let mut tables = schema_model::engine_family();
    let ready = tables
        .iter_mut()
        .filter(|t| t.name == "jobs")
        .flat_map(|t| t.columns.iter_mut())
        .find(|c| c.name == "ready")
        .unwrap_or_else(|| panic!("the model has jobs.ready"));
    ready.doc = doc.to_owned();
    let describe = serde_json::json!({ "schema": "alkstore", "tables": tables }).to_string();
    let number = MODEL_VERSION + 1;
    let mut all = versions();
    all.push(SchemaVersion {
        number,
        release: "a throwaway version",
        shipped: Some(Shipped {
            number,
            release: "a throwaway version",
            schema_sql: "",
            describe_json: Box::leak(describe.into_boxed_str()),
            statements_json: "{\"statements\": []}",
        }),
        hints: UpgradeHints::default(),
    });
    let history = History::new(all).unwrap_or_else(|e| panic!("{e}"));

    let client = harness::connect().await;
    let schema = version_1(&client, "upg_contract_first").await;
    run_upgrade(&schema, &short())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let comment = format!(
        "SELECT col_description('{}'::regclass, a.attnum) FROM pg_attribute a
         WHERE a.attrelid = '{}'::regclass AND a.attname = 'ready'",
        jobs(&schema),
        jobs(&schema)
    );
    let before: Option<String> = rows(&client, &comment).await[0].get(0);
    let options = short();
    let upgrader = Upgrader::new(&history, &options);
    let mut upgrading = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    let err = within(
        Duration::from_secs(10),
        "an expand behind a pending contract",
        upgrader.expand(&mut upgrading, &schema, &mut quiet),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err.kind(),
            schema_gen::ErrorKind::ContractFirst { pending: 2, .. }
        ),
        "{err}"
    );
    let after: Option<String> = rows(&client, &comment).await[0].get(0);
    assert_eq!(after, before, "the refused expand changed the comment");

    // This release's contract (the throwaway history's target is not
    // expanded yet, so its contract would refuse).
    run_contract(&schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let outcome = upgrader
        .expand(&mut upgrading, &schema, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.after.expanded, number);
    let after: Option<String> = rows(&client, &comment).await[0].get(0);
    assert_eq!(after.as_deref(), Some(doc));
}
