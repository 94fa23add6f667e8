//! Every named CHECK constraint of the model refuses a violating row, by
//! its name, on a real server. The cases are generated from each table's
//! `checks()`: a valid row per table, then, per constraint, that row changed
//! in the one way its rule forbids. A new CHECK is tested without a new
//! case; a new kind of rule does not compile until it says how to break it.
//! That each CHECK exists at all is `invariants.rs`'s: this test follows the
//! model's list, so a CHECK removed from the model leaves it unnoticed.

use std::collections::BTreeSet;

use schema_model::{
    CheckRule, ConsumedEvents, DeadJobs, Jobs, Locks, Schedules, SchemaName, SchemaVersions,
    StreamEvents, StreamOffsets, TableModel, engine_family,
};
use sea_query::{Expr, PostgresQueryBuilder, Query};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// `row` with `column`'s literal replaced (or added).
fn with<T: TableModel>(row: &[(T, String)], column: T, literal: &str) -> Vec<(T, String)> {
    let mut out: Vec<(T, String)> = row.iter().filter(|(c, _)| *c != column).cloned().collect();
    out.push((column, literal.to_owned()));
    out
}

fn insert<T: TableModel>(schema: &SchemaName, row: &[(T, String)]) -> String {
    Query::insert()
        .into_table((schema.clone(), T::TABLE))
        .columns(row.iter().map(|(c, _)| *c))
        .values_panic(row.iter().map(|(_, literal)| Expr::cust(literal.clone())))
        .to_string(PostgresQueryBuilder)
}

/// The literal `row` holds for `column`, as a number.
fn number<T: TableModel>(row: &[(T, String)], column: T) -> i64 {
    row.iter()
        .find(|(c, _)| *c == column)
        .and_then(|(_, literal)| literal.parse().ok())
        .unwrap_or_else(|| panic!("{column:?} needs a numeric literal in the valid row"))
}

/// Runs `sql` in a transaction that is rolled back; the server's refusal, if any.
async fn attempt(client: &Client, sql: &str) -> Option<tokio_postgres::Error> {
    client
        .batch_execute("BEGIN")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let result = client.batch_execute(sql).await.err();
    client
        .batch_execute("ROLLBACK")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    result
}

/// Checks every CHECK of `T` against `valid` (a row every constraint
/// accepts, with every column a rule names set). Returns the table's name.
async fn every_check_refuses<T: TableModel>(
    client: &Client,
    schema: &SchemaName,
    valid: &[(T, &str)],
) -> String {
    let table = T::table_name();
    let valid: Vec<(T, String)> = valid.iter().map(|(c, l)| (*c, (*l).to_owned())).collect();
    if let Some(err) = attempt(client, &insert(schema, &valid)).await {
        panic!(
            "{table}: the valid row is refused: {}",
            harness::describe_error(&err)
        );
    }
    for check in T::checks() {
        let broken = match &check.rule {
            CheckRule::NotEmpty(c) => with(&valid, *c, "''"),
            CheckRule::AtLeast(c, n) => with(&valid, *c, &(n - 1).to_string()),
            CheckRule::Positive(c) => with(&valid, *c, "0"),
            CheckRule::NullTogether(columns) => with(&valid, columns[0], "NULL"),
            CheckRule::SetOnlyIf { flag, .. } => with(&valid, *flag, "false"),
            CheckRule::NotBefore { later, earlier } => {
                with(&valid, *later, &(number(&valid, *earlier) - 1).to_string())
            }
        };
        let sql = insert(schema, &broken);
        let err = attempt(client, &sql)
            .await
            .unwrap_or_else(|| panic!("{table}: {} accepted a violating row: {sql}", check.name));
        let db = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{table}: {}: not a server error: {err}", check.name));
        assert_eq!(
            db.code(),
            &SqlState::CHECK_VIOLATION,
            "{sql}: {}",
            db.message()
        );
        assert_eq!(
            db.constraint(),
            Some(check.name),
            "{sql}: refused by another constraint: {}",
            db.message()
        );
    }
    table
}

