//! `schema-gen apply` and `schema-gen check`: the commands that connect to a
//! PostgreSQL server. Where they connect is [`super::connection`]'s
//! business, what they print [`super::report`]'s.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use schema_model::{Layout, SchemaName};

use super::failure::Failure;
use super::{EXIT_DRIFT, connection, layout, report, write_out};
use crate::bootstrap::{Outcome, bootstrap_with};
use crate::check::{ForeignPolicy, Status, status_for};
use crate::connect::Environment;
use crate::error::{Error, ErrorKind};
use crate::grants::{audit::Roles, role_name};
use crate::options::MAX_LOCK_TIMEOUT;
use crate::options::Options;
use crate::verify::Difference;

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
    /// Where the engine family lives: `citus` creates it as a distributed
    /// schema on a Citus coordinator (apply), and reads pg_dist_schema and
    /// pg_dist_partition to report a family distributed otherwise (check);
    /// a server without Citus, or a worker, is refused.
    #[arg(long, value_name = "LAYOUT", default_value = "single-server", value_parser = layout::parser())]
    pub layout: Layout,
    /// check only: also verify that this role (the engine's runtime role)
    /// has exactly the privileges `schema-gen grants` gives it, and the
    /// readiness conditions its statements need (replica identity of
    /// published tables, the right to vacuum); each gap is drift (exit 1).
    #[arg(long, value_name = "ROLE")]
    pub runtime_role: Option<String>,
    /// check only, with --runtime-role: the role that runs the engine's
    /// vacuum [default: the runtime role].
    #[arg(long, value_name = "ROLE", requires = "runtime_role")]
    pub maintenance_role: Option<String>,
}

/// The arguments of `check`: where and how, as `apply`, and the policy on
/// foreign objects.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Where to connect, which schema, how to report.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Let a foreign object pass (one the model does not own and that
    /// cannot change what the engine's statements do: a DBA's non-unique
    /// index, a nullable column without default, a table or view): an
    /// index's or relation's name, or TABLE.COLUMN; `*` stands for any run
    /// of characters (`report_*`; `*` alone allows them all). Repeatable.
    /// Foreign objects not named make check exit 5 when nothing worse is found.
    #[arg(long = "allow-foreign", value_name = "NAME")]
    pub allow_foreign: Vec<String>,
}

/// The form `--lock-timeout` takes, for its error messages.
const LOCK_TIMEOUT_FORM: &str = "a number with its unit, e.g. 300ms, 5s, 1m or 1m 30s";

