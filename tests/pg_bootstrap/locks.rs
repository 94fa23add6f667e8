//! Interrupted opens and the bootstrap's locks and bounds: terminated
//! bootstraps, the bootstrap lock, and the bounds that end a wait.

use std::time::{Duration, Instant};

use harness::exec;
use schema_gen::render::{self};
use schema_gen::{ErrorKind, Options, Outcome, bootstrap, bootstrap_with, verify, verify_with};
use tokio_postgres::error::SqlState;

use super::{
    backend_pid, bootstrapped, bounded, current_role, model_tables, short_bound, wait_until_blocked,
};

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
        query.starts_with("SET LOCAL search_path = pg_catalog, pg_temp;"),
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
