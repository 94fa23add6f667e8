//! A real PostgreSQL server for the integration tests.
//!
//! If `ALKSTORE_TEST_DATABASE_URL` is set, every test uses that server (the URL
//! must name a superuser). Otherwise the first test that asks for a connection
//! starts one throwaway cluster for the whole test process from the installed
//! PostgreSQL binaries: `initdb` into a fresh temporary directory, durability
//! switched off for speed, trust authentication on 127.0.0.1, a free TCP port.
//!
//! Teardown: Rust test binaries have no global teardown hook, so a small
//! watchdog shell process is started next to the cluster. It blocks reading a
//! pipe whose only write end lives in the test process; the kernel closes that
//! end when the test process exits for any reason (normal exit, panic, signal,
//! `SIGKILL`), and the watchdog then runs `pg_ctl stop -m immediate` and
//! removes the directory. On a normal exit an `atexit` hook closes the pipe
//! first and waits for the watchdog, so the cluster is already gone when
//! `cargo test` returns.
//!
//! There is no silent skip: if no server can be had, every test that asks for
//! one panics with a message naming the set-up step that failed and the
//! output of the failing command. The only way out is the explicit local
//! opt-out [`skip_db_tests`] (`ALKSTORE_SKIP_DB_TESTS=1`).
//!
//! Each `#[tokio::test]` runs its own runtime, so connections are never shared
//! between tests: [`connect`] opens a fresh one on the caller's runtime.

#![warn(missing_docs)]

use std::collections::hash_map::RandomState;
use std::ffi::c_int;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::str::FromStr as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, NoTls, Socket};

/// Environment variable naming an external PostgreSQL server to test against
/// (a superuser URL, key/value or `postgres://` form).
pub const DATABASE_URL_ENV: &str = "ALKSTORE_TEST_DATABASE_URL";

/// Environment variable naming the directory that holds `initdb`, `pg_ctl`,
/// `postgres` and `psql`, overriding the search of `pg_config --bindir` and
/// `/usr/lib/postgresql/*/bin`.
pub const PG_BIN_ENV: &str = "ALKSTORE_PG_BIN";

/// Environment variable that, set to `1`, lets database tests return early
/// (for local runs without PostgreSQL). Refused when `CI` is set.
pub const SKIP_ENV: &str = "ALKSTORE_SKIP_DB_TESTS";

/// The superuser name of the throwaway cluster (`initdb -U`), fixed so it does
/// not depend on which OS user runs the tests.
const LOCAL_SUPERUSER: &str = "postgres";

/// The OS user that owns the cluster when the tests run as root: `initdb` and
/// `postgres` refuse to run as root.
const CLUSTER_OS_USER: &str = "postgres";

const INSTALL_HINT: &str = "install the PostgreSQL server package (apt-get install postgresql) \
     or set ALKSTORE_TEST_DATABASE_URL to a superuser URL of a running server";

/// The server every test in this process talks to, or why there is none.
static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The watchdogs of the throwaway clusters (the shared one, and any started
/// with [`start_cluster`]), taken by the `atexit` hook.
static WATCHDOGS: Mutex<Vec<Watchdog>> = Mutex::new(Vec::new());

/// How to reach the server: everything but user, password and database, which
/// vary per call.
struct Server {
    /// `host`, `port`, ... pairs, rendered first in every URL.
    base: Vec<(&'static str, String)>,
    superuser: String,
    superuser_password: Option<String>,
    dbname: String,
    /// Where `psql` lives, if known; otherwise `psql` is looked up on `PATH`.
    bindir: Option<PathBuf>,
}

struct Watchdog {
    child: Child,
    /// The write end of the watchdog's stdin; closing it stops the cluster.
    stdin: ChildStdin,
}

fn server() -> &'static Server {
    match SERVER.get_or_init(|| match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => external_server(&url),
        _ => start_local_cluster(),
    }) {
        Ok(server) => {
            // The inventory to leave the server as, and the clean-up at exit.
            crate::hygiene::watch(
                || {
                    server.psql_command(&server.render(
                        &server.superuser,
                        server.superuser_password.as_deref(),
                        &server.dbname,
                    ))
                },
                process_tag(),
            );
            server
        }
        // Computed once, reported by every test that needs the server.
        Err(message) => panic!("no PostgreSQL server for the integration tests: {message}"),
    }
}

