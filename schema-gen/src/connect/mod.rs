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
//! file (`pgpass.rs`) and the precedence below are written after libpq's
//! `fe-connect.c`, and the tests
//! in `tests/pg_conninfo.rs` run psql on the same inputs and compare.
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

pub(crate) mod conninfo;
pub(crate) mod pgpass;
pub(crate) mod service;
pub(crate) mod tls;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use conninfo::ParseError;
pub use tls::SslMode;

use crate::error::{self, Error, ErrorKind};
use conninfo::Support;
use tls::{Roots, TlsRequest, TlsSettings};

/// The environment libpq reads: `PG*` variables, the home directory (for
/// `~/.pgpass` and `~/.postgresql/`), and the operating-system user name
/// (the default user).
///
/// [`Environment::from_process`] reads the real one; tests build one with
/// [`Environment::new`] and the `with_*` methods, so no test has to change
/// the process's environment.
#[derive(Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
    home: Option<PathBuf>,
    os_user: Option<String>,
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vars: BTreeMap<&str, &str> = self
            .vars
            .iter()
            .map(|(k, v)| {
                let v = if k == "PGPASSWORD" { "***" } else { v.as_str() };
                (k.as_str(), v)
            })
            .collect();
        f.debug_struct("Environment")
            .field("vars", &vars)
            .field("home", &self.home)
            .field("os_user", &self.os_user)
            .finish()
    }
}

impl Environment {
    /// An empty environment: no variables, no home directory, no user name.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process's environment: every variable that is valid UTF-8, the
    /// home directory as libpq finds it (`HOME`, else the password database),
    /// and the effective user's name.
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            home: std::env::home_dir(),
            os_user: whoami::username().ok(),
        }
    }

    /// Sets a variable.
    pub fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Sets the home directory.
    pub fn with_home(mut self, dir: impl Into<PathBuf>) -> Self {
        self.home = Some(dir.into());
        self
    }

    /// Sets the operating-system user name (libpq's default user).
    pub fn with_os_user(mut self, name: &str) -> Self {
        self.os_user = Some(name.to_owned());
        self
    }

    /// A variable's value, if set.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

/// Where a setting came from, as an error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The connection string's keyword (or URL part).
    ConnectionString(&'static str),
    /// An environment variable.
    Environment(&'static str),
    /// A keyword of the connection service file's section.
    ServiceFile(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionString(key) => write!(f, "`{key}`"),
            Self::Environment(var) => f.write_str(var),
            Self::ServiceFile(key) => write!(f, "`{key}` of the service file"),
        }
    }
}

/// Why a connection could not be configured. Nothing reached the network;
/// no message carries a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The connection string does not parse.
    #[error("the connection string is not valid: {0}")]
    Parse(#[from] ParseError),
    /// A setting has a value libpq would refuse.
    #[error("{message}")]
    Invalid {
        /// The keyword or variable.
        origin: Origin,
        /// What is wrong and what is expected.
        message: String,
    },
    /// A setting libpq knows that schema-gen cannot honour.
    #[error("{origin} is not supported by schema-gen: {reason}")]
    Unsupported {
        /// The keyword or variable.
        origin: Origin,
        /// Why, and what to do instead.
        reason: String,
    },
    /// A certificate or key file cannot be used.
    #[error("{0}")]
    TlsFile(String),
}

/// Where a password came from, so a failed login can say which one to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// The connection string.
    ConnectionString,
    /// `PGPASSWORD`.
    Environment,
    /// The connection service file.
    ServiceFile,
    /// A line of the password file.
    File {
        /// The password file.
        path: PathBuf,
        /// The 1-based line that matched.
        line: usize,
    },
}

impl fmt::Display for PasswordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionString => f.write_str("the connection string"),
            Self::Environment => f.write_str("PGPASSWORD"),
            Self::ServiceFile => f.write_str("the connection service file"),
            Self::File { path, line } => write!(f, "line {line} of {}", path.display()),
        }
    }
}

/// One server to try.
#[derive(Debug, Clone)]
struct Target {
    /// What to connect to.
    host: Host,
    port: u16,
    password: Option<(String, PasswordSource)>,
}

#[derive(Debug, Clone)]
enum Host {
    /// A host name or address, resolved by the driver.
    Name(String),
    /// `hostaddr`: connect to the address, verify and look up passwords by
    /// the name when there is one.
    Addr { name: Option<String>, addr: IpAddr },
    /// A Unix-domain socket directory.
    Socket(PathBuf),
}

impl fmt::Display for Target {
    /// `host:port`, or `socket DIR (port N)`; never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Socket(_) => write!(f, "{} (port {})", self.host, self.port),
            host => write!(f, "{host}:{}", self.port),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Addr {
                name: Some(name),
                addr,
            } => write!(f, "{name} ({addr})"),
            Self::Addr { name: None, addr } => write!(f, "{addr}"),
            Self::Socket(dir) => write!(f, "socket {}", dir.display()),
        }
    }
}

