//! The resolved connection: every setting read with its default, the
//! targets with their passwords, the TLS configuration built.

use std::fmt;
use std::time::Duration;

use super::passwords::passwords;
use super::settings::{self, Settings};
use super::targets::{Target, targets};
use super::tls::{self, TlsSettings};
use super::tls_request::tls_request;
use super::{ConfigError, Environment, Origin, PasswordSource, SslMode};

/// A resolved connection: every setting decided, every file read, nothing
/// sent yet. Built by [`ConnectOptions::resolve`], used by
/// [`ConnectOptions::connect`].
#[derive(Clone)]
pub struct ConnectOptions {
    /// Everything but host, port and password.
    pub(super) base: tokio_postgres::Config,
    pub(super) targets: Vec<Target>,
    pub(super) user: String,
    pub(super) dbname: String,
    pub(super) tls: TlsSettings,
    pub(super) random_order: bool,
    pub(super) application_name_set: bool,
    pub(super) connect_timeout_set: bool,
    /// Bounds each attempt as a whole: the driver's own timeout covers the
    /// TCP connect only, so a server that accepts and then stays silent (or a
    /// stalled TLS handshake) would hang without it.
    pub(super) connect_timeout: Option<Duration>,
    pub(super) warnings: Vec<String>,
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
        Self::from_settings(&settings::gather(conninfo, env)?, env)
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

        let (targets, warning) = passwords(s, env, targets(s, env)?, &dbname, &user);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned to Debian's default socket directory, so that a server
    /// listening in `/tmp` on this machine cannot change what is described.
    fn env() -> Environment {
        Environment::new()
            .with_os_user("osuser")
            .with_default_socket_dir("/var/run/postgresql")
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
    fn the_default_socket_directory_is_localhost_in_the_password_file() {
        let home = std::env::temp_dir().join(format!("connect-pgpass-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let file = home.join(".pgpass");
        std::fs::write(&file, "localhost:5432:*:*:sock\n").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let env = env().with_home(&home);
        let from_file = |conninfo: &str| {
            resolve(conninfo, &env).password_sources()[0]
                .is_some_and(|source| matches!(source, PasswordSource::File { line: 1, .. }))
        };
        let found = [
            from_file(""),
            from_file("host=/var/run/postgresql"),
            from_file("host=/tmp"),
        ];
        let _ = std::fs::remove_dir_all(&home);
        // Nothing named and the default directory named: `localhost`; another
        // directory is looked up by its path, as libpq does.
        assert_eq!(found, [true, true, false]);
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
}