/// Returns a superuser connection URL for the test database.
///
/// The URL is in libpq key/value form, accepted by both
/// `tokio_postgres::Config::from_str` and `psql -d`. Starts the throwaway
/// cluster on first use unless `ALKSTORE_TEST_DATABASE_URL` is set.
///
/// # Panics
///
/// If no server can be had; the message names the failing set-up step.
pub fn database_url() -> String {
    let s = server();
    s.render(&s.superuser, s.superuser_password.as_deref(), &s.dbname)
}

/// Returns a connection URL for `role` (no password) on the test database.
///
/// The throwaway cluster trusts every local TCP connection, so no password is
/// needed there; for an external server that checks passwords use
/// [`url_for`] with `Some(password)`.
pub fn url_for_role(role: &str) -> String {
    url_for(role, None, None)
}

/// Returns a connection URL for `role`, with `password` if given, on
/// `database` (or on the test database when `None`).
pub fn url_for(role: &str, password: Option<&str>, database: Option<&str>) -> String {
    let s = server();
    s.render(role, password, database.unwrap_or(&s.dbname))
}

/// Opens a superuser connection to the test database.
///
/// The connection task is spawned on the current tokio runtime, so call this
/// from inside the test that uses the client.
///
/// # Panics
///
/// If no server can be had or the connection fails.
pub async fn connect() -> Client {
    connect_url(&database_url()).await
}

/// Opens a connection to the test database as `role`.
///
/// On the throwaway cluster authentication is `trust` and `password` is not
/// checked (the role still needs `LOGIN`); on an external server it is sent.
///
/// # Panics
///
/// If the connection fails.
pub async fn connect_as(role: &str, password: &str) -> Client {
    connect_url(&url_for(role, Some(password), None)).await
}

/// Opens a connection to `url` (e.g. one returned by [`create_database`] or
/// [`url_for`]), spawning its connection task on the current tokio runtime.
///
/// # Panics
///
/// If the connection fails; the message shows the URL without its password.
pub async fn connect_url(url: &str) -> Client {
    let (client, connection) = open(url).await;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("test PostgreSQL connection closed with an error: {e}");
        }
    });
    client
}

/// Connects to `url` without TLS; the caller drives the connection.
async fn open(url: &str) -> (Client, tokio_postgres::Connection<Socket, NoTlsStream>) {
    tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connecting to the test PostgreSQL server at `{}` failed: {}",
                redact(url),
                describe_error(&e)
            )
        })
}

/// The server's notices (`WARNING`, `NOTICE`, ...) on a connection opened by
/// [`connect_with_notices`], in the order they came.
#[derive(Clone, Default)]
pub struct Notices(std::sync::Arc<Mutex<Vec<tokio_postgres::error::DbError>>>);

impl Notices {
    /// The notices received so far, removed from the list.
    pub fn take(&self) -> Vec<tokio_postgres::error::DbError> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Opens a connection to the test database that keeps the server's notices
/// (e.g. VACUUM's `skipping ... lock not available` warning), which
/// [`connect`] drops.
///
/// # Panics
///
/// If the connection fails.
pub async fn connect_with_notices() -> (Client, Notices) {
    connect_url_with_notices(&database_url()).await
}

/// [`connect_with_notices`] to the server at `url` (a Citus node, say).
///
/// # Panics
///
/// If the connection fails.
pub async fn connect_url_with_notices(url: &str) -> (Client, Notices) {
    let (client, mut connection) = open(url).await;
    let notices = Notices::default();
    let kept = notices.clone();
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notice(notice))) => kept
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(notice),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    eprintln!("test PostgreSQL connection closed with an error: {e}");
                    break;
                }
                None => break,
            }
        }
    });
    (client, notices)
}

