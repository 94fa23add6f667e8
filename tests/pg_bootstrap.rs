//! `bootstrap` and `verify` against a real PostgreSQL server: creation,
//! idempotence, the live catalog, the engine's invariants on real rows,
//! concurrency, locks, privileges, co-tenancy and interrupted bootstraps.
//!
//! Every test works in its own schema (or its own database), so the tests run
//! in parallel against one server.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::exec;
use harness::explain::{PlanMode, explain_analyze};
use schema_gen::catalog;
use schema_gen::render::{self, StatementKind};
use schema_gen::statements;
use schema_gen::{ErrorKind, Options, Outcome, bootstrap, bootstrap_with, verify, verify_with};
use schema_model::description::pg_ident;
use schema_model::{SchemaName, engine_family};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// An event of stream `s` with `payload`, for the append statement.
fn event(payload: &[u8]) -> schema_model::StreamEvent {
    let mut event = schema_model::StreamEvent::default();
    event.stream = "s".into();
    event.payload = payload.to_vec();
    event
}

fn model_tables() -> Vec<String> {
    engine_family().into_iter().map(|t| t.name).collect()
}

async fn bootstrapped(prefix: &str) -> (Client, SchemaName) {
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name(prefix);
    let outcome = bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema}: {e}"));
    assert!(outcome.created(), "{outcome}");
    (client, schema)
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_bootstraps_of_one_fresh_schema_all_succeed_and_one_creates() {
    if harness::skip_db_tests() {
        return;
    }
    const SESSIONS: usize = 32;
    let schema = harness::unique_schema_name("concurrent");
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        clients.push(harness::connect().await);
    }
    // All sessions start together, so they all see the schema missing.
    let barrier = Arc::new(tokio::sync::Barrier::new(SESSIONS));
    // The waiters take the bootstrap lock one after another, each reading
    // the catalog under it: on a loaded 2-core machine, with the other
    // tests running, 31 of those took more than the default 5 s. The bound
    // is not what this test is about (`lock_timeout` tests are below).
    let options = Options {
        lock_timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    for mut client in clients {
        let schema = schema.clone();
        let barrier = Arc::clone(&barrier);
        let options = options.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            bootstrap_with(&mut client, &schema, &options).await
        });
    }
    let mut created = 0;
    let mut current = 0;
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Ok(Outcome::Created { .. }) => created += 1,
            Ok(Outcome::AlreadyCurrent { .. }) => current += 1,
            Ok(other) => panic!("unexpected outcome {other:?}"),
            Err(err) => panic!("a concurrent bootstrap failed: {err}"),
        }
    }
    assert_eq!((created, current), (1, SESSIONS - 1));
    let client = harness::connect().await;
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
}

#[tokio::test]
async fn steady_state_is_one_round_trip_that_only_reads_the_catalog() {
    if harness::skip_db_tests() {
        return;
    }
    let (_, schema) = bootstrapped("one_trip").await;
    let proxy = harness::wire::CountingProxy::start(&harness::database_url()).await;
    let mut client = proxy.connect(&harness::database_url()).await;
    proxy.reset();

    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    assert!(!outcome.created(), "{outcome}");
    assert_eq!(proxy.round_trips(), 1, "{:#?}", proxy.statements());
    // One simple query: its bounds, then the catalog read, nothing else.
    let batch = catalog::batch(&schema, &Options::default());
    assert_eq!(proxy.statements(), [batch.as_str()]);
    assert!(
        batch.starts_with("SET LOCAL lock_timeout = '5s'; SET LOCAL statement_timeout = '15s';"),
        "{batch}"
    );
    let upper = catalog::statement(&schema).to_uppercase();
    for ddl in [
        "CREATE ",
        "ALTER ",
        "COMMENT ON",
        "LOCK ",
        "BEGIN",
        "ADVISORY",
        "SET ",
    ] {
        assert!(!upper.contains(ddl), "the catalog read contains {ddl:?}");
    }
    // The bounds were local to that query's implicit transaction.
    let shown = client.simple_query("SHOW lock_timeout").await.unwrap();
    let left = shown.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    assert_eq!(left.as_deref(), Some("0"));

    proxy.reset();
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
    assert_eq!(proxy.round_trips(), 1);

    // The proxy counts waits, not messages: three queries one after the
    // other are three round trips.
    proxy.reset();
    for _ in 0..3 {
        client.batch_execute("SELECT 1").await.unwrap();
    }
    assert_eq!(proxy.round_trips(), 3);

    // A fresh create sends every statement, pipelined: three round trips
    // (the read, the pipeline, the commit).
    proxy.reset();
    let fresh = harness::unique_schema_name("one_trip_fresh");
    assert!(bootstrap(&mut client, &fresh).await.unwrap().created());
    assert_eq!(proxy.round_trips(), 3, "{:#?}", proxy.statements());
    // The read, BEGIN, every statement in one query, COMMIT.
    let sent = proxy.statements();
    assert_eq!(sent.len(), 4, "{sent:#?}");
    assert_eq!((sent[1].as_str(), sent[3].as_str()), ("BEGIN", "COMMIT"));
    assert_eq!(
        sent[2].matches("CREATE TABLE").count(),
        model_tables().len()
    );
}

