//! The `schema-gen` command line: parsing and dispatch. `main.rs` only calls
//! [`run`].

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use schema_model::SchemaName;

use crate::{describe, render};

const EXAMPLES: &str = "\
Examples:
  schema-gen sql                              print the DDL for schema \"alkstore\"
  schema-gen sql --schema tenant_a | psql -v ON_ERROR_STOP=1
  schema-gen describe --format json           the family as stable JSON, for tools
  schema-gen describe --schema tenant_a       the family as markdown, for reviewers

Exit codes: 0 success, 2 usage error or refused input.";

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
    /// Print the bootstrap SQL as a psql-runnable script (one transaction).
    Sql {
        /// The engine-owned schema: lowercase letters, digits and '_', at most 63 bytes.
        #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
        schema: String,
    },
    /// Describe the table family: columns, types, nullability, defaults, docs,
    /// indexes and constraints.
    Describe {
        /// The engine-owned schema.
        #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
        schema: String,
        /// Markdown for reviewers, JSON (stable) for tools.
        #[arg(long, value_enum, default_value_t = Format::Markdown)]
        format: Format,
    },
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
/// `stdout` unless the command succeeds.
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
                let first = text.lines().next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                let _ = writeln!(stderr, "schema-gen: {first} (see 'schema-gen --help')");
                return ExitCode::from(EXIT_USAGE);
            }
            let _ = stdout.write_all(text.as_bytes());
            return ExitCode::SUCCESS;
        }
    };
    match execute(cli.command) {
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

fn execute(command: Command) -> Result<String, String> {
    match command {
        Command::Sql { schema } => Ok(render::script(&schema_name(&schema)?)),
        Command::Describe { schema, format } => {
            let description = describe::engine(&schema_name(&schema)?);
            match format {
                Format::Markdown => Ok(describe::to_markdown(&description)),
                Format::Json => describe::to_json(&description).map_err(|err| err.to_string()),
            }
        }
    }
}
