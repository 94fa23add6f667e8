//! The `schema-gen` command line, run in-process through `schema_gen::cli::run`
//! (the binary's `main` is only that call; `cli_binary.rs` runs the real binary).

use std::process::ExitCode;

use harness::cli::{assert_usage_error, run};
use schema_gen::render::{script, script_for};
use schema_model::{Layout, SchemaName};

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
fn sql_layout_citus_prints_the_script_with_the_distribution() {
    let out = run(&["sql", "--layout", "citus", "--schema", "tenant_a"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    let tenant = SchemaName::new("tenant_a").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.stdout, script_for(&tenant, Layout::CitusSchemaSharding));
    assert!(
        out.stdout
            .contains("SELECT citus_schema_distribute('\"tenant_a\"');\n"),
        "{}",
        out.stdout
    );
    let single = run(&["sql", "--layout", "single-server", "--schema", "tenant_a"]);
    assert_eq!(single.stdout, script(&tenant));
    // The layout places the PostgreSQL family: refused where it means nothing.
    assert_usage_error(
        &["sql", "--dialect", "clickhouse", "--layout", "citus"],
        "the clickhouse dialect has none",
    );
    assert_usage_error(
        &["describe", "--layout", "citus"],
        "--layout is for sql, apply and check",
    );
    assert_usage_error(
        &["sql", "--layout", "citus-rows"],
        "invalid value 'citus-rows' for '--layout <LAYOUT>'",
    );
}

#[test]
fn refused_schema_names_exit_2_with_the_rule_on_one_line() {
    assert_usage_error(
        &["sql", "--schema", "Alkstore"],
        "must start with a lowercase ASCII letter",
    );
    assert_usage_error(&["sql", "--schema", "pg_x"], "reserves for system schemas");
    assert_usage_error(&["sql", "--schema", "a;drop"], "contains ';' at byte 1");
    assert_usage_error(&["sql", "--schema", ""], "it is empty");
    assert_usage_error(&["describe", "--schema", &"a".repeat(64)], "64 bytes long");
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    assert_usage_error(&["bogus"], "unrecognized subcommand 'bogus'");
    assert_usage_error(&["sql", "--bogus"], "unexpected argument '--bogus'");
    // The accepted values are on the one line.
    assert_usage_error(
        &["describe", "--format", "yaml"],
        "invalid value 'yaml' for '--format <FORMAT>' [possible values: markdown, json]",
    );
    assert_usage_error(
        &["check", "--format", "yaml"],
        "[possible values: text, json]",
    );
    assert_usage_error(&[], "schema-gen");
}

#[test]
fn a_lock_timeout_of_zero_is_refused_before_any_connection() {
    // PostgreSQL reads a zero lock_timeout as "wait forever": refused at
    // parse time, for both commands, with no server to connect to.
    for command in ["check", "apply"] {
        for zero in ["0s", "0ms", "500us"] {
            assert_usage_error(
                &[command, "--lock-timeout", zero],
                "it must be at least 1ms (0 would mean: wait forever)",
            );
        }
        // Without a unit it is no duration at all: our words, not jiff's.
        for (unreadable, why) in [
            ("0", "`0` has no unit"),
            ("5", "`5` has no unit"),
            ("soon", "`soon` is not a duration"),
        ] {
            let line = format!(
                "schema-gen: invalid value '{unreadable}' for '--lock-timeout <DURATION>': {why}; \
                 write a number with its unit, e.g. 300ms, 5s, 1m or 1m 30s (see 'schema-gen \
                 --help')\n"
            );
            assert_usage_error(&[command, "--lock-timeout", unreadable], &line);
            assert_eq!(run(&[command, "--lock-timeout", unreadable]).stderr, line);
        }
    }
}

#[test]
fn a_lock_timeout_above_postgresqls_maximum_is_refused_not_cut() {
    for command in ["check", "apply"] {
        for too_long in ["10000h", "25d", "2147483648ms"] {
            assert_usage_error(
                &[command, "--lock-timeout", too_long],
                &format!(
                    "`{too_long}` is more than PostgreSQL's maximum lock_timeout, 2147483647ms \
                     (about 24 days)"
                ),
            );
        }
    }
    // The maximum itself is taken: the error is about the (missing) server.
    let out = run(&[
        "check",
        "--lock-timeout",
        "2147483647ms",
        "--database-url",
        "host=127.0.0.1 port=1 user=u",
    ]);
    assert_eq!(out.code, ExitCode::from(2));
    assert!(
        out.stderr
            .starts_with("schema-gen: cannot connect to PostgreSQL at 127.0.0.1:1/u as u"),
        "{}",
        out.stderr
    );
}

/// With `--format json` an error (exit 2) is one JSON object on stdout, the
/// same line as ever on stderr: `{"outcome": "error", "kind", "schema",
/// "sqlstate", "message"}`, snapshotted per kind the command line reports
/// without a server.
#[test]
fn with_format_json_errors_are_json_on_stdout() {
    let cases: [(&str, &[&str]); 5] = [
        (
            "usage",
            &["check", "--format", "json", "--lock-timeout", "5"],
        ),
        ("usage_format_first", &["apply", "--format=json", "--bogus"]),
        (
            "refused_input",
            &["apply", "--format", "json", "--schema", "Alk"],
        ),
        (
            "configuration",
            &[
                "check",
                "--format",
                "json",
                "--database-url",
                "host=db sslmdoe=require",
            ],
        ),
        (
            "connection",
            &[
                "check",
                "--format",
                "json",
                "--database-url",
                "host=127.0.0.1 port=1 user=u",
            ],
        ),
    ];
    for (name, args) in cases {
        let out = run(args);
        assert_eq!(out.code, ExitCode::from(2), "{args:?}");
        let json: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", out.stdout));
        // The line on stderr is the message, as without --format json.
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim_end(),
            format!(
                "schema-gen: {}",
                json["message"].as_str().unwrap_or_default()
            ),
        );
        assert_eq!(json["outcome"], "error");
        harness::snapshots::settings().bind(|| {
            insta::assert_snapshot!(format!("error_json_{name}"), out.stdout);
        });
    }
    // describe and statements take --format json too.
    for args in [
        &["describe", "--format", "json", "--schema", "Alk"][..],
        &["statements", "--format", "json", "--schema", "Alk"][..],
    ] {
        let out = run(args);
        assert_eq!(out.code, ExitCode::from(2), "{args:?}");
        let json: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", out.stdout));
        assert_eq!(json["kind"], "refused_input", "{args:?}");
    }
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
            "consumed_events",
            "schema_versions"
        ]
    );
    let claim = &json["tables"][0]["indexes"][0];
    assert_eq!(claim["name"], "jobs_claim_idx");
    assert_eq!(
        claim["definition"],
        "USING btree (queue, priority DESC, run_at, id) WHERE ((claimed_at IS NULL) AND ready)"
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

/// `schema-gen statements`: every hot-path statement with its `$n`
/// placeholders, names and types, as SQL for a DBA and as stable JSON.
#[test]
fn statements_prints_every_hot_path_statement_in_both_formats() {
    let sql = run(&["statements"]);
    assert_eq!(sql.code, ExitCode::SUCCESS, "{}", sql.stderr);
    assert_eq!(sql.stderr, "");
    let json = run(&["statements", "--format", "json"]);
    assert_eq!(json.code, ExitCode::SUCCESS, "{}", json.stderr);
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("statements_sql", sql.stdout);
        insta::assert_snapshot!("statements_json", json.stdout);
    });

    // The JSON is the library's list, in the shape the issue fixes.
    let parsed: serde_json::Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}"));
    let library = schema_gen::statements::all(&SchemaName::default());
    let listed = parsed["statements"]
        .as_array()
        .unwrap_or_else(|| panic!("no statements array"));
    assert_eq!(listed.len(), library.len());
    for (entry, statement) in listed.iter().zip(&library) {
        assert_eq!(entry["name"], statement.name());
        assert_eq!(entry["sql"], statement.sql());
        let params: Vec<(String, String)> = entry["params"]
            .as_array()
            .unwrap_or_else(|| panic!("no params"))
            .iter()
            .map(|p| (p["name"].to_string(), p["type"].to_string()))
            .collect();
        let expected: Vec<(String, String)> = statement
            .params()
            .iter()
            .map(|p| (format!("\"{}\"", p.name), format!("\"{}\"", p.type_name())))
            .collect();
        assert_eq!(params, expected, "{}", statement.name());
        // A tool binds by name: each name is one placeholder.
        let mut names: Vec<&String> = params.iter().map(|(name, _)| name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            params.len(),
            "{}: a name repeats",
            statement.name()
        );
    }
    assert_eq!(
        parsed["claim_path"],
        serde_json::json!(["promote", "claim"])
    );

    // Another schema name changes only the qualified names.
    let tenant = run(&["statements", "--schema", "tenant_a", "--format", "json"]);
    assert_eq!(
        tenant
            .stdout
            .replace("\\\"tenant_a\\\"", "\\\"alkstore\\\""),
        json.stdout
    );
    assert_usage_error(
        &["statements", "--schema", "Alkstore"],
        "must start with a lowercase ASCII letter",
    );
    assert_usage_error(&["statements", "--format", "yaml"], "invalid value 'yaml'");
}

#[test]
fn statements_layout_citus_lists_the_citus_forms() {
    let out = run(&["statements", "--layout", "citus", "--format", "json"]);
    assert_eq!(out.code, ExitCode::SUCCESS, "{}", out.stderr);
    let parsed: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = parsed["statements"]
        .as_array()
        .unwrap_or_else(|| panic!("no statements array"))
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let library: Vec<String> =
        schema_gen::statements::all_for(&SchemaName::default(), Layout::CitusSchemaSharding)
            .iter()
            .map(|s| s.name().to_owned())
            .collect();
    assert_eq!(names, library);
    for name in ["lock_clear_lapsed", "lock_acquire_free", "commit_horizon"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "lock_acquire"), "{names:?}");
    // The default listing is the single server's, unchanged.
    let default = run(&["statements", "--format", "json"]);
    let single = run(&[
        "statements",
        "--layout",
        "single-server",
        "--format",
        "json",
    ]);
    assert_eq!(default.stdout, single.stdout);
}
