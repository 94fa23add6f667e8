//! The real `schema-gen` binary, as an operator runs it: exit codes, the
//! one-line error with nothing on stdout, the refused name judged before any
//! connection, and the `DATABASE_URL` fallback. Declared by the schema-gen
//! package (so cargo builds the binary first) but kept with the other
//! integration tests; the cases against a live server are in `pg_cli.rs`.

use std::net::TcpListener;
use std::process::{Command, Output};

/// Runs the binary with `DATABASE_URL` set to `database_url`, or unset, and
/// nothing else in its environment: no `PG*` variable, and a home directory
/// without a password file.
fn schema_gen(args: &[&str], database_url: Option<&str>) -> Output {
    schema_gen_with(args, database_url, &[])
}

/// [`schema_gen`] with extra environment variables.
fn schema_gen_with(args: &[&str], database_url: Option<&str>, vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_schema-gen"));
    command
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent-schema-gen-home");
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    command.envs(vars.iter().copied());
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run schema-gen: {e}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Asserts nothing reached stdout and stderr is one line; returns that line.
fn one_line_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    stderr
}

#[test]
fn sql_prints_the_ddl_and_exits_0() {
    let out = schema_gen(&["sql"], None);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("-- alkstore engine schema \"alkstore\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("CREATE SCHEMA IF NOT EXISTS \"alkstore\";"),
        "{stdout}"
    );
    assert!(out.stderr.is_empty());
}

#[test]
fn version_names_the_release_and_the_schema_version_it_creates() {
    // The release and the schema version it creates, read from where they
    // are decided (the workspace's version, schema_model's history), so
    // shipping a version edits no test.
    let expected = format!(
        "schema-gen {} (creates schema version {})\n",
        env!("CARGO_PKG_VERSION"),
        schema_model::history::MODEL_VERSION
    );
    for flag in ["--version", "-V"] {
        let out = schema_gen(&[flag], None);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
        assert!(out.stderr.is_empty());
    }
    assert_eq!(env!("CARGO_PKG_NAME"), "schema-gen");
}

#[test]
fn a_refused_name_exits_2_with_nothing_on_stdout() {
    let out = schema_gen(&["sql", "--schema", "Bad.Name"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(
        stderr.contains("schema name \"Bad.Name\" is refused"),
        "{stderr}"
    );
}

#[test]
fn check_and_apply_exit_2_on_an_unreachable_server() {
    let url = format!("postgres://nobody:sekret@127.0.0.1:{}/nothing", free_port());
    for command in ["check", "apply"] {
        let out = schema_gen(&[command, "--database-url", &url], None);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let stderr = one_line_error(&out);
        assert!(
            stderr.starts_with("schema-gen: cannot connect to PostgreSQL at 127.0.0.1:"),
            "{stderr}"
        );
        assert!(!stderr.contains("sekret"), "the password leaked: {stderr}");
    }
}

#[test]
fn database_url_is_the_fallback_and_the_flag_wins() {
    let port = free_port();
    let env_url = format!("host=127.0.0.1 port={port} user=u dbname=from_env");
    let out = schema_gen(&["check"], Some(&env_url));
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}/from_env as u")),
        "DATABASE_URL was not used: {stderr}"
    );

    let flag_url = format!("host=127.0.0.1 port={port} user=u dbname=from_flag");
    let out = schema_gen(&["check", "--database-url", &flag_url], Some("not a url ="));
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(stderr.contains("/from_flag as u"), "{stderr}");
}

#[test]
fn with_nothing_set_libpqs_default_socket_is_tried() {
    // A port no server has a socket for, so the attempt fails whatever runs
    // on this machine; tests/pg_conninfo/ connects there beside psql.
    let port = free_port().to_string();
    let os_user = String::from_utf8_lossy(
        &Command::new("id")
            .arg("-un")
            .output()
            .unwrap_or_else(|e| panic!("id -un: {e}"))
            .stdout,
    )
    .trim()
    .to_owned();
    for url in [Some(""), Some("  "), None] {
        let out = schema_gen_with(&["check"], url, &[("PGPORT", &port)]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = one_line_error(&out);
        assert!(
            stderr.starts_with(&format!(
                "schema-gen: cannot connect to PostgreSQL at socket /var/run/postgresql (port \
                 {port})/{os_user} as {os_user} (sslmode=prefer): "
            )),
            "{url:?}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "nothing names a server (host in the connection string, PGHOST or PGHOSTADDR), \
                 so libpq's default was tried: the local socket in /var/run/postgresql or /tmp \
                 (port {port})"
            )),
            "{url:?}: {stderr}"
        );
    }
}