/// A resolved connection: every setting decided, every file read, nothing
/// sent yet. Built by [`ConnectOptions::resolve`], used by
/// [`ConnectOptions::connect`].
#[derive(Clone)]
pub struct ConnectOptions {
    /// Everything but host, port and password.
    base: tokio_postgres::Config,
    targets: Vec<Target>,
    user: String,
    dbname: String,
    tls: TlsSettings,
    random_order: bool,
    application_name_set: bool,
    connect_timeout_set: bool,
    /// Bounds each attempt as a whole: the driver's own timeout covers the
    /// TCP connect only, so a server that accepts and then stays silent (or a
    /// stalled TLS handshake) would hang without it.
    connect_timeout: Option<Duration>,
    /// No host or hostaddr anywhere: libpq's default socket is tried.
    host_defaulted: bool,
    warnings: Vec<String>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The base Config redacts its password itself; targets print theirs
        // as the source only.
        f.debug_struct("ConnectOptions")
            .field("target", &self.describe())
            .field("sslmode", &self.tls.mode)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// The settings in force, each with where it came from.
struct Settings(BTreeMap<&'static str, (String, Origin)>);

impl Settings {
    fn get(&self, key: &str) -> Option<(&str, Origin)> {
        self.0.get(key).map(|(v, o)| (v.as_str(), *o))
    }

    /// The value when set and not empty (libpq treats empty as unset).
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(|(v, _)| v).filter(|v| !v.is_empty())
    }

    fn origin(&self, key: &'static str) -> Origin {
        self.get(key)
            .map(|(_, o)| o)
            .unwrap_or(Origin::ConnectionString(key))
    }

    fn invalid(&self, key: &'static str, expected: &str) -> ConfigError {
        let origin = self.origin(key);
        let shown = if conninfo::is_secret(key) {
            String::new()
        } else {
            format!(": `{}`", self.get(key).map(|(v, _)| v).unwrap_or(""))
        };
        ConfigError::Invalid {
            origin,
            message: format!("invalid value for {origin}{shown} (expected {expected})"),
        }
    }

    fn one_of<T: Copy>(
        &self,
        key: &'static str,
        default: T,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        match self.value(key) {
            None => Ok(default),
            Some(v) => choices
                .iter()
                .find(|(name, _)| *name == v)
                .map(|(_, t)| *t)
                .ok_or_else(|| {
                    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                    self.invalid(key, &names.join(", "))
                }),
        }
    }

    fn int(&self, key: &'static str) -> Result<Option<i64>, ConfigError> {
        self.value(key)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| self.invalid(key, "an integer"))
            })
            .transpose()
    }
}

impl ConnectOptions {
    /// Resolves `conninfo` (a `postgresql://` URL or `key=value` pairs; empty
    /// for "the environment only") against `env`, as libpq does: the string
    /// wins over the `PG*` variables, which win over the defaults; then the
    /// password file is consulted for each host when no password was given,
    /// and the certificate files are read.
    ///
    /// ```
    /// use schema_gen::connect::{ConnectOptions, Environment, SslMode};
    ///
    /// let env = Environment::new()
    ///     .with_var("PGHOST", "db.internal")
    ///     .with_var("PGUSER", "app")
    ///     .with_var("PGSSLMODE", "disable");
    /// let options = ConnectOptions::resolve("port=6543 dbname=tenants", &env).unwrap();
    /// assert_eq!(options.describe(), "db.internal:6543/tenants as app");
    /// assert_eq!(options.ssl_mode(), SslMode::Disable);
    ///
    /// let err = ConnectOptions::resolve("host=db sslmdoe=require", &env).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "the connection string is not valid: unknown connection parameter `sslmdoe` \
    ///      (did you mean `sslmode`?)"
    /// );
    /// ```
    pub fn resolve(conninfo: &str, env: &Environment) -> Result<Self, ConfigError> {
        let mut settings = BTreeMap::new();
        if !conninfo.trim().is_empty() {
            if !conninfo::is_connection_string(conninfo) {
                // Not quoted: a mistyped URL may hold a password.
                return Err(ParseError::Uri {
                    message: "it is neither a postgresql:// (or postgres://) URL nor key=value \
                              pairs (a bare word is not taken for a database name: write \
                              dbname=NAME)"
                        .to_owned(),
                }
                .into());
            }
            for pair in conninfo::parse(conninfo)? {
                settings.insert(pair.key, (pair.value, Origin::ConnectionString(pair.key)));
            }
        }
        // libpq's parseServiceInfo: the service's section fills in what the
        // string did not set, before the environment does.
        let service = settings
            .get("service")
            .map(|(v, _)| v.clone())
            .or_else(|| env.var("PGSERVICE").map(str::to_owned))
            .filter(|name| !name.is_empty());
        if let Some(name) = service {
            let found = service::lookup(
                &name,
                env.var("PGSERVICEFILE"),
                env.var("PGSYSCONFDIR"),
                env.home.as_deref(),
            )
            .map_err(|message| ConfigError::Invalid {
                origin: match settings.get("service") {
                    Some(_) => Origin::ConnectionString("service"),
                    None => Origin::Environment("PGSERVICE"),
                },
                message,
            })?;
            for (key, value) in found {
                settings
                    .entry(key)
                    .or_insert((value, Origin::ServiceFile(key)));
            }
        }
        // libpq's conninfo_add_defaults: a keyword the string did not set
        // takes its environment variable, even an empty one.
        for keyword in conninfo::KEYWORDS {
            if settings.contains_key(keyword.name) {
                continue;
            }
            if let Some(var) = keyword.env
                && let Some(value) = env.var(var)
            {
                settings.insert(keyword.name, (value.to_owned(), Origin::Environment(var)));
            }
        }
        let settings = Settings(settings);
        for keyword in conninfo::KEYWORDS {
            if let (Support::Refused(reason), Some(_)) =
                (keyword.support, settings.value(keyword.name))
            {
                return Err(ConfigError::Unsupported {
                    origin: settings.origin(keyword.name),
                    reason: reason.to_owned(),
                });
            }
        }
        Self::from_settings(&settings, env)
    }

