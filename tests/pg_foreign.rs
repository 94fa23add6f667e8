//! Foreign objects against a real server: what a DBA adds to the engine
//! schema that the model does not own. An object that cannot change what
//! the engine's statements read, write or return is reported and left
//! alone (bootstrap opens, an upgrade plans around it); one that can is
//! drift (bootstrap refuses, changing nothing). Every rule of the
//! classification fires both ways here, each next to what the object does
//! to the engine's own statements: a foreign object leaves an engine cycle
//! (enqueue twice, claim, ack) working, most drift cases break it.
//!
//! The exit codes of `check`, `apply` and `upgrade` in each state are in
//! `cli_states.rs` (the real binary).

use harness::exec;
use harness::history::{create_version, dump_rows};
use schema_gen::statements::{Job, Statement, jobs};
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_gen::{Difference, ErrorKind, Outcome, bootstrap, verify};
use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;
use tokio_postgres::Client;

const NOW: i64 = 1_000_000;

/// A bootstrapped schema with `sql` run on it (`{s}` is the schema).
async fn schema_with(client: &mut Client, prefix: &str, sql: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    assert!(bootstrap(client, &schema).await.unwrap().created());
    exec(client, &sql.replace("{s}", schema.as_str())).await;
    schema
}

async fn run(client: &Client, statement: &Statement) -> Result<Vec<tokio_postgres::Row>, String> {
    client
        .query(statement.sql(), &statement.args())
        .await
        .map_err(|e| format!("{}: {}", statement.name(), harness::describe_error(&e)))
}

/// What an engine does, through the product's statements: two jobs
/// enqueued on one queue at priority 0, one claimed, then acked.
async fn engine_cycle(client: &Client, schema: &SchemaName) -> Result<(), String> {
    let mut job = Job::new("mail", b"payload".to_vec());
    job.run_at = NOW;
    job.enqueued_at = NOW;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 3;
    job.opts.backoff_base_s = 2;
    job.opts.dead_letter_retention_s = 86400;
    for _ in 0..2 {
        run(client, &jobs::enqueue(schema, &job, NOW)).await?;
    }
    let claimed = run(client, &jobs::claim(schema, "mail", "w", NOW, 1)).await?;
    let row = claimed.first().ok_or("nothing claimed")?;
    let (id, attempts): (i64, i32) = (row.get("id"), row.get("attempts"));
    let acked = run(client, &jobs::ack(schema, id, "w", attempts)).await?;
    let _ = acked;
    let left: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.jobs"), &[])
        .await
        .map_err(|e| harness::describe_error(&e))?
        .get(0);
    if left == 1 {
        Ok(())
    } else {
        Err(format!("{left} jobs left after the ack, not 1"))
    }
}

/// One rule of the classification, both ways: an object left foreign, and
/// one the same rule makes drift (with the words that say why, and whether
/// the engine cycle breaks on it).
struct Pair {
    rule: &'static str,
    foreign: &'static str,
    drift: &'static str,
    says: &'static str,
    breaks_the_engine: bool,
}

