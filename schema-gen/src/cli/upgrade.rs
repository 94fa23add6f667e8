//! `schema-gen upgrade`: moves a database to this release's version online
//! (expand), or with `--contract` removes what only older engines needed;
//! `--dry-run` prints the plan as a psql script instead.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::database::{Refusal, ReportFormat, parse_lock_timeout};
use super::failure::Failure;
use super::{connection, report, write_out};
use crate::connect::Environment;
use crate::error::ErrorKind;
use crate::upgrade::{self, DryRun, Progress, Span, Step, UpgradeOptions, UpgradeOutcome};

/// The arguments of `upgrade`.
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// PostgreSQL connection string, as psql takes it (see `apply`)
    /// [env: DATABASE_URL]. Use a direct connection or session pooling:
    /// the CONCURRENTLY steps need session settings.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The engine-owned schema.
    #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
    pub schema: String,
    /// Run the contract steps instead: remove what only the engines of older
    /// versions needed. Run it once none of them works on the database.
    #[arg(long)]
    pub contract: bool,
    /// Print the steps still to run as a psql script, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Text for people, JSON (stable) for tools. Progress goes to stderr.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// How long each wait for a lock that blocks the engine (ACCESS
    /// EXCLUSIVE, for a catalog change) may last before the step backs off
    /// and tries again (20 tries).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_lock_timeout)]
    pub lock_timeout: Duration,
}

#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum UpgradeReport<'a> {
    Plan {
        schema: &'a str,
        contract: bool,
        before: Span,
        steps: &'a [Step],
        script: &'a str,
    },
    /// Expanded, contracted or created.
    Upgraded {
        #[serde(flatten)]
        result: &'a UpgradeOutcome,
        contract_pending: bool,
        /// Objects the model does not own, left untouched.
        foreign: Vec<report::DifferenceReport<'a>>,
        message: String,
    },
}

/// Runs `upgrade`.
pub(super) fn run(
    args: &UpgradeArgs,
    env: &Environment,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    let json = args.format == ReportFormat::Json;
    let connection::Prepared {
        schema,
        connection,
        runtime,
    } = match connection::prepare(
        &args.schema,
        args.database_url.as_deref(),
        env,
        json,
        stdout,
        stderr,
    ) {
        Ok(prepared) => prepared,
        Err(code) => return code,
    };
    let warnings = connection.warnings().to_vec();
    let options = UpgradeOptions {
        lock_timeout: args.lock_timeout,
        ..UpgradeOptions::default()
    };
    let schema_for_work = schema.clone();
    // Progress lines go to stderr as the steps run: the upgrade sends them,
    // a second future on the same thread prints them.
    let (lines, mut printed) = tokio::sync::mpsc::unbounded_channel::<String>();
    let result = runtime.block_on(async {
        let work = async move {
            let mut client = connection.connect().await?;
            if args.dry_run {
                return upgrade::dry_run(&client, &schema_for_work, &options, args.contract)
                    .await
                    .map(Done::Plan);
            }
            let mut progress = move |event: &Progress| {
                let _ = lines.send(event.line());
            };
            if args.contract {
                upgrade::contract(&mut client, &schema_for_work, &options, &mut progress).await
            } else {
                upgrade::upgrade(&mut client, &schema_for_work, &options, &mut progress).await
            }
            .map(Done::Ran)
        };
        let print = async {
            while let Some(line) = printed.recv().await {
                let _ = writeln!(stderr, "{line}");
            }
        };
        tokio::join!(work, print).0
    });
    let failed = result.as_ref().err().map(ToString::to_string);
    connection::print_warnings(&warnings, failed.as_deref(), stderr);
    let text = match result {
        Ok(Done::Plan(plan)) if json => report_json(&UpgradeReport::Plan {
            schema: schema.as_str(),
            contract: args.contract,
            before: plan.before,
            steps: &plan.steps,
            script: &plan.script,
        }),
        Ok(Done::Plan(plan)) => plan.script,
        Ok(Done::Ran(outcome)) if json => report_json(&UpgradeReport::Upgraded {
            result: &outcome,
            contract_pending: outcome.contract_pending(),
            foreign: report::differences(&outcome.foreign),
            message: outcome.message(),
        }),
        Ok(Done::Ran(outcome)) => format!("{}\n", outcome.message()),
        Err(err) => {
            if let ErrorKind::Drift {
                differences,
                nearest,
                ..
            } = err.kind()
            {
                let refusal = Refusal {
                    schema: &schema,
                    differences,
                    nearest: *nearest,
                    command: "upgrade",
                };
                return refusal.print(json, stdout, stderr);
            }
            return Failure::from_error(&err)
                .about(schema.as_str())
                .print(json, stdout, stderr);
        }
    };
    write_out(stdout, stderr, &text, ExitCode::SUCCESS)
}

enum Done {
    Plan(DryRun),
    Ran(UpgradeOutcome),
}

fn report_json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value)
        .unwrap_or_else(|err| format!("{{\"error\": \"cannot serialize the report: {err}\"}}"));
    text.push('\n');
    text
}
