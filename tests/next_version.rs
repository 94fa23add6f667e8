//! The next schema version, tried before it ships: a throwaway version
//! after the model, declared the way a real one is (the model's typed
//! `IndexDef`: a unique partial index and an expression index on `jobs`),
//! planned, printed, applied online to a real database at this release's
//! version, contracted, and judged at each step by the one verdict. Nothing
//! here is shipped: the history is built by the test
//! (`History::new`), and the recipe for a real version is in
//! `schema_model::history`'s docs.

use harness::{exec, rows};
use schema_gen::check;
use schema_gen::render;
use schema_gen::upgrade::{Progress, UpgradeOptions, Upgrader};
use schema_gen::versions::{Action, History, Standing, Verdict};
use schema_gen::{ErrorKind, Options, bootstrap};
use schema_model::history::{MODEL_VERSION, SchemaVersion, Shipped, UpgradeHints, versions};
use schema_model::{
    IndexDef, IndexDescription, IndexKey, IndexPredicate, Jobs, SchemaName, engine_family,
};

/// The indexes the throwaway version adds to `jobs`.
fn new_indexes() -> Vec<IndexDef<Jobs>> {
    vec![
        IndexDef::new(
            "jobs_one_claim_per_worker_idx",
            [IndexKey::asc(Jobs::WorkerId)],
            "A worker holds at most one claim.",
        )
        .unique()
        .partial(IndexPredicate::IsNotNull(Jobs::ClaimedAt)),
        IndexDef::new(
            "jobs_queue_folded_idx",
            [IndexKey::lower(Jobs::Queue), IndexKey::desc(Jobs::Priority)],
            "Queues by name whatever its case.",
        ),
    ]
}

/// The version after the model, as its release would print it.
fn next_version() -> SchemaVersion {
    let alkstore = SchemaName::default();
    let mut tables = engine_family();
    let jobs = tables
        .iter_mut()
        .find(|t| t.name == "jobs")
        .unwrap_or_else(|| panic!("the model has jobs"));
    let mut script = render::script(&alkstore);
    let mut added = String::new();
    for index in new_indexes() {
        jobs.indexes.push(IndexDescription::of(&index));
        added.push_str(&format!(
            "{};\n\n",
            render::create_index(&alkstore, &index).to_string(sea_query::PostgresQueryBuilder)
        ));
    }
    script = script.replace("COMMIT;\n", &format!("{added}COMMIT;\n"));
    let describe = serde_json::json!({ "schema": "alkstore", "tables": tables }).to_string();
    let leak = |text: String| -> &'static str { Box::leak(text.into_boxed_str()) };
    let number = MODEL_VERSION + 1;
    SchemaVersion {
        number,
        release: "a throwaway version",
        shipped: Some(Shipped {
            number,
            release: "a throwaway version",
            schema_sql: leak(script),
            describe_json: leak(describe),
            statements_json: "{\"statements\": []}",
        }),
        hints: UpgradeHints::default(),
    }
}

/// Where `schema` stands along `history`, by the one verdict.
async fn judged(
    client: &tokio_postgres::Client,
    schema: &SchemaName,
    history: &History,
) -> Verdict {
    check::inspect(client, schema, &Options::default(), history)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .verdict
}

#[tokio::test]
async fn a_version_after_the_model_with_new_index_kinds_is_planned_and_applied_online() {
    if harness::skip_db_tests() {
        return;
    }
    let mut all = versions();
    all.push(next_version());
    let history = History::new(all).unwrap_or_else(|e| panic!("{e}"));
    let next = MODEL_VERSION + 1;
    assert_eq!(history.target().number(), next);
    let plan = history
        .plan_to(next)
        .unwrap_or_else(|| panic!("no plan to {next}"));
    let words: Vec<String> = plan.expand.iter().map(|s| s.describe()).collect();
    assert_eq!(
        words,
        [
            "jobs: create index jobs_one_claim_per_worker_idx concurrently",
            "jobs: create index jobs_queue_folded_idx concurrently",
        ]
    );
    assert!(
        plan.expand
            .iter()
            .all(|s| matches!(s.action, Action::CreateIndex { .. }))
    );
    assert!(plan.contract.is_empty());

    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("next_version");
    bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let claimed = |worker: &str| {
        format!(
            "INSERT INTO \"{}\".jobs (queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts, worker_id, claimed_at, claim_expires_at, ready) \
             VALUES ('Mail', '\\x00', 0, 1, 1, 30, 3, 1, 60, 1, '{worker}', 2, 40, true)",
            schema.as_str()
        )
    };
    exec(&client, &claimed("w1")).await;
    exec(&client, &claimed("w2")).await;

    let options = UpgradeOptions::default();
    let upgrader = Upgrader::new(&history, &options);
    let before = judged(&client, &schema, &history).await;
    assert_eq!(
        before.standing,
        Standing::Older {
            found: MODEL_VERSION,
            recognised: false
        }
    );
    let printed = upgrader
        .dry_run(&client, &schema, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        printed.script.contains(&format!(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS \"jobs_one_claim_per_worker_idx\" \
             ON \"{}\".\"jobs\" USING btree (worker_id) WHERE (claimed_at IS NOT NULL)",
            schema.as_str()
        )),
        "{}",
        printed.script
    );
    let mut quiet = |_: &Progress| {};
    let expanded = upgrader
        .expand(&mut client, &schema, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((expanded.steps_run, expanded.after.expanded), (2, next));
    let after_expand = judged(&client, &schema, &history).await;
    assert_eq!(
        after_expand.standing,
        Standing::ContractPending {
            oldest_served: MODEL_VERSION
        }
    );
    assert!(after_expand.matches(), "{:?}", after_expand.differences);

    // The unique partial index is real: a second claim for one worker is
    // refused by its name, an unclaimed row is not in it.
    let err = client
        .batch_execute(&claimed("w1"))
        .await
        .expect_err("a second claim for one worker");
    assert!(
        err.as_db_error()
            .is_some_and(|db| db.constraint() == Some("jobs_one_claim_per_worker_idx")),
        "{err:?}"
    );
    // The expression index is used for a case-folded lookup.
    exec(&client, "SET enable_seqscan = off").await;
    let plan: Vec<String> = rows(
        &client,
        &format!(
            "EXPLAIN SELECT id FROM \"{}\".jobs WHERE lower(queue) = 'mail' ORDER BY lower(queue), priority DESC",
            schema.as_str()
        ),
    )
    .await
    .iter()
    .map(|r| r.get(0))
    .collect();
    exec(&client, "RESET enable_seqscan").await;
    assert!(
        plan.iter().any(|l| l.contains("jobs_queue_folded_idx")),
        "{plan:#?}"
    );

    let contracted = upgrader
        .contract(&mut client, &schema, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(contracted.after.contracted, next);
    let current = judged(&client, &schema, &history).await;
    assert_eq!(current.standing, Standing::Current);
    assert!(current.matches(), "{:?}", current.differences);
    // This release's engine does not open a database of a version it does
    // not know, once it no longer serves this release.
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::NewerVersion { found, .. } if *found == next),
        "{err}"
    );
}
