//! `schema-gen apply` and `schema-gen check`: the commands that connect to a
//! PostgreSQL server. Where they connect is [`super::connection`]'s
//! business, what they print [`super::report`]'s.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use schema_model::SchemaName;

use super::{EXIT_DRIFT, EXIT_USAGE, connection, report, schema_name, write_out};
use crate::connect::Environment;
use crate::error::{self, ErrorKind};
use crate::verify::{Difference, verify_with};
use crate::{Options, Outcome, bootstrap_with};

/// Where `apply` and `check` connect, which schema they look at, and how
/// they report.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection string, as psql takes it:
    /// `postgres://user@host:port/db?sslmode=verify-full` or `host=... dbname=...`
    /// [env: DATABASE_URL]. PG* variables and ~/.pgpass fill in what it leaves
    /// out; with nothing set, libpq's defaults: the local socket
    /// (/var/run/postgresql, or /tmp), port 5432, the OS user.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The engine-owned schema: lowercase letters, digits and '_', at most 63 bytes.
    #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
    pub schema: String,
    /// Text for people, JSON (stable) for tools.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// How long to wait for a lock (e.g. 300ms, 5s, 1m) before giving up with
    /// exit 2 and naming the session that holds it; check and a steady-state
    /// apply wait only behind ACCESS EXCLUSIVE on an engine table.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_lock_timeout)]
    pub lock_timeout: Duration,
}

/// `300ms`, `5s`, `1m 30s`, ...: jiff's friendly duration format. Zero is
/// refused: PostgreSQL reads a zero `lock_timeout` as "wait forever".
fn parse_lock_timeout(text: &str) -> Result<Duration, String> {
    let duration = jiff::fmt::friendly::SpanParser::new()
        .parse_unsigned_duration(text)
        .map_err(|err| format!("{err} (write e.g. 300ms, 5s or 1m)"))?;
    if duration < Duration::from_millis(1) {
        return Err("it must be at least 1ms (0 would mean: wait forever)".to_owned());
    }
    Ok(duration)
}

/// Output format of `apply` and `check`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// One line per finding.
    Text,
    /// Pretty-printed JSON: differences with their kind, whether each is
    /// documentation only, and (apply) what was done.
    Json,
}

/// Which database command to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Apply,
    Check,
}

/// What a database command found.
enum Report {
    Applied(Outcome),
    Checked(Vec<Difference>),
}

/// Runs `apply` or `check`. The schema name is validated, and the connection
/// resolved (string, PG* variables, password file, certificates), before
/// anything touches the network.
pub(super) fn run(
    action: Action,
    args: &DatabaseArgs,
    env: &Environment,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    let fail = |stderr: &mut dyn Write, message: &str| {
        let _ = writeln!(stderr, "schema-gen: {}", error::one_line(message));
        ExitCode::from(EXIT_USAGE)
    };
    let schema = match schema_name(&args.schema) {
        Ok(schema) => schema,
        Err(message) => return fail(stderr, &message),
    };
    let connection = match connection::options(args.database_url.as_deref(), env) {
        Ok(connection) => connection,
        Err(message) => return fail(stderr, &message),
    };
    for warning in connection.warnings() {
        let _ = writeln!(stderr, "schema-gen: warning: {warning}");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(stderr, &format!("cannot start the async runtime: {err}")),
    };
    let bounds = Options {
        lock_timeout: args.lock_timeout,
    };
    let result = runtime.block_on(async {
        let mut client = connection.connect().await?;
        match action {
            Action::Apply => bootstrap_with(&mut client, &schema, &bounds)
                .await
                .map(Report::Applied),
            Action::Check => verify_with(&client, &schema, &bounds)
                .await
                .map(Report::Checked),
        }
    });
    let json = args.format == ReportFormat::Json;
    let (text, code) = match result {
        Ok(Report::Applied(outcome)) if json => (report::apply_json(&outcome), ExitCode::SUCCESS),
        Ok(Report::Applied(outcome)) => (format!("{outcome}\n"), ExitCode::SUCCESS),
        // Comments do not change what the engine reads or writes: a check
        // that finds nothing but stale or missing ones passes, and lists them.
        Ok(Report::Checked(differences)) if json => {
            let code = if differences.iter().all(Difference::is_comment) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_DRIFT)
            };
            (report::check_json(&schema, &differences), code)
        }
        Ok(Report::Checked(differences)) if differences.is_empty() => (
            format!("schema {schema} matches the model\n"),
            ExitCode::SUCCESS,
        ),
        Ok(Report::Checked(differences)) if differences.iter().all(Difference::is_comment) => (
            report::comments_text(&schema, &differences),
            ExitCode::SUCCESS,
        ),
        Ok(Report::Checked(differences)) => (
            report::differences_text(&schema, &differences, "differs from the model"),
            ExitCode::from(EXIT_DRIFT),
        ),
        Err(err) => {
            if let ErrorKind::Drift { differences, .. } = err.kind() {
                return refused(&schema, differences, json, stdout, stderr);
            }
            return fail(stderr, &err.to_string());
        }
    };
    write_out(stdout, stderr, &text, code)
}

/// A refused `apply`: the differences on stderr (text), or the JSON report
/// on stdout, and the drift exit code.
fn refused(
    schema: &SchemaName,
    differences: &[Difference],
    json: bool,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    const VERDICT: &str = "differs from the model; apply refused and changed nothing";
    if json {
        let text = report::refused_json(schema, differences, &format!("schema {schema} {VERDICT}"));
        return write_out(stdout, stderr, &text, ExitCode::from(EXIT_DRIFT));
    }
    let text = report::differences_text(schema, differences, VERDICT);
    let _ = write!(stderr, "schema-gen: {text}");
    ExitCode::from(EXIT_DRIFT)
}