/// Creates a fresh, empty database named `name` (from `template0`, so nothing
/// added to `template1` leaks in) and returns a superuser URL for it.
///
/// `name` must be a plain identifier, e.g. from [`unique_name`]. Databases
/// created on an external server are not dropped by the harness.
///
/// # Panics
///
/// If `name` is not a plain identifier or the database cannot be created.
pub async fn create_database(name: &str) -> String {
    if let Err(why) = check_ident(name, 63) {
        panic!("create_database: {name:?} is not a plain identifier: {why}");
    }
    crate::hygiene::remember(name);
    let client = connect().await;
    client
        .batch_execute(&format!("CREATE DATABASE \"{name}\" TEMPLATE template0"))
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name} failed: {}", describe_error(&e)));
    let s = server();
    s.render(&s.superuser, s.superuser_password.as_deref(), name)
}

/// Runs `sql` (one or more statements, simple-query protocol) on `client`.
///
/// # Panics
///
/// If the server refuses it; the message quotes the SQL and the server's words.
pub async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
}

/// Runs one query on `client` and returns its rows.
///
/// # Panics
///
/// If the server refuses it; the message quotes the SQL and the server's words.
pub async fn rows(client: &Client, sql: &str) -> Vec<tokio_postgres::Row> {
    client
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)))
}

/// Pipes `script` into `psql` connected to `url` (with [`psql_with_url`]'s
/// flags), as an operator applies `schema-gen sql`, and returns its output.
///
/// # Panics
///
/// If psql cannot be started or fed.
pub fn psql_script(url: &str, script: &str) -> Output {
    let mut child = psql_with_url(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting psql: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .unwrap_or_else(|e| panic!("writing to psql: {e}"));
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for psql: {e}"))
}

/// Returns a `psql` command that connects to the test database as superuser,
/// with `-X -q -v ON_ERROR_STOP=1` (no psqlrc, quiet, stop at the first error).
///
/// Add `-c SQL` or `-f FILE` and run it; psql's exit status tells whether all
/// statements succeeded.
pub fn psql() -> Command {
    psql_with_url(&database_url())
}

/// Like [`psql`] but connecting to `url` (e.g. as a less privileged role).
pub fn psql_with_url(url: &str) -> Command {
    server().psql_command(url)
}

/// Returns the server's `server_version_num` (e.g. `150008` for 15.8).
///
/// # Panics
///
/// If no server can be had or the query fails.
pub async fn server_version_num() -> i32 {
    static VERSION: OnceLock<i32> = OnceLock::new();
    if let Some(v) = VERSION.get() {
        return *v;
    }
    let row = connect()
        .await
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .unwrap_or_else(|e| panic!("reading server_version_num: {}", describe_error(&e)));
    *VERSION.get_or_init(|| row.get(0))
}

/// Returns a schema name unique across this run and across test binaries
/// running at the same time against one shared server:
/// `{prefix}_{process tag}_{counter}`, lowercase, valid as an unquoted
/// identifier (`[a-z_][a-z0-9_]*`), at most 63 bytes.
///
/// The process tag mixes the pid, the start time and per-process randomness:
/// a pid alone repeats across hosts and across runs, and a leftover schema from
/// a killed run must not collide with a new one.
///
/// # Panics
///
/// If `prefix` is empty, longer than 40 bytes, starts with `pg_` (reserved
/// for system schemas and roles), or is not of the form `[a-z_][a-z0-9_]*`.
pub fn unique_schema(prefix: &str) -> String {
    unique_ident(prefix)
}

/// [`unique_schema`] as a validated [`schema_model::SchemaName`].
pub fn unique_schema_name(prefix: &str) -> schema_model::SchemaName {
    let raw = unique_schema(prefix);
    schema_model::SchemaName::new(&raw)
        .unwrap_or_else(|e| panic!("the harness made a name the model refuses: {e}"))
}

/// Returns a role or database name unique across this run and across
/// concurrently running test binaries; same form and rules as
/// [`unique_schema`].
pub fn unique_name(prefix: &str) -> String {
    unique_ident(prefix)
}

/// Returns `true` (after a loud message on stderr) when
/// `ALKSTORE_SKIP_DB_TESTS=1`, so a database test can `return` early on a
/// machine without PostgreSQL.
///
/// Use as `if harness::skip_db_tests() { return; }` at the top of a test.
///
/// # Panics
///
/// If the variable is set to `1` while `CI` is set (CI must never skip), or
/// to anything other than `1`, `0` or the empty string.
pub fn skip_db_tests() -> bool {
    match std::env::var(SKIP_ENV).as_deref() {
        Err(_) | Ok("") | Ok("0") => false,
        Ok("1") => {
            if std::env::var_os("CI").is_some() {
                panic!("{SKIP_ENV}=1 is for local runs only and is refused when CI is set");
            }
            eprintln!(
                "\n!!!!!!!! {SKIP_ENV}=1: SKIPPING a PostgreSQL test; it proves nothing !!!!!!!!\n"
            );
            true
        }
        Ok(other) => panic!("{SKIP_ENV} must be 1 (skip) or 0 (run), not {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// URLs

impl Server {
    /// `psql -X -q -v ON_ERROR_STOP=1 -d URL` with the server's psql.
    fn psql_command(&self, url: &str) -> Command {
        let bin = self
            .bindir
            .as_ref()
            .map(|dir| dir.join("psql"))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("psql"));
        let mut cmd = Command::new(bin);
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url]);
        cmd
    }

    fn render(&self, user: &str, password: Option<&str>, dbname: &str) -> String {
        let mut pairs: Vec<(&str, &str)> =
            self.base.iter().map(|(k, v)| (*k, v.as_str())).collect();
        pairs.push(("user", user));
        if let Some(pw) = password {
            pairs.push(("password", pw));
        }
        pairs.push(("dbname", dbname));
        let mut url = String::new();
        for (key, value) in pairs {
            if !url.is_empty() {
                url.push(' ');
            }
            let _ = write!(url, "{key}={}", quote_value(value));
        }
        url
    }
}

/// Quotes a key/value connection-string value the way libpq and
/// tokio-postgres both parse it.
fn quote_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| !c.is_whitespace() && c != '\'' && c != '\\');
    if plain {
        return value.to_owned();
    }
    let mut out = String::from("'");
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// The URL with its password replaced, for error messages.
fn redact(url: &str) -> String {
    match Config::from_str(url) {
        Ok(config) if config.get_password().is_some() => {
            let mut out = Vec::new();
            for (k, v) in url_pairs(&config) {
                let v = if k == "password" { "***".to_owned() } else { v };
                out.push(format!("{k}={}", quote_value(&v)));
            }
            out.join(" ")
        }
        _ => url.to_owned(),
    }
}

