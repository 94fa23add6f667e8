//! `check --format json` and `apply --format json` against the shared
//! cluster: the shapes tools read, as snapshots (the unique schema name
//! replaced by `<schema>`), and the exit codes that go with them.

use std::process::ExitCode;

use harness::cli::{run as cli, runtime};
use schema_model::history::MODEL_VERSION;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn apply_and_check_report_in_json() {
    if harness::skip_db_tests() {
        return;
    }
    harness::snapshots::settings().bind(json_reports);
}

fn json_reports() {
    let raw = harness::unique_schema("cli_json");
    let url = harness::database_url();
    let args = |command: &'static str| -> Vec<String> {
        [
            command,
            "--database-url",
            &url,
            "--schema",
            &raw,
            "--format",
            "json",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let run = |command| {
        let args = args(command);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let ran = cli(&args);
        (ran.code, ran.stdout.replace(&raw, "<schema>"), ran.stderr)
    };

    let (code, stdout, stderr) = run("check");
    assert_eq!((code, stderr.as_str()), (ExitCode::from(1), ""), "{stdout}");
    insta::assert_snapshot!("check_json_missing_schema", stdout);

    let (code, stdout, stderr) = run("apply");
    assert_eq!((code, stderr.as_str()), (ExitCode::SUCCESS, ""), "{stdout}");
    let created = json(&stdout);
    assert_eq!(created["outcome"], "created");
    assert_eq!(created["tables_created"].as_array().map(Vec::len), Some(8));
    // The statement count follows the model; the snapshot is about the shape.
    let statements = created["statements_run"]
        .as_u64()
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(statements > 7, "{stdout}");
    let stdout = stdout
        .replace(
            &format!("\"statements_run\": {statements},"),
            "\"statements_run\": \"<n>\",",
        )
        .replace(&format!(": {statements} statements"), ": <n> statements");
    insta::assert_snapshot!("apply_json_created", stdout);

    let (code, stdout, _) = run("apply");
    assert_eq!(code, ExitCode::SUCCESS);
    insta::assert_snapshot!("apply_json_already_current", stdout);

    let (code, stdout, _) = run("check");
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(
        json(&stdout),
        json(&format!(
            r#"{{"schema": "<schema>", "state": "matches", "exit_code": 0, "matches": true,
                "differences": [], "version": {{
                "state": "current", "found": {v}, "contracted": {v}, "model": {v}, "nearest": null,
                "serves_model": true, "message": "schema <schema> matches the model (version {v})"}}}}"#,
            v = MODEL_VERSION
        ))
    );

    // A shape difference and a comment difference.
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    rt.block_on(harness::exec(
        &client,
        &format!(
            "ALTER TABLE {raw}.jobs ALTER COLUMN priority TYPE bigint;
             COMMENT ON TABLE {raw}.locks IS 'edited by hand';"
        ),
    ));
    let (code, stdout, stderr) = run("check");
    assert_eq!((code, stderr.as_str()), (ExitCode::from(1), ""), "{stdout}");
    let checked = json(&stdout);
    let only_docs: Vec<bool> = checked["differences"]
        .as_array()
        .unwrap_or_else(|| panic!("{stdout}"))
        .iter()
        .map(|d| d["documentation_only"] == true)
        .collect();
    assert_eq!(only_docs, vec![false, true], "{stdout}");
    insta::assert_snapshot!("check_json_drift", stdout);

    // A refused apply reports on stdout in JSON, with the drift exit code.
    let (code, stdout, stderr) = run("apply");
    assert_eq!((code, stderr.as_str()), (ExitCode::from(1), ""), "{stdout}");
    insta::assert_snapshot!("apply_json_refused", stdout);

    // Only the comment left: documentation only, so the schema matches and
    // check passes, still listing it.
    rt.block_on(harness::exec(
        &client,
        &format!("ALTER TABLE {raw}.jobs ALTER COLUMN priority TYPE integer"),
    ));
    let (code, stdout, stderr) = run("check");
    assert_eq!((code, stderr.as_str()), (ExitCode::SUCCESS, ""), "{stdout}");
    let checked = json(&stdout);
    assert_eq!(checked["matches"], true, "{stdout}");
    let kinds: Vec<(&str, bool)> = checked["differences"]
        .as_array()
        .unwrap_or_else(|| panic!("{stdout}"))
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["documentation_only"] == true,
            )
        })
        .collect();
    assert_eq!(kinds, vec![("comment", true)], "{stdout}");

    // A DBA's reporting index: foreign, its own class; not allowed, then
    // allowed by name.
    rt.block_on(harness::exec(
        &client,
        &format!("CREATE INDEX jobs_enqueued_at_report_idx ON {raw}.jobs (enqueued_at)"),
    ));
    let (code, stdout, stderr) = run("check");
    assert_eq!((code, stderr.as_str()), (ExitCode::from(5), ""), "{stdout}");
    insta::assert_snapshot!("check_json_foreign", stdout);
    let args = args("check");
    let mut allowing: Vec<&str> = args.iter().map(String::as_str).collect();
    allowing.extend(["--allow-foreign", "jobs_enqueued_at_report_idx"]);
    let ran = cli(&allowing);
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stdout);
    let checked = json(&ran.stdout);
    assert_eq!(
        (
            &checked["state"],
            &checked["exit_code"],
            &checked["matches"]
        ),
        (&"matches".into(), &0.into(), &true.into()),
        "{}",
        ran.stdout
    );
    let foreign = &checked["differences"][0];
    assert_eq!(
        (&foreign["class"], &foreign["allowed"]),
        (&"foreign".into(), &true.into()),
        "{}",
        ran.stdout
    );
}