const PAIRS: &[Pair] = &[
    Pair {
        rule: "an index that is not unique",
        foreign: "CREATE INDEX jobs_report_idx ON {s}.jobs (queue, priority)",
        drift: "CREATE UNIQUE INDEX jobs_report_idx ON {s}.jobs (queue, priority)",
        says: "unique, so it refuses rows the model accepts",
        breaks_the_engine: true,
    },
    Pair {
        rule: "an expression of leakproof functions only",
        foreign: "CREATE INDEX jobs_report_idx ON {s}.jobs ((queue = 'mail'), run_at)",
        drift: "CREATE INDEX jobs_report_idx ON {s}.jobs ((1 / priority))",
        says: "evaluates function int4div(integer,integer), which can fail it",
        breaks_the_engine: true,
    },
    Pair {
        rule: "a predicate of plain comparisons",
        foreign: "CREATE INDEX jobs_report_idx ON {s}.jobs (enqueued_at) \
                  WHERE claimed_at IS NOT NULL AND queue IN ('mail', 'sms')",
        drift: "CREATE INDEX jobs_report_idx ON {s}.jobs (enqueued_at) WHERE queue::int > 0",
        says: "evaluates expression node coerceviaio, which can fail it",
        breaks_the_engine: true,
    },
    Pair {
        rule: "PostgreSQL's own collations",
        foreign: "CREATE INDEX jobs_report_idx ON {s}.jobs (queue COLLATE \"C\")",
        drift: "CREATE COLLATION {o}.mine FROM \"C\";
                CREATE INDEX jobs_report_idx ON {s}.jobs (queue COLLATE {o}.mine)",
        says: "evaluates collation {o}.mine",
        breaks_the_engine: false,
    },
    Pair {
        rule: "PostgreSQL's own operator classes",
        foreign: "CREATE INDEX jobs_report_idx ON {s}.jobs (priority int4_ops)",
        drift: "CREATE OPERATOR CLASS {o}.int4_mine FOR TYPE integer USING btree AS
                    OPERATOR 1 <, OPERATOR 2 <=, OPERATOR 3 =, OPERATOR 4 >=, OPERATOR 5 >,
                    FUNCTION 1 btint4cmp(integer, integer);
                CREATE INDEX jobs_report_idx ON {s}.jobs (priority {o}.int4_mine)",
        says: "evaluates operator class {o}.int4_mine for access method btree",
        breaks_the_engine: false,
    },
    Pair {
        rule: "a nullable column",
        foreign: "ALTER TABLE {s}.jobs ADD COLUMN note text",
        drift: "ALTER TABLE {s}.jobs ADD COLUMN note text NOT NULL",
        says: "NOT NULL, so every insert of the engine, which leaves it out, fails",
        breaks_the_engine: true,
    },
    Pair {
        rule: "a column without default",
        foreign: "ALTER TABLE {s}.jobs ADD COLUMN note bigint",
        drift: "ALTER TABLE {s}.jobs ADD COLUMN note bigint DEFAULT 7",
        says: "DEFAULT 7, evaluated on every insert of the engine",
        breaks_the_engine: false,
    },
    Pair {
        rule: "a column without identity",
        foreign: "ALTER TABLE {s}.jobs ADD COLUMN note smallint",
        drift: "ALTER TABLE {s}.jobs ADD COLUMN note smallint GENERATED ALWAYS AS IDENTITY",
        says: "GENERATED ALWAYS AS IDENTITY, evaluated on every insert of the engine",
        breaks_the_engine: false,
    },
    Pair {
        rule: "a column that is not generated",
        foreign: "ALTER TABLE {s}.jobs ADD COLUMN note integer",
        drift: "ALTER TABLE {s}.jobs ADD COLUMN note integer GENERATED ALWAYS AS (1 / priority) STORED",
        says: "GENERATED ALWAYS AS ((1 / priority)) STORED, evaluated on every insert",
        breaks_the_engine: true,
    },
    Pair {
        rule: "a column whose type is no domain",
        foreign: "ALTER TABLE {s}.jobs ADD COLUMN note text",
        drift: "CREATE DOMAIN {o}.required AS text NOT NULL;
                ALTER TABLE {s}.jobs ADD COLUMN note {o}.required",
        says: "is a domain, whose constraints apply to the NULL every insert",
        breaks_the_engine: true,
    },
    Pair {
        rule: "a table that references no engine table",
        foreign: "CREATE TABLE {s}.report (job_id bigint, seen_at bigint)",
        drift: "CREATE TABLE {o}.report (job_id bigint REFERENCES {s}.jobs (id))",
        says: "foreign key report_job_id_fkey of {o}.report references it",
        breaks_the_engine: false,
    },
];

/// Every rule fires both ways: the foreign object is reported as foreign,
/// bootstrap opens and returns it, the engine works; the drift object is
/// reported as drift, bootstrap refuses naming it and changes nothing. (`{o}`
/// is another schema, for what lives outside the engine's: a collation, an
/// operator class, a domain, a referencing table.)
#[tokio::test]
async fn each_rule_leaves_one_object_foreign_and_makes_its_neighbour_drift() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    for pair in PAIRS {
        let rule = pair.rule;
        let foreign = schema_with(&mut client, "foreign_ok", pair.foreign).await;
        let found = verify(&client, &foreign).await.unwrap();
        assert!(
            !found.is_empty() && found.iter().all(Difference::is_foreign),
            "{rule}: {found:?}"
        );
        match bootstrap(&mut client, &foreign).await {
            Ok(Outcome::AlreadyCurrent {
                foreign: seen,
                stale_comments,
                ..
            }) => {
                assert_eq!(seen, found, "{rule}");
                assert!(stale_comments.is_empty(), "{rule}");
            }
            other => panic!("{rule}: bootstrap {other:?}"),
        }
        engine_cycle(&client, &foreign)
            .await
            .unwrap_or_else(|e| panic!("{rule}: the engine fails beside a foreign object: {e}"));

        let raw = harness::unique_schema("foreign_no");
        let other = harness::unique_schema("foreign_other");
        let drifted = SchemaName::new(&raw).unwrap();
        exec(&client, &format!("CREATE SCHEMA {other}")).await;
        assert!(bootstrap(&mut client, &drifted).await.unwrap().created());
        let place = |sql: &str| sql.replace("{s}", &raw).replace("{o}", &other);
        exec(&client, &place(pair.drift)).await;
        let says = place(pair.says);
        let found = verify(&client, &drifted).await.unwrap();
        assert!(
            found
                .iter()
                .any(|d| d.is_drift() && d.to_string().contains(&says)),
            "{rule}: {found:?} does not say {says:?}"
        );
        let before = harness::dump::dump_schema(&client, &raw).await;
        let err = bootstrap(&mut client, &drifted).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Drift { .. }),
            "{rule}: {err}"
        );
        assert!(err.to_string().contains(&says), "{rule}: {err}");
        assert_eq!(
            harness::dump::dump_schema(&client, &raw).await,
            before,
            "{rule}"
        );
        let cycle = engine_cycle(&client, &drifted).await;
        assert_eq!(
            cycle.is_err(),
            pair.breaks_the_engine,
            "{rule}: the engine cycle beside the drift object: {cycle:?}"
        );
    }
}