/// The parameters of `config` that the harness carries over, in URL order.
fn url_pairs(config: &Config) -> Vec<(&'static str, String)> {
    let mut pairs = Vec::new();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) => dir.to_string_lossy().into_owned(),
        })
        .collect();
    if !hosts.is_empty() {
        pairs.push(("host", hosts.join(",")));
    }
    let addrs: Vec<String> = config
        .get_hostaddrs()
        .iter()
        .map(|a| a.to_string())
        .collect();
    if !addrs.is_empty() {
        pairs.push(("hostaddr", addrs.join(",")));
    }
    let ports: Vec<String> = config.get_ports().iter().map(|p| p.to_string()).collect();
    if !ports.is_empty() {
        pairs.push(("port", ports.join(",")));
    }
    if let Some(options) = config.get_options() {
        pairs.push(("options", options.to_owned()));
    }
    if let Some(name) = config.get_application_name() {
        pairs.push(("application_name", name.to_owned()));
    }
    match config.get_ssl_mode() {
        SslMode::Disable => pairs.push(("sslmode", "disable".to_owned())),
        SslMode::Require => pairs.push(("sslmode", "require".to_owned())),
        // `prefer` is the default of both libpq and tokio-postgres.
        _ => {}
    }
    if let Some(timeout) = config.get_connect_timeout() {
        pairs.push(("connect_timeout", timeout.as_secs().max(1).to_string()));
    }
    if let Some(user) = config.get_user() {
        pairs.push(("user", user.to_owned()));
    }
    if let Some(pw) = config.get_password() {
        pairs.push(("password", String::from_utf8_lossy(pw).into_owned()));
    }
    if let Some(db) = config.get_dbname() {
        pairs.push(("dbname", db.to_owned()));
    }
    pairs
}