    /// [`ConnectOptions::resolve`] against the process's environment.
    pub fn from_env(conninfo: &str) -> Result<Self, ConfigError> {
        Self::resolve(conninfo, &Environment::from_process())
    }

    fn from_settings(s: &Settings, env: &Environment) -> Result<Self, ConfigError> {
        let mut base = tokio_postgres::Config::new();

        let user = match s.value("user") {
            Some(user) => user.to_owned(),
            None => env.os_user.clone().ok_or_else(|| ConfigError::Invalid {
                origin: Origin::Environment("PGUSER"),
                message: "no user name: the operating-system user has none; set user in the \
                          connection string or PGUSER"
                    .to_owned(),
            })?,
        };
        // libpq: the database defaults to the user name.
        let dbname = s.value("dbname").unwrap_or(&user).to_owned();
        base.user(&user).dbname(&dbname);

        let (targets, warning) = passwords(s, env, targets(s)?, &dbname, &user);
        let warnings: Vec<String> = warning.into_iter().collect();

        if let Some(options) = s.value("options") {
            base.options(options);
        }
        let application_name_set = if let Some(name) = s.value("application_name") {
            base.application_name(name);
            true
        } else if let Some(name) = s.value("fallback_application_name") {
            base.application_name(name);
            true
        } else {
            false
        };
        let connect_timeout = s.int("connect_timeout")?;
        // libpq raises 1 second to 2, so rounding cannot cut it short.
        let timeout = connect_timeout
            .filter(|&t| t > 0)
            .map(|seconds| Duration::from_secs(seconds.max(2).unsigned_abs()));
        if let Some(timeout) = timeout {
            base.connect_timeout(timeout);
        }
        base.keepalives(s.one_of("keepalives", true, &[("1", true), ("0", false)])?);
        if let Some(idle) = s.int("keepalives_idle")?.filter(|&t| t > 0) {
            base.keepalives_idle(Duration::from_secs(idle.unsigned_abs()));
        }
        if let Some(interval) = s.int("keepalives_interval")?.filter(|&t| t > 0) {
            base.keepalives_interval(Duration::from_secs(interval.unsigned_abs()));
        }
        if let Some(count) = s.int("keepalives_count")?.filter(|&t| t > 0) {
            base.keepalives_retries(u32::try_from(count).unwrap_or(u32::MAX));
        }
        if let Some(ms) = s.int("tcp_user_timeout")?.filter(|&t| t > 0) {
            // libpq's unit is milliseconds.
            base.tcp_user_timeout(Duration::from_millis(ms.unsigned_abs()));
        }
        use tokio_postgres::config::{ChannelBinding, SslNegotiation, TargetSessionAttrs};
        base.channel_binding(s.one_of(
            "channel_binding",
            ChannelBinding::Prefer,
            &[
                ("disable", ChannelBinding::Disable),
                ("prefer", ChannelBinding::Prefer),
                ("require", ChannelBinding::Require),
            ],
        )?);
        base.target_session_attrs(s.one_of(
            "target_session_attrs",
            TargetSessionAttrs::Any,
            &[
                ("any", TargetSessionAttrs::Any),
                ("read-write", TargetSessionAttrs::ReadWrite),
                ("read-only", TargetSessionAttrs::ReadOnly),
            ],
        )?);
        let random_order = s.one_of(
            "load_balance_hosts",
            false,
            &[("disable", false), ("random", true)],
        )?;
        if let Some(encoding) = s.value("client_encoding")
            && !matches!(
                encoding.to_ascii_uppercase().as_str(),
                "UTF8" | "UTF-8" | "UNICODE" | "AUTO"
            )
        {
            return Err(ConfigError::Unsupported {
                origin: s.origin("client_encoding"),
                reason: format!(
                    "the driver always speaks UTF8, not `{encoding}`; drop the setting"
                ),
            });
        }
        if s.one_of(
            "gssencmode",
            false,
            &[
                ("disable", false),
                ("allow", false),
                ("prefer", false),
                ("require", true),
            ],
        )? {
            return Err(ConfigError::Unsupported {
                origin: s.origin("gssencmode"),
                reason: "GSSAPI encryption is not available; use TLS (sslmode=verify-full)"
                    .to_owned(),
            });
        }

        let mode = match s.value("sslmode") {
            None => SslMode::Prefer,
            Some(v) => SslMode::parse(v).ok_or_else(|| {
                s.invalid(
                    "sslmode",
                    "disable, allow, prefer, require, verify-ca or verify-full",
                )
            })?,
        };
        let direct = s.one_of(
            "sslnegotiation",
            false,
            &[("postgres", false), ("direct", true)],
        )?;
        if direct {
            if !mode.requires_tls() {
                return Err(ConfigError::Invalid {
                    origin: s.origin("sslnegotiation"),
                    message: format!(
                        "sslnegotiation=direct needs sslmode require, verify-ca or verify-full, \
                         not {}",
                        mode.as_str()
                    ),
                });
            }
            base.ssl_negotiation(SslNegotiation::Direct);
        }
        let tls = tls::build(&tls_request(s, env, mode)?).map_err(|e| ConfigError::TlsFile(e.0))?;

        Ok(Self {
            base,
            targets,
            user,
            dbname,
            tls,
            random_order,
            application_name_set,
            connect_timeout_set: connect_timeout.is_some(),
            connect_timeout: timeout,
            host_defaulted: s.value("host").is_none() && s.value("hostaddr").is_none(),
            warnings,
        })
    }

