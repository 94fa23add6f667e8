//! Where `apply` and `check` connect: `--database-url`, else `DATABASE_URL`,
//! resolved with libpq's rules against the `PG*` variables and the password
//! file ([`crate::connect`]).

use std::time::Duration;

use crate::connect::{ConnectOptions, Environment};

/// How long `apply` / `check` wait for a server to accept a connection when
/// neither `connect_timeout` nor `PGCONNECT_TIMEOUT` says: an unreachable
/// host must not hang a deploy script (libpq would wait forever).
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The variables that name a server when no connection string is given.
const SERVER_VARIABLES: [&str; 2] = ["PGHOST", "PGHOSTADDR"];

/// Resolves the connection of `apply` / `check`. The connection string is
/// `--database-url`, else `DATABASE_URL`; it may be left out (or empty) when
/// `PGHOST` or `PGHOSTADDR` names the server. Errors say which input is
/// wrong and never print a password.
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
    if conninfo.trim().is_empty()
        && SERVER_VARIABLES
            .iter()
            .all(|var| env.var(var).is_none_or(str::is_empty))
    {
        let given = if source.is_empty() {
            "neither --database-url nor DATABASE_URL is given".to_owned()
        } else {
            format!("{source} is empty")
        };
        return Err(format!(
            "no server to connect to: {given}, and neither PGHOST nor PGHOSTADDR is set; give \
             --database-url postgres://user@host:port/db (or key=value pairs), or set PGHOST \
             (with PGPORT, PGUSER, PGDATABASE, ... as psql reads them)"
        ));
    }
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