/// The DBA's objects of the issue: a reporting index, a column, a table, a
/// view, a materialized view and a sequence of their own. Bootstrap opens,
/// returns each, and creates what is missing beside them.
#[tokio::test]
async fn a_dbas_objects_are_returned_by_bootstrap_which_opens_and_creates_beside_them() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = schema_with(
        &mut client,
        "foreign_dba",
        "ALTER TABLE {s}.jobs ADD COLUMN tenant text;
         CREATE TABLE {s}.report_daily (day date PRIMARY KEY, jobs bigint NOT NULL);
         CREATE VIEW {s}.queue_depth AS SELECT queue, count(*) FROM {s}.jobs GROUP BY queue;
         CREATE MATERIALIZED VIEW {s}.lock_count AS SELECT count(*) FROM {s}.locks;
         CREATE SEQUENCE {s}.report_seq;",
    )
    .await;
    // As the DBA did it (outside a transaction block).
    exec(
        &client,
        &format!(
            "CREATE INDEX CONCURRENTLY jobs_enqueued_at_report_idx ON {schema}.jobs (enqueued_at)"
        ),
    )
    .await;
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    let seen: Vec<String> = outcome.foreign().iter().map(ToString::to_string).collect();
    assert_eq!(
        seen,
        [
            "extra column jobs.tenant (text)",
            "extra index jobs_enqueued_at_report_idx on jobs: `USING btree (enqueued_at)`",
            "extra materialized view lock_count (not in the model)",
            "extra view queue_depth (not in the model)",
            "extra table report_daily (not in the model)",
            "extra sequence report_seq (not in the model)",
        ]
    );
    assert!(
        outcome.to_string().starts_with(&format!(
            "schema {schema} is already current: nothing to do; 6 objects not in the model left \
             alone (foreign: extra column jobs.tenant (text); "
        )),
        "{outcome}"
    );

    // A schema whose model tables are partly missing is completed beside
    // the DBA's table, which bootstrap reports.
    exec(&client, &format!("DROP TABLE {schema}.locks CASCADE")).await;
    match bootstrap(&mut client, &schema).await.unwrap() {
        Outcome::Created {
            tables_created,
            foreign,
            ..
        } => {
            assert_eq!(tables_created, ["locks"]);
            // The materialized view went with locks.
            assert_eq!(foreign.len(), 5, "{foreign:?}");
        }
        other => panic!("{other:?}"),
    }
    engine_cycle(&client, &schema).await.unwrap();
}