fn external_server(url: &str) -> Result<Server, String> {
    let config = Config::from_str(url).map_err(|e| {
        format!("{DATABASE_URL_ENV} is not a connection string tokio-postgres accepts: {e}")
    })?;
    let superuser = config
        .get_user()
        .ok_or_else(|| format!("{DATABASE_URL_ENV} must name a user (a superuser)"))?
        .to_owned();
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err(format!("{DATABASE_URL_ENV} must name a host"));
    }
    let superuser_password = config
        .get_password()
        .map(|pw| String::from_utf8_lossy(pw).into_owned());
    // libpq's default database is the user name.
    let dbname = config.get_dbname().unwrap_or(&superuser).to_owned();
    let base = url_pairs(&config)
        .into_iter()
        .filter(|(k, _)| !matches!(*k, "user" | "password" | "dbname"))
        .collect();
    Ok(Server {
        base,
        superuser,
        superuser_password,
        dbname,
        bindir: find_bindir("psql").ok(),
    })
}

/// The server's own words for a failed statement (severity, message and
/// SQLSTATE), or the driver's message with its causes: tokio-postgres's
/// `Display` says only "db error".
pub fn describe_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let _ = write!(text, ": {s}");
        source = s.source();
    }
    text
}

// ---------------------------------------------------------------------------
// Names

fn unique_ident(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    if let Err(why) = check_ident(prefix, 40) {
        panic!("unique name prefix {prefix:?} is not usable: {why}");
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("{prefix}_{}_{n}", process_tag());
    // Also catches the prefix `pg` (giving `pg_...`) and a name over 63 bytes,
    // which PostgreSQL would silently truncate.
    if let Err(why) = check_ident(&name, 63) {
        panic!("unique name prefix {prefix:?} gives the unusable name {name}: {why}");
    }
    // Whatever the test makes of it (schema, role, database) is dropped at exit.
    crate::hygiene::remember(&name);
    name
}

fn check_ident(name: &str, max_len: usize) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("it is empty".into()),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            return Err("it must start with a lowercase ASCII letter or `_`".into());
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err("it may contain only lowercase ASCII letters, digits and `_`".into());
    }
    if name.len() > max_len {
        return Err(format!("it is longer than {max_len} bytes"));
    }
    if name.starts_with("pg_") {
        return Err("names starting with `pg_` are reserved by PostgreSQL".into());
    }
    Ok(())
}

/// Eight base-36 characters that differ between processes with high
/// probability: pid, start time and the per-process random hasher seed.
fn process_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        h.write_u128(now.as_nanos());
        let mut v = h.finish();
        let mut tag = String::new();
        for _ in 0..8 {
            let d = (v % 36) as u32;
            tag.push(char::from_digit(d, 36).expect("digit below 36"));
            v /= 36;
        }
        tag
    })
}

// ---------------------------------------------------------------------------
// The throwaway cluster

/// How to run the server binaries: directly, or as the `postgres` OS user when
/// the tests run as root.
struct Runner {
    bindir: PathBuf,
    as_postgres: bool,
    /// Working directory for the binaries: a root-only cwd would make them warn.
    dir: PathBuf,
}

