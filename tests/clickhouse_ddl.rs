//! The analytics sink's ClickHouse DDL and description, as reviewers read
//! them (snapshots), and the `--dialect` / `--database` flags of the CLI.

use std::process::ExitCode;

use harness::cli::{assert_usage_error, run};
use schema_gen::clickhouse::{script, statements};
use schema_gen::describe;
use schema_model::DatabaseName;

fn database(name: &str) -> DatabaseName {
    DatabaseName::new(name).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn clickhouse_ddl_for_the_default_database() {
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!(
            "clickhouse_ddl_relay_analytics",
            script(&DatabaseName::default())
        );
    });
}

#[test]
fn clickhouse_describe_json() {
    let description = schema_gen::clickhouse::describe(&DatabaseName::default());
    let json = describe::to_json(&description).unwrap_or_else(|e| panic!("{e}"));
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("clickhouse_describe_json", json);
    });
}

#[test]
fn clickhouse_describe_markdown() {
    let description = schema_gen::clickhouse::describe(&DatabaseName::default());
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!(
            "clickhouse_describe_markdown",
            describe::analytics_to_markdown(&description)
        );
    });
}

#[test]
fn the_ddl_differs_between_databases_only_in_the_name() {
    let normalise = |name: &str| script(&database(name)).replace(&format!("`{name}`"), "`<db>`");
    assert_eq!(normalise("relay_analytics"), normalise("analytics_eu"));
    for statement in statements(&database("analytics_eu")) {
        assert!(
            statement.sql.contains("`analytics_eu`"),
            "{}",
            statement.sql
        );
        assert!(
            !statement.sql.contains("relay_analytics"),
            "{}",
            statement.sql
        );
    }
}

#[test]
fn every_column_of_the_model_is_in_the_ddl_in_order() {
    use schema_model::{ClickHouseTable, WebhookAttempts};
    use sea_query::Iden;
    let ddl = script(&DatabaseName::default());
    let positions: Vec<usize> = WebhookAttempts::columns()
        .into_iter()
        .map(|(column, definition)| {
            let line = format!(
                "\n    `{}` {} COMMENT ",
                column.to_string(),
                definition.ch_type
            );
            ddl.find(&line)
                .unwrap_or_else(|| panic!("{line:?} missing from\n{ddl}"))
        })
        .collect();
    assert!(positions.is_sorted());
}

#[test]
fn sql_with_the_clickhouse_dialect_prints_the_one_rendering_function() {
    let out = run(&["sql", "--dialect", "clickhouse"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    assert_eq!(out.stdout, script(&DatabaseName::default()));
    assert_eq!(out.stderr, "");

    let out = run(&[
        "sql",
        "--dialect",
        "clickhouse",
        "--database",
        "analytics_eu",
    ]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    assert_eq!(out.stdout, script(&database("analytics_eu")));
}

#[test]
fn the_postgres_dialect_stays_the_default() {
    let explicit = run(&["sql", "--dialect", "postgres"]);
    let default = run(&["sql"]);
    assert_eq!(explicit.code, ExitCode::SUCCESS);
    assert_eq!(explicit.stdout, default.stdout);
    assert!(
        default
            .stdout
            .contains("CREATE SCHEMA IF NOT EXISTS \"alkstore\"")
    );
}

#[test]
fn a_name_flag_of_the_other_dialect_is_a_usage_error() {
    assert_usage_error(
        &["sql", "--database", "relay_analytics"],
        "--database names a ClickHouse database",
    );
    assert_usage_error(
        &["sql", "--dialect", "postgres", "--database", "x"],
        "needs --dialect clickhouse",
    );
    assert_usage_error(
        &["sql", "--dialect", "clickhouse", "--schema", "alkstore"],
        "with --dialect clickhouse use --database",
    );
    assert_usage_error(
        &[
            "describe",
            "--dialect",
            "clickhouse",
            "--schema",
            "alkstore",
        ],
        "use --database",
    );
    assert_usage_error(
        &["describe", "--database", "x"],
        "needs --dialect clickhouse",
    );
    assert_usage_error(&["sql", "--dialect", "mysql"], "mysql");
}

#[test]
fn a_refused_database_name_is_a_usage_error_naming_the_rule() {
    assert_usage_error(
        &["sql", "--dialect", "clickhouse", "--database", "system"],
        "ClickHouse owns",
    );
    assert_usage_error(
        &["sql", "--dialect", "clickhouse", "--database", "Relay"],
        "it starts with 'R'",
    );
    assert_usage_error(
        &["sql", "--dialect", "clickhouse", "--database", "a`b"],
        "contains '`' at byte 1",
    );
    assert_usage_error(
        &["describe", "--dialect", "clickhouse", "--database", ""],
        "it is empty",
    );
}

#[test]
fn describe_covers_the_clickhouse_family() {
    let out = run(&["describe", "--dialect", "clickhouse", "--format", "json"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    let expected = describe::to_json(&schema_gen::clickhouse::describe(&DatabaseName::default()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.stdout, expected);

    let out = run(&[
        "describe",
        "--dialect",
        "clickhouse",
        "--database",
        "analytics_eu",
    ]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("# ClickHouse database `analytics_eu`\n"),
        "{}",
        out.stdout
    );
}
