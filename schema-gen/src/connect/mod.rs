//! Connecting the way libpq (and so psql) does: the same connection strings,
//! the same `PG*` environment variables and password file, the same
//! precedence (what the connection string says wins over the service file's
//! section, which wins over the environment, which wins over the defaults),
//! and TLS with libpq's `sslmode` meanings
//! over rustls.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use schema_gen::connect::{ConnectOptions, Environment};
//!
//! // `PGHOST`, `PGUSER`, `~/.pgpass`, ... fill in what the string leaves out.
//! let options = ConnectOptions::resolve(
//!     "postgres://app@db.internal/app?sslmode=verify-full",
//!     &Environment::from_process(),
//! )?;
//! let client = options.connect().await?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! Why not a crate: tokio-postgres's own `Config` parser refuses libpq's TLS
//! and password-file keywords and reads no environment; `pg-client-config`
//! builds on that parser (so the same keywords are refused) and lets the
//! environment override the string; `postgres_secrets` and the other pgpass
//! parsers skip the permission rule or refuse lines libpq accepts; sqlx's
//! `PgConnectOptions` reads the environment and pgpass but parses URLs only,
//! hides the password and root certificate behind private fields, and would
//! bring sqlx's runtime into an engine that uses tokio-postgres. So the
//! parsing (`conninfo.rs`), the service file (`service.rs`), the password
//! file (`pgpass.rs`) and the precedence (`settings.rs`) are written after libpq's
//! `fe-connect.c`, and the tests
//! in `tests/pg_conninfo/` run psql on the same inputs and compare.
//!
//! Where this differs from libpq, on purpose:
//!
//! - a `sslrootcert`, `sslcert` or `sslkey` file that is named but missing is
//!   an error (libpq silently goes on without it, so a typo turns off
//!   verification or the client certificate);
//! - `verify-ca` / `verify-full` without a root certificate file use the
//!   system's trusted roots (libpq 15 refuses; libpq 16 wants
//!   `sslrootcert=system`, which is accepted here too);
//! - `prefer` does not retry in clear text after a failed TLS handshake or
//!   login (libpq does, so a certificate it could not verify still lets it
//!   in unencrypted);
//! - the keywords marked refused in `conninfo.rs` (`sslcrl`,
//!   `requirepeer`, `sslpassword`, ...) are errors rather than ignored;
//! - rustls checks host names against the certificate's subject alternative
//!   names only, never its common name.
//!
//! One job per file: [`Environment`] (what the process gives),
//! `settings.rs` (precedence: string, service, environment), `targets.rs`
//! (host and target expansion), `passwords.rs` (password lookup, with
//! `pgpass.rs` reading the file), `tls_request.rs` (which TLS files and
//! settings, with `tls.rs` building rustls's configuration), `options.rs`
//! (the resolved [`ConnectOptions`]), `attempt.rs` (the connect itself) and
//! `hints.rs` (what a failure means and what to do).

mod attempt;
mod config_error;
pub(crate) mod conninfo;
mod environment;
mod hints;
mod options;
mod passwords;
pub(crate) mod pgpass;
pub(crate) mod service;
mod settings;
mod targets;
pub(crate) mod tls;
mod tls_request;

pub use config_error::ConfigError;
pub use conninfo::ParseError;
pub use environment::{Environment, LIBPQ_SOCKET_DIRS};
pub use options::ConnectOptions;
pub use passwords::PasswordSource;
pub use settings::Origin;
pub use tls::SslMode;