#[test]
fn pg_variables_name_the_server_when_no_url_is_given() {
    let port = free_port().to_string();
    let out = schema_gen_with(
        &["check"],
        Some(""),
        &[
            ("PGHOST", "127.0.0.1"),
            ("PGPORT", &port),
            ("PGUSER", "from_env"),
            ("PGDATABASE", "envdb"),
            ("PGCONNECT_TIMEOUT", "5"),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(
        stderr.starts_with(&format!(
            "schema-gen: cannot connect to PostgreSQL at 127.0.0.1:{port}/envdb as from_env (sslmode=prefer): "
        )),
        "{stderr}"
    );
}

#[test]
fn a_server_that_accepts_and_stays_silent_is_given_up_on_after_connect_timeout() {
    // The kernel completes the TCP handshake for the listen backlog; nobody
    // ever answers the startup message.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = silent
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_schema-gen"))
        .args([
            "check",
            "--database-url",
            &format!("host=127.0.0.1 port={port} user=u"),
        ])
        .env_clear()
        .env("HOME", "/nonexistent-schema-gen-home")
        .env("PGCONNECT_TIMEOUT", "2")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run schema-gen: {e}"));
    // Bounded here too: without the guard the command would wait forever.
    // The guard and the bound below are far above the 2 s the command waits:
    // they catch a lost bound, never a slow machine.
    while child.try_wait().ok().flatten().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("check still waits for a silent server after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let waited = started.elapsed();
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for schema-gen: {e}"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(
        stderr.contains("no answer within 2 s (connect_timeout)"),
        "{stderr}"
    );
    assert!(
        waited < std::time::Duration::from_secs(30),
        "waited {waited:?}"
    );
    drop(silent);
}

#[test]
fn a_misspelt_key_is_named() {
    let out = schema_gen(
        &["check", "--database-url", "host=db sslmdoe=require"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        one_line_error(&out),
        "schema-gen: --database-url: the connection string is not valid: unknown connection \
         parameter `sslmdoe` (did you mean `sslmode`?)\n"
    );
    let out = schema_gen(&["check"], Some("postgres://u@db/app?sslmode=verify_full"));
    assert_eq!(
        one_line_error(&out),
        "schema-gen: DATABASE_URL: invalid value for `sslmode`: `verify_full` (expected \
         disable, allow, prefer, require, verify-ca or verify-full)\n"
    );
}

#[test]
fn a_password_with_an_unencoded_at_sign_is_refused_without_showing_it() {
    let out = schema_gen(
        &["check"],
        Some("postgres://app:pa@ss w0rd@db.example.com:5432/app"),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(stderr.contains("more than one '@'"), "{stderr}");
    assert!(stderr.contains("%40"), "{stderr}");
    for fragment in ["pa@", "ss w0rd", "w0rd"] {
        assert!(!stderr.contains(fragment), "the password leaked: {stderr}");
    }
}

#[test]
fn a_refused_name_is_judged_before_connecting() {
    let url = format!("host=127.0.0.1 port={} user=u dbname=d", free_port());
    let out = schema_gen(&["apply", "--schema", "Tenant-A"], Some(&url));
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(
        stderr.starts_with("schema-gen: schema name \"Tenant-A\" is refused"),
        "{stderr}"
    );
}

#[test]
fn help_documents_apply_and_check_without_showing_the_url() {
    let out = schema_gen(&["--help"], Some("postgres://u:sekret@db/app"));
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["apply", "check", "1 drift", "DATABASE_URL="] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let out = schema_gen(&["check", "--help"], Some("postgres://u:sekret@db/app"));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[env: DATABASE_URL"), "{help}");
    // Every state, with its exit code, and the policy's flag.
    for (code, state) in [
        (0, "matches"),
        (1, "drift"),
        (2, "error"),
        (3, "needs_upgrade"),
        (4, "contract_pending"),
        (5, "foreign_objects"),
        (6, "newer_version"),
    ] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(&format!("{code} {state} "))),
            "check --help lacks {code} {state}:\n{help}"
        );
    }
    for needle in [
        "--allow-foreign <NAME>",
        "the worst wins: 2, 1, 6, 3, 4, 5, 0",
    ] {
        assert!(
            help.contains(needle),
            "check --help lacks {needle:?}:\n{help}"
        );
    }
    assert!(
        !help.contains("sekret"),
        "check --help shows the URL:\n{help}"
    );
}

#[test]
fn output_that_cannot_be_written_exits_2_not_1() {
    // 1 means drift; a full disk or a closed pipe is an error like any other.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap_or_else(|e| panic!("opening /dev/full: {e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_schema-gen"))
        .arg("sql")
        .stdout(full)
        .output()
        .unwrap_or_else(|e| panic!("cannot run schema-gen: {e}"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("schema-gen: cannot write output:"),
        "{stderr}"
    );
}
