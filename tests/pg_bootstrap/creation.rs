//! Creation, idempotence and the live catalog: what one bootstrap makes,
//! the rows it holds, the names it quotes and the ones it refuses.

use harness::exec;
use harness::explain::{PlanMode, explain_analyze};
use schema_gen::render::{self};
use schema_gen::statements;
use schema_gen::{ErrorKind, Outcome, bootstrap, verify};
use schema_model::description::pg_ident;
use schema_model::{SchemaName, engine_family};
use tokio_postgres::error::SqlState;

use super::{bootstrapped, event, model_tables};

#[tokio::test]
async fn bootstrap_twice_creates_then_is_already_current() {
    if harness::skip_db_tests() {
        return;
    }
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name("boot_twice");

    let first = bootstrap(&mut client, &schema).await.unwrap();
    match &first {
        Outcome::Created {
            schema_created,
            tables_created,
            statements_run,
            ..
        } => {
            assert!(schema_created);
            assert_eq!(tables_created, &model_tables());
            assert_eq!(*statements_run, render::bootstrap_statements(&schema).len());
        }
        other => panic!("first bootstrap: {other:?}"),
    }
    let after_first = harness::dump::dump_schema(&client, schema.as_str()).await;

    let second = bootstrap(&mut client, &schema).await.unwrap();
    assert_eq!(
        second,
        Outcome::AlreadyCurrent {
            schema: schema.clone(),
            stale_comments: vec![],
            foreign: vec![],
        }
    );
    assert_eq!(
        second.to_string(),
        format!("schema {schema} is already current: nothing to do")
    );
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        after_first,
        "a steady-state bootstrap changed the catalog"
    );
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);

    // Every table of the model exists with exactly its pinned columns.
    for table in engine_family() {
        let rows = client
            .query(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position",
                &[&schema.as_str(), &table.name],
            )
            .await
            .unwrap();
        let live: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let model: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
        assert_eq!(live, model, "columns of {}", table.name);
    }
}

#[tokio::test]
async fn the_live_catalog_is_pinned_by_a_snapshot() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = bootstrapped("snap").await;
    let dump = harness::dump::dump_schema(&client, schema.as_str()).await;
    // The random schema name would make every run differ.
    let stable = dump.replace(schema.as_str(), "<schema>");
    assert!(!stable.contains(schema.as_str()));
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("pg_live_catalog", stable);
    });
}

#[tokio::test]
async fn a_missing_schema_is_one_difference() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("never_made");
    let differences = verify(&client, &schema).await.unwrap();
    assert_eq!(
        differences
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [format!("missing schema {schema}")]
    );
}

#[tokio::test]
async fn the_claim_index_has_its_definition_and_serves_the_claim_without_a_sort() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = bootstrapped("claim").await;
    let definition: String = client
        .query_one(
            "SELECT pg_get_indexdef(format('%I.%I', $1::text, 'jobs_claim_idx')::regclass)",
            &[&schema.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    // Written out by hand: equality prefix, the exact ORDER BY (DESC where
    // it is DESC), then id, restricted to claimable rows.
    assert_eq!(
        definition,
        format!(
            "CREATE INDEX jobs_claim_idx ON {schema}.jobs USING btree \
             (queue, priority DESC, run_at, id) WHERE ((claimed_at IS NULL) AND ready)"
        )
    );

    exec(
        &client,
        &format!(
            "INSERT INTO {schema}.jobs (queue, payload, priority, run_at, enqueued_at,
                 visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s,
                 attempts, ready)
             SELECT 'q' || (i % 20), '\\x00', i % 7, i, i, 30, 3, 1, 86400, 0, true
             FROM generate_series(1, 5000) AS i;
             ANALYZE {schema}.jobs;"
        ),
    )
    .await;
    // The claim uses the index and does not sort.
    let claim = statements::jobs::claim(&schema, "q3", "w", 4000, 1);
    let plan = explain_analyze(&client, &claim, PlanMode::Custom).await;
    assert!(
        plan.indexes.iter().any(|i| i == "jobs_claim_idx") && plan.sort_nodes().is_empty(),
        "expected an index scan on jobs_claim_idx with no sort:\n{}",
        plan.pretty()
    );
}

