//! `schema-gen upgrade` through a connection pooler (the harness's real
//! pgbouncer): in transaction or statement pooling it is refused before it
//! reads or locks anything, naming the pooler and asking for a direct URL,
//! and leaves no lock; in session pooling it runs. An upgrade the probe did
//! not guard (the library, called on a pooled connection) stops before its
//! next step once its server session changes, naming the session left
//! holding its lock.

use std::process::ExitCode;
use std::sync::mpsc;

use harness::dump::dump_schema;
use harness::history::create_version;
use harness::pgbouncer::{PoolMode, url as pooled_url};
use harness::{exec, rows};
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_model::SchemaName;
use tokio_postgres::Client;

/// Sessions holding the upgrade lock of `schema`, anywhere on the server.
async fn upgrade_lock_holders(client: &Client, schema: &SchemaName) -> Vec<i32> {
    let key = upgrade::upgrade_lock_key(schema);
    let bits = u64::from_ne_bytes(key.to_ne_bytes());
    rows(
        client,
        &format!(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = {} \
             AND objid = {} AND objsubid = 1 ORDER BY 1",
            bits >> 32,
            bits & 0xffff_ffff
        ),
    )
    .await
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Through pgbouncer in transaction and in statement pooling, `upgrade`
/// and `upgrade --contract` exit 2 naming the pooler, before they read or
/// lock anything: while a direct session holds `jobs` in ACCESS EXCLUSIVE
/// (a catalog read would give up on it) and the upgrade lock (taking it
/// would be refused as another upgrade), they are refused as pooled all
/// the same. Nothing changed, no lock is left on any server connection, and
/// a direct run then upgrades.
#[test]
fn an_upgrade_through_a_transaction_or_statement_pooler_is_refused_before_any_lock() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = harness::cli::runtime();
    let schema = harness::unique_schema_name("upool");
    let (admin, holder, before) = rt.block_on(async {
        let admin = harness::connect().await;
        create_version(&admin, &schema, 1).await;
        let before = dump_schema(&admin, schema.as_str()).await;
        let holder = harness::connect().await;
        exec(
            &holder,
            &format!(
                "BEGIN; LOCK TABLE \"{schema}\".jobs IN ACCESS EXCLUSIVE MODE; \
                 SELECT pg_advisory_lock({})",
                upgrade::upgrade_lock_key(&schema)
            ),
        )
        .await;
        (admin, holder, before)
    });
    for mode in [PoolMode::Transaction, PoolMode::Statement] {
        let url = pooled_url(mode);
        for contract in [false, true] {
            let mut args = vec![
                "upgrade",
                "--database-url",
                &url,
                "--schema",
                schema.as_str(),
                "--lock-timeout",
                "300ms",
                "--format",
                "json",
            ];
            if contract {
                args.push("--contract");
            }
            let ran = harness::cli::run(&args);
            assert_eq!(
                ran.code,
                ExitCode::from(2),
                "{mode:?} {args:?}: {}",
                ran.stderr
            );
            let json: serde_json::Value = serde_json::from_str(&ran.stdout)
                .unwrap_or_else(|e| panic!("{mode:?}: {e}: {}", ran.stdout));
            assert_eq!(json["kind"], "pooled", "{mode:?}: {json}");
            let line = ran.stderr.trim_end();
            assert_eq!(line.lines().count(), 1, "{line}");
            for words in [
                "connection pooler in transaction or statement pooling mode",
                "pgbouncer",
                &format!("127.0.0.1:{}/", url_port(&url)),
                "nothing was read, locked or changed",
                "point the database URL at PostgreSQL itself",
            ] {
                assert!(line.contains(words), "{mode:?}: {words:?} in {line}");
            }
        }
    }
    rt.block_on(async {
        exec(&holder, "ROLLBACK").await;
        exec(
            &holder,
            &format!(
                "SELECT pg_advisory_unlock({})",
                upgrade::upgrade_lock_key(&schema)
            ),
        )
        .await;
        assert_eq!(dump_schema(&admin, schema.as_str()).await, before);
        assert_eq!(
            upgrade_lock_holders(&admin, &schema).await,
            Vec::<i32>::new()
        );
    });
    let direct = harness::database_url();
    let ran = harness::cli::run(&[
        "upgrade",
        "--database-url",
        &direct,
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    assert!(
        ran.stdout.contains("with its contract pending"),
        "{}",
        ran.stdout
    );
}

/// The port of a key/value URL.
fn url_port(url: &str) -> &str {
    url.split_whitespace()
        .find_map(|pair| pair.strip_prefix("port="))
        .unwrap_or_default()
}

/// Through pgbouncer in session pooling the connection keeps its session:
/// the probe lets the upgrade run, and its lock goes with it.
#[test]
fn an_upgrade_through_session_pooling_runs() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = harness::cli::runtime();
    let schema = harness::unique_schema_name("upool_session");
    rt.block_on(async { create_version(&harness::connect().await, &schema, 1).await });
    let url = pooled_url(PoolMode::Session);
    for extra in [None, Some("--contract")] {
        let mut args = vec![
            "upgrade",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend(extra);
        let ran = harness::cli::run(&args);
        assert_eq!(ran.code, ExitCode::SUCCESS, "{args:?}: {}", ran.stderr);
    }
    rt.block_on(async {
        let admin = harness::connect().await;
        assert_eq!(
            upgrade_lock_holders(&admin, &schema).await,
            Vec::<i32>::new()
        );
    });
}

/// The library's upgrade called on a pooled connection (no probe): once
/// another client is handed the server connection that took the upgrade
/// lock, the next leg runs on another one, and the upgrade stops before
/// that step with `session_changed`, naming the session left holding the
/// lock (which still holds it: the pooler keeps it); ending that session,
/// as the message says, lets a direct run resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_upgrade_the_probe_missed_stops_when_its_session_changes() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("upool_miss");
    create_version(&admin, &schema, 1).await;
    let url = pooled_url(PoolMode::TransactionOfTwo);
    let mut upgrader = harness::connect_url(&url).await;
    let other = harness::connect_url(&url).await;
    let (first_done, mut take_now) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (taken, wait_for_other) = mpsc::channel::<i32>();
    let taking = tokio::spawn(async move {
        let mut pid = 0;
        if take_now.recv().await.is_some() {
            // Pooled: the upgrader's server connection is idle in the
            // pool, the most recently used, so this transaction gets it.
            let found = other
                .simple_query("BEGIN; SELECT pg_backend_pid()")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            pid = found
                .iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
                    _ => None,
                })
                .unwrap_or(0);
            let _ = taken.send(pid);
        }
        (other, pid)
    });
    let mut progress = harness::upgrade::pause_after_step(1, first_done, wait_for_other);
    let err = upgrade::upgrade(
        &mut upgrader,
        &schema,
        &UpgradeOptions::default(),
        &mut progress,
    )
    .await
    .unwrap_err();
    let (other, held_by) = taking.await.unwrap();
    let text = err.to_string();
    assert_eq!(err.kind().name(), "session_changed", "{text}");
    assert_eq!(err.done().map(|d| d.steps_run), Some(1), "{text}");
    assert!(
        text.contains(&format!("session {held_by} took the upgrade lock"))
            && text.contains(&format!("SELECT pg_terminate_backend({held_by})")),
        "{text}"
    );
    // The lock stayed on that server connection, which the pooler keeps.
    exec(&other, "ROLLBACK").await;
    assert_eq!(upgrade_lock_holders(&admin, &schema).await, vec![held_by]);
    exec(
        &admin,
        &format!("SELECT pg_terminate_backend({held_by}, 10000)"),
    )
    .await;
    assert_eq!(
        upgrade_lock_holders(&admin, &schema).await,
        Vec::<i32>::new()
    );
    let mut direct = harness::connect().await;
    let mut quiet = |_: &Progress| {};
    let outcome = upgrade::upgrade(&mut direct, &schema, &UpgradeOptions::default(), &mut quiet)
        .await
        .unwrap_or_else(|e| panic!("the direct rerun: {e}"));
    assert!(outcome.contract_pending(), "{}", outcome.message());
}
