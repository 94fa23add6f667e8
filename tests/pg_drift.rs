//! Drift against a real server: each hand-made change to a bootstrapped
//! schema is reported by `verify` in words a DBA understands, and refused by
//! `bootstrap`, which changes nothing (the catalog dump before and after the
//! refused bootstrap is identical).
//!
//! Each case asserts the whole list of differences, so a comparison that
//! reports too much fails as surely as one that reports too little.

use harness::exec;
use schema_gen::render::{self, SCHEMA_DOC};
use schema_gen::{Difference, ErrorKind, Outcome, bootstrap, verify};
use schema_model::{SchemaName, TableModel as _};

fn texts(differences: &[Difference]) -> Vec<String> {
    differences.iter().map(ToString::to_string).collect()
}

/// Bootstraps a fresh schema, applies `drift` (`{s}` is the schema), then
/// checks that verify reports exactly `expected` and that bootstrap refuses
/// with the same list and leaves the catalog as it was.
async fn drift_case(prefix: &str, drift: &str, expected: &[&str]) {
    let mut client = harness::connect().await;
    let raw = harness::unique_schema(prefix);
    let schema = SchemaName::new(&raw).unwrap();
    assert!(bootstrap(&mut client, &schema).await.unwrap().created());
    exec(&client, &drift.replace("{s}", &raw)).await;

    let differences = verify(&client, &schema).await.unwrap();
    assert_eq!(texts(&differences), expected, "verify after: {drift}");
    assert!(differences.iter().any(Difference::is_drift));

    let before = harness::dump::dump_schema(&client, &raw).await;
    let err = bootstrap(&mut client, &schema)
        .await
        .expect_err("bootstrap must refuse a drifted schema");
    assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
    assert_eq!(err.differences(), differences.as_slice());
    let message = err.to_string();
    for line in expected {
        assert!(message.contains(line), "{message} lacks {line}");
    }
    assert!(message.contains("changed nothing"), "{message}");
    assert_eq!(
        harness::dump::dump_schema(&client, &raw).await,
        before,
        "a refused bootstrap changed the catalog"
    );
}

#[tokio::test]
async fn a_dropped_column_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_dropcol",
        "ALTER TABLE {s}.dead_jobs DROP COLUMN last_error",
        &["missing column dead_jobs.last_error"],
    )
    .await;
}

#[tokio::test]
async fn a_changed_type_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_type",
        "ALTER TABLE {s}.jobs ALTER COLUMN priority TYPE bigint",
        &["jobs.priority: type is bigint, model says integer"],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_not_null_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_null",
        "ALTER TABLE {s}.jobs ALTER COLUMN queue DROP NOT NULL",
        &["jobs.queue: accepts NULL, model says NOT NULL"],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_index_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_noidx",
        "DROP INDEX {s}.jobs_claim_idx",
        &[
            "missing index jobs_claim_idx on jobs (model says `USING btree (queue, priority DESC, \
             run_at, id) WHERE ((claimed_at IS NULL) AND ready)`)",
        ],
    )
    .await;
}

#[tokio::test]
async fn an_index_recreated_with_another_definition_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // The right name, the wrong order: `IF NOT EXISTS` would skip it silently.
    drift_case(
        "drift_idxdef",
        "DROP INDEX {s}.jobs_claim_idx;
         CREATE INDEX jobs_claim_idx ON {s}.jobs (queue, priority, run_at, id)
             WHERE claimed_at IS NULL;",
        &[
            "index jobs_claim_idx: is `USING btree (queue, priority, run_at, id) WHERE \
             (claimed_at IS NULL)`, model says `USING btree (queue, priority DESC, run_at, id) \
             WHERE ((claimed_at IS NULL) AND ready)`",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_check_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_check",
        "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempts_not_negative",
        &[
            "missing CHECK constraint jobs_attempts_not_negative on jobs (model says `CHECK \
             ((attempts >= 0))`)",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_weakened_or_unvalidated_check_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_checkdef",
        "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempts_not_negative,
             ADD CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= -1);
         ALTER TABLE {s}.locks DROP CONSTRAINT locks_owner_not_empty,
             ADD CONSTRAINT locks_owner_not_empty CHECK (owner <> '') NOT VALID;",
        &[
            "constraint jobs_attempts_not_negative: is `CHECK ((attempts >= '-1'::integer))`, \
             model says `CHECK ((attempts >= 0))`",
            "constraint locks_owner_not_empty: is `CHECK ((owner <> ''::text)) NOT VALID`, \
             model says `CHECK ((owner <> ''::text))`",
        ],
    )
    .await;
}

#[tokio::test]
async fn defaults_identity_and_extras_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_misc",
        "ALTER TABLE {s}.jobs ALTER COLUMN attempts SET DEFAULT 0;
         ALTER TABLE {s}.stream_events ALTER COLUMN id SET GENERATED BY DEFAULT;
         ALTER TABLE {s}.locks ADD COLUMN note text;
         CREATE INDEX locks_owner_idx ON {s}.locks (owner);
         ALTER TABLE {s}.stream_offsets SET UNLOGGED;
         CREATE TABLE {s}.mine (x int);",
        &[
            "jobs.attempts: has DEFAULT 0, model says no default",
            "stream_events.id: has GENERATED BY DEFAULT AS IDENTITY, model says GENERATED \
             ALWAYS AS IDENTITY",
            "stream_offsets: is an unlogged table, model says a permanent table",
            "extra column locks.note (text)",
            "extra index locks_owner_idx on locks: `USING btree (owner)`",
            "extra table mine (not in the model)",
        ],
    )
    .await;
}

#[tokio::test]
async fn drift_plus_a_missing_table_creates_nothing() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_partial",
        "DROP TABLE {s}.locks; ALTER TABLE {s}.jobs DROP COLUMN last_error;",
        &["missing column jobs.last_error", "missing table locks"],
    )
    .await;
}

#[tokio::test]
async fn comment_drift_is_reported_not_refused_and_the_script_refreshes_it() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let raw = harness::unique_schema("drift_doc");
    let schema = SchemaName::new(&raw).unwrap();
    assert!(bootstrap(&mut client, &schema).await.unwrap().created());
    exec(
        &client,
        &format!(
            "COMMENT ON COLUMN {raw}.jobs.queue IS 'old words';
             COMMENT ON SCHEMA {raw} IS NULL;"
        ),
    )
    .await;
    let expected = [
        format!("comment on schema {raw}: missing, model says {SCHEMA_DOC:?}"),
        format!(
            "comment on column jobs.queue: is \"old words\", model says {:?}",
            schema_model::Jobs::Queue
                .column()
                .map(|c| c.doc)
                .unwrap_or_default()
        ),
    ];
    let differences = verify(&client, &schema).await.unwrap();
    assert_eq!(texts(&differences), expected);
    assert!(differences.iter().all(Difference::is_comment));

    // Documentation only: bootstrap is current, says so, and writes nothing.
    let before = harness::dump::dump_schema(&client, &raw).await;
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    let Outcome::AlreadyCurrent { stale_comments, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(stale_comments, &differences);
    assert!(
        outcome.to_string().contains("2 comments differ"),
        "{outcome}"
    );
    assert_eq!(harness::dump::dump_schema(&client, &raw).await, before);

    // Re-running the printed script refreshes the comments.
    let out = harness::psql()
        .args(["-c", &render::script(&schema)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
}
