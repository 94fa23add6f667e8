//! The command line and the printed plan: the dry run is a script psql
//! runs, the command line's refusals and exit codes, squawk on every
//! statement.

use super::*;

/// The dry run is a script psql runs: piped in, it expands a version 1
/// schema (check: contract pending), and the contract's dry run contracts it.
#[tokio::test]
async fn the_dry_run_is_a_plan_psql_runs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_psql");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;
    let before = harness::dump::dump_schema(&client, schema.as_str()).await;
    let plan = upgrade::dry_run(&client, &schema, &bounded(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Reading it changed nothing.
    assert_eq!(
        harness::dump::dump_schema(&client, schema.as_str()).await,
        before
    );
    assert!(
        plan.steps
            .iter()
            .any(|s| matches!(s.action, Action::CreateIndex { .. }))
    );
    assert!(
        plan.script
            .contains("CREATE INDEX CONCURRENTLY IF NOT EXISTS")
    );
    let ran = psql_within(&harness::database_url(), &plan.script, RUN_LIMIT);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(
        found.state,
        VersionState::ContractPending,
        "{}",
        found.message
    );
    assert!(found.passes(), "{:?}", found.differences);
    ready_is_derived_from_run_at(&client, &schema, false).await;

    let plan = upgrade::dry_run(&client, &schema, &bounded(), true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ran = psql_within(&harness::database_url(), &plan.script, RUN_LIMIT);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let found = status(&client, &schema).await;
    assert_eq!(found.state, VersionState::Current, "{}", found.message);
    assert!(found.passes(), "{:?}", found.differences);
    // Nothing left to plan.
    let plan = upgrade::dry_run(&client, &schema, &bounded(), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.steps.is_empty(), "{:?}", plan.steps);
}

/// `schema-gen upgrade` as an operator runs it: the dry run prints a script
/// and changes nothing, the upgrade reports progress on stderr and the
/// outcome (text or JSON) on stdout, `check` then says the contract is
/// pending (4), and the exit codes say needs upgrade (3) and drift (1).
#[test]
fn the_upgrade_command_line() {
    use harness::cli::{run as cli, runtime};
    use std::process::ExitCode;
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let client = rt.block_on(harness::connect());
    let schema = harness::unique_schema_name("up_cli");
    rt.block_on(create_version(&client, &schema, 1));
    let url = harness::database_url();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut args = vec![
            "upgrade",
            "--database-url",
            &url,
            "--schema",
            schema.as_str(),
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect()
    };
    let run = |args: Vec<String>| cli(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::from(3), "{}", check.stderr);
    assert!(
        check
            .stdout
            .contains("is at version 1 (recognised by its shape"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains("`schema-gen upgrade --schema"),
        "{}",
        check.stdout
    );

    let dry = run(args(&["--dry-run"]));
    assert_eq!(dry.code, ExitCode::SUCCESS, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("CREATE INDEX CONCURRENTLY"),
        "{}",
        dry.stdout
    );
    let dry_json = run(args(&["--dry-run", "--format", "json"]));
    let plan: serde_json::Value = serde_json::from_str(&dry_json.stdout).unwrap();
    assert_eq!(plan["outcome"], "plan");
    assert!(
        plan["steps"].as_array().is_some_and(|s| s.len() >= 6),
        "{plan}"
    );
    assert!(plan["steps"][0]["action"].is_string(), "{plan}");

    let ran = run(args(&["--format", "json"]));
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}", ran.stderr);
    let outcome: serde_json::Value = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(outcome["outcome"], "upgraded");
    assert_eq!(outcome["contract_pending"], true);
    assert_eq!(outcome["after"]["expanded"], MODEL_VERSION);
    assert!(
        ran.stderr.contains("version 2 expand step 1/"),
        "{}",
        ran.stderr
    );

    let check = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(check.code, ExitCode::from(4), "{}", check.stdout);
    assert!(
        check.stdout.contains("with its contract pending"),
        "{}",
        check.stdout
    );

    let contract = run(args(&["--contract"]));
    assert_eq!(contract.code, ExitCode::SUCCESS, "{}", contract.stderr);
    assert!(
        contract
            .stdout
            .contains(&format!("is at version {MODEL_VERSION}")),
        "{}",
        contract.stdout
    );

    // Drift outside any version: exit 1, the differences listed.
    let drifted = harness::unique_schema_name("up_cli_drift");
    rt.block_on(create_version(&client, &drifted, 2));
    rt.block_on(exec(
        &client,
        &format!(
            "ALTER TABLE \"{}\".locks ADD COLUMN x int DEFAULT 0",
            drifted.as_str()
        ),
    ));
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    assert!(
        refused.stderr.contains("extra column locks.x"),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty());
    let refused = cli(&[
        "upgrade",
        "--database-url",
        &url,
        "--schema",
        drifted.as_str(),
        "--format",
        "json",
    ]);
    assert_eq!(refused.code, ExitCode::from(1));
    let json: serde_json::Value = serde_json::from_str(&refused.stdout).unwrap();
    assert_eq!(json["outcome"], "refused");

    // The contract before the expand: needs upgrade (3).
    let early = harness::unique_schema_name("up_cli_early");
    rt.block_on(create_version(&client, &early, 1));
    let err = cli(&[
        "upgrade",
        "--contract",
        "--database-url",
        &url,
        "--schema",
        early.as_str(),
    ]);
    assert_eq!(err.code, ExitCode::from(3), "{}", err.stdout);
    assert!(
        err.stderr.contains("cannot be contracted"),
        "{}",
        err.stderr
    );
}

/// Every upgrade statement, expand and contract, from each shipped version,
/// passes squawk's PostgreSQL migration rules, but for the ones waived here,
/// each with why; a waiver no statement needs any more fails too.
#[tokio::test]
async fn every_upgrade_statement_passes_squawk() {
    if harness::skip_db_tests() {
        return;
    }
    const WAIVED: &[(&str, &str)] = &[
        (
            "prefer-bigint-over-int",
            "schema_versions.version counts schema versions: 2^31 of them will not come",
        ),
        (
            "renaming-object",
            "the swap renames indexes only; no engine statement names an index (the planner \
             picks it by predicate), so a rename breaks no client",
        ),
        (
            "ban-drop-default",
            "the contract drops a transitional default once the older engines that inserted \
             without the column are gone, which is what the contract is for",
        ),
    ];
    let client = harness::connect().await;
    let version = harness::server_version_num().await;
    let pg_version = format!("{}.0", version / 10000);
    let mut fired = std::collections::BTreeSet::new();
    for from in history::versions()
        .iter()
        .filter(|v| v.shipped.is_some())
        .map(|v| v.number)
    {
        let schema = harness::unique_schema_name(&format!("up_squawk_v{from}"));
        create_version(&client, &schema, from).await;
        let options = UpgradeOptions::default();
        let expand = upgrade::dry_run(&client, &schema, &options, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        run_upgrade(&schema, &options)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let contract = upgrade::dry_run(&client, &schema, &options, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for (phase, plan) in [("expand", expand), ("contract", contract)] {
            for finding in
                harness::squawk::lint(&plan.script, &format!("v{from}-{phase}"), &pg_version)
            {
                let line = plan
                    .script
                    .lines()
                    .nth((finding.line as usize).saturating_sub(1))
                    .unwrap_or("");
                assert!(
                    WAIVED.iter().any(|(rule, _)| *rule == finding.rule_name),
                    "v{from} {phase}: squawk's {} fires on line {}: {line}\n({})",
                    finding.rule_name,
                    finding.line,
                    finding.message
                );
                fired.insert(finding.rule_name);
            }
        }
    }
    let waived: std::collections::BTreeSet<String> =
        WAIVED.iter().map(|(r, _)| (*r).to_owned()).collect();
    assert_eq!(
        fired, waived,
        "a waiver no statement needs any more: drop it"
    );
}
