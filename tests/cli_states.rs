//! The real `schema-gen` binary against a live server: every state `check`
//! reports has its exit code and its name (text and JSON), the worst of
//! several wins, `--allow-foreign` decides about foreign objects, and
//! `apply` and `upgrade` exit with the code `check` would give. Declared by
//! the schema-gen package (so cargo builds the binary first), with the
//! test harness for the server.

use std::process::{Command, Output};

use harness::cli::runtime;
use harness::exec;
use harness::history::create_version;
use schema_model::history::MODEL_VERSION;

/// Runs the binary with `args` and nothing of this machine's environment
/// (no `PG*` variable, a home without a password file).
fn schema_gen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_schema-gen"))
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent-schema-gen-home")
        .output()
        .unwrap_or_else(|e| panic!("cannot run schema-gen: {e}"))
}

/// What one run said: its exit code, stdout, stderr.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn ran(args: &[&str]) -> Ran {
    let out = schema_gen(args);
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `schema-gen COMMAND --database-url URL --schema SCHEMA EXTRA...`.
fn on(command: &str, url: &str, schema: &str, extra: &[&str]) -> Ran {
    let mut args = vec![command, "--database-url", url, "--schema", schema];
    args.extend_from_slice(extra);
    ran(&args)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Asserts `check` (text, then JSON) exits `code` in state `state`, and
/// returns the text output.
fn assert_check(url: &str, schema: &str, extra: &[&str], code: i32, state: &str) -> String {
    let text = on("check", url, schema, extra);
    assert_eq!(
        text.code,
        Some(code),
        "check {extra:?} of {schema}: {}{}",
        text.stdout,
        text.stderr
    );
    let mut with_json = extra.to_vec();
    with_json.extend(["--format", "json"]);
    let report = on("check", url, schema, &with_json);
    assert_eq!(
        report.code,
        Some(code),
        "{}{}",
        report.stdout,
        report.stderr
    );
    let value = json(&report.stdout);
    assert_eq!(value["state"], state, "{}", report.stdout);
    assert_eq!(value["exit_code"], code, "{}", report.stdout);
    assert_eq!(value["matches"], code == 0, "{}", report.stdout);
    text.stdout
}

/// A schema created by `schema-gen apply`, then changed by `sql` (`{s}` is
/// the schema).
fn applied(url: &str, prefix: &str, sql: &str) -> String {
    let schema = harness::unique_schema(prefix);
    let done = on("apply", url, &schema, &[]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    if !sql.is_empty() {
        let rt = runtime();
        let client = rt.block_on(harness::connect());
        rt.block_on(exec(&client, &sql.replace("{s}", &schema)));
    }
    schema
}

/// A schema at version `version`, as its release created it, then changed
/// by `sql`.
fn at_version(version: u32, prefix: &str, sql: &str) -> String {
    let schema = harness::unique_schema_name(prefix);
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    rt.block_on(create_version(&client, &schema, version));
    if !sql.is_empty() {
        rt.block_on(exec(&client, &sql.replace("{s}", schema.as_str())));
    }
    schema.as_str().to_owned()
}

const REPORT_INDEX: &str = "CREATE INDEX jobs_enqueued_at_report_idx ON {s}.jobs (enqueued_at)";

/// A version row newer than this release's: still serving it (expanded,
/// its contract pending) or not (contracted).
fn newer_row(contracted: bool) -> String {
    format!(
        "INSERT INTO {{s}}.schema_versions (version, release, started_at, expanded_at, \
         contracted_at) VALUES ({}, 'a newer release', 1, 2, {})",
        MODEL_VERSION + 1,
        if contracted { "3" } else { "NULL" }
    )
}

#[test]
fn every_state_of_check_has_its_exit_code_and_its_name() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();

    // 0: matches.
    let schema = applied(&url, "state_matches", "");
    let text = assert_check(&url, &schema, &[], 0, "matches");
    assert_eq!(
        text,
        format!("schema {schema} matches the model (version {MODEL_VERSION})\n")
    );

    // 1: drift.
    let schema = applied(
        &url,
        "state_drift",
        "ALTER TABLE {s}.jobs ALTER COLUMN priority TYPE bigint",
    );
    let text = assert_check(&url, &schema, &[], 1, "drift");
    assert!(
        text.contains("  jobs.priority: type is bigint, model says integer\n"),
        "{text}"
    );

    // 2: error, as a failure (nothing on stdout but the JSON error) ...
    let unreachable = "host=127.0.0.1 port=1 user=u dbname=d connect_timeout=5";
    let failed = on("check", unreachable, "alkstore", &["--format", "json"]);
    assert_eq!(failed.code, Some(2), "{}", failed.stderr);
    let value = json(&failed.stdout);
    assert_eq!(
        (&value["outcome"], &value["state"]),
        (&"error".into(), &"error".into())
    );
    // ... and as a state: a role that may not read the version rows.
    let schema = applied(&url, "state_error", "");
    let reader = harness::unique_name("state_reader");
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    rt.block_on(exec(
        &client,
        &format!("CREATE ROLE {reader} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {reader};"),
    ));
    let text = assert_check(&harness::url_for_role(&reader), &schema, &[], 2, "error");
    assert!(
        text.contains(&format!("GRANT SELECT ON {schema}.schema_versions")),
        "{text}"
    );

    // 3: needs upgrade.
    let schema = at_version(1, "state_older", "");
    let text = assert_check(&url, &schema, &[], 3, "needs_upgrade");
    assert!(text.contains("schema-gen upgrade"), "{text}");

    // 4: contract pending, after `schema-gen upgrade`.
    let schema = at_version(1, "state_pending", "");
    let up = on("upgrade", &url, &schema, &[]);
    assert_eq!(up.code, Some(0), "{}", up.stderr);
    let text = assert_check(&url, &schema, &[], 4, "contract_pending");
    assert!(text.contains("with its contract pending"), "{text}");

    // 5: foreign objects only, until the policy allows them.
    let schema = applied(&url, "state_foreign", REPORT_INDEX);
    let text = assert_check(&url, &schema, &[], 5, "foreign_objects");
    assert_eq!(
        text,
        format!(
            "schema {schema} matches the model (version {MODEL_VERSION})\n\
             1 object not in the model (foreign: the engine neither reads nor needs it, and \
             leaves it alone; 1 not allowed, so check exits 5 (name them with --allow-foreign \
             NAME to let them pass)):\n  \
             extra index jobs_enqueued_at_report_idx on jobs: `USING btree (enqueued_at)`\n"
        )
    );
    for allowed in ["jobs_enqueued_at_report_idx", "*_report_idx", "*"] {
        let text = assert_check(&url, &schema, &["--allow-foreign", allowed], 0, "matches");
        assert!(
            text.ends_with("`USING btree (enqueued_at)` (allowed)\n"),
            "{text}"
        );
    }
    for other in ["jobs_enqueued_at", "report_*", "jobs.enqueued_at"] {
        assert_check(
            &url,
            &schema,
            &["--allow-foreign", other],
            5,
            "foreign_objects",
        );
    }

    // 6: a newer version, serving this release or not.
    for contracted in [false, true] {
        let schema = applied(&url, "state_newer", &newer_row(contracted));
        let text = assert_check(&url, &schema, &[], 6, "newer_version");
        assert!(
            text.contains(&format!("newer than this release's {MODEL_VERSION}")),
            "{text}"
        );
    }
}

#[test]
fn when_several_states_apply_the_worst_wins() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    // Foreign objects never hide anything else.
    let drift_too = applied(
        &url,
        "worst_drift",
        &format!("{REPORT_INDEX}; ALTER TABLE {{s}}.locks ALTER COLUMN owner DROP NOT NULL"),
    );
    let text = assert_check(&url, &drift_too, &[], 1, "drift");
    assert!(text.contains("1 object not in the model"), "{text}");
    assert!(text.contains("1 not allowed by --allow-foreign"), "{text}");
    let older = at_version(1, "worst_older", REPORT_INDEX);
    assert_check(&url, &older, &[], 3, "needs_upgrade");
    let pending = at_version(1, "worst_pending", REPORT_INDEX);
    assert_eq!(on("upgrade", &url, &pending, &[]).code, Some(0));
    assert_check(&url, &pending, &[], 4, "contract_pending");
    assert_check(
        &url,
        &pending,
        &["--allow-foreign", "jobs_enqueued_at_report_idx"],
        4,
        "contract_pending",
    );
    // Drift beats an older version and a pending contract.
    let older_drift = at_version(
        1,
        "worst_older_drift",
        "ALTER TABLE {s}.jobs ALTER COLUMN priority TYPE bigint",
    );
    assert_check(&url, &older_drift, &[], 1, "drift");
    let pending_drift = at_version(1, "worst_pending_drift", "");
    assert_eq!(on("upgrade", &url, &pending_drift, &[]).code, Some(0));
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    rt.block_on(exec(
        &client,
        &format!("CREATE UNIQUE INDEX jobs_queue_once ON {pending_drift}.jobs (queue)"),
    ));
    assert_check(&url, &pending_drift, &[], 1, "drift");
}