/// `300ms`, `5s`, `1m 30s`, `1d`, ...: jiff's friendly duration format, days
/// and weeks taken as 24 and 168 hours (PostgreSQL's `1d` is 24 hours too).
/// Refused: zero (PostgreSQL reads a zero `lock_timeout` as "wait forever"),
/// a negative span, months and years (no fixed length), and anything above
/// PostgreSQL's maximum (2147483647 ms), which would otherwise be silently
/// cut to it. jiff's own message describes its grammar, not the mistake, so
/// the messages here are ours.
pub(super) fn parse_lock_timeout(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let span = jiff::fmt::friendly::SpanParser::new()
        .parse_span(trimmed)
        .map_err(|_| {
            if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                format!("`{trimmed}` has no unit; write {LOCK_TIMEOUT_FORM}")
            } else {
                format!("`{trimmed}` is not a duration; write {LOCK_TIMEOUT_FORM}")
            }
        })?;
    if span.is_negative() {
        return Err(format!(
            "`{trimmed}` is negative; write {LOCK_TIMEOUT_FORM}"
        ));
    }
    let duration = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .ok()
        .and_then(|signed| Duration::try_from(signed).ok())
        .ok_or_else(|| {
            format!(
                "`{trimmed}` has months or years, which have no fixed length; write \
                 {LOCK_TIMEOUT_FORM}"
            )
        })?;
    if duration < Duration::from_millis(1) {
        return Err("it must be at least 1ms (0 would mean: wait forever)".to_owned());
    }
    // PostgreSQL counts whole milliseconds, rounded up.
    if duration.as_nanos().div_ceil(1_000_000) > MAX_LOCK_TIMEOUT.as_millis() {
        return Err(format!(
            "`{trimmed}` is more than PostgreSQL's maximum lock_timeout, {}ms (about 24 days)",
            MAX_LOCK_TIMEOUT.as_millis()
        ));
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action {
    Apply,
    /// `check`, with the policy its exit code follows.
    Check(ForeignPolicy),
}

/// What a database command found.
enum Report {
    Applied(Outcome),
    Checked(Status),
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
    let json = args.format == ReportFormat::Json;
    let roles = match roles(&action, args) {
        Ok(roles) => roles,
        Err(message) => return Failure::usage(message).print(json, stdout, stderr),
    };
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
    let bounds = Options {
        lock_timeout: args.lock_timeout,
        layout: args.layout,
    };
    let result = runtime.block_on(async {
        let mut client = connection.connect().await?;
        match action {
            Action::Apply => bootstrap_with(&mut client, &schema, &bounds)
                .await
                .map(Report::Applied),
            Action::Check(_) => status_for(&client, &schema, &bounds, roles.as_ref())
                .await
                .map(Report::Checked),
        }
    });
    let failed = result.as_ref().err().map(ToString::to_string);
    connection::print_warnings(connection.warnings(), failed.as_deref(), stderr);
    let (text, code) = match result {
        Ok(Report::Applied(outcome)) if json => (report::apply_json(&outcome), ExitCode::SUCCESS),
        Ok(Report::Applied(outcome)) => (format!("{outcome}\n"), ExitCode::SUCCESS),
        // The exit code is the state's: comments never fail it, foreign
        // objects only as the policy says.
        Ok(Report::Checked(status)) => {
            let policy = match &action {
                Action::Check(policy) => policy.clone(),
                Action::Apply => ForeignPolicy::default(),
            };
            let code = ExitCode::from(status.state(&policy).exit_code());
            if json {
                (report::check_json(&schema, &status, &policy), code)
            } else {
                (report::check_text(&schema, &status, &policy).0, code)
            }
        }
        Err(err) => {
            if let Some(refusal) = Refusal::of(&err, &schema, "apply") {
                return refusal.print(json, stdout, stderr);
            }
            return Failure::from_error(&err)
                .about(schema.as_str())
                .print(json, stdout, stderr);
        }
    };
    write_out(stdout, stderr, &text, code)
}

/// The roles `check --runtime-role` verifies; `apply` takes none.
fn roles(action: &Action, args: &DatabaseArgs) -> Result<Option<Roles>, String> {
    let Some(runtime) = &args.runtime_role else {
        return Ok(None);
    };
    if *action == Action::Apply {
        return Err(
            "--runtime-role and --maintenance-role are for check (apply creates or confirms \
             the family; `schema-gen grants` prints the grants)"
                .to_owned(),
        );
    }
    Ok(Some(Roles {
        runtime: role_name(runtime)?,
        maintenance: args
            .maintenance_role
            .as_deref()
            .map(role_name)
            .transpose()?,
    }))
}

/// A refusal over drift (`apply`, `upgrade`): nothing was changed.
pub(super) struct Refusal<'a> {
    pub(super) schema: &'a SchemaName,
    /// What is in the way (drift, objects missing from a drifted family).
    pub(super) differences: &'a [Difference],
    /// The known version the differences are from, when the schema is none.
    pub(super) nearest: Option<u32>,
    /// The command that refused.
    pub(super) command: &'static str,
}

impl<'a> Refusal<'a> {
    /// The refusal `err` carries, when it is a drift refusal of `command`.
    pub(super) fn of(
        err: &'a Error,
        schema: &'a SchemaName,
        command: &'static str,
    ) -> Option<Self> {
        match err.kind() {
            ErrorKind::Drift {
                differences,
                nearest,
                ..
            } => Some(Refusal {
                schema,
                differences,
                nearest: *nearest,
                command,
            }),
            _ => None,
        }
    }

    /// The differences on stderr (text), or the JSON report on stdout, and
    /// the drift exit code.
    pub(super) fn print(
        &self,
        json: bool,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> ExitCode {
        let command = self.command;
        let verdict = match self.nearest {
            Some(version) => format!(
                "is no version this release knows, nor a step of an upgrade between two; it is \
                 nearest to version {version}, from which it differs; {command} refused and \
                 changed nothing"
            ),
            None => format!("differs from the model; {command} refused and changed nothing"),
        };
        let schema = self.schema;
        if json {
            let text = report::refused_json(
                schema,
                self.differences,
                self.nearest,
                &format!("schema {schema} {verdict}"),
            );
            return write_out(stdout, stderr, &text, ExitCode::from(EXIT_DRIFT));
        }
        let text = report::differences_text(schema, self.differences, &verdict);
        let _ = write!(stderr, "schema-gen: {text}");
        ExitCode::from(EXIT_DRIFT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_timeouts_parse_or_say_what_to_write() {
        assert_eq!(parse_lock_timeout("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_lock_timeout("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_lock_timeout("2147483647ms"), Ok(MAX_LOCK_TIMEOUT));
        assert_eq!(
            parse_lock_timeout("5"),
            Err(format!("`5` has no unit; write {LOCK_TIMEOUT_FORM}"))
        );
        assert_eq!(
            parse_lock_timeout("soon"),
            Err(format!(
                "`soon` is not a duration; write {LOCK_TIMEOUT_FORM}"
            ))
        );
        for too_long in ["10000h", "2147483648ms", "2147483647.5ms"] {
            let err = parse_lock_timeout(too_long).unwrap_err();
            assert!(
                err.contains("more than PostgreSQL's maximum lock_timeout, 2147483647ms"),
                "{err}"
            );
        }
        assert!(
            parse_lock_timeout("0s")
                .unwrap_err()
                .contains("at least 1ms")
        );
    }
}
