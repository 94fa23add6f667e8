//! A real pgbouncer in front of the test server, for the tests of what a
//! connection pooler does to bootstrap and check.
//!
//! The first test that asks for it starts one pgbouncer for the whole test
//! process (Debian's `pgbouncer` package; `apt-get install pgbouncer`), on a
//! free port of 127.0.0.1, with one pooled database per pool mode
//! ([`PoolMode`]; transaction pooling twice, once over at most two server
//! connections), each forwarding to the test server's database as its
//! superuser (`auth_type = any`: pgbouncer itself asks no password), and one
//! more in transaction pooling that logs in as a least-privilege role of its
//! own ([`runtime_url`], [`runtime_role`]), as an engine's runtime role does
//! behind a pooler. As for
//! the cluster, a small watchdog shell process holds the read end of a pipe
//! whose write end lives in the test process: when the process exits, for
//! any reason, the watchdog stops pgbouncer and removes its directory.
//!
//! No silent skip: without pgbouncer, the tests that need it fail with the
//! set-up step to take.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::str::FromStr as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::Config;
use tokio_postgres::config::Host;

/// How pgbouncer hands server connections to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per client transaction.
    Transaction,
    /// A server connection per statement: no multi-statement transaction.
    Statement,
    /// A server connection per client session, reset when the client
    /// leaves.
    Session,
    /// Transaction pooling over at most two server connections, so a test
    /// holding one in an open transaction decides which one the next
    /// client transaction gets.
    TransactionOfTwo,
}

impl PoolMode {
    const ALL: [PoolMode; 4] = [
        Self::Transaction,
        Self::Statement,
        Self::Session,
        Self::TransactionOfTwo,
    ];

    /// The pooled database's name.
    fn name(self) -> &'static str {
        match self {
            Self::Transaction => "transaction",
            Self::Statement => "statement",
            Self::Session => "session",
            Self::TransactionOfTwo => "transaction_of_two",
        }
    }

    /// Its pgbouncer settings.
    fn settings(self) -> &'static str {
        match self {
            Self::Transaction => "pool_mode=transaction",
            Self::Statement => "pool_mode=statement",
            Self::Session => "pool_mode=session",
            Self::TransactionOfTwo => "pool_mode=transaction pool_size=2",
        }
    }
}

struct Bouncer {
    port: u16,
    /// The role the pooled database `transaction_runtime` logs in as, and
    /// its password (for a server that checks one).
    runtime_role: String,
    runtime_password: String,
}

struct Watchdog {
    _child: Child,
    /// Closing it (at process exit) stops pgbouncer.
    _stdin: ChildStdin,
}

static BOUNCER: OnceLock<Result<Bouncer, String>> = OnceLock::new();
static WATCHDOG: Mutex<Option<Watchdog>> = Mutex::new(None);
/// Whether the runtime role was created (once per process, on first use).
static RUNTIME_ROLE: OnceLock<Result<(), String>> = OnceLock::new();

/// The pooled database of [`runtime_url`].
const RUNTIME_DATABASE: &str = "transaction_runtime";

/// A key/value URL that reaches the test database through pgbouncer in
/// `mode` (as the test server's superuser, whatever user the URL names).
///
/// # Panics
///
/// If pgbouncer is not installed or does not start; the message names the
/// set-up step.
pub fn url(mode: PoolMode) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname={} connect_timeout=10",
        bouncer().port,
        mode.name()
    )
}

/// A key/value URL that reaches the test database through pgbouncer in
/// transaction pooling as [`runtime_role`] (pgbouncer logs in to the server
/// as that role, whatever user the URL names). The role is created on the
/// first call: `LOGIN` and nothing else (no superuser, no `CREATEDB` or
/// `CREATEROLE`, owning nothing); a test grants it what it needs, e.g. the
/// engine's runtime grants (`schema_gen::grants::script`). Dropped at exit
/// with the other names the harness hands out.
///
/// # Panics
///
/// If pgbouncer does not start (see [`url`]) or the role cannot be created.
pub fn runtime_url() -> String {
    let bouncer = bouncer();
    let created = RUNTIME_ROLE.get_or_init(|| {
        let sql = format!(
            "CREATE ROLE {} LOGIN PASSWORD '{}'",
            bouncer.runtime_role, bouncer.runtime_password
        );
        let out = crate::psql()
            .args(["-c", &sql])
            .output()
            .map_err(|e| format!("running psql: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    });
    if let Err(message) = created {
        panic!(
            "creating the pooled runtime role {}: {message}",
            bouncer.runtime_role
        );
    }
    format!(
        "host=127.0.0.1 port={} user={} dbname={RUNTIME_DATABASE} connect_timeout=10",
        bouncer.port, bouncer.runtime_role
    )
}

/// The least-privilege role [`runtime_url`] reaches the server as.
///
/// # Panics
///
/// If pgbouncer does not start (see [`url`]).
pub fn runtime_role() -> &'static str {
    &bouncer().runtime_role
}

fn bouncer() -> &'static Bouncer {
    match BOUNCER.get_or_init(start) {
        Ok(bouncer) => bouncer,
        Err(message) => panic!("no pgbouncer for the pooling tests: {message}"),
    }
}

fn start() -> Result<Bouncer, String> {
    let binary = find_binary()?;
    let upstream = Config::from_str(&crate::database_url())
        .map_err(|e| format!("parsing the test server's URL: {e}"))?;
    let as_postgres = is_root();
    let dir = std::env::temp_dir().join(format!(
        "alkstore-pgbouncer-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos()
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))?;
    // Named like the harness's other names, so it is dropped at exit.
    let runtime_role = crate::unique_name("pooled_runtime");
    let runtime_password = format!(
        "{:016x}",
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), &dir)
    );
    let config = dir.join("pgbouncer.ini");
    let runtime = (runtime_role.as_str(), runtime_password.as_str());
    std::fs::write(&config, settings(&upstream, port, &dir, runtime)?)
        .map_err(|e| format!("writing {}: {e}", config.display()))?;
    if as_postgres {
        // pgbouncer refuses to run as root.
        let status = Command::new("chown")
            .arg("-R")
            .arg("postgres:")
            .arg(&dir)
            .status()
            .map_err(|e| format!("chown of {}: {e}", dir.display()))?;
        if !status.success() {
            return Err(format!("chown of {} failed", dir.display()));
        }
    }
    start_watchdog(&binary, &config, &dir, as_postgres)?;
    wait_until_listening(port, &dir)?;
    Ok(Bouncer {
        port,
        runtime_role,
        runtime_password,
    })
}