#[tokio::test]
async fn stream_offsets_are_monotone_and_leave_gaps_that_are_never_reused() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = bootstrapped("offsets").await;
    let append = statements::streams::append(&schema, &event(b"\x01"));
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id: i64 = client
            .query_one(append.sql(), &append.args())
            .await
            .unwrap()
            .get(0);
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Delete the last and a middle event: the survivors keep their ids and
    // the next append does not reuse either.
    exec(
        &client,
        &format!(
            "DELETE FROM {schema}.stream_events WHERE id IN ({}, {})",
            ids[2], ids[4]
        ),
    )
    .await;
    let next: i64 = client
        .query_one(append.sql(), &append.args())
        .await
        .unwrap()
        .get(0);
    assert!(
        next > ids[4],
        "offset {next} reused after deleting {}",
        ids[4]
    );
    let survivors: Vec<i64> = client
        .query(
            &format!("SELECT id FROM {schema}.stream_events ORDER BY id"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(survivors, [ids[0], ids[1], ids[3], next]);

    // Nobody can supply or rewrite an offset.
    let err = client
        .batch_execute(&format!(
            "INSERT INTO {schema}.stream_events (id, stream, payload, created_at)
             VALUES ({}, 's', '\\x01', 1)",
            ids[2]
        ))
        .await
        .expect_err("an explicit offset must be refused");
    assert_eq!(err.code(), Some(&SqlState::GENERATED_ALWAYS), "{err}");
    let err = client
        .batch_execute(&format!("UPDATE {schema}.stream_events SET id = id + 100"))
        .await
        .expect_err("renumbering must be refused");
    assert_eq!(err.code(), Some(&SqlState::GENERATED_ALWAYS), "{err}");
}

#[tokio::test]
async fn payloads_round_trip_byte_for_byte() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = bootstrapped("payloads").await;
    let every_byte: Vec<u8> = (0..=255u8).collect();
    let payloads: Vec<Vec<u8>> = vec![
        every_byte,
        // Not UTF-8: a lone continuation byte, an overlong '/', a surrogate, 0xFF.
        vec![0x80, b'a', 0xC0, 0xAF, 0xED, 0xA0, 0x80, 0xFF, 0xFE, 0x00],
        // JSON that jsonb would rewrite: duplicate keys, key order, whitespace.
        b"{\"b\":1,  \"a\" :2,\n\t\"a\":3 , \"z\":[ 1 ,2 ] }\r\n".to_vec(),
        b"\"\\u0000 \\ud800\"".to_vec(),
        Vec::new(),
    ];
    for (n, payload) in payloads.iter().enumerate() {
        let n = i64::try_from(n).unwrap();
        let inserts = [
            format!(
                "INSERT INTO {schema}.jobs (queue, payload, priority, run_at, enqueued_at,
                     visibility_timeout_s, max_attempts, backoff_base_s,
                     dead_letter_retention_s, attempts, ready)
                 VALUES ('q', $1, 0, 0, 0, 30, 3, 1, 60, 0, true) RETURNING id::bigint"
            ),
            format!(
                "INSERT INTO {schema}.dead_jobs (id, queue, payload, priority, run_at,
                     enqueued_at, visibility_timeout_s, max_attempts, backoff_base_s,
                     dead_letter_retention_s, attempts, died_at)
                 VALUES ({n}, 'q', $1, 0, 0, 0, 30, 3, 1, 60, 3, 0) RETURNING id"
            ),
            format!(
                "INSERT INTO {schema}.stream_events (stream, payload, created_at)
                 VALUES ('s', $1, 0) RETURNING id"
            ),
            format!(
                "INSERT INTO {schema}.schedules (name, spec, every_s, queue, payload, priority,
                     max_attempts, visibility_timeout_s, backoff_base_s,
                     dead_letter_retention_s, next_fire_at, enabled)
                 VALUES ('s{n}', '@every 1m', 60, 'q', $1, 0, 3, 30, 1, 60, 0, true)
                 RETURNING 0::bigint"
            ),
        ];
        let tables = ["jobs", "dead_jobs", "stream_events", "schedules"];
        for (insert, table) in inserts.iter().zip(tables) {
            let key: i64 = client
                .query_one(insert.as_str(), &[payload])
                .await
                .unwrap_or_else(|e| panic!("{table}: {e}"))
                .get(0);
            let filter = if table == "schedules" {
                format!("name = 's{n}'")
            } else {
                format!("id = {key}")
            };
            let row = client
                .query_one(
                    &format!(
                        "SELECT payload, encode(payload, 'hex'), octet_length(payload)
                         FROM {schema}.{table} WHERE {filter}"
                    ),
                    &[],
                )
                .await
                .unwrap();
            let back: Vec<u8> = row.get(0);
            let hex: String = row.get(1);
            let len: i32 = row.get(2);
            assert_eq!(&back, payload, "{table}: payload {n} changed");
            // What the server stored, read without the binary codec.
            let expected_hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, expected_hex, "{table}: payload {n} stored differently");
            assert_eq!(usize::try_from(len).unwrap(), payload.len());
        }
    }
}

