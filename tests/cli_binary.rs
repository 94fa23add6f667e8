//! The real `schema-gen` binary, as an operator runs it: exit codes, the
//! one-line error with nothing on stdout, the refused name judged before any
//! connection, and the `DATABASE_URL` fallback. Declared by the schema-gen
//! package (so cargo builds the binary first) but kept with the other
//! integration tests; the cases against a live server are in `pg_cli.rs`.

use std::net::TcpListener;
use std::process::{Command, Output};

/// Runs the binary with `DATABASE_URL` set to `database_url`, or unset.
fn schema_gen(args: &[&str], database_url: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_schema-gen"));
    command.args(args).env_remove("DATABASE_URL");
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
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

    let out = schema_gen(&["check"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = one_line_error(&out);
    assert!(stderr.contains("--database-url"), "{stderr}");
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