/// A version-1 database with a DBA's column and its index upgrades, expand
/// and contract: their definitions and values untouched, still reported.
#[tokio::test]
async fn an_upgrade_plans_around_a_dbas_column_and_index() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("foreign_up");
    create_version(&client, &schema, 1).await;
    exec(
        &client,
        &format!(
            "ALTER TABLE {schema}.jobs ADD COLUMN tenant text;
             CREATE INDEX jobs_tenant_report_idx ON {schema}.jobs (tenant, enqueued_at);
             INSERT INTO {schema}.jobs (queue, payload, priority, run_at, enqueued_at,
                 visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s,
                 attempts, tenant)
             VALUES ('mail', '\\x00', 0, 1, 1, 30, 3, 2, 86400, 0, 'acme');"
        ),
    )
    .await;
    let dba = format!(
        "SELECT pg_get_indexdef('{schema}.jobs_tenant_report_idx'::regclass), \
         (SELECT tenant FROM {schema}.jobs), \
         (SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
          WHERE attrelid = '{schema}.jobs'::regclass AND attname = 'tenant')"
    );
    let read = async |client: &Client| -> (String, String, String) {
        let row = client.query_one(dba.as_str(), &[]).await.unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let before = read(&client).await;
    let rows_before = dump_rows(&client, &schema).await;

    let options = UpgradeOptions::default();
    let mut quiet = |_: &Progress| {};
    let plan = upgrade::dry_run(&client, &schema, &options, false)
        .await
        .unwrap();
    assert!(!plan.steps.is_empty());
    assert!(!plan.script.contains("tenant"), "{}", plan.script);
    let expanded = upgrade::upgrade(&mut client, &schema, &options, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(expanded.after.expanded, MODEL_VERSION);
    let names: Vec<Option<String>> = expanded
        .foreign
        .iter()
        .map(Difference::foreign_name)
        .collect();
    assert_eq!(
        names,
        [
            Some("jobs.tenant".to_owned()),
            Some("jobs_tenant_report_idx".to_owned())
        ]
    );
    assert!(
        expanded
            .message()
            .contains("2 objects not in the model left untouched")
    );
    let contracted = upgrade::contract(&mut client, &schema, &options, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!contracted.contract_pending());
    assert_eq!(contracted.foreign, expanded.foreign);
    assert_eq!(read(&client).await, before, "the DBA's objects changed");
    let rows_after = dump_rows(&client, &schema).await;
    assert_eq!(
        harness::history::restricted(&rows_before, &rows_after),
        rows_before
    );
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    assert_eq!(outcome.foreign(), contracted.foreign.as_slice());
}

/// A DBA's object under a name a later version uses is in an upgrade's
/// way: `check` says so, and the upgrade refuses before any step.
#[tokio::test]
async fn a_foreign_object_under_a_name_a_later_version_uses_stops_the_upgrade() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("foreign_name");
    create_version(&client, &schema, 1).await;
    // Version 2 adds jobs.ready and jobs_promote_idx; a DBA got there first.
    exec(
        &client,
        &format!("CREATE INDEX jobs_promote_idx ON {schema}.jobs (queue, enqueued_at)"),
    )
    .await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let options = UpgradeOptions::default();
    let mut quiet = |_: &Progress| {};
    let err = upgrade::upgrade(&mut client, &schema, &options, &mut quiet)
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
    assert!(
        err.to_string().contains(
            "extra index jobs_promote_idx on jobs: `USING btree (queue, enqueued_at)`: version 2 \
             of the model creates an object of this name"
        ),
        "{err}"
    );
    assert!(err.done().is_none_or(|d| !d.changed_anything()), "{err}");
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );

    // Under another name it is the DBA's own, and the upgrade goes ahead.
    exec(
        &client,
        &format!("ALTER INDEX {schema}.jobs_promote_idx RENAME TO jobs_queue_report_idx"),
    )
    .await;
    let expanded = upgrade::upgrade(&mut client, &schema, &options, &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(expanded.foreign.len(), 1);
}

/// A database that is no known version is measured against the nearest
/// one: a version-1 database with a DBA's column and index and one real
/// change lists that change only, naming version 1.
#[tokio::test]
async fn a_database_of_no_version_is_measured_against_the_nearest() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("foreign_near");
    create_version(&client, &schema, 1).await;
    exec(
        &client,
        &format!(
            "ALTER TABLE {schema}.jobs ADD COLUMN tenant text;
             CREATE INDEX jobs_tenant_report_idx ON {schema}.jobs (tenant);
             DROP INDEX {schema}.jobs_expiry_idx;"
        ),
    )
    .await;
    let options = UpgradeOptions::default();
    let mut quiet = |_: &Progress| {};
    let err = upgrade::upgrade(&mut client, &schema, &options, &mut quiet)
        .await
        .unwrap_err();
    match err.kind() {
        ErrorKind::Drift {
            differences,
            nearest,
            ..
        } => {
            assert_eq!(*nearest, Some(1), "{err}");
            let listed: Vec<String> = differences.iter().map(ToString::to_string).collect();
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert!(
                listed[0].starts_with("missing index jobs_expiry_idx on jobs"),
                "{listed:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains("is no version this release knows; it is nearest to version 1, from which it differs in 1 way"),
        "{err}"
    );
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert_eq!(err.differences().len(), 1, "{err}");
}