    /// `host:port/db as user` for every host, never the password.
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self.targets.iter().map(Target::to_string).collect();
        format!("{}/{} as {}", hosts.join(","), self.dbname, self.user)
    }

    /// The `sslmode` in force.
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode
    }

    /// Where the password of each host comes from (`None`: no password).
    pub fn password_sources(&self) -> Vec<Option<&PasswordSource>> {
        self.targets
            .iter()
            .map(|t| t.password.as_ref().map(|(_, source)| source))
            .collect()
    }

    /// What the resolution noticed and libpq would warn about: a password
    /// file that was ignored, and why.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Sets the `application_name` unless the connection string or
    /// `PGAPPNAME` did (libpq's `fallback_application_name`).
    pub fn fallback_application_name(&mut self, name: &str) -> &mut Self {
        if !self.application_name_set {
            self.base.application_name(name);
        }
        self
    }

    /// Bounds each connection attempt unless `connect_timeout` /
    /// `PGCONNECT_TIMEOUT` said otherwise (libpq waits forever by default).
    pub fn default_connect_timeout(&mut self, timeout: Duration) -> &mut Self {
        if !self.connect_timeout_set {
            self.base.connect_timeout(timeout);
            self.connect_timeout = Some(timeout);
        }
        self
    }

    /// Connects to the first host that accepts (in random order with
    /// `load_balance_hosts=random`) and spawns the connection's task on the
    /// current tokio runtime. A failure says, for every host tried, what
    /// went wrong and what to do, never the password.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, Error> {
        let mut order: Vec<usize> = (0..self.targets.len()).collect();
        if self.random_order {
            shuffle(&mut order);
        }
        let mut failures = Vec::new();
        let mut last = None;
        for i in order {
            let target = &self.targets[i];
            match self.connect_one(target).await {
                Ok(client) => return Ok(client),
                Err(AttemptError::Driver(err)) => {
                    failures.push(format!(
                        "{}: {}",
                        self.describe_target(target),
                        self.explain(target, &err)
                    ));
                    last = Some(err);
                }
                Err(AttemptError::TimedOut(timeout)) => failures.push(format!(
                    "{}: no answer within {} s (connect_timeout): check that this is a \
                     PostgreSQL server, the host, the port and the firewall",
                    self.describe_target(target),
                    timeout.as_secs()
                )),
            }
        }
        let message = if failures.len() == 1 {
            format!("cannot connect to PostgreSQL at {}", failures.join(""))
        } else {
            format!(
                "cannot connect to PostgreSQL at any of {} hosts: {}",
                failures.len(),
                failures.join("; ")
            )
        };
        Err(ErrorKind::Connection {
            message,
            source: last,
        }
        .into())
    }

    fn describe_target(&self, target: &Target) -> String {
        format!(
            "{target}/{} as {} (sslmode={})",
            self.dbname,
            self.user,
            self.tls.mode.as_str()
        )
    }

    async fn connect_one(&self, target: &Target) -> Result<tokio_postgres::Client, AttemptError> {
        use tokio_postgres::config::SslMode as DriverMode;
        match self.tls.mode {
            // libpq never asks for TLS over a Unix-domain socket.
            _ if matches!(target.host, Host::Socket(_)) => {
                self.connect_with(target, DriverMode::Disable).await
            }
            SslMode::Disable => self.connect_with(target, DriverMode::Disable).await,
            // libpq's allow: clear text first, TLS if the server refuses it.
            SslMode::Allow => match self.connect_with(target, DriverMode::Disable).await {
                Ok(client) => Ok(client),
                Err(_) => self.connect_with(target, DriverMode::Require).await,
            },
            SslMode::Prefer => self.connect_with(target, DriverMode::Prefer).await,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                self.connect_with(target, DriverMode::Require).await
            }
        }
    }

    async fn connect_with(
        &self,
        target: &Target,
        mode: tokio_postgres::config::SslMode,
    ) -> Result<tokio_postgres::Client, AttemptError> {
        match self.connect_timeout {
            Some(timeout) => tokio::time::timeout(timeout, self.attempt(target, mode))
                .await
                .map_err(|_| AttemptError::TimedOut(timeout))?
                .map_err(AttemptError::Driver),
            None => self
                .attempt(target, mode)
                .await
                .map_err(AttemptError::Driver),
        }
    }

    async fn attempt(
        &self,
        target: &Target,
        mode: tokio_postgres::config::SslMode,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        use tokio_postgres::config::SslMode as DriverMode;
        let mut config = self.base.clone();
        match &target.host {
            Host::Name(name) => {
                config.host(name);
            }
            Host::Addr {
                name: Some(name),
                addr,
            } => {
                config.host(name).hostaddr(*addr);
            }
            // The address doubles as the name the certificate must carry.
            Host::Addr { name: None, addr } => {
                config.host(addr.to_string());
            }
            Host::Socket(dir) => {
                config.host_path(dir);
            }
        }
        config.port(target.port);
        if let Some((password, _)) = &target.password {
            config.password(password);
        }
        config.ssl_mode(mode);
        let client = match (&self.tls.config, mode) {
            (Some(tls), DriverMode::Prefer | DriverMode::Require) => {
                let connector = tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone());
                let (client, connection) = config.connect(connector).await?;
                tokio::spawn(connection);
                client
            }
            _ => {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                client
            }
        };
        Ok(client)
    }

    /// The driver's or server's words, and what to do about them.
    fn explain(&self, target: &Target, err: &tokio_postgres::Error) -> String {
        let detail = error::detail(err);
        let code = err.code().map(|c| c.code().to_owned());
        let hint = if code.as_deref() == Some("28P01") {
            match &target.password {
                Some((_, source)) => format!("; the password came from {source}: correct it there"),
                None => String::new(),
            }
        } else if detail.contains("password missing") {
            let mut hint = "; the server asks for a password and none was given: set \
                            PGPASSWORD, add a line host:port:database:user:password to \
                            ~/.pgpass (mode 0600, or name the file with PGPASSFILE), or put it in \
                            the connection string"
                .to_owned();
            for warning in &self.warnings {
                hint.push_str("; ");
                hint.push_str(warning);
            }
            hint
        } else if code.as_deref() == Some("28000") && detail.contains("no encryption") {
            format!(
                "; the server accepts this user only over TLS and sslmode={} let the connection \
                 go without it: use sslmode=require or stronger",
                self.tls.mode.as_str()
            )
        } else if detail.contains("server did not use channel binding") {
            "; channel_binding=require needs SCRAM authentication over TLS: use sslmode=require \
             or stronger, or drop channel_binding"
                .to_owned()
        } else if detail.contains("server does not support TLS") {
            format!(
                "; sslmode={} demands TLS and this server does not offer it: turn ssl on in \
                 the server, or connect with sslmode=prefer",
                self.tls.mode.as_str()
            )
        } else if let Some(tls_err) = rustls_error(err) {
            certificate_hint(tls_err, &target.host, self.tls.mode, &self.tls.roots)
        } else if self.host_defaulted {
            "; no host was given (host in the connection string, PGHOST or PGHOSTADDR), so \
             libpq's default, the local Unix-domain socket, was tried: name the server"
                .to_owned()
        } else if detail.contains("timed out") {
            "; the server did not answer within connect_timeout: check the host, the port and \
             the firewall"
                .to_owned()
        } else {
            "; check the connection string (or the PG* variables) and that the server is up"
                .to_owned()
        };
        format!("{detail}{hint}")
    }
}