/// The tables of the engine family in `schema`, qualified.
fn qualified_tables(schema: &SchemaName) -> Vec<String> {
    model_tables()
        .into_iter()
        .map(|t| format!("{schema}.{t}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_completes_while_every_engine_table_is_being_written() {
    if harness::skip_db_tests() {
        return;
    }
    let (_, schema) = bootstrapped("busy").await;

    // One open write transaction per engine table (ROW EXCLUSIVE is what
    // INSERT, UPDATE and DELETE take), plus a real pending insert into jobs.
    let mut writers = Vec::new();
    for table in qualified_tables(&schema) {
        let writer = harness::connect().await;
        exec(
            &writer,
            &format!("BEGIN; LOCK TABLE {table} IN ROW EXCLUSIVE MODE;"),
        )
        .await;
        writers.push(writer);
    }
    exec(
        &writers[0],
        &format!(
            "INSERT INTO {schema}.jobs (queue, payload, priority, run_at, enqueued_at,
                 visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s,
                 attempts, ready)
             VALUES ('q', '\\x00', 0, 0, 0, 30, 3, 1, 60, 0, true)"
        ),
    )
    .await;

    let mut opener = harness::connect().await;
    exec(&opener, "SET lock_timeout = '200ms'").await;
    // lock_timeout turns any wait on a conflicting lock into an error.
    let outcome = bootstrap(&mut opener, &schema).await.unwrap();
    assert!(!outcome.created(), "{outcome}");

    // The test can fail: the idempotent script's CREATE INDEX IF NOT EXISTS
    // waits behind these writers until lock_timeout.
    let index = render::bootstrap_statements(&schema)
        .into_iter()
        .find(|s| s.kind == StatementKind::CreateIndex)
        .unwrap();
    let err = opener
        .batch_execute(&index.sql)
        .await
        .expect_err("CREATE INDEX IF NOT EXISTS must wait behind open writers");
    assert_eq!(err.code(), Some(&SqlState::LOCK_NOT_AVAILABLE), "{err}");

    // Stronger still: EXCLUSIVE on every table blocks all writes and row
    // locks and leaves only ACCESS SHARE, the lock of a plain SELECT.
    for writer in &writers {
        exec(writer, "ROLLBACK").await;
    }
    for (writer, table) in writers.iter().zip(qualified_tables(&schema)) {
        exec(
            writer,
            &format!("BEGIN; LOCK TABLE {table} IN EXCLUSIVE MODE;"),
        )
        .await;
    }
    let outcome = bootstrap(&mut opener, &schema).await.unwrap();
    assert!(!outcome.created(), "{outcome}");
    for writer in &writers {
        exec(writer, "ROLLBACK").await;
    }

    // And the modes it takes, seen from inside a transaction.
    let tx = opener.transaction().await.unwrap();
    tx.simple_query(&catalog::statement(&schema)).await.unwrap();
    let modes: HashSet<String> = tx
        .query(
            "SELECT l.mode FROM pg_locks l
             JOIN pg_class c ON c.oid = l.relation
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE l.pid = pg_backend_pid() AND n.nspname = $1",
            &[&schema.as_str()],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        modes.iter().all(|m| m == "AccessShareLock"),
        "locks on engine relations: {modes:?}"
    );
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn a_least_privilege_role_bootstraps_at_steady_state() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("least");
    let role = harness::unique_name("runtime");

    // The DBA applies the printed script, then grants USAGE and DML only.
    let out = harness::psql()
        .args(["-c", &render::script(&schema)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exec(
        &admin,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};"
        ),
    )
    .await;

    let mut runtime = harness::connect_url(&harness::url_for_role(&role)).await;
    let can: (bool, bool) = {
        let row = runtime
            .query_one(
                "SELECT has_database_privilege(current_database(), 'CREATE'),
                        has_schema_privilege($1, 'CREATE')",
                &[&schema.as_str()],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(can, (false, false), "the role must not be able to create");

    let outcome = bootstrap(&mut runtime, &schema).await.unwrap();
    assert!(!outcome.created(), "{outcome}");
    assert_eq!(verify(&runtime, &schema).await.unwrap(), vec![]);

    // It can do the engine's work...
    exec(
        &runtime,
        &format!(
            "INSERT INTO {schema}.stream_events (stream, payload, created_at)
             VALUES ('s', '\\x00', 0)"
        ),
    )
    .await;
    // ...and could not have run the idempotent script (so this test can fail).
    let err = runtime
        .batch_execute(&render::script(&schema))
        .await
        .expect_err("the script needs CREATE and ownership");
    assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{err}");

    drop(runtime);
    exec(
        &admin,
        &format!("DROP SCHEMA {schema} CASCADE; DROP ROLE {role};"),
    )
    .await;
}

#[tokio::test]
async fn a_role_without_create_gets_an_error_that_names_the_missing_privilege() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("noprivdb");
    let role = harness::unique_name("nocreate");
    let db_admin = harness::connect_url(&harness::create_database(&db).await).await;
    exec(&db_admin, &format!("CREATE ROLE {role} LOGIN")).await;
    let mut client = harness::connect_url(&harness::url_for(&role, None, Some(&db))).await;
    let schema = harness::unique_schema_name("denied");

    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    match err.kind() {
        ErrorKind::Privilege {
            role: named,
            privilege,
            ..
        } => {
            assert_eq!(named, &role);
            assert_eq!(privilege, &format!("CREATE on database {db}"));
        }
        other => panic!("expected a privilege error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("role {role} lacks CREATE on database {db}")),
        "{text}"
    );
    assert!(text.contains("schema-gen sql --schema"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(
        harness::dump::dump_schema(&db_admin, schema.as_str()).await,
        format!("schema {schema}: does not exist\n")
    );

    // The schema exists (a DBA made it) but the role may not create in it.
    exec(
        &db_admin,
        &format!("CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO {role};"),
    )
    .await;
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("role {role} lacks CREATE on schema {schema}")),
        "{err}"
    );
    assert_eq!(
        harness::dump::dump_schema(&db_admin, schema.as_str()).await,
        format!("schema {schema} -- (no comment)\n"),
        "a refused bootstrap left something behind"
    );
}

#[tokio::test]
async fn bootstrap_creates_missing_tables_of_an_existing_schema_and_touches_nothing_else() {
    if harness::skip_db_tests() {
        return;
    }
    let (mut client, schema) = bootstrapped("partial").await;
    exec(
        &client,
        &format!(
            "DROP TABLE {schema}.locks, {schema}.consumed_events;
             INSERT INTO {schema}.stream_events (stream, payload, created_at) VALUES ('s', '\\x00', 0);"
        ),
    )
    .await;
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Created {
            schema: schema.clone(),
            schema_created: false,
            tables_created: vec!["locks".into(), "consumed_events".into()],
            statements_run:
                render::bootstrap_statements(&schema)
                    .iter()
                    .filter(|s| s.object.starts_with("locks")
                        || s.object.starts_with("consumed_events"))
                    .count(),
            foreign: vec![],
        }
    );
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
    let events: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.stream_events"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 1);

    // A schema a DBA created empty (owned by the bootstrapping role) is filled in.
    let empty = harness::unique_schema_name("prepared");
    exec(&client, &format!("CREATE SCHEMA {empty}")).await;
    match bootstrap(&mut client, &empty).await.unwrap() {
        Outcome::Created {
            schema_created,
            tables_created,
            ..
        } => {
            assert!(!schema_created);
            assert_eq!(tables_created, model_tables());
        }
        other => panic!("{other:?}"),
    }
    // Its comment was the DBA's (none) and stays so: reported, not rewritten.
    let differences: Vec<String> = verify(&client, &empty)
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        differences,
        [format!(
            "comment on schema {empty}: missing, model says {:?}",
            render::SCHEMA_DOC
        )]
    );
}

/// The consumer's schemas and rows, for a before/after comparison.
async fn consumer_dump(client: &Client) -> String {
    let mut all = String::new();
    for schema in ["public", "analytics"] {
        all.push_str(&harness::dump::dump_schema(client, schema).await);
    }
    let rows: Vec<String> = client
        .query(
            "SELECT format('%s', j) FROM public.jobs j
             UNION ALL SELECT format('%s', a) FROM analytics.jobs a ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    all.push_str(&rows.join("\n"));
    all
}

#[tokio::test]
async fn co_tenants_are_untouched_and_two_engine_schemas_stay_apart() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("cotenant");
    let url = harness::create_database(&db).await;
    let mut client = harness::connect_url(&url).await;
    exec(
        &client,
        "CREATE TABLE public.jobs (id int PRIMARY KEY, note text NOT NULL);
         INSERT INTO public.jobs VALUES (1, 'consumer row');
         CREATE TABLE public.locks (name text);
         CREATE SCHEMA analytics;
         CREATE TABLE analytics.jobs (run_id bigint, status text);
         CREATE INDEX jobs_claim_idx ON analytics.jobs (status);
         INSERT INTO analytics.jobs VALUES (7, 'ok');
         CREATE TABLE analytics.events (at bigint);",
    )
    .await;
    let before = consumer_dump(&client).await;

    let one = harness::unique_schema_name("tenant_one");
    let two = harness::unique_schema_name("tenant_two");
    assert!(bootstrap(&mut client, &one).await.unwrap().created());
    assert!(bootstrap(&mut client, &two).await.unwrap().created());
    assert_eq!(verify(&client, &one).await.unwrap(), vec![]);
    assert_eq!(verify(&client, &two).await.unwrap(), vec![]);

    // Pointed at the consumer's schema, bootstrap refuses and changes nothing.
    let analytics = SchemaName::new("analytics").unwrap();
    let err = bootstrap(&mut client, &analytics).await.unwrap_err();
    let listed: Vec<String> = err.differences().iter().map(ToString::to_string).collect();
    assert!(
        listed.contains(&"missing column jobs.id".to_owned()),
        "{listed:?}"
    );
    // The consumer's other table is foreign: not in the way, so not listed.
    assert!(
        err.differences().iter().all(|d| !d.is_foreign()),
        "{listed:?}"
    );
    assert_eq!(consumer_dump(&client).await, before);

    // The two engine schemas share nothing: rows and offsets are their own.
    let append = |schema: &SchemaName| statements::streams::append(schema, &event(b"\x00"));
    let (in_one, in_two) = (append(&one), append(&two));
    let a: i64 = client
        .query_one(in_one.sql(), &in_one.args())
        .await
        .unwrap()
        .get(0);
    let b: i64 = client
        .query_one(in_one.sql(), &in_one.args())
        .await
        .unwrap()
        .get(0);
    let c: i64 = client
        .query_one(in_two.sql(), &in_two.args())
        .await
        .unwrap()
        .get(0);
    assert_eq!((a, b, c), (1, 2, 1));
    let in_two: i64 = client
        .query_one(&format!("SELECT count(*) FROM {two}.stream_events"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_two, 1);
    assert_ne!(
        render::advisory_lock_key(&one),
        render::advisory_lock_key(&two)
    );
}

/// Polls until `pid` waits on a lock it has not been granted. The deadline
/// only ends a failing run: a loaded machine may take seconds to get there.
async fn wait_until_blocked(observer: &Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: bool = observer
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn current_role(client: &Client) -> String {
    client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0)
}

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_terminated_while_waiting_for_the_lock_leaves_no_schema() {
    if harness::skip_db_tests() {
        return;
    }
    let schema = harness::unique_schema_name("killed_wait");
    let holder = harness::connect().await;
    exec(
        &holder,
        &format!("BEGIN; {};", render::advisory_lock_statement(&schema)),
    )
    .await;

    let mut victim = harness::connect().await;
    let pid = backend_pid(&victim).await;
    let task = {
        let schema = schema.clone();
        tokio::spawn(async move { bootstrap(&mut victim, &schema).await })
    };
    let observer = harness::connect().await;
    wait_until_blocked(&observer, pid).await;
    let killed: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Connection { .. }), "{err}");
    assert!(err.to_string().contains("nothing was committed"), "{err}");
    exec(&holder, "ROLLBACK").await;

    assert_eq!(
        harness::dump::dump_schema(&observer, schema.as_str()).await,
        format!("schema {schema}: does not exist\n")
    );
    let mut next = harness::connect().await;
    assert!(bootstrap(&mut next, &schema).await.unwrap().created());
    assert_eq!(verify(&next, &schema).await.unwrap(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_terminated_mid_ddl_leaves_no_partial_schema() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("killed_ddl");
    exec(&admin, &format!("CREATE SCHEMA {schema}")).await;

    // Another transaction (not taking the bootstrap lock) is creating a
    // relation named `locks` in the schema: bootstrap's own CREATE TABLE of
    // `locks`, the sixth table, waits on it, after five tables are made.
    let blocker = harness::connect().await;
    exec(
        &blocker,
        &format!("BEGIN; CREATE TABLE {schema}.locks (x int);"),
    )
    .await;

    let mut victim = harness::connect().await;
    let pid = backend_pid(&victim).await;
    let task = {
        let schema = schema.clone();
        tokio::spawn(async move { bootstrap(&mut victim, &schema).await })
    };
    let observer = harness::connect().await;
    wait_until_blocked(&observer, pid).await;
    // Mid-way for real: the victim holds the locks of tables it created.
    let created: i64 = observer
        .query_one(
            "SELECT count(*) FROM pg_locks
             WHERE pid = $1 AND locktype = 'relation' AND mode = 'AccessExclusiveLock'",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        created >= 5,
        "only {created} relations created before the wait"
    );
    let query: String = observer
        .query_one("SELECT query FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .get(0);
    // The statements go in one query (pg_stat_activity shows its start).
    assert!(
        query.starts_with("SET LOCAL lock_timeout"),
        "blocked on: {query}"
    );

    assert!(
        observer
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap()
            .get::<_, bool>(0)
    );
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Connection { .. }), "{err}");
    exec(&blocker, "ROLLBACK").await;

    assert_eq!(
        harness::dump::dump_schema(&observer, schema.as_str()).await,
        format!("schema {schema} -- (no comment)\n"),
        "the terminated bootstrap left objects behind"
    );
    let mut next = harness::connect().await;
    match bootstrap(&mut next, &schema).await.unwrap() {
        Outcome::Created { tables_created, .. } => assert_eq!(tables_created, model_tables()),
        other => panic!("{other:?}"),
    }
}

/// Awaits `call`, or panics after a minute: a lost bound must fail a test,
/// not hang it. Far above the bounds the tests set (300 ms), so only a lost
/// bound, never a loaded machine, reaches it.
async fn bounded<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .unwrap_or_else(|_| panic!("still waiting after 60 s: the lock wait is not bounded"))
}

