//! Where `apply` and `check` connect: `--database-url`, else `DATABASE_URL`,
//! resolved with libpq's rules against the `PG*` variables and the password
//! file ([`crate::connect`]).

use std::time::Duration;

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