/// Why one connection attempt failed.
#[derive(Debug)]
enum AttemptError {
    /// The driver's or the server's error.
    Driver(tokio_postgres::Error),
    /// The attempt as a whole took longer than `connect_timeout`.
    TimedOut(Duration),
}

/// The rustls error somewhere in `err`'s causes (tokio-rustls wraps it in an
/// `io::Error`, whose `source` skips it).
fn rustls_error(err: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        cause = e.source();
    }
    None
}

fn certificate_hint(err: &rustls::Error, host: &Host, mode: SslMode, roots: &Roots) -> String {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(cert) = err else {
        return "; the TLS handshake failed: check that the server's TLS settings and \
                ssl_min_protocol_version allow TLS 1.2 or 1.3"
            .to_owned();
    };
    let trusted = match roots {
        Roots::File(path) => format!("the roots in sslrootcert {}", path.display()),
        Roots::System => "the system's trusted roots".to_owned(),
        Roots::None => "no roots".to_owned(),
    };
    match cert {
        C::NotValidForName | C::NotValidForNameContext { .. } => format!(
            "; the server's certificate does not name the host {host} (sslmode={} checks the \
             host name): connect by a name the certificate carries, or use sslmode=verify-ca \
             to check the chain only",
            mode.as_str()
        ),
        C::UnknownIssuer | C::BadSignature => format!(
            "; the server's certificate is not signed by {trusted}: give the CA certificate \
             that signed it as sslrootcert"
        ),
        C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
            "; the server's certificate is outside its validity period: renew it on the server"
                .to_owned()
        }
        _ => format!("; the server's certificate was refused (checked against {trusted})"),
    }
}

