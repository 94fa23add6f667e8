//! `schema-gen upgrade`: moves a database to this release's version online
//! (expand), or with `--contract` removes what only older engines needed;
//! `--dry-run` prints the plan as a psql script instead.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use schema_model::Layout;

use super::database::{Refusal, ReportFormat, parse_lock_timeout};
use super::failure::Failure;
use super::{connection, layout, report, write_out};
use crate::connect::Environment;
use crate::upgrade::{self, DryRun, Progress, Span, Step, UpgradeOptions, UpgradeOutcome};

/// The arguments of `upgrade`.
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// PostgreSQL connection string, as psql takes it (see `apply`)
    /// [env: DATABASE_URL]. A direct connection or session pooling: the
    /// upgrade needs a session of its own (its lock, the settings of its
    /// CONCURRENTLY steps), and refuses a pooler in transaction or
    /// statement mode before it reads or locks anything.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The engine-owned schema.
    #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
    pub schema: String,
    /// Run the contract steps instead: remove what only the engines of older
    /// versions needed. Run it once none of them works on the database.
    #[arg(long)]
    pub contract: bool,
    /// With --contract: run it even while engines of older versions are
    /// connected (found by their application_name, `alkstore-engine/<release>`,
    /// or by their last statement); their statements fail from then on,
    /// enqueues included. Without it the contract refuses, naming them.
    #[arg(long, requires = "contract")]
    pub allow_older_engines: bool,
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
    /// Where the family lives: on a Citus coordinator (`citus`) the steps
    /// run on the distributed schema in place, and a schema the upgrade
    /// creates is created distributed.
    #[arg(long, value_name = "LAYOUT", default_value = "single-server", value_parser = layout::parser())]
    pub layout: Layout,
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
        layout: args.layout,
        allow_older_engines: args.allow_older_engines,
        ..UpgradeOptions::default()
    };
    let schema_for_work = schema.clone();
    // Progress lines go to stderr as the steps run: the upgrade sends them,
    // a second future on the same thread prints them.
    let (lines, mut printed) = tokio::sync::mpsc::unbounded_channel::<String>();
    let result = runtime.block_on(async {
        let work = async move {
            if args.dry_run {
                // One catalog read: it needs no session of its own.
                let client = connection.connect().await?;
                return upgrade::dry_run(&client, &schema_for_work, &options, args.contract)
                    .await
                    .map(Done::Plan);
            }
            // Before anything is read or locked: a pooled connection is
            // refused (its lock could stay on a server connection the
            // pooler hands to an engine).
            let mut watched = connection.connect_watched().await?;
            upgrade::require_session(
                &watched.client,
                &mut watched.notifications,
                || connection.connect_watched(),
                &schema_for_work,
                &connection.describe(),
            )
            .await?;
            let mut client = watched.client;
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
            if let Some(refusal) = Refusal::of(&err, &schema, "upgrade") {
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
