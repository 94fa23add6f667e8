//! `schema-gen sql | psql`, `apply` and `check` against a real server, run
//! in-process through `schema_gen::cli::run` (what the binary's `main`
//! calls, with the same writers). `cli_binary.rs` runs the real
//! binary for the cases that need no server: exit codes, the refused name,
//! the `DATABASE_URL` fallback.
//!
//! These are plain `#[test]`s: `run` starts its own runtime for `apply` and
//! `check`, which must not be nested in the test's. Set-up runs on a separate
//! runtime through `block_on`.

use std::net::TcpListener;
use std::process::ExitCode;

use harness::cli::run as cli;
use schema_gen::{Outcome, bootstrap};
use schema_model::SchemaName;
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    Runtime::new().unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// A URL on which nothing listens: a port the OS just handed out and took back.
fn unreachable_url() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"));
    format!("host=127.0.0.1 port={port} user=nobody dbname=nothing connect_timeout=5")
}

fn pipe_into_psql(script: &str) {
    let out = harness::psql_script(&harness::database_url(), script);
    assert!(
        out.status.success(),
        "psql -v ON_ERROR_STOP=1 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sql_piped_into_psql_twice_then_check_is_clean_and_bootstrap_is_current() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = harness::unique_schema("cli_psql");
    let printed = cli(&["sql", "--schema", &raw]);
    assert_eq!(printed.code, ExitCode::SUCCESS, "{}", printed.stderr);
    pipe_into_psql(&printed.stdout);
    pipe_into_psql(&printed.stdout);

    let url = harness::database_url();
    let checked = cli(&["check", "--database-url", &url, "--schema", &raw]);
    assert_eq!(checked.code, ExitCode::SUCCESS, "{}", checked.stderr);
    assert_eq!(checked.stdout, format!("schema {raw} matches the model\n"));
    assert_eq!(checked.stderr, "");

    let schema = SchemaName::new(&raw).unwrap();
    let outcome = runtime().block_on(async {
        let mut client = harness::connect().await;
        bootstrap(&mut client, &schema).await.unwrap()
    });
    assert_eq!(
        outcome,
        Outcome::AlreadyCurrent {
            schema: schema.clone(),
            stale_comments: vec![],
        }
    );

    let applied = cli(&["apply", "--database-url", &url, "--schema", &raw]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    assert_eq!(
        applied.stdout,
        format!("schema {raw} is already current: nothing to do\n")
    );
}

#[test]
fn apply_creates_check_exits_1_on_drift_and_apply_refuses_it() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = harness::unique_schema("cli_drift");
    let url = harness::database_url();

    let checked = cli(&["check", "--database-url", &url, "--schema", &raw]);
    assert_eq!(checked.code, ExitCode::from(1), "{}", checked.stderr);
    assert_eq!(
        checked.stdout,
        format!("schema {raw} differs from the model (1 difference):\n  missing schema {raw}\n")
    );

    let applied = cli(&["apply", "--database-url", &url, "--schema", &raw]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    assert!(
        applied
            .stdout
            .starts_with(&format!("created schema {raw} with 7 tables")),
        "{}",
        applied.stdout
    );

    let rt = runtime();
    let client = rt.block_on(harness::connect());
    rt.block_on(client.batch_execute(&format!(
        "ALTER TABLE {raw}.jobs ALTER COLUMN priority TYPE bigint;
         ALTER TABLE {raw}.locks ALTER COLUMN owner DROP NOT NULL;"
    )))
    .unwrap();
    let before = rt.block_on(harness::dump::dump_schema(&client, &raw));

    let checked = cli(&["check", "--database-url", &url, "--schema", &raw]);
    assert_eq!(checked.code, ExitCode::from(1), "{}", checked.stderr);
    assert_eq!(
        checked.stdout,
        format!(
            "schema {raw} differs from the model (2 differences):\n  \
             jobs.priority: type is bigint, model says integer\n  \
             locks.owner: accepts NULL, model says NOT NULL\n"
        )
    );
    assert_eq!(checked.stderr, "");

    let applied = cli(&["apply", "--database-url", &url, "--schema", &raw]);
    assert_eq!(applied.code, ExitCode::from(1), "{}", applied.stderr);
    assert_eq!(
        applied.stdout, "",
        "a refused apply prints nothing on stdout"
    );
    assert!(
        applied.stderr.starts_with(&format!(
            "schema-gen: schema {raw} differs from the model; apply refused and changed nothing"
        )),
        "{}",
        applied.stderr
    );
    assert!(
        applied
            .stderr
            .contains("  jobs.priority: type is bigint, model says integer\n"),
        "{}",
        applied.stderr
    );
    assert_eq!(
        rt.block_on(harness::dump::dump_schema(&client, &raw)),
        before
    );
}

#[test]
fn check_exits_2_on_an_unreachable_server() {
    let url = unreachable_url();
    for command in ["check", "apply"] {
        let ran = cli(&[command, "--database-url", &url]);
        assert_eq!(ran.code, ExitCode::from(2), "{command}: {}", ran.stderr);
        assert_eq!(ran.stdout, "");
        assert_eq!(ran.stderr.lines().count(), 1, "{:?}", ran.stderr);
        assert!(
            ran.stderr
                .starts_with("schema-gen: cannot connect to PostgreSQL at 127.0.0.1:"),
            "{}",
            ran.stderr
        );
        assert!(ran.stderr.contains("/nothing as nobody"), "{}", ran.stderr);
    }
}

#[test]
fn a_refused_schema_name_is_reported_before_any_connection() {
    // The server is unreachable: an error about the name proves the name was
    // judged before anything touched the network.
    let url = unreachable_url();
    for (name, rule) in [
        ("Alk", "it starts with 'A'"),
        ("alk;drop", "it contains ';' at byte 3"),
        ("pg_alk", "reserves for system schemas"),
    ] {
        for command in ["check", "apply"] {
            let ran = cli(&[command, "--database-url", &url, "--schema", name]);
            assert_eq!(ran.code, ExitCode::from(2), "{command} {name}");
            assert_eq!(ran.stdout, "");
            assert_eq!(ran.stderr.lines().count(), 1, "{:?}", ran.stderr);
            assert!(
                ran.stderr
                    .starts_with(&format!("schema-gen: schema name {name:?} is refused")),
                "{}",
                ran.stderr
            );
            assert!(ran.stderr.contains(rule), "{}", ran.stderr);
            assert!(!ran.stderr.contains("connect"), "{}", ran.stderr);
        }
    }
}

#[test]
fn apply_names_the_missing_privilege_and_exits_2() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("cli_noprivdb");
    let role = harness::unique_name("cli_nocreate");
    let rt = runtime();
    rt.block_on(async {
        let admin = harness::connect_url(&harness::create_database(&db).await).await;
        admin
            .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .await
            .unwrap();
    });
    let url = harness::url_for(&role, None, Some(&db));
    let ran = cli(&["apply", "--database-url", &url, "--schema", "alk"]);
    assert_eq!(ran.code, ExitCode::from(2), "{}", ran.stderr);
    assert_eq!(ran.stdout, "");
    assert_eq!(ran.stderr.lines().count(), 1, "{:?}", ran.stderr);
    assert!(
        ran.stderr.starts_with(&format!(
            "schema-gen: role {role} lacks CREATE on database {db}"
        )),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr
            .contains("schema-gen sql --schema alk | psql -v ON_ERROR_STOP=1"),
        "{}",
        ran.stderr
    );

    // The same role can check (it only reads pg_catalog): the schema is missing.
    let ran = cli(&["check", "--database-url", &url, "--schema", "alk"]);
    assert_eq!(ran.code, ExitCode::from(1), "{}", ran.stderr);
    assert!(ran.stdout.contains("missing schema alk"), "{}", ran.stdout);
}
