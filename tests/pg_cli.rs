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

use harness::cli::{run as cli, runtime};
use schema_gen::{Outcome, bootstrap};
use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;

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
    assert_eq!(
        checked.stdout,
        format!("schema {raw} matches the model (version {MODEL_VERSION})\n")
    );
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
            foreign: vec![],
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
            .starts_with(&format!("created schema {raw} with 8 tables")),
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

#[test]
fn apply_and_check_exit_2_within_their_bound_while_access_exclusive_is_held() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = harness::unique_schema("cli_blocked");
    let url = harness::database_url();
    let applied = cli(&["apply", "--database-url", &url, "--schema", &raw]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);

    // A multi-threaded runtime keeps the holder's connection alive while the
    // commands run on their own.
    let rt = runtime();
    let holder = rt.block_on(harness::connect());
    rt.block_on(holder.batch_execute(&format!(
        "BEGIN; LOCK TABLE {raw}.locks IN ACCESS EXCLUSIVE MODE;"
    )))
    .unwrap();
    // Released after 60 s whatever happens: a lost bound makes the commands
    // wait for it and then pass, which fails this test instead of hanging it.
    // Far above the 300ms bound, so a loaded machine never gets there first.
    let holder = std::sync::Arc::new(holder);
    let release = {
        let holder = std::sync::Arc::clone(&holder);
        rt.spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            let _ = holder.batch_execute("ROLLBACK").await;
        })
    };
    for command in ["check", "apply"] {
        let ran = cli(&[
            command,
            "--database-url",
            &url,
            "--schema",
            &raw,
            "--lock-timeout",
            "300ms",
        ]);
        assert_eq!(ran.code, ExitCode::from(2), "{command}: {}", ran.stderr);
        assert_eq!(ran.stdout, "", "{command}");
        assert_eq!(ran.stderr.lines().count(), 1, "{command}: {:?}", ran.stderr);
        assert!(
            ran.stderr.starts_with(&format!(
                "schema-gen: gave up after 300ms (lock_timeout) reading the catalog of schema \
                 {raw}: waiting for ACCESS SHARE on {raw}.locks; session "
            )),
            "{command}: {}",
            ran.stderr
        );
        assert!(
            ran.stderr
                .contains(&format!("holds ACCESS EXCLUSIVE on {raw}.locks")),
            "{}",
            ran.stderr
        );
        assert!(
            !ran.stderr.contains("bootstrap transaction"),
            "{}",
            ran.stderr
        );
        // Not hung: it gave up with the bound's message while the lock was
        // still held (the holder lets go after 60 s or below), so the bound
        // fired; its wall-clock time is the machine's load, not a property.
    }
    // With --format json: the same failure as an object on stdout, with the
    // server's SQLSTATE (55P03, lock_not_available).
    let ran = cli(&[
        "check",
        "--database-url",
        &url,
        "--schema",
        &raw,
        "--lock-timeout",
        "300ms",
        "--format",
        "json",
    ]);
    assert_eq!(ran.code, ExitCode::from(2), "{}", ran.stderr);
    let json: serde_json::Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", ran.stdout));
    assert_eq!(
        (
            &json["outcome"],
            &json["kind"],
            &json["schema"],
            &json["sqlstate"]
        ),
        (
            &serde_json::json!("error"),
            &serde_json::json!("lock_timeout"),
            &serde_json::json!(raw),
            &serde_json::json!("55P03")
        ),
        "{}",
        ran.stdout
    );
    assert_eq!(
        ran.stderr.trim_end(),
        format!(
            "schema-gen: {}",
            json["message"].as_str().unwrap_or_default()
        )
    );
    release.abort();
    rt.block_on(holder.batch_execute("ROLLBACK")).unwrap();
    let checked = cli(&["check", "--database-url", &url, "--schema", &raw]);
    assert_eq!(checked.code, ExitCode::SUCCESS, "{}", checked.stderr);
}

