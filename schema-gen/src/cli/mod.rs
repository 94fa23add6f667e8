//! The `schema-gen` command line: parsing and dispatch. `main.rs` only calls
//! [`run`]. The offline commands (`sql`, `describe`) live in `family`, the
//! ones that talk to a server (`apply`, `check`) in `database`, which
//! connects through `connection` and prints through `report`; every command
//! fails (exit 2) through `failure`.

mod connection;
mod database;
mod failure;
mod family;
mod layout;
mod report;
mod statements;
mod upgrade;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
use schema_model::SchemaName;

use crate::check::ForeignPolicy;
use crate::connect::Environment;
use failure::Failure;

pub use database::{CheckArgs, DatabaseArgs, ReportFormat};
pub use family::TargetArgs;
pub use statements::{StatementsArgs, StatementsFormat};
pub use upgrade::UpgradeArgs;

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
  schema-gen check --database-url 'postgres://app@db/app?sslmode=verify-full&sslrootcert=ca.pem'
  PGHOST=db PGUSER=app PGDATABASE=app PGSSLMODE=require schema-gen check --format json
                                              libpq's PG* variables and ~/.pgpass, as psql reads them
  schema-gen apply --layout citus --database-url postgres://app@coordinator/app
                                              on a Citus coordinator: the family as a distributed schema
  schema-gen statements --format json         the engine's hot-path statements, their $n parameters and the claim path
  schema-gen upgrade --dry-run                the steps that move an older database to this release's
                                              version, as a psql script (nothing is changed)
  schema-gen upgrade                          run them online, with progress; the older engines keep working
  schema-gen upgrade --contract               once no older engine runs: remove what only they needed
                                              (refused, naming them, while one is connected)

  schema-gen check --lock-timeout 300ms       give up after 300ms behind a lock (exit 2, naming
                                              the session that holds it)

Exit codes (one scheme for check, apply and upgrade; `schema-gen check --help` says more):
  0 matches (apply: the engine opens; upgrade: at this release's version)
  1 drift: what differs is listed (apply and upgrade: refused, nothing changed)
  2 any error: usage, refused input, unreachable server, missing privilege, a lock held past
    --lock-timeout, output that cannot be written
  3 needs upgrade: an older version (`schema-gen upgrade`)
  4 contract pending (check); a contract to run first (upgrade)
  5 foreign objects only, not allowed by check --allow-foreign
  6 newer version than this release's";

/// What `schema-gen check --help` says about its exit codes.
const CHECK_STATES: &str = "\
Exit codes and states (the JSON `state`; when several apply the worst wins: 2, 1, 6, 3, 4, 5, 0):
  0 matches           this release's version, as the model has it (comments that differ, and
                      foreign objects --allow-foreign names, are listed and do not fail it)
  1 drift             something differs that a person must fix: a hand-made change, an index
                      or constraint of another shape, a trigger, rule, unique index, CHECK,
                      default, row-level security or foreign key the model lacks, a NOT NULL
                      extra column; or a missing schema or table (`schema-gen apply` creates it)
  2 error             the question could not be answered: connection, privilege, lock, usage
  3 needs_upgrade     an older version, or an upgrade under way: `schema-gen upgrade`
  4 contract_pending  serves this release; `schema-gen upgrade --contract` once no older
                      engine runs
  5 foreign_objects   nothing else but objects the model does not own that cannot change what
                      the engine reads, writes or returns (a non-unique index on plain columns,
                      a nullable column without default, a table or view of its own), not all
                      named by --allow-foreign
  6 newer_version     a version newer than this release's

Examples:
  schema-gen check --format json                      `state` and `exit_code` by name, each
                                                      difference with its `class`
  schema-gen check --allow-foreign jobs_report_idx --allow-foreign 'report_*'";

/// Prints, describes, applies and checks alkstore's engine schema.
#[derive(Debug, Parser)]
#[command(
    name = "schema-gen",
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
    /// difference; the exit code says where it stands (see below).
    #[command(after_help = CHECK_STATES)]
    Check(CheckArgs),
    /// Print every hot-path statement the engine runs, with its $n
    /// placeholders and its parameters' names and types.
    Statements(StatementsArgs),
    /// Move a database at an older schema version to this release's version
    /// online (expand: the older engines keep working), or with --contract
    /// remove what only the older engines needed; --dry-run prints the plan
    /// as a psql script. Foreign objects (a DBA's index, column, table) are
    /// left untouched and listed. Exit 0 at this release's version, 1 when
    /// drift outside any known version blocks it (nothing changed; the
    /// nearest version named), 3 for a contract before its expand, 6 for a
    /// newer version, 2 on errors.
    Upgrade(UpgradeArgs),
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

