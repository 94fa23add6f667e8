//! Many opens at once and the steady state: concurrent bootstraps of one
//! schema, one catalog read at steady state, and a pooler in statement mode.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use harness::exec;
use schema_gen::catalog;
use schema_gen::render::{self, StatementKind};
use schema_gen::{ErrorKind, Options, Outcome, bootstrap, bootstrap_with, verify, verify_with};
use tokio_postgres::error::SqlState;

use super::{
    backend_pid, bootstrapped, bounded, model_tables, qualified_tables, short_bound,
    wait_until_blocked,
};

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
        batch.starts_with(
            "SET LOCAL search_path = pg_catalog, pg_temp; SET LOCAL lock_timeout = '5s'; \
             SET LOCAL statement_timeout = '15s';"
        ),
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