/// A Fisher-Yates shuffle seeded from the standard library's per-process
/// random hasher keys (no random-number crate for one shuffle).
fn shuffle(items: &mut [usize]) {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    for i in (1..items.len()).rev() {
        hasher.write_usize(i);
        let j = usize::try_from(hasher.finish() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

/// libpq's connectOptions2: one target per `hostaddr` (or `host`) entry,
/// ports matched one-to-one or one for all.
fn targets(s: &Settings) -> Result<Vec<Target>, ConfigError> {
    let split = |key: &str| -> Vec<String> {
        s.value(key)
            .map(|v| v.split(',').map(|part| part.trim().to_owned()).collect())
            .unwrap_or_default()
    };
    let hosts = split("host");
    let addrs = split("hostaddr");
    let ports = split("port");
    let count = if !addrs.is_empty() {
        addrs.len()
    } else {
        hosts.len().max(1)
    };
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(ConfigError::Invalid {
            origin: s.origin("hostaddr"),
            message: format!(
                "{} host names and {} hostaddr values do not pair up: give one address per host",
                hosts.len(),
                addrs.len()
            ),
        });
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(ConfigError::Invalid {
            origin: s.origin("port"),
            message: format!(
                "{} ports for {count} hosts: give one port for all, or one per host",
                ports.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let host = hosts.get(i).filter(|h| !h.is_empty());
        let addr = addrs.get(i).filter(|a| !a.is_empty());
        let port_text = if ports.len() == 1 {
            ports.first()
        } else {
            ports.get(i)
        };
        let port = match port_text.filter(|p| !p.is_empty()) {
            None => 5432,
            Some(text) => text
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| s.invalid("port", "a port number from 1 to 65535"))?,
        };
        let host = match (host, addr) {
            (name, Some(addr)) => Host::Addr {
                name: name.cloned(),
                addr: addr.parse().map_err(|_| {
                    s.invalid("hostaddr", "numeric IP addresses (host= takes names)")
                })?,
            },
            (Some(name), None) if name.starts_with('/') => Host::Socket(PathBuf::from(name)),
            (Some(name), None) if name.starts_with('@') => {
                return Err(ConfigError::Unsupported {
                    origin: s.origin("host"),
                    reason: "abstract Unix-domain sockets (@name) are not supported by the \
                             driver; give the socket directory or a TCP host"
                        .to_owned(),
                });
            }
            (Some(name), None) => Host::Name(name.clone()),
            (None, None) => Host::Socket(PathBuf::from(pgpass::DEFAULT_SOCKET_DIR)),
        };
        out.push(Target {
            host,
            port,
            password: None,
        });
    }
    Ok(out)
}

/// The password of each target: the one given, else the password file's
/// (looked up per host, as libpq does). Returns the warnings too.
fn passwords(
    s: &Settings,
    env: &Environment,
    mut targets: Vec<Target>,
    dbname: &str,
    user: &str,
) -> (Vec<Target>, Option<String>) {
    if let Some(password) = s.value("password") {
        let source = match s.origin("password") {
            Origin::Environment(_) => PasswordSource::Environment,
            Origin::ConnectionString(_) => PasswordSource::ConnectionString,
            Origin::ServiceFile(_) => PasswordSource::ServiceFile,
        };
        for target in &mut targets {
            target.password = Some((password.to_owned(), source.clone()));
        }
        return (targets, None);
    }
    let file = match s.value("passfile") {
        Some(path) => Some(PathBuf::from(path)),
        None => pgpass::default_file(env.home.as_deref()),
    };
    let Some(file) = file else {
        return (targets, None);
    };
    let mut warning = None;
    for target in &mut targets {
        let host = match &target.host {
            Host::Name(name) => name.clone(),
            Host::Addr {
                name: Some(name), ..
            } => name.clone(),
            Host::Addr { name: None, addr } => addr.to_string(),
            Host::Socket(dir) => dir.display().to_string(),
        };
        match pgpass::lookup(&file, &host, target.port, dbname, user) {
            pgpass::Lookup::Found { password, line } => {
                target.password = Some((
                    password,
                    PasswordSource::File {
                        path: file.clone(),
                        line,
                    },
                ));
            }
            pgpass::Lookup::NotFound => {}
            pgpass::Lookup::Ignored(why) => warning = Some(why),
        }
    }
    (targets, warning)
}

/// The TLS settings: which roots, which client certificate, SNI, versions.
fn tls_request(s: &Settings, env: &Environment, mode: SslMode) -> Result<TlsRequest, ConfigError> {
    let pg_dir = env.home.as_deref().map(|home| home.join(".postgresql"));
    let default_file = |name: &str| {
        pg_dir
            .as_deref()
            .map(|dir| dir.join(name))
            .filter(|p| p.is_file())
    };
    let named_file = |key: &'static str| -> Result<Option<PathBuf>, ConfigError> {
        match s.value(key) {
            None => Ok(None),
            Some(path) => {
                let path = PathBuf::from(path);
                if mode != SslMode::Disable && !path.is_file() {
                    return Err(ConfigError::TlsFile(format!(
                        "{} names {}, which is not a readable file",
                        s.origin(key),
                        path.display()
                    )));
                }
                Ok(Some(path))
            }
        }
    };
    let roots = match s.value("sslrootcert") {
        Some("system") => {
            if mode != SslMode::VerifyFull {
                return Err(ConfigError::Invalid {
                    origin: s.origin("sslrootcert"),
                    message: format!(
                        "sslrootcert=system needs sslmode=verify-full, not {} (libpq's rule: the \
                         system's roots vouch for any host they signed)",
                        mode.as_str()
                    ),
                });
            }
            Roots::System
        }
        _ => match named_file("sslrootcert")?.or_else(|| default_file("root.crt")) {
            Some(path) => Roots::File(path),
            None if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) => Roots::System,
            None => Roots::None,
        },
    };
    let cert_mode = s.one_of("sslcertmode", true, &[("disable", false), ("allow", true)])?;
    let client = if cert_mode {
        let cert = named_file("sslcert")?.or_else(|| default_file("postgresql.crt"));
        match cert {
            None => None,
            Some(cert) => {
                let key = named_file("sslkey")?
                    .or_else(|| pg_dir.as_deref().map(|dir| dir.join("postgresql.key")));
                match key.filter(|k| k.is_file()) {
                    Some(key) => Some((cert, key)),
                    None => {
                        return Err(ConfigError::TlsFile(format!(
                            "the client certificate {} has no private key file: give sslkey",
                            cert.display()
                        )));
                    }
                }
            }
        }
    } else {
        None
    };
    let sni = s.value("sslsni").is_none_or(|v| v.starts_with('1'));
    let versions = tls::protocol_versions(
        s.value("ssl_min_protocol_version"),
        s.value("ssl_max_protocol_version"),
    )
    .map_err(|message| ConfigError::Invalid {
        origin: s.origin("ssl_min_protocol_version"),
        message,
    })?;
    Ok(TlsRequest {
        mode,
        roots,
        client,
        sni,
        versions,
    })
}

impl From<ConfigError> for Error {
    fn from(err: ConfigError) -> Self {
        ErrorKind::Other {
            message: err.to_string(),
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment::new().with_os_user("osuser")
    }

    fn resolve(conninfo: &str, env: &Environment) -> ConnectOptions {
        ConnectOptions::resolve(conninfo, env).unwrap_or_else(|e| panic!("{conninfo}: {e}"))
    }

    #[test]
    fn the_string_wins_over_the_environment_which_wins_over_defaults() {
        let env = env()
            .with_var("PGHOST", "envhost")
            .with_var("PGPORT", "6000")
            .with_var("PGUSER", "envuser")
            .with_var("PGDATABASE", "envdb")
            .with_var("PGSSLMODE", "disable");
        assert_eq!(
            resolve("", &env).describe(),
            "envhost:6000/envdb as envuser"
        );
        assert_eq!(resolve("postgres://u@h:1/d", &env).describe(), "h:1/d as u");
        assert_eq!(
            resolve("host=h", &env).describe(),
            "h:6000/envdb as envuser"
        );
        assert_eq!(resolve("", &env).ssl_mode(), SslMode::Disable);
        assert_eq!(
            resolve("sslmode=require", &env).ssl_mode(),
            SslMode::Require
        );
        // Defaults: the socket directory, 5432, the OS user, db = user.
        assert_eq!(
            resolve("", &self::env()).describe(),
            "socket /var/run/postgresql (port 5432)/osuser as osuser"
        );
        assert_eq!(resolve("", &self::env()).ssl_mode(), SslMode::Prefer);
    }

    #[test]
    fn an_empty_value_in_the_string_blocks_the_variable_and_means_default() {
        let env = env().with_var("PGHOST", "envhost");
        assert!(
            resolve("host=''", &env)
                .describe()
                .starts_with("socket /var/run/postgresql")
        );
    }

    #[test]
    fn bad_values_name_their_key_or_variable() {
        let err = ConnectOptions::resolve("sslmode=verify_full", &env()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value for `sslmode`: `verify_full` (expected disable, allow, prefer, \
             require, verify-ca or verify-full)"
        );
        let err = ConnectOptions::resolve("", &env().with_var("PGPORT", "54x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid value for PGPORT: `54x` (expected a port number from 1 to 65535)"
        );
        let err = ConnectOptions::resolve("host=a,b,c port=1,2", &env()).unwrap_err();
        assert!(err.to_string().contains("2 ports for 3 hosts"), "{err}");
    }

    #[test]
    fn refused_keywords_say_why() {
        let err = ConnectOptions::resolve("host=db sslpassword=x", &env()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`sslpassword` is not supported by schema-gen: encrypted client keys"),
            "{err}"
        );
        let err = ConnectOptions::resolve("", &env().with_var("PGSSLCRL", "/crl.pem")).unwrap_err();
        assert!(
            err.to_string().starts_with("PGSSLCRL is not supported"),
            "{err}"
        );
    }

    #[test]
    fn a_service_fills_in_after_the_string_and_before_the_environment() {
        let dir = std::env::temp_dir().join(format!("connect-service-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("services.conf");
        std::fs::write(&file, "[prod]\nhost=svchost\nport=6432\nuser=svcuser\n").unwrap();
        let env = env()
            .with_var("PGSERVICEFILE", &file.display().to_string())
            .with_var("PGPORT", "7000")
            .with_var("PGDATABASE", "envdb");
        let described = |conninfo: &str, env: &Environment| resolve(conninfo, env).describe();
        assert_eq!(
            described("service=prod", &env),
            "svchost:6432/envdb as svcuser"
        );
        assert_eq!(
            described("service=prod port=1", &env),
            "svchost:1/envdb as svcuser"
        );
        assert_eq!(
            described("", &env.clone().with_var("PGSERVICE", "prod")),
            "svchost:6432/envdb as svcuser"
        );
        let err = ConnectOptions::resolve("service=staging", &env).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            err.to_string().contains("service `staging` was not found"),
            "{err}"
        );
    }

    #[test]
    fn a_bare_word_is_not_taken_for_a_database_name() {
        let err = ConnectOptions::resolve("mydb", &env()).unwrap_err();
        assert!(err.to_string().contains("write dbname=NAME"), "{err}");
        assert!(!err.to_string().contains("mydb"), "{err}");
    }

    #[test]
    fn a_named_but_missing_root_certificate_is_an_error() {
        let err = ConnectOptions::resolve(
            "host=db sslmode=require sslrootcert=/nonexistent/ca.pem",
            &env(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`sslrootcert` names /nonexistent/ca.pem, which is not a readable file"
        );
        // With sslmode=disable no TLS file is read, as in libpq.
        resolve(
            "host=db sslmode=disable sslrootcert=/nonexistent/ca.pem",
            &env(),
        );
    }

    #[test]
    fn system_roots_need_verify_full() {
        let err = ConnectOptions::resolve("host=db sslrootcert=system sslmode=require", &env())
            .unwrap_err();
        assert!(
            err.to_string().contains("needs sslmode=verify-full"),
            "{err}"
        );
    }

    #[test]
    fn the_debug_form_shows_no_password() {
        let env = env().with_var("PGPASSWORD", "s3cret");
        let options = resolve("host=db password=an0ther", &env);
        let text = format!("{options:?} {env:?}");
        assert!(
            !text.contains("s3cret") && !text.contains("an0ther"),
            "{text}"
        );
        assert_eq!(
            options.password_sources(),
            vec![Some(&PasswordSource::ConnectionString)]
        );
        let options = resolve("host=db", &env);
        assert_eq!(
            options.password_sources(),
            vec![Some(&PasswordSource::Environment)]
        );
    }

    #[test]
    fn each_guard_on_settings_fires() {
        let refused = |conninfo: &str, needle: &str| {
            let err = ConnectOptions::resolve(conninfo, &env()).unwrap_err();
            assert!(err.to_string().contains(needle), "{conninfo}: {err}");
        };
        refused(
            "host=db sslnegotiation=direct",
            "sslnegotiation=direct needs sslmode require",
        );
        refused(
            "host=db client_encoding=LATIN1",
            "always speaks UTF8, not `LATIN1`",
        );
        refused(
            "host=db gssencmode=require",
            "GSSAPI encryption is not available",
        );
        refused(
            "host=a,b hostaddr=127.0.0.1",
            "2 host names and 1 hostaddr values",
        );
        refused("host=@abstract", "abstract Unix-domain sockets");
        refused("hostaddr=db.example.com", "numeric IP addresses");
        refused(
            "postgres://u:pa/ss@db/app",
            "the port in the URL is not a number",
        );
        refused(
            "host=db connect_timeout=soon",
            "invalid value for `connect_timeout`: `soon`",
        );
        refused(
            "host=db target_session_attrs=primary",
            "invalid value for `target_session_attrs`",
        );
        refused(
            "host=db ssl_max_protocol_version=TLSv1.1",
            "leave no TLS version",
        );
        resolve(
            "host=db client_encoding=utf8 gssencmode=prefer sslnegotiation=direct sslmode=require",
            &env(),
        );

        let err = ConnectOptions::resolve("host=db", &Environment::new()).unwrap_err();
        assert!(err.to_string().starts_with("no user name"), "{err}");
    }

    #[test]
    fn a_client_certificate_without_its_key_is_an_error() {
        let home = std::env::temp_dir().join(format!("connect-home-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".postgresql")).unwrap();
        std::fs::write(home.join(".postgresql/postgresql.crt"), "not read").unwrap();
        let err = ConnectOptions::resolve("host=db sslmode=require", &env().with_home(&home))
            .unwrap_err();
        let _ = std::fs::remove_dir_all(&home);
        assert!(
            err.to_string()
                .contains("has no private key file: give sslkey"),
            "{err}"
        );
    }

    #[test]
    fn the_default_bound_covers_the_whole_attempt_unless_connect_timeout_is_set() {
        // The kernel completes the TCP handshake for the listen backlog;
        // nobody ever answers the startup message.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        // The error within `wait`, or None if the attempt was still waiting.
        let outcome = |setting: &str, wait: Duration| -> Option<String> {
            let mut options = resolve(
                &format!("host=127.0.0.1 port={port} user=u sslmode=disable {setting}"),
                &env(),
            );
            options.default_connect_timeout(Duration::from_secs(1));
            runtime
                .block_on(async { tokio::time::timeout(wait, options.connect()).await })
                .ok()
                .map(|connected| connected.map(|_| ()).unwrap_err().to_string())
        };
        let err = outcome("", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still waiting after 10 s: the default bound is lost"));
        assert!(
            err.contains("no answer within 1 s (connect_timeout)"),
            "{err}"
        );
        // connect_timeout wins over the default, as does 0 (wait forever).
        let err = outcome("connect_timeout=2", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still waiting after 10 s: connect_timeout is lost"));
        assert!(
            err.contains("no answer within 2 s (connect_timeout)"),
            "{err}"
        );
        assert_eq!(outcome("connect_timeout=0", Duration::from_secs(3)), None);
        drop(silent);
    }

    #[test]
    fn shuffle_keeps_every_item() {
        let mut items: Vec<usize> = (0..10).collect();
        shuffle(&mut items);
        items.sort_unstable();
        assert_eq!(items, (0..10).collect::<Vec<_>>());
    }
}