impl Runner {
    fn command(&self, program: &str) -> Command {
        let bin = self.bindir.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", CLUSTER_OS_USER, "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        // Keep the caller's libpq settings from steering the cluster tools.
        for var in [
            "PGDATA",
            "PGPORT",
            "PGHOST",
            "PGUSER",
            "PGDATABASE",
            "PGOPTIONS",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }
}

fn start_local_cluster() -> Result<Server, String> {
    let cluster = start_cluster(&ClusterSetup::default())?;
    Ok(Server {
        base: vec![
            ("host", "127.0.0.1".to_owned()),
            ("port", cluster.port.to_string()),
        ],
        superuser: LOCAL_SUPERUSER.to_owned(),
        superuser_password: None,
        dbname: "postgres".to_owned(),
        bindir: Some(cluster.bindir),
    })
}

/// How [`start_cluster`] sets up a throwaway cluster beyond the defaults
/// (trust authentication on 127.0.0.1, durability off).
#[derive(Default)]
pub struct ClusterSetup {
    /// Lines appended to `postgresql.conf` (e.g. `ssl = on`).
    pub settings: String,
    /// The whole `pg_hba.conf`, replacing initdb's; `None` keeps it.
    pub hba: Option<String>,
    /// Files to write into the data directory before the server starts
    /// (so `postgresql.conf` can name them relative to it), owned by the
    /// cluster's OS user with mode 0600 (certificates, keys):
    /// `(file name, contents)`.
    pub files: Vec<(String, Vec<u8>)>,
    /// Listen on the Unix-domain socket only (no TCP), on this port: a
    /// cluster on port 5432 in its own socket directory collides with no
    /// other server, so a test can play libpq's defaults against it.
    pub socket_only_port: Option<u16>,
}

/// A throwaway cluster started by [`start_cluster`]; stopped and removed when
/// the test process exits, like the shared one.
pub struct LocalCluster {
    /// The TCP port on 127.0.0.1 (and the socket's: `.s.PGSQL.<port>`).
    pub port: u16,
    /// The cluster's directory: its Unix-domain socket lives here (when the
    /// path is short enough), next to the data directory.
    pub dir: PathBuf,
    /// Whether the socket is in [`LocalCluster::dir`].
    pub has_socket: bool,
    /// The directory of the server binaries (and psql).
    pub bindir: PathBuf,
}

impl LocalCluster {
    /// A `psql` command that connects over the cluster's socket as the
    /// superuser (`local all all trust` must be in the hba), with
    /// `-X -q -v ON_ERROR_STOP=1`.
    pub fn psql_over_socket(&self) -> Command {
        let mut cmd = Command::new(self.bindir.join("psql"));
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                LOCAL_SUPERUSER,
                "-d",
                "postgres",
            ])
            .env_clear();
        cmd
    }
}

/// Starts another throwaway cluster from the installed binaries, set up as
/// `setup` says (the shared cluster of [`connect`] is this with the default
/// setup). Each call starts a new cluster.
///
/// # Errors
///
/// A message naming the set-up step that failed, with the command's output.
pub fn start_cluster(setup: &ClusterSetup) -> Result<LocalCluster, String> {
    let bindir = find_bindir("initdb")?;
    for tool in ["pg_ctl", "postgres"] {
        if !bindir.join(tool).is_file() {
            return Err(format!(
                "finding the PostgreSQL binaries: {} has initdb but no {tool}; {INSTALL_HINT}",
                bindir.display()
            ));
        }
    }
    let as_postgres = is_root()?;
    if as_postgres {
        run(
            Command::new("id").arg(CLUSTER_OS_USER),
            "running as root, so the cluster must belong to the `postgres` OS user, \
             which does not exist; create it (the postgresql package does) or run the tests \
             as a non-root user",
        )?;
    }

    let dir = make_temp_dir(as_postgres)?;
    // The watchdog comes first so that a failure below still removes the dir.
    let data = dir.join("data");
    start_watchdog(&bindir, &data, &dir, as_postgres)?;
    let runner = Runner {
        bindir: bindir.clone(),
        as_postgres,
        dir: dir.clone(),
    };

    let root_hint = if as_postgres {
        format!(
            " (running as root: the temp dir {} must be reachable by the `postgres` OS user; \
             set TMPDIR=/tmp if its parent is not)",
            dir.display()
        )
    } else {
        String::new()
    };
    run(
        runner.command("initdb").arg("-D").arg(&data).args([
            "-U",
            LOCAL_SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        ]),
        &format!("initdb of the throwaway test cluster failed{root_hint}"),
    )?;

    let has_socket = write_settings(&data, &dir)?;
    if setup.socket_only_port.is_some() {
        if !has_socket {
            return Err(format!(
                "the cluster directory {} is too long a path for a Unix-domain socket; set \
                 TMPDIR to a short directory such as /tmp",
                dir.display()
            ));
        }
        append_settings(&data, "listen_addresses = ''")?;
    }
    append_settings(&data, &setup.settings)?;
    if let Some(hba) = &setup.hba {
        write_cluster_file(
            &data.join("pg_hba.conf"),
            hba.as_bytes(),
            as_postgres,
            0o600,
        )?;
    }
    for (name, contents) in &setup.files {
        write_cluster_file(&data.join(name), contents, as_postgres, 0o600)?;
    }

    let log = dir.join("postgres.log");
    let mut attempt = 0;
    let port = loop {
        attempt += 1;
        let port = match setup.socket_only_port {
            Some(port) => port,
            None => free_port()?,
        };
        let result = run(
            runner
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o"])
                .arg(format!("-p {port}"))
                .arg("start"),
            "starting the throwaway test cluster with pg_ctl failed",
        );
        match result {
            Ok(_) => break port,
            Err(e) => {
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                // Another process may take the port between our probe and the bind.
                let port_taken = log_text.contains("could not bind")
                    || log_text.contains("could not create any TCP/IP sockets");
                if port_taken && attempt < 5 {
                    continue;
                }
                return Err(format!(
                    "{e}\n--- {} (last lines) ---\n{}",
                    log.display(),
                    tail(&log_text, 30)
                ));
            }
        }
    };

    Ok(LocalCluster {
        port,
        dir,
        has_socket,
        bindir,
    })
}

