//! A real Citus cluster for the Citus tests: a coordinator and two workers.
//!
//! The first test that asks for it starts three throwaway clusters from the
//! installed PostgreSQL binaries, exactly as [`crate::pg`] starts the single
//! server ([`crate::pg::start_cluster`]: fresh temporary directories, free
//! ports, durability off, trust on 127.0.0.1, run as the `postgres` OS user
//! when root, a watchdog that stops them when the test process ends), with
//! `shared_preload_libraries = 'citus'` and `max_prepared_transactions > 0`.
//! Then it runs `CREATE EXTENSION citus` on each node,
//! `citus_set_coordinator_host` on the coordinator and `citus_add_node` for
//! each worker. Only the test binaries that call [`cluster`] pay for it.
//!
//! There is no silent skip: when Citus is not installed for the server the
//! harness uses, every test that asks for the cluster panics with a message
//! naming the set-up step (`bash .ci/install-citus`).
//!
//! Connections use `sslmode=disable`: `CREATE EXTENSION citus` turns on TLS
//! with a self-signed certificate, which only the TLS test of
//! `tests/citus.rs` uses (the nodes still talk to each other over it, as
//! Citus configures them). `wal_level` is the default, `replica`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use schema_gen::statements::Statement;
use tokio_postgres::{Client, NoTls};

use crate::explain::literals;
use crate::pg::{ClusterSetup, LocalCluster, describe_error, find_bindir, start_cluster};

/// The Citus version the cluster must run (`citus_version()` starts with
/// `Citus 13.2.2 `); the one `.ci/install-citus` builds.
pub const CITUS_VERSION: &str = "13.2.2";

/// What to do when Citus is missing.
const INSTALL_HINT: &str = "run `bash .ci/install-citus` (builds Citus 13.2.2 from \
     ../shared/vendor/citus-13.2.2.tar.gz and installs it for the installed PostgreSQL server; \
     set ALKSTORE_VENDOR_DIR if the tarball lives elsewhere)";

/// The settings every node needs; a worker also needs prepared transactions,
/// because Citus commits a transaction over several nodes in two phases.
const NODE_SETTINGS: &str = "shared_preload_libraries = 'citus'\n\
     max_prepared_transactions = 100\n";

static CLUSTER: OnceLock<Result<CitusCluster, String>> = OnceLock::new();

/// The running cluster: where its nodes listen.
pub struct CitusCluster {
    /// The coordinator's TCP port on 127.0.0.1.
    pub coordinator: u16,
    /// The two workers' TCP ports on 127.0.0.1.
    pub workers: [u16; 2],
    /// How long starting and wiring up the three nodes took.
    pub startup: Duration,
}

/// The cluster every Citus test in this process shares, started on first use.
///
/// # Panics
///
/// If it cannot be started; the message names the failing set-up step.
pub fn cluster() -> &'static CitusCluster {
    match CLUSTER.get_or_init(start) {
        Ok(cluster) => cluster,
        Err(message) => panic!("no Citus cluster for the Citus tests: {message}"),
    }
}

impl CitusCluster {
    /// A superuser connection URL (key/value form) for the coordinator.
    pub fn coordinator_url(&self) -> String {
        node_url(self.coordinator)
    }

    /// A superuser connection URL for worker `index` (0 or 1).
    ///
    /// # Panics
    ///
    /// If `index` is not 0 or 1.
    pub fn worker_url(&self, index: usize) -> String {
        node_url(self.workers[index])
    }

    /// Opens a superuser connection to the coordinator on the current tokio
    /// runtime.
    ///
    /// # Panics
    ///
    /// If the connection fails.
    pub async fn connect_coordinator(&self) -> Client {
        connect(&self.coordinator_url()).await
    }

    /// Opens a superuser connection to worker `index` (0 or 1).
    ///
    /// # Panics
    ///
    /// If `index` is not 0 or 1 or the connection fails.
    pub async fn connect_worker(&self, index: usize) -> Client {
        connect(&self.worker_url(index)).await
    }
}

fn node_url(port: u16) -> String {
    format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable")
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connecting to the Citus node `{url}`: {}",
                describe_error(&e)
            )
        });
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("Citus test connection closed with an error: {e}");
        }
    });
    client
}