#[tokio::test]
async fn every_named_check_refuses_a_violating_row_by_its_name() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::engine::engine_schema(&client, "checks").await;
    let bytes = "'\\x00ff'::bytea";
    let next_version = (schema_model::history::MODEL_VERSION + 1).to_string();
    let tested: BTreeSet<String> = [
        every_check_refuses(
            &client,
            &schema,
            &[
                (Jobs::Queue, "'q'"),
                (Jobs::Payload, bytes),
                (Jobs::Priority, "0"),
                (Jobs::RunAt, "10"),
                (Jobs::Ready, "true"),
                (Jobs::ExpiresAt, "100"),
                (Jobs::EnqueuedAt, "1"),
                (Jobs::VisibilityTimeoutS, "30"),
                (Jobs::MaxAttempts, "3"),
                (Jobs::BackoffBaseS, "1"),
                (Jobs::DeadLetterRetentionS, "60"),
                (Jobs::Attempts, "1"),
                (Jobs::WorkerId, "'w'"),
                (Jobs::ClaimedAt, "10"),
                (Jobs::ClaimExpiresAt, "40"),
                (Jobs::LastError, "'e'"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (DeadJobs::Id, "1"),
                (DeadJobs::Queue, "'q'"),
                (DeadJobs::Payload, bytes),
                (DeadJobs::Priority, "0"),
                (DeadJobs::RunAt, "10"),
                (DeadJobs::EnqueuedAt, "1"),
                (DeadJobs::VisibilityTimeoutS, "30"),
                (DeadJobs::MaxAttempts, "3"),
                (DeadJobs::BackoffBaseS, "1"),
                (DeadJobs::DeadLetterRetentionS, "60"),
                (DeadJobs::Attempts, "1"),
                (DeadJobs::WorkerId, "'w'"),
                (DeadJobs::ClaimedAt, "10"),
                (DeadJobs::LastError, "'e'"),
                (DeadJobs::DiedAt, "50"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (StreamEvents::Stream, "'s'"),
                (StreamEvents::Key, "'k'"),
                (StreamEvents::Payload, bytes),
                (StreamEvents::CreatedAt, "1"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (StreamOffsets::Stream, "'s'"),
                (StreamOffsets::Consumer, "'c'"),
                (StreamOffsets::Offset, "1"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (Schedules::Name, "'n'"),
                (Schedules::Spec, "'@every 1m'"),
                (Schedules::EveryS, "60"),
                (Schedules::Queue, "'q'"),
                (Schedules::Payload, bytes),
                (Schedules::Priority, "0"),
                (Schedules::MaxAttempts, "3"),
                (Schedules::VisibilityTimeoutS, "30"),
                (Schedules::BackoffBaseS, "1"),
                (Schedules::DeadLetterRetentionS, "60"),
                (Schedules::ExpiresS, "10"),
                (Schedules::NextFireAt, "1"),
                (Schedules::LastFiredAt, "0"),
                (Schedules::Enabled, "true"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (Locks::Name, "'l'"),
                (Locks::Owner, "'o'"),
                (Locks::ExpiresAt, "1"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                (ConsumedEvents::Consumer, "'c'"),
                (ConsumedEvents::EventId, "'e'"),
                (ConsumedEvents::ConsumedAt, "1"),
            ],
        )
        .await,
        every_check_refuses(
            &client,
            &schema,
            &[
                // Not the version the bootstrap recorded (the model's): the
                // key is free.
                (SchemaVersions::Version, next_version.as_str()),
                (SchemaVersions::Release, "'schema-gen 9'"),
                (SchemaVersions::StartedAt, "1"),
                (SchemaVersions::ExpandedAt, "2"),
                (SchemaVersions::ContractedAt, "3"),
            ],
        )
        .await,
    ]
    .into_iter()
    .collect();
    let family: BTreeSet<String> = engine_family().into_iter().map(|t| t.name).collect();
    assert_eq!(tested, family, "a table of the family has no CHECK cases");
}

/// The storage parameters the model declares are what the server keeps in
/// `pg_class.reloptions`, text for text (so the verification of issue 7 can
/// compare the strings), and nothing else is set.
#[tokio::test]
async fn declared_storage_parameters_are_stored_as_rendered() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::engine::engine_schema(&client, "reloptions").await;
    let mut declared_any = false;
    for table in engine_family() {
        let stored: Option<Vec<String>> = client
            .query_one(
                "SELECT reloptions FROM pg_class WHERE oid = ($1 || '.' || $2)::regclass",
                &[&schema.as_str(), &table.name],
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {}", table.name, harness::describe_error(&e)))
            .get(0);
        assert_eq!(
            stored.unwrap_or_default(),
            table.storage_parameters,
            "{}: reloptions",
            table.name
        );
        declared_any |= !table.storage_parameters.is_empty();
    }
    assert!(
        declared_any,
        "the model declares storage parameters (jobs' autovacuum trigger)"
    );
}