/// A short bound, so the tests that make a lock wait give up quickly.
fn short_bound() -> Options {
    Options {
        lock_timeout: Duration::from_millis(300),
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_lock_makes_a_creator_wait_and_the_timeout_names_its_holder() {
    if harness::skip_db_tests() {
        return;
    }
    // Another session holds the bootstrap lock of this schema (another
    // bootstrap, or the printed script, mid-way). Without the lock,
    // bootstrap would not wait: it would create the schema and succeed, and
    // no retry on a clash could make this test pass.
    let schema = harness::unique_schema_name("lock_wait");
    let holder = harness::connect().await;
    let holder_pid = backend_pid(&holder).await;
    exec(
        &holder,
        &format!("BEGIN; {};", render::advisory_lock_statement(&schema)),
    )
    .await;
    let mut client = harness::connect().await;
    let started = Instant::now();
    let err = bounded(bootstrap_with(&mut client, &schema, &short_bound()))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    exec(&holder, "ROLLBACK").await;
    match err.kind() {
        ErrorKind::LockTimeout {
            waiting_for,
            holders,
            timeout,
            in_transaction,
            ..
        } => {
            assert!(
                waiting_for.starts_with(&format!("the bootstrap lock of schema {schema}")),
                "{waiting_for}"
            );
            assert_eq!(*timeout, Duration::from_millis(300));
            assert!(in_transaction);
            let pids: Vec<i32> = holders.iter().map(|h| h.pid).collect();
            assert_eq!(pids, [holder_pid], "{holders:?}");
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "gave up after 300ms (lock_timeout) bootstrapping schema {schema}: waiting for the \
             bootstrap lock of schema {schema} (advisory lock {})",
            render::advisory_lock_key(&schema)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "session {holder_pid} (role {}",
            current_role(&holder).await
        )),
        "{text}"
    );
    assert!(
        text.contains("the bootstrap transaction was rolled back, nothing was changed"),
        "{text}"
    );
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        format!("schema {schema}: does not exist\n")
    );
    // The connection is usable and holds nothing: the same call now succeeds.
    assert!(bootstrap(&mut client, &schema).await.unwrap().created());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_open_behind_access_exclusive_gives_up_within_its_bound() {
    if harness::skip_db_tests() {
        return;
    }
    let (mut client, schema) = bootstrapped("blocked_open").await;
    let role = harness::unique_name("blocked_reader");
    exec(&client, &format!("CREATE ROLE {role} LOGIN")).await;
    // A VACUUM FULL or an ALTER TABLE in progress, held longer than the bound.
    let holder = harness::connect().await;
    exec(&holder, "SET application_name = 'maintenance'").await;
    let holder_pid = backend_pid(&holder).await;
    let holder_role = current_role(&holder).await;
    exec(
        &holder,
        &format!("BEGIN; LOCK TABLE {schema}.locks IN ACCESS EXCLUSIVE MODE;"),
    )
    .await;

    // Should the bound be lost, fail instead of hanging until the holder ends.
    let opened = bounded(bootstrap_with(&mut client, &schema, &short_bound())).await;
    let checked = bounded(verify_with(&client, &schema, &short_bound())).await;
    for (what, err) in [
        ("bootstrap", opened.unwrap_err()),
        ("verify", checked.unwrap_err()),
    ] {
        let ErrorKind::LockTimeout {
            holders,
            in_transaction,
            ..
        } = err.kind()
        else {
            panic!("{what}: expected a lock timeout, got {err}");
        };
        assert!(!in_transaction, "{what}");
        assert_eq!(holders.len(), 1, "{what}: {holders:?}");
        assert_eq!(holders[0].pid, holder_pid);
        assert_eq!(
            holders[0].relation.as_deref(),
            Some(format!("{schema}.locks").as_str())
        );
        let text = err.to_string();
        assert_eq!(
            text,
            format!(
                "gave up after 300ms (lock_timeout) reading the catalog of schema {schema}: \
                 waiting for ACCESS SHARE on {schema}.locks; session {holder_pid} (role \
                 {holder_role}, application \"maintenance\", idle in transaction, transaction since \
                 {}, query `BEGIN; LOCK TABLE {schema}.locks IN ACCESS EXCLUSIVE MODE;`) holds \
                 ACCESS EXCLUSIVE on {schema}.locks; nothing was changed: retry once that \
                 session ends, or end it with SELECT pg_terminate_backend({holder_pid})",
                holders[0].since.as_deref().unwrap_or("?")
            ),
            "{what}"
        );
    }
    // Bounded, not hung: both gave up with a lock timeout while the holder
    // still held the lock (it lets go only below), so their bound fired; how
    // long they took on the wall clock is the machine's load, not a property.

    // A role that may not read others' activity still learns who and where.
    let reader = harness::connect_url(&harness::url_for_role(&role)).await;
    let err = bounded(verify_with(&reader, &schema, &short_bound()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "session {holder_pid} (role {holder_role}, application \"maintenance\", its activity is \
             hidden from this role (pg_read_all_stats shows it)) holds ACCESS EXCLUSIVE on \
             {schema}.locks"
        )),
        "{text}"
    );
    exec(&holder, "ROLLBACK").await;
    drop(reader);
    exec(&holder, &format!("DROP ROLE {role}")).await;

    // Released: the same calls succeed on the same connection.
    assert!(
        !bootstrap_with(&mut client, &schema, &short_bound())
            .await
            .unwrap()
            .created()
    );
}