/// What `schema-gen --version` prints after the name: the release, and the
/// schema version it creates
/// ([`MODEL_VERSION`](schema_model::history::MODEL_VERSION)), e.g.
/// `0.3.0 (creates schema version 3)`.
pub fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        format!(
            "{} (creates schema version {})",
            env!("CARGO_PKG_VERSION"),
            schema_model::history::MODEL_VERSION
        )
    })
}

/// Exit code for a usage error or refused input (clap's own convention).
pub const EXIT_USAGE: u8 = 2;

/// Exit code of `check` when the schema differs from the model, and of
/// `apply` when it refused because of drift.
pub const EXIT_DRIFT: u8 = 1;

/// Parses `args` (including the program name), runs the command against the
/// process's environment (`DATABASE_URL`, `PG*`, `~/.pgpass`), writes to
/// `stdout` / `stderr` and returns the process exit code. Nothing reaches
/// `stdout` unless the command succeeds (a `check` that finds differences
/// succeeds: it lists them on `stdout` and returns [`EXIT_DRIFT`]).
pub fn run<I, T>(args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run_in(args, &Environment::from_process(), stdout, stderr)
}

/// [`run`] against `env` instead of the process's environment (tests run the
/// command line in-process with the variables of their choice).
pub fn run_in<I, T>(
    args: I,
    env: &Environment,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let parsed = Cli::command()
        .version(version())
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version are answers, not errors: they go to stdout.
            let text = err.render().to_string();
            if err.use_stderr() {
                let message = format!("{} (see 'schema-gen --help')", usage_line(&text));
                return Failure::usage(message).print(
                    failure::asks_for_json(&args),
                    stdout,
                    stderr,
                );
            }
            let _ = stdout.write_all(text.as_bytes());
            return ExitCode::SUCCESS;
        }
    };
    match cli.command {
        // These talk to a server and have their own exit codes.
        Command::Apply(args) => database::run(database::Action::Apply, &args, env, stdout, stderr),
        Command::Check(args) => database::run(
            database::Action::Check(ForeignPolicy::allowing(args.allow_foreign)),
            &args.database,
            env,
            stdout,
            stderr,
        ),
        Command::Sql(target) => print(family::sql(&target), false, stdout, stderr),
        Command::Describe { target, format } => print(
            family::describe(&target, format),
            format == Format::Json,
            stdout,
            stderr,
        ),
        Command::Statements(args) => print(
            statements::statements(&args),
            args.format == StatementsFormat::Json,
            stdout,
            stderr,
        ),
        Command::Upgrade(args) => upgrade::run(&args, env, stdout, stderr),
    }
}

/// clap's error as one line, so scripts can log it: its first line, and the
/// indented lines after it (the missing arguments, the accepted values, a
/// tip); the rest of clap's text is a pointer to --help.
fn usage_line(text: &str) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let listed: Vec<&str> = lines
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect();
    match (listed.is_empty(), first.ends_with(':')) {
        (true, _) => first.to_owned(),
        // `the following required arguments were not provided: a, b`
        (false, true) => format!("{first} {}", listed.join(", ")),
        // `invalid value 'yaml' for '--format <FORMAT>' [possible values: markdown, json]`
        (false, false) => format!("{first} {}", listed.join("; ")),
    }
}

/// Writes a command's output, or its refusal (one line on `stderr`, and the
/// JSON failure on `stdout` when `json`).
fn print(
    result: Result<String, String>,
    json: bool,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> ExitCode {
    match result {
        Ok(output) => write_out(stdout, stderr, &output, ExitCode::SUCCESS),
        Err(message) => Failure::refused_input(message).print(json, stdout, stderr),
    }
}

/// Writes `text` to `stdout` and returns `code`, or, when it cannot be
/// written (a full disk, a closed pipe), says so on `stderr` and returns
/// [`EXIT_USAGE`]: not [`EXIT_DRIFT`], which would read as drift.
fn write_out(
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    text: &str,
    code: ExitCode,
) -> ExitCode {
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => code,
        Err(err) => {
            let _ = writeln!(stderr, "schema-gen: cannot write output: {err}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

pub(crate) fn schema_name(raw: &str) -> Result<SchemaName, String> {
    SchemaName::new(raw).map_err(|err| err.to_string())
}
