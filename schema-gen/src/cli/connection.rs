//! Where `apply` and `check` connect: `--database-url`, else `DATABASE_URL`,
//! resolved with libpq's rules against the `PG*` variables and the password
//! file ([`crate::connect`]).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use schema_model::SchemaName;

use super::failure::Failure;
use super::schema_name;
use crate::connect::{ConnectOptions, Environment};

/// How long `apply` / `check` wait for a server to accept a connection when
/// neither `connect_timeout` nor `PGCONNECT_TIMEOUT` says: an unreachable
/// host must not hang a deploy script (libpq would wait forever).
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves the connection of `apply` / `check`. The connection string is
/// `--database-url`, else `DATABASE_URL`; left out (or empty), the `PG*`
/// variables and then libpq's defaults decide, as for psql: with nothing set,
/// the local socket in `/var/run/postgresql` (or `/tmp`), port 5432, the
/// operating-system user and a database named like it. Errors say which
/// input is wrong and never print a password.
pub(super) fn options(
    database_url: Option<&str>,
    env: &Environment,
) -> Result<ConnectOptions, String> {
    let (conninfo, source) = match database_url {
        Some(url) => (url, "--database-url"),
        None => match env.var("DATABASE_URL") {
            Some(url) => (url, "DATABASE_URL"),
            None => ("", ""),
        },
    };
    let mut options = ConnectOptions::resolve(conninfo, env).map_err(|err| {
        if source.is_empty() {
            err.to_string()
        } else {
            format!("{source}: {err}")
        }
    })?;
    options
        .fallback_application_name("schema-gen")
        .default_connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    Ok(options)
}

/// What every command that talks to a database needs before it does: the
/// schema name validated, the connection resolved and a runtime started,
/// in that order, so bad input is refused before anything touches the
/// network.
pub(super) struct Prepared {
    /// The validated schema name.
    pub(super) schema: SchemaName,
    /// The resolved connection.
    pub(super) connection: ConnectOptions,
    /// A current-thread runtime to run the work on.
    pub(super) runtime: tokio::runtime::Runtime,
}

/// Builds [`Prepared`], or prints the failure (as JSON when `json`) and
/// returns its exit code.
pub(super) fn prepare(
    raw_schema: &str,
    database_url: Option<&str>,
    env: &Environment,
    json: bool,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<Prepared, ExitCode> {
    let schema = schema_name(raw_schema)
        .map_err(|message| Failure::refused_input(message).print(json, stdout, stderr))?;
    let connection = options(database_url, env).map_err(|message| {
        Failure::configuration(message)
            .about(schema.as_str())
            .print(json, stdout, stderr)
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| {
            Failure::runtime(format!("cannot start the async runtime: {err}"))
                .about(schema.as_str())
                .print(json, stdout, stderr)
        })?;
    Ok(Prepared {
        schema,
        connection,
        runtime,
    })
}

/// Prints libpq's warnings (an ignored password file) once: a failed
/// login's message already carries them, so those are left out then.
pub(super) fn print_warnings(warnings: &[String], failure: Option<&str>, stderr: &mut dyn Write) {
    for warning in warnings {
        if !failure.is_some_and(|text| text.contains(warning.as_str())) {
            let _ = writeln!(stderr, "schema-gen: warning: {warning}");
        }
    }
}