#[test]
fn the_dba_path_and_the_plain_apply_path_both_end_in_a_passing_check() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();

    // Plain: apply, then check.
    let plain = harness::unique_schema("cli_plain");
    let applied = cli(&["apply", "--database-url", &url, "--schema", &plain]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    let checked = cli(&["check", "--database-url", &url, "--schema", &plain]);
    assert_eq!(checked.code, ExitCode::SUCCESS, "{}", checked.stderr);
    assert_eq!(
        checked.stdout,
        format!("schema {plain} matches the model (version {MODEL_VERSION})\n")
    );

    // The documented DBA path: the DBA creates the schema and grants, the
    // application's role applies (creating the tables it then owns) and
    // checks. The schema's comment is the DBA's to write: documentation only.
    let dba = harness::unique_schema("cli_dba");
    let app = harness::unique_name("cli_app");
    let rt = runtime();
    rt.block_on(async {
        let admin = harness::connect().await;
        admin
            .batch_execute(&format!(
                "CREATE ROLE {app} LOGIN;
                 CREATE SCHEMA {dba};
                 GRANT USAGE, CREATE ON SCHEMA {dba} TO {app};"
            ))
            .await
            .unwrap();
    });
    let app_url = harness::url_for_role(&app);
    let applied = cli(&["apply", "--database-url", &app_url, "--schema", &dba]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    assert!(
        applied.stdout.starts_with(&format!(
            "created 8 missing tables in existing schema {dba}"
        )),
        "{}",
        applied.stdout
    );
    for who in [&app_url, &url] {
        let checked = cli(&["check", "--database-url", who, "--schema", &dba]);
        assert_eq!(checked.code, ExitCode::SUCCESS, "{}", checked.stderr);
        assert_eq!(
            checked.stdout,
            format!(
                "schema {dba} matches the model; 1 comment differs (documentation only, so \
                 check passes; `schema-gen sql --schema {dba} | psql -v ON_ERROR_STOP=1` run by \
                 the owner refreshes it):\n  comment on schema {dba}: missing, model says {:?}\n",
                schema_gen::render::SCHEMA_DOC
            )
        );
    }
    // Drift next to a stale comment still fails the gate.
    rt.block_on(async {
        let admin = harness::connect().await;
        admin
            .batch_execute(&format!(
                "ALTER TABLE {dba}.locks ADD COLUMN note text NOT NULL"
            ))
            .await
            .unwrap();
    });
    let checked = cli(&["check", "--database-url", &url, "--schema", &dba]);
    assert_eq!(checked.code, ExitCode::from(1), "{}", checked.stdout);
    assert!(
        checked.stdout.contains(
            "  extra column locks.note (text): NOT NULL, so every insert of the engine, which \
             leaves it out, fails\n"
        ),
        "{}",
        checked.stdout
    );
}

#[test]
fn apply_through_statement_pooling_exits_2_and_says_why() {
    if harness::skip_db_tests() {
        return;
    }
    let pooled = harness::pgbouncer::url(harness::pgbouncer::PoolMode::Statement);
    let raw = harness::unique_schema("cli_pooled");
    let ran = cli(&["apply", "--database-url", &pooled, "--schema", &raw]);
    assert_eq!(ran.code, ExitCode::from(2), "{}", ran.stderr);
    assert_eq!(ran.stderr.lines().count(), 1, "{:?}", ran.stderr);
    assert!(
        ran.stderr.contains("statement pooling mode"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains("safe to retry"), "{}", ran.stderr);
    // Check only reads: it works through statement pooling.
    let checked = cli(&["check", "--database-url", &pooled, "--schema", &raw]);
    assert_eq!(checked.code, ExitCode::from(1), "{}", checked.stderr);
    assert_eq!(
        checked.stdout,
        format!("schema {raw} differs from the model (1 difference):\n  missing schema {raw}\n")
    );
}

/// A stdout that refuses every write, as a full disk or a closed pipe does.
struct Refusing;

impl std::io::Write for Refusing {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("no space left on device"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_check_whose_report_cannot_be_written_exits_2_not_1() {
    if harness::skip_db_tests() {
        return;
    }
    // The schema differs (it is missing), so a written report would exit 1:
    // failing to write it must not look like that.
    let raw = harness::unique_schema("cli_unwritten");
    let url = harness::database_url();
    let mut stderr = Vec::new();
    let code = schema_gen::cli::run(
        [
            "schema-gen",
            "check",
            "--database-url",
            &url,
            "--schema",
            &raw,
        ],
        &mut Refusing,
        &mut stderr,
    );
    assert_eq!(code, ExitCode::from(2));
    assert_eq!(
        String::from_utf8_lossy(&stderr),
        "schema-gen: cannot write output: no space left on device\n"
    );
}