/// The configuration: a pooled database per [`PoolMode`] as `upstream`'s
/// user, and [`RUNTIME_DATABASE`] as `runtime` (role, password).
fn settings(
    upstream: &Config,
    port: u16,
    dir: &Path,
    runtime: (&str, &str),
) -> Result<String, String> {
    let (host, server_port) = match (upstream.get_hosts().first(), upstream.get_ports().first()) {
        (Some(Host::Tcp(host)), port) => (host.clone(), port.copied().unwrap_or(5432)),
        (Some(Host::Unix(dir)), port) => (dir.display().to_string(), port.copied().unwrap_or(5432)),
        (None, port) => ("127.0.0.1".to_owned(), port.copied().unwrap_or(5432)),
    };
    let user = upstream.get_user().unwrap_or("postgres");
    let dbname = upstream.get_dbname().unwrap_or(user);
    let password = upstream
        .get_password()
        .map(|p| format!(" password={}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    let mut databases = String::new();
    for mode in PoolMode::ALL {
        databases.push_str(&format!(
            "{} = host={host} port={server_port} dbname={dbname} user={user}{password} {}\n",
            mode.name(),
            mode.settings()
        ));
    }
    let (role, role_password) = runtime;
    databases.push_str(&format!(
        "{RUNTIME_DATABASE} = host={host} port={server_port} dbname={dbname} user={role} \
         password={role_password} pool_mode=transaction\n"
    ));
    Ok(format!(
        "[databases]\n{databases}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
         unix_socket_dir =\nauth_type = any\nmax_client_conn = 200\ndefault_pool_size = 20\n\
         logfile = {dir}/pgbouncer.log\npidfile = {dir}/pgbouncer.pid\n",
        dir = dir.display()
    ))
}

fn find_binary() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "pgbouncer is not installed: apt-get install pgbouncer (.ci/run does)".to_owned()
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Starts pgbouncer under a shell that stops it (by its pidfile) and removes
/// `dir` once the test process is gone (its stdin pipe reaches EOF).
fn start_watchdog(
    binary: &Path,
    config: &Path,
    dir: &Path,
    as_postgres: bool,
) -> Result<(), String> {
    const SCRIPT: &str = r#"
trap '' INT HUP
if [ -n "$4" ]; then
    runuser -u "$4" -- "$2" "$3" </dev/null >/dev/null 2>&1 &
else
    "$2" "$3" </dev/null >/dev/null 2>&1 &
fi
cat >/dev/null
kill "$(cat "$1/pgbouncer.pid" 2>/dev/null)" 2>/dev/null
kill $! 2>/dev/null
sleep 0.2
rm -rf "$1"
"#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("alkstore-pgbouncer-watchdog")
        .arg(dir)
        .arg(binary)
        .arg(config)
        .arg(if as_postgres { "postgres" } else { "" })
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting the pgbouncer watchdog (sh): {e}"))?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| "the watchdog's stdin was not piped".to_owned())?;
    *WATCHDOG.lock().unwrap_or_else(|p| p.into_inner()) = Some(Watchdog {
        _child: child,
        _stdin: stdin,
    });
    Ok(())
}

fn wait_until_listening(port: u16, dir: &Path) -> Result<(), String> {
    // Only a pgbouncer that never comes up waits this long; a loaded
    // machine may take seconds to start one.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
    Err(format!(
        "pgbouncer did not listen on 127.0.0.1:{port} within 60 s; its log:\n{log}"
    ))
}