/// A role's own `statement_timeout` does not cut bootstrap's statements
/// short: bootstrap bounds them itself (`lock_timeout`, plus an allowance).
///
/// Proven with waits that last as long as the test decides, longer than the
/// role's bound, not with a statement that happens to run longer than it:
/// that is a race with the machine's load both ways. (This test used to
/// give the role 1 ms and count on the catalog read taking longer; on a
/// loaded machine it failed in 2 of 4 runs, because bootstrap's own first
/// statement, the `SET LOCAL` of its bounds, also runs under the role's
/// bound, PostgreSQL applying a timeout per statement, and a backend can be
/// off the CPU for longer than 1 ms.) The role's bound here is 1 s, far
/// beyond any pause of a trivial `SET`; every wait the test makes is a lower
/// bound (held at least this long), which load can only lengthen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_own_statement_timeout_does_not_cut_an_open_short() {
    if harness::skip_db_tests() {
        return;
    }
    const ROLE_BOUND: Duration = Duration::from_secs(1);
    // Far above anything the test holds, so only the role's bound could cut
    // a wait short.
    let options = Options {
        lock_timeout: Duration::from_secs(120),
        ..Options::default()
    };
    let schema = harness::unique_schema_name("role_timeout");
    let mut client = harness::connect().await;
    exec(&client, "SET statement_timeout = '1s'").await;
    let pid = backend_pid(&client).await;
    let observer = harness::connect().await;

    // Another bootstrap of this schema holds its lock.
    let holder = harness::connect().await;
    exec(
        &holder,
        &format!("BEGIN; {};", render::advisory_lock_statement(&schema)),
    )
    .await;
    // The role's bound is in force on this session: the same wait, made
    // without bootstrap's own bounds, is cancelled by it.
    let err = client
        .batch_execute(&render::advisory_lock_statement(&schema))
        .await
        .expect_err("the lock is held: only the role's statement_timeout ends this wait");
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
    assert!(
        harness::describe_error(&err).contains("statement timeout"),
        "{}",
        harness::describe_error(&err)
    );

    // Bootstrap waits for the lock past the role's bound, then creates.
    let (client, created) = {
        let schema = schema.clone();
        let options = options.clone();
        let task = tokio::spawn(async move {
            let outcome = bootstrap_with(&mut client, &schema, &options).await;
            (client, outcome)
        });
        wait_until_blocked(&observer, pid).await;
        tokio::time::sleep(2 * ROLE_BOUND).await;
        exec(&holder, "COMMIT").await;
        task.await.unwrap()
    };
    assert!(created.unwrap().created());

    // The steady-state read waits behind ACCESS EXCLUSIVE (a VACUUM FULL)
    // past the role's bound, then finds the schema current.
    exec(
        &holder,
        &format!("BEGIN; LOCK TABLE {schema}.locks IN ACCESS EXCLUSIVE MODE;"),
    )
    .await;
    let (mut client, current) = {
        let schema = schema.clone();
        let task = tokio::spawn(async move {
            let mut client = client;
            let outcome = bootstrap_with(&mut client, &schema, &options).await;
            (client, outcome)
        });
        wait_until_blocked(&observer, pid).await;
        tokio::time::sleep(2 * ROLE_BOUND).await;
        exec(&holder, "ROLLBACK").await;
        task.await.unwrap()
    };
    assert!(!current.unwrap().created());
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
    // Bootstrap's bounds were its own statements' (SET LOCAL): the
    // session's is the role's still.
    let session: String = client
        .query_one("SELECT current_setting('statement_timeout')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(session, "1s");
    assert!(bootstrap(&mut client, &schema).await.is_ok());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clash_with_a_creator_that_skips_the_lock_is_retried_and_rechecked() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("clash");
    exec(&admin, &format!("CREATE SCHEMA {schema}")).await;

    // Another tool creates `locks` exactly as the model has it, in its own
    // transaction and without the bootstrap lock.
    let mut in_locks = false;
    let locks_statements: Vec<String> = render::bootstrap_statements(&schema)
        .into_iter()
        .filter(|s| {
            if s.kind == StatementKind::CreateTable {
                in_locks = s.object == "locks";
            }
            in_locks
        })
        .map(|s| s.sql)
        .collect();
    assert!(locks_statements.len() > 2, "{locks_statements:?}");
    let other = harness::connect().await;
    exec(&other, &format!("BEGIN; {};", locks_statements.join(";\n"))).await;

    let mut client = harness::connect().await;
    let pid = backend_pid(&client).await;
    let task = {
        let schema = schema.clone();
        tokio::spawn(async move { bootstrap(&mut client, &schema).await })
    };
    let observer = harness::connect().await;
    wait_until_blocked(&observer, pid).await;
    // The other tool commits: bootstrap's CREATE TABLE of `locks` now fails
    // on a catalog unique index. It must roll back, read the catalog again,
    // find `locks` matching the model and create only the rest.
    exec(&other, "COMMIT").await;
    match task.await.unwrap() {
        Ok(Outcome::Created { tables_created, .. }) => {
            let expected: Vec<String> = model_tables()
                .into_iter()
                .filter(|t| t != "locks")
                .collect();
            assert_eq!(tables_created, expected);
        }
        other => panic!("expected the retry to create the other tables, got {other:?}"),
    }
    let differences: Vec<String> = verify(&observer, &schema)
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    // Only the schema's comment: the schema was not bootstrap's to document.
    assert_eq!(
        differences,
        [format!(
            "comment on schema {schema}: missing, model says {:?}",
            render::SCHEMA_DOC
        )]
    );
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

#[tokio::test]
async fn statement_pooling_is_named_as_such_and_reads_work_through_it() {
    if harness::skip_db_tests() {
        return;
    }
    let statement = harness::pgbouncer::url(harness::pgbouncer::PoolMode::Statement);
    let transaction = harness::pgbouncer::url(harness::pgbouncer::PoolMode::Transaction);
    let schema = harness::unique_schema_name("pooled");

    // Creating needs a transaction, which statement pooling refuses, the
    // same way every time: not a lost connection that a retry could mend.
    for attempt in 0..2 {
        let mut pooled = harness::connect_url(&statement).await;
        let err = bootstrap(&mut pooled, &schema).await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::StatementPooling { .. }),
            "attempt {attempt}: {err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("statement pooling mode"), "{text}");
        assert!(!text.contains("safe to retry"), "{text}");
        assert!(text.contains("every retry fails the same way"), "{text}");
    }
    let direct = harness::connect().await;
    assert_eq!(
        harness::dump::dump_schema(&direct, schema.as_str()).await,
        format!("schema {schema}: does not exist\n")
    );

    // Transaction pooling creates; then reads pass even statement pooling.
    let mut pooled = harness::connect_url(&transaction).await;
    assert!(bootstrap(&mut pooled, &schema).await.unwrap().created());
    let mut pooled = harness::connect_url(&statement).await;
    assert!(!bootstrap(&mut pooled, &schema).await.unwrap().created());
    assert_eq!(verify(&pooled, &schema).await.unwrap(), vec![]);

    // A lock timeout through statement pooling is still reported as one.
    exec(
        &direct,
        &format!("BEGIN; LOCK TABLE {schema}.stream_offsets IN ACCESS EXCLUSIVE MODE;"),
    )
    .await;
    let err = bounded(verify_with(&pooled, &schema, &short_bound()))
        .await
        .unwrap_err();
    exec(&direct, "ROLLBACK").await;
    assert!(
        matches!(err.kind(), ErrorKind::LockTimeout { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&format!(
            "holds ACCESS EXCLUSIVE on {schema}.stream_offsets"
        )),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_queued_behind_a_waiting_alter_names_both_sessions() {
    if harness::skip_db_tests() {
        return;
    }
    // A long write transaction (ROW EXCLUSIVE, which the read does not mind)
    // and an ALTER TABLE queued behind it for ACCESS EXCLUSIVE: PostgreSQL
    // queues the read behind the ALTER, so the ALTER is what it waits for.
    let (client, schema) = bootstrapped("queued_open").await;
    let writer = harness::connect().await;
    let writer_pid = backend_pid(&writer).await;
    exec(
        &writer,
        &format!("BEGIN; LOCK TABLE {schema}.locks IN ROW EXCLUSIVE MODE;"),
    )
    .await;
    let alter = harness::connect().await;
    let alter_pid = backend_pid(&alter).await;
    let queued = {
        let schema = schema.clone();
        tokio::spawn(async move {
            let _ = alter
                .batch_execute(&format!(
                    "SET lock_timeout = '10s'; ALTER TABLE {schema}.locks ADD COLUMN later int"
                ))
                .await;
        })
    };
    let observer = harness::connect().await;
    wait_until_blocked(&observer, alter_pid).await;

    let err = bounded(verify_with(&client, &schema, &short_bound()))
        .await
        .unwrap_err();
    exec(&observer, &format!("SELECT pg_cancel_backend({alter_pid})")).await;
    exec(&writer, "ROLLBACK").await;
    let _ = queued.await;
    let ErrorKind::LockTimeout { holders, .. } = err.kind() else {
        panic!("expected a lock timeout, got {err}");
    };
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].pid, alter_pid);
    assert!(!holders[0].granted);
    assert_eq!(holders[0].blocked_by.as_deref(), Some(&[writer_pid][..]));
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "is queued for ACCESS EXCLUSIVE on {schema}.locks behind session {writer_pid}; "
        )),
        "{text}"
    );
    assert!(text.ends_with("retry once the lock is released"), "{text}");
    // The ALTER never ran: the schema is as it was.
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
}
