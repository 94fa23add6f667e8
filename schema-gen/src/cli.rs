//! The `schema-gen` command line: parsing and dispatch. `main.rs` only calls
//! [`run`].

use std::io::Write;
use std::process::ExitCode;
use std::str::FromStr as _;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use schema_model::{DatabaseName, SchemaName};

use crate::error::{self, Error, ErrorKind};
use crate::verify::{Difference, verify};
use crate::{Outcome, bootstrap, clickhouse, describe, render};

const EXAMPLES: &str = "\
Examples:
  schema-gen sql                              print the DDL for schema \"alkstore\"
  schema-gen sql --schema tenant_a | psql -v ON_ERROR_STOP=1
  schema-gen describe --format json           the family as stable JSON, for tools
  schema-gen describe --schema tenant_a       the family as markdown, for reviewers
  schema-gen sql --dialect clickhouse         the analytics sink's DDL (database \"relay_analytics\")
  schema-gen sql --dialect clickhouse --database analytics_eu | clickhouse client --multiquery
  schema-gen describe --dialect clickhouse --format json
  schema-gen apply --database-url postgres://app@db/app --schema tenant_a
                                              create the schema, or confirm it is current
  DATABASE_URL=postgres://app@db/app schema-gen check
                                              list every difference between the database and the model

Exit codes: 0 success (check: the schema matches the model), 1 drift (check: differences
listed on stdout; apply: refused, nothing changed), 2 any error: usage, refused input,
unreachable server, missing privilege.";

/// Prints, describes, applies and checks alkstore's engine schema.
#[derive(Debug, Parser)]
#[command(
    name = "schema-gen",
    version,
    about = "Prints, describes, applies and checks alkstore's engine schema.",
    after_help = EXAMPLES
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the bootstrap SQL as a psql-runnable script (one transaction), or
    /// with --dialect clickhouse the analytics sink's DDL for clickhouse client.
    Sql(TargetArgs),
    /// Describe the table family: columns, types, nullability, defaults, docs,
    /// indexes and constraints.
    Describe {
        /// Which family, and the schema or database it lives in.
        #[command(flatten)]
        target: TargetArgs,
        /// Markdown for reviewers, JSON (stable) for tools.
        #[arg(long, value_enum, default_value_t = Format::Markdown)]
        format: Format,
    },
    /// Create the engine schema in a live PostgreSQL database, or confirm it is
    /// current (what the engine does at open): one transaction, refuses on drift.
    Apply(DatabaseArgs),
    /// Compare a live PostgreSQL database with the model and print every
    /// difference (exit 0 when it matches, 1 when it differs).
    Check(DatabaseArgs),
}

/// Which family `sql` and `describe` are about, and where it lives.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The engine-owned schema: lowercase letters, digits and '_', at most 63 bytes
    /// (postgres dialect only) [default: alkstore].
    #[arg(long)]
    pub schema: Option<String>,
    /// Which family: the engine's PostgreSQL tables, or the ClickHouse analytics sink.
    #[arg(long, value_enum, default_value_t = Dialect::Postgres)]
    pub dialect: Dialect,
    /// The ClickHouse database (clickhouse dialect only) [default: relay_analytics].
    #[arg(long)]
    pub database: Option<String>,
}

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
}

/// Which table family (and SQL dialect) a command is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dialect {
    /// The engine's tables, in PostgreSQL (`--schema`).
    Postgres,
    /// The analytics sink, in ClickHouse (`--database`).
    Clickhouse,
}

/// Output format of `describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Markdown tables.
    Markdown,
    /// Pretty-printed JSON.
    Json,
}

/// Exit code for a usage error or refused input (clap's own convention).
pub const EXIT_USAGE: u8 = 2;

/// Parses `args` (including the program name), runs the command, writes to
/// `stdout` / `stderr` and returns the process exit code. Nothing reaches
/// `stdout` unless the command succeeds (a `check` that finds differences
/// succeeds: it lists them on `stdout` and returns [`EXIT_DRIFT`]).
pub fn run<I, T>(args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are answers, not errors: they go to stdout.
            let text = err.render().to_string();
            if err.use_stderr() {
                // One line, so scripts can log it; the rest of clap's text is a hint.
                let mut lines = text.lines();
                let first = lines.next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                // clap lists missing arguments on the next, indented lines.
                let listed: Vec<&str> = if first.ends_with(':') {
                    lines
                        .take_while(|line| line.starts_with("  "))
                        .map(str::trim)
                        .collect()
                } else {
                    Vec::new()
                };
                let first = if listed.is_empty() {
                    first.to_owned()
                } else {
                    format!("{first} {}", listed.join(", "))
                };
                let _ = writeln!(stderr, "schema-gen: {first} (see 'schema-gen --help')");
                return ExitCode::from(EXIT_USAGE);
            }
            let _ = stdout.write_all(text.as_bytes());
            return ExitCode::SUCCESS;
        }
    };
    match cli.command {
        // These talk to a server and have their own exit codes.
        Command::Apply(args) => database(Action::Apply, &args, stdout, stderr),
        Command::Check(args) => database(Action::Check, &args, stdout, stderr),
        Command::Sql(target) => print(sql(&target), stdout, stderr),
        Command::Describe { target, format } => {
            print(describe_family(&target, format), stdout, stderr)
        }
    }
}

