//! `schema-gen apply` and `schema-gen check`: the commands that connect to a
//! PostgreSQL server.

use std::io::Write;
use std::process::ExitCode;
use std::str::FromStr as _;
use std::time::Duration;

use clap::Args;
use schema_model::SchemaName;

use super::{EXIT_DRIFT, EXIT_USAGE, schema_name};
use crate::error::{self, Error, ErrorKind};
use crate::verify::{Difference, verify_with};
use crate::{Options, Outcome, bootstrap_with};

/// Where `apply` and `check` connect, and which schema they look at.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection string: `postgres://user@host:port/db` or
    /// `host=... dbname=...`; TLS is not supported yet.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// The engine-owned schema: lowercase letters, digits and '_', at most 63 bytes.
    #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
    pub schema: String,
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

/// How long `apply` / `check` wait for the server to accept a connection when
/// the URL does not say (`connect_timeout`): an unreachable host must not
/// hang a deploy script.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `apply` or `check`. The schema name is validated, and the URL parsed,
/// before anything touches the network.
pub(super) fn run(
    action: Action,
    args: &DatabaseArgs,
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
    let mut config = match tokio_postgres::Config::from_str(&args.database_url) {
        Ok(config) => config,
        Err(err) => {
            // The driver's message never echoes the URL, so no password leaks.
            return fail(
                stderr,
                &format!(
                    "the database URL is not valid: {err} (give --database-url or DATABASE_URL \
                     as postgres://user@host:port/db or host=... dbname=...)"
                ),
            );
        }
    };
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(stderr, &format!("cannot start the async runtime: {err}")),
    };
    let options = Options {
        lock_timeout: args.lock_timeout,
    };
    let result = runtime.block_on(async {
        let mut client = connect(&config).await?;
        match action {
            Action::Apply => bootstrap_with(&mut client, &schema, &options)
                .await
                .map(Report::Applied),
            Action::Check => verify_with(&client, &schema, &options)
                .await
                .map(Report::Checked),
        }
    });
    let (text, code) = match result {
        Ok(Report::Applied(outcome)) => (format!("{outcome}\n"), ExitCode::SUCCESS),
        Ok(Report::Checked(differences)) if differences.is_empty() => (
            format!("schema {schema} matches the model\n"),
            ExitCode::SUCCESS,
        ),
        // Comments do not change what the engine reads or writes: a check
        // that only finds stale or missing ones passes, and lists them.
        Ok(Report::Checked(differences)) if differences.iter().all(Difference::is_comment) => {
            (comments_report(&schema, &differences), ExitCode::SUCCESS)
        }
        Ok(Report::Checked(differences)) => (
            differences_report(&schema, &differences, "differs from the model"),
            ExitCode::from(EXIT_DRIFT),
        ),
        Err(err) => {
            if let ErrorKind::Drift { differences, .. } = err.kind() {
                let report = differences_report(
                    &schema,
                    differences,
                    "differs from the model; apply refused and changed nothing",
                );
                let _ = write!(stderr, "schema-gen: {report}");
                return ExitCode::from(EXIT_DRIFT);
            }
            return fail(stderr, &err.to_string());
        }
    };
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => code,
        Err(err) => {
            // Not 1: that would read as drift.
            let _ = writeln!(stderr, "schema-gen: cannot write output: {err}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// `schema x <verdict> in N ways:` and one difference per line, comments
/// marked as documentation only.
fn differences_report(schema: &SchemaName, differences: &[Difference], verdict: &str) -> String {
    let mut out = format!(
        "schema {schema} {verdict} ({} difference{}):\n",
        differences.len(),
        if differences.len() == 1 { "" } else { "s" }
    );
    for difference in differences {
        let note = if difference.is_comment() {
            " (documentation only)"
        } else {
            ""
        };
        out.push_str(&format!("  {difference}{note}\n"));
    }
    out
}

/// `schema x matches the model; N comments differ ...:` and one per line.
fn comments_report(schema: &SchemaName, differences: &[Difference]) -> String {
    let one = differences.len() == 1;
    let mut out = format!(
        "schema {schema} matches the model; {} comment{} differ{} (documentation only, so check \
         passes; `schema-gen sql --schema {schema} | psql -v ON_ERROR_STOP=1` run by the owner \
         refreshes {}):\n",
        differences.len(),
        if one { "" } else { "s" },
        if one { "s" } else { "" },
        if one { "it" } else { "them" },
    );
    for difference in differences {
        out.push_str(&format!("  {difference}\n"));
    }
    out
}

/// Opens a connection (no TLS) and drives it on the current runtime.
async fn connect(config: &tokio_postgres::Config) -> Result<tokio_postgres::Client, Error> {
    match config.connect(tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            // A failure shows up as an error of the next query on `client`.
            tokio::spawn(connection);
            Ok(client)
        }
        Err(err) => Err(ErrorKind::Connection {
            message: format!(
                "cannot connect to PostgreSQL at {}: {}; check --database-url (or DATABASE_URL) \
                 and that the server is up",
                describe_target(config),
                error::detail(&err)
            ),
            source: Some(err),
        }
        .into()),
    }
}

/// `host:port/db as user`, never the password.
fn describe_target(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(dir) => dir.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    let mut target = if hosts.is_empty() {
        "localhost".to_owned()
    } else {
        hosts.join(",")
    };
    if !ports.is_empty() {
        target.push(':');
        target.push_str(&ports.join(","));
    }
    if let Some(db) = config.get_dbname() {
        target.push('/');
        target.push_str(db);
    }
    if let Some(user) = config.get_user() {
        target.push_str(" as ");
        target.push_str(user);
    }
    target
}
