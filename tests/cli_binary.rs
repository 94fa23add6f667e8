//! The real `schema-gen` binary, as an operator runs it. Declared by the
//! schema-gen package (so cargo builds the binary first) but kept with the
//! other integration tests.

use std::process::Command;

fn schema_gen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_schema-gen"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run schema-gen: {e}"))
}

#[test]
fn sql_prints_the_ddl_and_exits_0() {
    let out = schema_gen(&["sql"]);
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
    let out = schema_gen(&["sql", "--schema", "Bad.Name"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("schema name \"Bad.Name\" is refused"),
        "{stderr}"
    );
}