/// `ALKSTORE_PG_BIN`, else `pg_config --bindir`, else the highest version under
/// `/usr/lib/postgresql/*/bin`: the first that contains `program`.
pub(crate) fn find_bindir(program: &str) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(PG_BIN_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if dir.join(program).is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "finding the PostgreSQL binaries: {PG_BIN_ENV}={} has no {program}; \
                 point it at the directory holding the server binaries or unset it",
                dir.display()
            ))
        };
    }
    let mut looked = Vec::new();
    match Command::new("pg_config").arg("--bindir").output() {
        Ok(out) if out.status.success() => {
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if dir.join(program).is_file() {
                return Ok(dir);
            }
            looked.push(format!(
                "`pg_config --bindir` = {} (no {program})",
                dir.display()
            ));
        }
        Ok(out) => looked.push(format!(
            "`pg_config --bindir` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => looked.push(format!("`pg_config` not runnable: {e}")),
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join(program).is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    looked.push(format!("no /usr/lib/postgresql/*/bin/{program}"));
    Err(format!(
        "finding the PostgreSQL binaries: no {program} found ({}); {INSTALL_HINT}, \
         or set {PG_BIN_ENV} to the directory holding {program}",
        looked.join("; ")
    ))
}

fn is_root() -> Result<bool, String> {
    let out = run(
        Command::new("id").arg("-u"),
        "checking the user id with `id -u`",
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "0")
}

fn make_temp_dir(as_postgres: bool) -> Result<PathBuf, String> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!("alkstore-pg-{}-{nanos:09}", std::process::id()));
    // `create_dir`, not `create_dir_all`: the directory must be new.
    std::fs::create_dir(&dir)
        .map_err(|e| format!("creating the cluster directory {}: {e}", dir.display()))?;
    if as_postgres {
        run(
            Command::new("chown")
                .arg(format!("{CLUSTER_OS_USER}:"))
                .arg(&dir),
            "handing the cluster directory to the `postgres` OS user with chown",
        )?;
    }
    Ok(dir)
}

/// Writes the harness's settings; returns whether the socket lives in `dir`.
fn write_settings(data: &Path, dir: &Path) -> Result<bool, String> {
    // The socket path has a ~107-byte limit; TCP is what the tests use anyway.
    let socket_dir = if dir.as_os_str().len() + "/.s.PGSQL.65535".len() < 100 {
        dir.to_string_lossy().replace('\'', "''")
    } else {
        String::new()
    };
    let settings = format!(
        "\n# alkstore test harness: a throwaway cluster, so durability is off for speed.\n\
         listen_addresses = '127.0.0.1'\n\
         unix_socket_directories = '{socket_dir}'\n\
         max_connections = 200\n\
         fsync = off\n\
         synchronous_commit = off\n\
         full_page_writes = off\n\
         # A statement whose client is gone (a test that failed at its own\n\
         # bound dropped the connection) ends within a second, instead of\n\
         # running on with its locks, which the drop at exit would wait for.\n\
         client_connection_check_interval = 1s\n"
    );
    let has_socket = !socket_dir.is_empty();
    append_settings(data, &settings)?;
    Ok(has_socket)
}

