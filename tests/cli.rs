//! The `schema-gen` command line, run in-process through `schema_gen::cli::run`
//! (the binary's `main` is only that call; `cli_binary.rs` runs the real binary).

use std::process::ExitCode;

use schema_gen::render::script;
use schema_model::SchemaName;

struct Outcome {
    code: ExitCode,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Outcome {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = schema_gen::cli::run(
        std::iter::once("schema-gen").chain(args.iter().copied()),
        &mut stdout,
        &mut stderr,
    );
    Outcome {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn assert_refused(args: &[&str], needle: &str) {
    let out = run(args);
    assert_eq!(out.code, ExitCode::from(2), "{args:?}: {}", out.stderr);
    assert_eq!(
        out.stdout, "",
        "{args:?}: nothing may reach stdout on an error"
    );
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "{args:?}: one line: {:?}",
        out.stderr
    );
    assert!(
        out.stderr.contains(needle),
        "{args:?}: {:?} lacks {needle:?}",
        out.stderr
    );
}

#[test]
fn sql_prints_the_script_of_the_one_rendering_function() {
    let out = run(&["sql"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    assert_eq!(out.stdout, script(&SchemaName::default()));
    assert_eq!(out.stderr, "");

    let out = run(&["sql", "--schema", "tenant_a"]);
    let tenant = SchemaName::new("tenant_a").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.stdout, script(&tenant));
    assert!(
        out.stdout
            .contains("CREATE TABLE IF NOT EXISTS \"tenant_a\".\"jobs\" (\n")
    );
    assert!(out.stdout.trim_end().ends_with("COMMIT;"));
}

#[test]
fn refused_schema_names_exit_2_with_the_rule_on_one_line() {
    assert_refused(
        &["sql", "--schema", "Alkstore"],
        "must start with a lowercase ASCII letter",
    );
    assert_refused(&["sql", "--schema", "pg_x"], "reserves for system schemas");
    assert_refused(&["sql", "--schema", "a;drop"], "contains ';' at byte 1");
    assert_refused(&["sql", "--schema", ""], "it is empty");
    assert_refused(&["describe", "--schema", &"a".repeat(64)], "64 bytes long");
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    assert_refused(&["bogus"], "unrecognized subcommand 'bogus'");
    assert_refused(&["sql", "--bogus"], "unexpected argument '--bogus'");
    assert_refused(&["describe", "--format", "yaml"], "invalid value 'yaml'");
    assert_refused(&[], "schema-gen");
}

#[test]
fn help_shows_examples_on_stdout() {
    let out = run(&["--help"]);
    assert_eq!(out.code, ExitCode::SUCCESS);
    assert!(out.stdout.contains("Examples:"), "{}", out.stdout);
    assert!(
        out.stdout.contains("schema-gen sql --schema tenant_a"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stderr, "");
}

#[test]
fn describe_json_is_the_family_for_tools() {
    let out = run(&["describe", "--format", "json"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    let json: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(json["schema"], "alkstore");
    let tables: Vec<&str> = json["tables"]
        .as_array()
        .map(|tables| tables.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        tables,
        [
            "jobs",
            "dead_jobs",
            "stream_events",
            "stream_offsets",
            "schedules",
            "locks",
            "consumed_events"
        ]
    );
    let claim = &json["tables"][0]["indexes"][0];
    assert_eq!(claim["name"], "jobs_claim_idx");
    assert_eq!(
        claim["definition"],
        "USING btree (queue, priority DESC, run_at, id) WHERE (claimed_at IS NULL)"
    );
}

#[test]
fn describe_markdown_is_the_default() {
    let out = run(&["describe", "--schema", "tenant_a"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("# Schema `tenant_a`\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("| `priority` | integer | no |"),
        "{}",
        out.stdout
    );
}