#[test]
fn apply_and_upgrade_exit_with_the_code_check_would_give() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();

    // apply opens beside foreign objects (0), lists them, and so does its JSON.
    let schema = applied(&url, "apply_foreign", REPORT_INDEX);
    let done = on("apply", &url, &schema, &[]);
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert_eq!(
        done.stdout,
        format!(
            "schema {schema} is already current: nothing to do; 1 object not in the model left \
             alone (foreign: extra index jobs_enqueued_at_report_idx on jobs: `USING btree \
             (enqueued_at)`)\n"
        )
    );
    let done = on("apply", &url, &schema, &["--format", "json"]);
    let value = json(&done.stdout);
    assert_eq!(value["foreign"][0]["class"], "foreign", "{}", done.stdout);

    // apply refuses drift (1), an older version (3), a newer one that no
    // longer serves this release (6); it opens one that does (0).
    let drifted = applied(
        &url,
        "apply_drift",
        "ALTER TABLE {s}.jobs ALTER COLUMN priority TYPE bigint",
    );
    assert_eq!(on("apply", &url, &drifted, &[]).code, Some(1));
    let older = at_version(1, "apply_older", "");
    let refused = on("apply", &url, &older, &["--format", "json"]);
    assert_eq!(refused.code, Some(3), "{}", refused.stderr);
    let value = json(&refused.stdout);
    assert_eq!(
        (&value["kind"], &value["state"]),
        (&"older_version".into(), &"needs_upgrade".into())
    );
    let gone = applied(&url, "apply_newer", &newer_row(true));
    let refused = on("apply", &url, &gone, &["--format", "json"]);
    assert_eq!(refused.code, Some(6), "{}", refused.stderr);
    assert_eq!(json(&refused.stdout)["state"], "newer_version");
    let serving = applied(&url, "apply_served", &newer_row(false));
    assert_eq!(on("apply", &url, &serving, &[]).code, Some(0));

    // upgrade: around foreign objects (0, listed), refused on drift naming
    // the nearest version (1), a contract before the expand (3), a newer
    // version (6).
    let with_dba = at_version(
        1,
        "up_foreign",
        "ALTER TABLE {s}.jobs ADD COLUMN tenant text; \
         CREATE INDEX jobs_tenant_report_idx ON {s}.jobs (tenant)",
    );
    let up = on("upgrade", &url, &with_dba, &["--format", "json"]);
    assert_eq!(up.code, Some(0), "{}", up.stderr);
    let value = json(&up.stdout);
    let foreign: Vec<&str> = value["foreign"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", up.stdout))
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(foreign, ["extra_column", "extra_index"], "{}", up.stdout);
    let near = at_version(
        1,
        "up_near",
        "ALTER TABLE {s}.jobs ADD COLUMN tenant text; \
         CREATE INDEX jobs_tenant_report_idx ON {s}.jobs (tenant); \
         DROP INDEX {s}.jobs_expiry_idx",
    );
    let refused = on("upgrade", &url, &near, &["--format", "json"]);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    let value = json(&refused.stdout);
    assert_eq!(value["nearest"], 1, "{}", refused.stdout);
    assert_eq!(
        value["differences"].as_array().map(Vec::len),
        Some(1),
        "{}",
        refused.stdout
    );
    let refused = on("upgrade", &url, &near, &[]);
    assert!(
        refused.stderr.starts_with(&format!(
            "schema-gen: schema {near} is no version this release knows, nor a step of an \
             upgrade between two; it is nearest to version 1, from which it differs; upgrade \
             refused and changed nothing (1 difference):\n  missing index jobs_expiry_idx"
        )),
        "{}",
        refused.stderr
    );
    let older = at_version(1, "up_contract", "");
    let early = on("upgrade", &url, &older, &["--contract"]);
    assert_eq!(early.code, Some(3), "{}", early.stderr);
    let gone = applied(&url, "up_newer", &newer_row(true));
    assert_eq!(on("upgrade", &url, &gone, &[]).code, Some(6));
}