fn append_settings(data: &Path, settings: &str) -> Result<(), String> {
    let path = data.join("postgresql.conf");
    // Appending keeps the file's owner (the `postgres` OS user when root).
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("\n{settings}\n").as_bytes()))
        .map_err(|e| format!("writing the test settings to {}: {e}", path.display()))
}

/// Writes a file the server reads, owned by the cluster's OS user.
fn write_cluster_file(
    path: &Path,
    contents: &[u8],
    as_postgres: bool,
    mode: u32,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    if as_postgres {
        run(
            Command::new("chown")
                .arg(format!("{CLUSTER_OS_USER}:"))
                .arg(path),
            "handing a cluster file to the `postgres` OS user with chown",
        )?;
    }
    Ok(())
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free TCP port on 127.0.0.1: {e}"))
}

/// Starts the process that stops the cluster and removes `dir` once the
/// test process is gone (its stdin pipe reaches EOF).
fn start_watchdog(bindir: &Path, data: &Path, dir: &Path, as_postgres: bool) -> Result<(), String> {
    // Ignore the terminal's SIGINT/SIGHUP (also inherited by `cat`): a Ctrl-C
    // kills the tests, and the watchdog must outlive them to clean up.
    const SCRIPT: &str = r#"
trap '' INT HUP
cat >/dev/null
if [ -n "$4" ]; then
    runuser -u "$4" -- "$2" -D "$3" -m immediate stop
else
    "$2" -D "$3" -m immediate stop
fi >/dev/null 2>&1
rm -rf "$1"
"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("alkstore-pg-watchdog")
        .arg(dir)
        .arg(bindir.join("pg_ctl"))
        .arg(data)
        .arg(if as_postgres { CLUSTER_OS_USER } else { "" })
        .current_dir("/")
        .stdin(Stdio::piped())
        // Inheriting cargo's stdout would keep `cargo test | tee` waiting.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C to the tests' group does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the cluster watchdog (sh): {e}"))?;
    let stdin = child.stdin.take().expect("stdin was piped");
    WATCHDOGS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Watchdog { child, stdin });
    register_exit_hook();
    Ok(())
}

fn register_exit_hook() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        unsafe extern "C" {
            fn atexit(callback: extern "C" fn()) -> c_int;
        }
        // SAFETY: `atexit` is the C library's; `stop_cluster_at_exit` is a
        // plain `extern "C" fn` that never unwinds.
        if unsafe { atexit(stop_cluster_at_exit) } != 0 {
            // Not fatal: the watchdog still cleans up, just after the exit.
            eprintln!("could not register the test cluster's exit hook");
        }
    });
}

/// Runs at a normal process exit: closes the watchdogs' pipes and waits for
/// them, so the clusters are stopped and their directories gone before the
/// process ends.
extern "C" fn stop_cluster_at_exit() {
    // `try_lock`: never block the exit on a thread that died holding the lock.
    if let Ok(mut guard) = WATCHDOGS.try_lock() {
        let watchdogs: Vec<Watchdog> = guard.drain(..).collect();
        let children: Vec<Child> = watchdogs
            .into_iter()
            .map(|Watchdog { child, stdin }| {
                drop(stdin);
                child
            })
            .collect();
        for mut child in children {
            let _ = child.wait();
        }
    }
}

fn run(cmd: &mut Command, step: &str) -> Result<Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{step}: could not run {cmd:?}: {e}"))?;
    if out.status.success() {
        return Ok(out);
    }
    Err(format!(
        "{step}: {cmd:?} exited with {}\n--- stderr ---\n{}\n--- stdout ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim_end(),
        String::from_utf8_lossy(&out.stdout).trim_end(),
    ))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