#[tokio::test]
async fn every_model_identifier_is_quoted_as_the_server_quotes_it() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let mut names = Vec::new();
    for table in engine_family() {
        names.push(table.name.clone());
        names.extend(table.columns.iter().map(|c| c.name.clone()));
        names.extend(table.indexes.iter().map(|i| i.name.clone()));
        names.push(table.primary_key.name.clone());
        names.extend(table.checks.iter().map(|c| c.name.clone()));
    }
    // `offset` is a column and a reserved word: the case that matters.
    assert!(names.iter().any(|n| n == "offset"));
    for name in &names {
        let server: String = client
            .query_one("SELECT quote_ident($1)", &[name])
            .await
            .unwrap()
            .get(0);
        assert_eq!(pg_ident(name), server, "quoting of {name:?}");
    }
}

#[test]
fn refused_schema_names_cannot_reach_a_bootstrap() {
    // `bootstrap` and `verify` take a `SchemaName`, which these never become:
    // no client is needed to refuse them.
    for bad in [
        "",
        "Alk",
        "alk-store",
        "alk;drop schema public",
        "pg_alk",
        "public",
        "a\"b",
        &"a".repeat(64),
    ] {
        assert!(SchemaName::new(bad).is_err(), "{bad:?} was accepted");
    }
}

#[tokio::test]
async fn tables_altered_as_they_are_created_are_refused_and_leave_no_schema() {
    if harness::skip_db_tests() {
        return;
    }
    // The SQL bootstrap runs and the model disagree: here because an event
    // trigger (database-wide, hence a database of its own) alters each table
    // as it is created. Only the verification after the statements, inside
    // the transaction, can see it.
    let db = harness::unique_name("tampered");
    let url = harness::create_database(&db).await;
    let mut client = harness::connect_url(&url).await;
    exec(
        &client,
        "CREATE FUNCTION public.tamper() RETURNS event_trigger LANGUAGE plpgsql AS $$
         DECLARE created record;
         BEGIN
             FOR created IN SELECT * FROM pg_event_trigger_ddl_commands()
                            WHERE command_tag = 'CREATE TABLE' LOOP
                 EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY',
                                created.object_identity);
             END LOOP;
         END $$;
         CREATE EVENT TRIGGER tamper ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
             EXECUTE FUNCTION public.tamper();",
    )
    .await;
    let schema = harness::unique_schema_name("tampered");
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::CreatedDiffers { .. }),
        "{err:?}"
    );
    let listed: Vec<String> = err.differences().iter().map(ToString::to_string).collect();
    assert_eq!(listed.len(), model_tables().len(), "{listed:#?}");
    assert!(
        listed
            .iter()
            .zip(model_tables())
            .all(|(line, table)| line.starts_with(&format!(
                "{table}: row-level security is enabled, model says disabled"
            ))),
        "{listed:#?}"
    );
    let text = err.to_string();
    assert!(text.contains("an event trigger"), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        format!("schema {schema}: does not exist\n"),
        "a refused bootstrap left a schema behind"
    );

    // Without the trigger the same database bootstraps cleanly.
    exec(&client, "DROP EVENT TRIGGER tamper").await;
    assert!(bootstrap(&mut client, &schema).await.unwrap().created());
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
}