/// The `Task Count` lines of `EXPLAIN` of `statement` with its bound values
/// (as a prepared statement, so the plan is the one the engine gets), in plan
/// order, and the plan text. A statement routed to one shard has exactly one
/// entry, `1`; a statement that first runs a distributed subplan has more.
///
/// # Panics
///
/// If preparing or explaining fails; the message names the statement.
pub async fn task_counts(client: &Client, statement: &Statement) -> (Vec<u32>, String) {
    let name = statement.name();
    let types: Vec<String> = statement.params().iter().map(|p| p.type_name()).collect();
    let arguments = literals(statement);
    let prepare = if types.is_empty() {
        format!("PREPARE citus_probe AS {}", statement.sql())
    } else {
        format!(
            "PREPARE citus_probe({}) AS {}",
            types.join(", "),
            statement.sql()
        )
    };
    client
        .batch_execute(&prepare)
        .await
        .unwrap_or_else(|e| panic!("{name}: preparing failed: {}", describe_error(&e)));
    let explain = if arguments.is_empty() {
        "EXPLAIN (COSTS OFF) EXECUTE citus_probe".to_owned()
    } else {
        format!(
            "EXPLAIN (COSTS OFF) EXECUTE citus_probe({})",
            arguments.join(", ")
        )
    };
    let result = client.query(&explain, &[]).await;
    client
        .batch_execute("DEALLOCATE citus_probe")
        .await
        .unwrap_or_else(|e| panic!("{name}: DEALLOCATE failed: {}", describe_error(&e)));
    let rows = result.unwrap_or_else(|e| panic!("{name}: EXPLAIN failed: {}", describe_error(&e)));
    let lines: Vec<String> = rows.iter().map(|row| row.get::<_, String>(0)).collect();
    let counts = lines
        .iter()
        .filter_map(|line| line.trim().strip_prefix("Task Count: "))
        .map(|n| {
            n.parse::<u32>()
                .unwrap_or_else(|e| panic!("{name}: unreadable `Task Count: {n}`: {e}"))
        })
        .collect();
    (counts, lines.join("\n"))
}

// ---------------------------------------------------------------------------
// Start-up

fn start() -> Result<CitusCluster, String> {
    let began = Instant::now();
    citus_installed(&find_bindir("initdb")?)?;
    let setup = || ClusterSetup {
        settings: NODE_SETTINGS.to_owned(),
        ..ClusterSetup::default()
    };
    // initdb dominates; the three run side by side.
    let nodes: Vec<Result<LocalCluster, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|_| scope.spawn(move || start_cluster(&setup())))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a node's start-up thread panicked".to_owned()))
            })
            .collect()
    });
    let started = nodes
        .into_iter()
        .collect::<Result<Vec<LocalCluster>, String>>()
        .map_err(|e| format!("starting a Citus node: {e}"))?;
    let [coordinator, first, second]: [LocalCluster; 3] = started
        .try_into()
        .map_err(|_| "three nodes were asked for".to_owned())?;
    let psql = coordinator.bindir.join("psql");
    // Each node's CREATE EXTENSION takes about a second; side by side too.
    std::thread::scope(|scope| {
        let handles: Vec<_> = [&coordinator, &first, &second]
            .map(|node| {
                let psql = &psql;
                scope.spawn(move || run_sql(psql, node.port, "CREATE EXTENSION citus"))
            })
            .into_iter()
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a CREATE EXTENSION thread panicked".to_owned()))
                .map(drop)
        })
    })?;
    run_sql(
        &psql,
        coordinator.port,
        &format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {c}); \
             SELECT citus_add_node('127.0.0.1', {w1}); \
             SELECT citus_add_node('127.0.0.1', {w2});",
            c = coordinator.port,
            w1 = first.port,
            w2 = second.port
        ),
    )?;
    expected_version(&run_sql(&psql, coordinator.port, "SELECT citus_version()")?)?;
    Ok(CitusCluster {
        coordinator: coordinator.port,
        workers: [first.port, second.port],
        startup: began.elapsed(),
    })
}

/// Whether `citus_version()` returned `version` of the Citus the tests are
/// written against ([`CITUS_VERSION`]).
///
/// # Errors
///
/// A message naming the version found and the set-up step that installs the
/// expected one.
pub fn expected_version(version: &str) -> Result<(), String> {
    if version.starts_with(&format!("Citus {CITUS_VERSION} ")) {
        return Ok(());
    }
    Err(format!(
        "the cluster runs `{}`, the tests expect Citus {CITUS_VERSION}: {INSTALL_HINT}",
        version.trim()
    ))
}

/// Whether Citus is installed for the server in `bindir` (Debian's layout:
/// `…/bin` next to `…/lib/citus.so`, or `pg_config --pkglibdir`).
///
/// # Errors
///
/// A message naming the set-up step that installs it.
pub fn citus_installed(bindir: &Path) -> Result<(), String> {
    let mut looked: Vec<PathBuf> = Vec::new();
    if let Some(parent) = bindir.parent() {
        looked.push(parent.join("lib").join("citus.so"));
    }
    if let Ok(out) = Command::new(bindir.join("pg_config"))
        .arg("--pkglibdir")
        .output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        looked.push(dir.join("citus.so"));
    }
    if looked.iter().any(|p| p.is_file()) {
        return Ok(());
    }
    let places: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "Citus is not installed for the PostgreSQL server in {} (no {}): {INSTALL_HINT}",
        bindir.display(),
        places.join(" nor ")
    ))
}

/// Runs `sql` with psql on the node at `port` and returns its unaligned
/// output.
fn run_sql(psql: &Path, port: u16, sql: &str) -> Result<String, String> {
    let out = Command::new(psql)
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(node_url(port))
        .args(["-c", sql])
        .env_remove("PGSERVICE")
        .output()
        .map_err(|e| format!("running psql for `{sql}`: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(format!(
        "setting up the Citus cluster: `{sql}` on port {port} failed: {}{}",
        String::from_utf8_lossy(&out.stderr).trim(),
        if String::from_utf8_lossy(&out.stderr).contains("citus") {
            format!("; {INSTALL_HINT}")
        } else {
            String::new()
        }
    ))
}
