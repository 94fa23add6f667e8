//! The invariants the engine relies on exist on the server, checked against
//! an oracle written out here by hand: the named CHECK constraints each
//! table must have, rows each must refuse (by its name) and the nearest rows
//! it must accept.
//!
//! `check_constraints.rs` derives its cases from the model's own `checks()`,
//! so a CHECK deleted from the model (and from the DDL snapshot with it)
//! would quietly leave that test; here it fails. A CHECK added to the model
//! fails here too until this oracle says which rows it refuses and accepts.
//! Tables with no CHECK need no entry.

use std::collections::{BTreeMap, BTreeSet};

use harness::describe_error;
use schema_model::{
    ConsumedEvents, DeadJobs, Jobs, Locks, Schedules, SchemaName, SchemaVersions, StreamEvents,
    StreamOffsets, TableModel,
};
use sea_query::{Expr, PostgresQueryBuilder, Query};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// Columns set to SQL literals: a row, or the changes to one.
type Row<T> = Vec<(T, &'static str)>;

/// One named CHECK: rows it must refuse and rows it must accept, each given
/// as the columns that differ from the table's valid row.
struct Invariant<T> {
    name: &'static str,
    refused: Vec<Row<T>>,
    accepted: Vec<Row<T>>,
}

fn invariant<T>(name: &'static str, refused: Vec<Row<T>>, accepted: Vec<Row<T>>) -> Invariant<T> {
    Invariant {
        name,
        refused,
        accepted,
    }
}

/// `column <> ''`: the empty string refused, one character accepted.
fn not_empty<T>(name: &'static str, column: T) -> Invariant<T>
where
    T: Copy,
{
    invariant(
        name,
        vec![vec![(column, "''")]],
        vec![vec![(column, "'x'")]],
    )
}

/// `column >= bound`: `below` refused, `bound` accepted.
fn at_least<T: Copy>(
    name: &'static str,
    column: T,
    below: &'static str,
    bound: &'static str,
) -> Invariant<T> {
    invariant(
        name,
        vec![vec![(column, below)]],
        vec![vec![(column, bound)]],
    )
}

/// The table's valid row with `changes` applied.
fn changed<T: TableModel>(valid: &[(T, &'static str)], changes: &[(T, &'static str)]) -> Row<T> {
    let mut row: Row<T> = valid
        .iter()
        .filter(|(c, _)| !changes.iter().any(|(changed, _)| changed == c))
        .copied()
        .collect();
    row.extend_from_slice(changes);
    row
}

fn insert<T: TableModel>(schema: &SchemaName, row: &[(T, &'static str)]) -> String {
    Query::insert()
        .into_table((schema.clone(), T::TABLE))
        .columns(row.iter().map(|(c, _)| *c))
        .values_panic(row.iter().map(|(_, literal)| Expr::cust(*literal)))
        .to_string(PostgresQueryBuilder)
}

/// Runs `sql` in a transaction that is rolled back; the server's refusal, if any.
async fn attempt(client: &Client, sql: &str) -> Option<tokio_postgres::Error> {
    harness::exec(client, "BEGIN").await;
    let result = client.batch_execute(sql).await.err();
    harness::exec(client, "ROLLBACK").await;
    result
}

/// Checks `invariants` of `T` with rows derived from `valid`; returns the
/// table's name and the names checked.
async fn each_holds<T: TableModel>(
    client: &Client,
    schema: &SchemaName,
    valid: Row<T>,
    invariants: Vec<Invariant<T>>,
) -> (String, BTreeSet<&'static str>) {
    let table = T::table_name();
    let sql = insert(schema, &valid);
    if let Some(err) = attempt(client, &sql).await {
        panic!(
            "{table}: the valid row is refused: {sql}: {}",
            describe_error(&err)
        );
    }
    for invariant in &invariants {
        for changes in &invariant.refused {
            let sql = insert(schema, &changed(&valid, changes));
            let err = attempt(client, &sql).await.unwrap_or_else(|| {
                panic!(
                    "{table}: a row {} must refuse was accepted: {sql}",
                    invariant.name
                )
            });
            let db = err
                .as_db_error()
                .unwrap_or_else(|| panic!("{table}: not a server error: {err}"));
            assert_eq!(
                db.code(),
                &SqlState::CHECK_VIOLATION,
                "{sql}: {}",
                db.message()
            );
            assert_eq!(
                db.constraint(),
                Some(invariant.name),
                "{sql}: refused by another constraint: {}",
                db.message()
            );
        }
        for changes in &invariant.accepted {
            let sql = insert(schema, &changed(&valid, changes));
            if let Some(err) = attempt(client, &sql).await {
                panic!(
                    "{table}: a row {} must accept was refused: {sql}: {}",
                    invariant.name,
                    describe_error(&err)
                );
            }
        }
    }
    (table, invariants.iter().map(|i| i.name).collect())
}

/// The CHECK constraints on the tables of `schema`, by table.
async fn live_checks(client: &Client, schema: &SchemaName) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let rows = client
        .query(
            "SELECT c.relname::text, k.conname::text FROM pg_constraint k
             JOIN pg_class c ON c.oid = k.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND k.contype = 'c'",
            &[&schema.as_str()],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)));
    for row in rows {
        out.entry(row.get(0)).or_default().insert(row.get(1));
    }
    out
}

#[tokio::test]
async fn every_invariant_of_the_oracle_exists_and_refuses_its_rows() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::engine::engine_schema(&client, "oracle").await;
    let bytes = "'\\x00ff'::bytea";
    let mut oracle: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut record = |(table, names): (String, BTreeSet<&'static str>)| {
        oracle.insert(table, names.into_iter().map(str::to_owned).collect());
    };

    // A claimed job, so every claim rule has something to break.
    record(
        each_holds(
            &client,
            &schema,
            vec![
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
            vec![
                not_empty("jobs_queue_not_empty", Jobs::Queue),
                at_least("jobs_attempts_not_negative", Jobs::Attempts, "-1", "0"),
                at_least(
                    "jobs_max_attempts_at_least_one",
                    Jobs::MaxAttempts,
                    "0",
                    "1",
                ),
                at_least(
                    "jobs_visibility_timeout_positive",
                    Jobs::VisibilityTimeoutS,
                    "0",
                    "1",
                ),
                at_least(
                    "jobs_backoff_base_not_negative",
                    Jobs::BackoffBaseS,
                    "-1",
                    "0",
                ),
                at_least(
                    "jobs_dead_letter_retention_positive",
                    Jobs::DeadLetterRetentionS,
                    "0",
                    "1",
                ),
                invariant(
                    "jobs_claim_columns_together",
                    vec![
                        vec![(Jobs::WorkerId, "NULL")],
                        vec![(Jobs::ClaimedAt, "NULL")],
                        vec![(Jobs::ClaimExpiresAt, "NULL")],
                        vec![(Jobs::WorkerId, "NULL"), (Jobs::ClaimedAt, "NULL")],
                    ],
                    vec![vec![
                        (Jobs::WorkerId, "NULL"),
                        (Jobs::ClaimedAt, "NULL"),
                        (Jobs::ClaimExpiresAt, "NULL"),
                    ]],
                ),
                invariant(
                    "jobs_claimed_job_is_ready",
                    vec![vec![(Jobs::Ready, "false")]],
                    // Waiting for promotion: not ready, not claimed.
                    vec![vec![
                        (Jobs::Ready, "false"),
                        (Jobs::WorkerId, "NULL"),
                        (Jobs::ClaimedAt, "NULL"),
                        (Jobs::ClaimExpiresAt, "NULL"),
                    ]],
                ),
                invariant(
                    "jobs_claim_expires_after_claim",
                    vec![vec![(Jobs::ClaimExpiresAt, "9")]],
                    vec![vec![(Jobs::ClaimExpiresAt, "10")]],
                ),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
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
            vec![
                not_empty("dead_jobs_queue_not_empty", DeadJobs::Queue),
                at_least(
                    "dead_jobs_attempts_not_negative",
                    DeadJobs::Attempts,
                    "-1",
                    "0",
                ),
                at_least(
                    "dead_jobs_max_attempts_at_least_one",
                    DeadJobs::MaxAttempts,
                    "0",
                    "1",
                ),
                at_least(
                    "dead_jobs_visibility_timeout_positive",
                    DeadJobs::VisibilityTimeoutS,
                    "0",
                    "1",
                ),
                at_least(
                    "dead_jobs_backoff_base_not_negative",
                    DeadJobs::BackoffBaseS,
                    "-1",
                    "0",
                ),
                at_least(
                    "dead_jobs_dead_letter_retention_positive",
                    DeadJobs::DeadLetterRetentionS,
                    "0",
                    "1",
                ),
                invariant(
                    "dead_jobs_claim_columns_together",
                    vec![
                        vec![(DeadJobs::WorkerId, "NULL")],
                        vec![(DeadJobs::ClaimedAt, "NULL")],
                    ],
                    // Never claimed (expired while waiting).
                    vec![vec![
                        (DeadJobs::WorkerId, "NULL"),
                        (DeadJobs::ClaimedAt, "NULL"),
                    ]],
                ),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
                (StreamEvents::Stream, "'s'"),
                (StreamEvents::Key, "'k'"),
                (StreamEvents::Payload, bytes),
                (StreamEvents::CreatedAt, "1"),
            ],
            vec![not_empty(
                "stream_events_stream_not_empty",
                StreamEvents::Stream,
            )],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
                (StreamOffsets::Stream, "'s'"),
                (StreamOffsets::Consumer, "'c'"),
                (StreamOffsets::Offset, "1"),
            ],
            vec![
                not_empty("stream_offsets_stream_not_empty", StreamOffsets::Stream),
                not_empty("stream_offsets_consumer_not_empty", StreamOffsets::Consumer),
                at_least(
                    "stream_offsets_offset_not_negative",
                    StreamOffsets::Offset,
                    "-1",
                    "0",
                ),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
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
            vec![
                not_empty("schedules_name_not_empty", Schedules::Name),
                not_empty("schedules_queue_not_empty", Schedules::Queue),
                at_least("schedules_every_positive", Schedules::EveryS, "0", "1"),
                at_least(
                    "schedules_max_attempts_at_least_one",
                    Schedules::MaxAttempts,
                    "0",
                    "1",
                ),
                at_least(
                    "schedules_visibility_timeout_positive",
                    Schedules::VisibilityTimeoutS,
                    "0",
                    "1",
                ),
                at_least(
                    "schedules_backoff_base_not_negative",
                    Schedules::BackoffBaseS,
                    "-1",
                    "0",
                ),
                at_least(
                    "schedules_dead_letter_retention_positive",
                    Schedules::DeadLetterRetentionS,
                    "0",
                    "1",
                ),
                invariant(
                    "schedules_expires_positive",
                    vec![vec![(Schedules::ExpiresS, "0")]],
                    // NULL: the enqueued jobs never expire.
                    vec![
                        vec![(Schedules::ExpiresS, "1")],
                        vec![(Schedules::ExpiresS, "NULL")],
                    ],
                ),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
                (Locks::Name, "'l'"),
                (Locks::Owner, "'o'"),
                (Locks::ExpiresAt, "1"),
            ],
            vec![
                not_empty("locks_name_not_empty", Locks::Name),
                not_empty("locks_owner_not_empty", Locks::Owner),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
                (ConsumedEvents::Consumer, "'c'"),
                (ConsumedEvents::EventId, "'e'"),
                (ConsumedEvents::ConsumedAt, "1"),
            ],
            vec![
                not_empty(
                    "consumed_events_consumer_not_empty",
                    ConsumedEvents::Consumer,
                ),
                not_empty(
                    "consumed_events_event_id_not_empty",
                    ConsumedEvents::EventId,
                ),
            ],
        )
        .await,
    );

    record(
        each_holds(
            &client,
            &schema,
            vec![
                // Not the version the bootstrap recorded: the key is free.
                (SchemaVersions::Version, "7"),
                (SchemaVersions::Release, "'schema-gen 9'"),
                (SchemaVersions::StartedAt, "10"),
                (SchemaVersions::ExpandedAt, "20"),
                (SchemaVersions::ContractedAt, "30"),
            ],
            vec![
                at_least(
                    "schema_versions_version_positive",
                    SchemaVersions::Version,
                    "0",
                    "1",
                ),
                not_empty("schema_versions_release_not_empty", SchemaVersions::Release),
                invariant(
                    "schema_versions_expanded_after_start",
                    vec![vec![(SchemaVersions::ExpandedAt, "9")]],
                    // NULL: still expanding.
                    vec![
                        vec![(SchemaVersions::ExpandedAt, "10")],
                        vec![
                            (SchemaVersions::ExpandedAt, "NULL"),
                            (SchemaVersions::ContractedAt, "NULL"),
                        ],
                    ],
                ),
                invariant(
                    "schema_versions_contracted_after_expand",
                    vec![vec![(SchemaVersions::ContractedAt, "19")]],
                    vec![
                        vec![(SchemaVersions::ContractedAt, "20")],
                        vec![(SchemaVersions::ContractedAt, "NULL")],
                    ],
                ),
            ],
        )
        .await,
    );

    // Exactly these: none missing (a CHECK dropped from the model), none
    // beyond them (a CHECK the oracle does not yet test).
    assert_eq!(live_checks(&client, &schema).await, oracle);
}