/// Writes a command's output, or its refusal as one line on `stderr`.
fn print(
    result: Result<String, String>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    match result {
        Ok(output) => match stdout.write_all(output.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                let _ = writeln!(stderr, "schema-gen: cannot write output: {err}");
                ExitCode::FAILURE
            }
        },
        Err(message) => {
            let _ = writeln!(stderr, "schema-gen: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn schema_name(raw: &str) -> Result<SchemaName, String> {
    SchemaName::new(raw).map_err(|err| err.to_string())
}

/// The validated target of `sql` / `describe`. A name flag of the other
/// dialect is refused rather than ignored: it would mean the operator had a
/// different database in mind than the one printed.
enum Target {
    Postgres(SchemaName),
    Clickhouse(DatabaseName),
}

fn target(args: &TargetArgs) -> Result<Target, String> {
    match (args.dialect, &args.schema, &args.database) {
        (Dialect::Postgres, schema, None) => {
            Ok(Target::Postgres(schema_name(schema.as_deref().unwrap_or(
                schema_model::schema_name::DEFAULT_SCHEMA_NAME,
            ))?))
        }
        (Dialect::Postgres, _, Some(_)) => Err(
            "--database names a ClickHouse database and needs --dialect clickhouse; \
             the postgres dialect takes --schema"
                .to_owned(),
        ),
        (Dialect::Clickhouse, Some(_), _) => Err(
            "--schema names a PostgreSQL schema; with --dialect clickhouse use --database"
                .to_owned(),
        ),
        (Dialect::Clickhouse, None, database) => database
            .as_deref()
            .map_or_else(|| Ok(DatabaseName::default()), DatabaseName::new)
            .map(Target::Clickhouse)
            .map_err(|err| err.to_string()),
    }
}

/// `schema-gen sql`: the script of the chosen family.
fn sql(args: &TargetArgs) -> Result<String, String> {
    Ok(match target(args)? {
        Target::Postgres(schema) => render::script(&schema),
        Target::Clickhouse(database) => clickhouse::script(&database),
    })
}

/// `schema-gen describe`: the chosen family as markdown or JSON.
fn describe_family(args: &TargetArgs, format: Format) -> Result<String, String> {
    match (target(args)?, format) {
        (Target::Postgres(schema), Format::Markdown) => {
            Ok(describe::to_markdown(&describe::engine(&schema)))
        }
        (Target::Postgres(schema), Format::Json) => {
            describe::to_json(&describe::engine(&schema)).map_err(|err| err.to_string())
        }
        (Target::Clickhouse(database), Format::Markdown) => Ok(describe::analytics_to_markdown(
            &clickhouse::describe(&database),
        )),
        (Target::Clickhouse(database), Format::Json) => {
            describe::to_json(&clickhouse::describe(&database)).map_err(|err| err.to_string())
        }
    }
}

/// Exit code of `check` when the schema differs from the model, and of
/// `apply` when it refused because of drift.
pub const EXIT_DRIFT: u8 = 1;

/// Which database command to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
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
fn database(
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
    let result = runtime.block_on(async {
        let mut client = connect(&config).await?;
        match action {
            Action::Apply => bootstrap(&mut client, &schema).await.map(Report::Applied),
            Action::Check => verify(&client, &schema).await.map(Report::Checked),
        }
    });
    let (text, code) = match result {
        Ok(Report::Applied(outcome)) => (format!("{outcome}\n"), ExitCode::SUCCESS),
        Ok(Report::Checked(differences)) if differences.is_empty() => (
            format!("schema {schema} matches the model\n"),
            ExitCode::SUCCESS,
        ),
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
    match stdout.write_all(text.as_bytes()) {
        Ok(()) => code,
        Err(err) => {
            let _ = writeln!(stderr, "schema-gen: cannot write output: {err}");
            ExitCode::FAILURE
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
