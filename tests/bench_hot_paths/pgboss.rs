//! The peer: pg-boss, from its npm package, installed by the benchmark under
//! `target/pg-boss-bench` (never committed), on the same server in the same
//! run, two ways:
//!
//! - through its own Node API (`send`/`insert`, `fetch`, `complete`) by a
//!   small driver script this module writes next to the package and runs;
//! - with its own SQL, taken at run time from the installed package's `plans`
//!   module (the statements its API sends), prepared and sent by the same Rust
//!   driver (tokio-postgres) as alkstore's statements.
//!
//! pg-boss creates its own schema and queues through its API (`start`,
//! `createQueue`). Its background maintenance and cron (`supervise`,
//! `schedule`) are switched off, so nothing but the measured loop touches its
//! tables.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;
use tokio_postgres::config::Host;
use uuid::Uuid;

use crate::latency::Recorder;
use crate::pool::{Conn, Param, Stmt, Worker, db_error};
use crate::workspace_target;

/// The newest pg-boss whose `engines.node` accepts Node 20 (11.x needs 22).
pub const PGBOSS_VERSION: &str = "10.4.2";

/// The oldest Node major version [`PGBOSS_VERSION`] supports.
const NODE_MAJOR_MIN: u32 = 20;

const SETUP_HINT: &str = "install Node.js and npm (apt-get install nodejs npm)";

/// The driver script: `node alkstore-bench.js <command> <json argument>`,
/// printing one JSON object on stdout.
const DRIVER_JS: &str = r#"'use strict'
// Written and run by alkstore's hot-path benchmark (tests/bench_hot_paths/pgboss.rs):
// drives pg-boss through its own API, and prints the SQL its API sends.
const PgBoss = require('pg-boss')
const plans = require('pg-boss/src/plans')

const [command, argument] = process.argv.slice(2)
const arg = JSON.parse(argument)

function boss (max) {
  const b = new PgBoss({ ...arg.connection, schema: arg.schema, max, supervise: false, schedule: false })
  b.on('error', e => { console.error(e); process.exitCode = 1 })
  return b
}

async function main () {
  if (command === 'sql') {
    return {
      version: require('pg-boss/package.json').version,
      insert_one: plans.insertJob(arg.schema),
      insert_many: plans.insertJobs(arg.schema),
      fetch: plans.fetchNextJob(arg.schema)({ includeMetadata: false }),
      complete: plans.completeJobs(arg.schema)
    }
  }
  if (command === 'setup') {
    const b = boss(2)
    await b.start()
    for (const q of arg.queues) await b.createQueue(q)
    await b.stop({ graceful: false, wait: true })
    return { queues: arg.queues.length }
  }
  if (command === 'loop') {
    const b = boss(arg.clients)
    await b.start()
    const latencies = []
    let jobs = 0
    let started = 0n
    const deadline = Date.now() + arg.seconds * 1000
    async function client (c) {
      let n = 0
      while (Date.now() < deadline) {
        const t0 = process.hrtime.bigint()
        if (arg.batch === 1) {
          await b.send(arg.queue, { client: c, n })
        } else {
          await b.insert(Array.from({ length: arg.batch }, (_, k) => ({ name: arg.queue, data: { client: c, n: n + k } })))
        }
        const got = await b.fetch(arg.queue, { batchSize: arg.batch })
        if (got.length) await b.complete(arg.queue, got.map(j => j.id))
        latencies.push(Number(process.hrtime.bigint() - t0) / 1000)
        jobs += got.length
        n += arg.batch
      }
    }
    started = process.hrtime.bigint()
    await Promise.all(Array.from({ length: arg.clients }, (_, c) => client(c)))
    const seconds = Number(process.hrtime.bigint() - started) / 1e9
    await b.stop({ graceful: false, wait: true })
    return { jobs, seconds, latencies_us: latencies.map(Math.round) }
  }
  throw new Error('unknown command ' + command)
}

// Exit only once stdout is flushed: a pipe takes 64 KiB before it blocks,
// and process.exit() would cut the rest off.
main().then(
  out => process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(process.exitCode || 0)),
  e => { console.error(e); process.exit(1) }
)
"#;

/// The installed package and its driver script.
pub struct PgBoss {
    dir: PathBuf,
    pub version: String,
    pub node_version: String,
}

/// The statements pg-boss's API sends, as its `plans` module renders them for
/// one schema.
#[derive(Debug, Deserialize)]
pub struct PgBossSql {
    pub version: String,
    /// `send()`: one job (19 parameters).
    pub insert_one: String,
    /// `insert()`: a JSON array of jobs.
    pub insert_many: String,
    /// `fetch()`: `$1` queue, `$2` batch size.
    pub fetch: String,
    /// `complete()`: `$1` queue, `$2` uuid[], `$3` output.
    pub complete: String,
}

/// What the Node API loop reported.
#[derive(Debug, Deserialize)]
pub struct ApiLoop {
    pub jobs: u64,
    pub seconds: f64,
    /// Every step's latency, in microseconds.
    pub latencies_us: Vec<f64>,
}

fn tool_version(tool: &str) -> Result<String, String> {
    let out = std::process::Command::new(tool)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("`{tool} --version` could not run ({e}); {SETUP_HINT}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{tool} --version` failed ({}): {}; {SETUP_HINT}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn installed_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules/pg-boss/package.json")).ok()?;
    let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
    manifest["version"].as_str().map(str::to_owned)
}

/// Installs pg-boss [`PGBOSS_VERSION`] under `target/pg-boss-bench` unless it
/// is already there, and writes the driver script.
pub fn install() -> Result<PgBoss, String> {
    let node_version = tool_version("node")?;
    let major: u32 = node_version
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("cannot read the Node version from {node_version:?}"))?;
    if major < NODE_MAJOR_MIN {
        return Err(format!(
            "Node {node_version} is too old for pg-boss {PGBOSS_VERSION} (needs {NODE_MAJOR_MIN}+); \
             {SETUP_HINT} from a newer distribution release"
        ));
    }
    tool_version("npm")?;
    let dir = workspace_target().join("pg-boss-bench");
    if installed_version(&dir).as_deref() != Some(PGBOSS_VERSION) {
        // Into a private directory first, then renamed into place, so an
        // interrupted install is never taken for a finished one.
        let staging = workspace_target().join(format!("pg-boss-bench.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .map_err(|e| format!("creating {}: {e}", staging.display()))?;
        let out = std::process::Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--prefer-offline",
                "--prefix",
            ])
            .arg(&staging)
            .arg(format!("pg-boss@{PGBOSS_VERSION}"))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running npm install: {e}; {SETUP_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "`npm install pg-boss@{PGBOSS_VERSION}` into {} failed ({}): {}\n\
                 It needs the npm registry (or npm's cache).",
                staging.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&staging, &dir)
            .map_err(|e| format!("moving {} to {}: {e}", staging.display(), dir.display()))?;
    }
    let version = installed_version(&dir)
        .ok_or_else(|| format!("pg-boss is not in {} after npm install", dir.display()))?;
    std::fs::write(dir.join("alkstore-bench.js"), DRIVER_JS)
        .map_err(|e| format!("writing the pg-boss driver script: {e}"))?;
    Ok(PgBoss {
        dir,
        version,
        node_version,
    })
}

/// The test server's connection parameters as node-postgres takes them.
fn connection() -> serde_json::Value {
    let url = harness::database_url();
    let config = tokio_postgres::Config::from_str(&url)
        .unwrap_or_else(|e| panic!("the harness's database URL does not parse: {e}"));
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(dir)) => dir.to_string_lossy().into_owned(),
        None => "localhost".to_owned(),
    };
    let mut c = json!({
        "host": host,
        "port": config.get_ports().first().copied().unwrap_or(5432),
        "user": config.get_user().unwrap_or("postgres"),
        "database": config.get_dbname().unwrap_or("postgres"),
        "application_name": "pgboss-bench",
    });
    if let Some(pw) = config.get_password() {
        c["password"] = json!(String::from_utf8_lossy(pw));
    }
    c
}

impl PgBoss {
    async fn node<T: for<'de> Deserialize<'de>>(
        &self,
        command: &str,
        argument: serde_json::Value,
    ) -> Result<T, String> {
        let out = tokio::process::Command::new("node")
            .arg("alkstore-bench.js")
            .arg(command)
            .arg(argument.to_string())
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("running node: {e}; {SETUP_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "the pg-boss driver (`node alkstore-bench.js {command}`) failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "the pg-boss driver printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The SQL pg-boss's API sends for `schema`.
    pub async fn sql(&self, schema: &str) -> Result<PgBossSql, String> {
        self.node("sql", json!({ "schema": schema })).await
    }

    /// Creates pg-boss's schema (its own migration) and `queues`, through its API.
    pub async fn setup(&self, schema: &str, queues: &[String]) -> Result<(), String> {
        let _: serde_json::Value = self
            .node(
                "setup",
                json!({ "connection": connection(), "schema": schema, "queues": queues }),
            )
            .await?;
        Ok(())
    }

    /// The enqueue -> fetch -> complete loop through pg-boss's Node API:
    /// `clients` concurrent loops over one pool of `clients` connections.
    pub async fn api_loop(
        &self,
        schema: &str,
        queue: &str,
        clients: usize,
        batch: u64,
        time: Duration,
    ) -> Result<ApiLoop, String> {
        self.node(
            "loop",
            json!({
                "connection": connection(),
                "schema": schema,
                "queue": queue,
                "clients": clients,
                "batch": batch,
                "seconds": time.as_secs_f64(),
            }),
        )
        .await
    }
}

/// One client of the loop sending pg-boss's own SQL through tokio-postgres:
/// the statements `send`/`insert`, `fetch` and `complete` send, with the
/// values those calls bind (options left to pg-boss's defaults).
pub struct SqlLoopWorker {
    conn: Conn,
    sql: Arc<PgBossSql>,
    queue: String,
    batch: u64,
    client: usize,
    n: u64,
    pub latency: Recorder,
}

impl SqlLoopWorker {
    pub async fn new(sql: Arc<PgBossSql>, queue: &str, batch: u64, client: usize) -> Self {
        Self {
            conn: Conn::open().await,
            sql,
            queue: queue.to_owned(),
            batch,
            client,
            n: 0,
            latency: Recorder::new(),
        }
    }

    fn insert(&self) -> Stmt {
        if self.batch == 1 {
            let mut params = vec![Param::Null; 19];
            params[1] = Param::Text(self.queue.clone());
            params[2] = Param::Json(json!({ "client": self.client, "n": self.n }));
            // singletonOffset: 0 unless a throttled send retries for the next slot.
            params[7] = Param::Int(0);
            Stmt::new(&self.sql.insert_one, params)
        } else {
            let jobs: Vec<serde_json::Value> = (0..self.batch)
                .map(|k| json!({ "name": self.queue, "data": { "client": self.client, "n": self.n + k } }))
                .collect();
            let mut params = vec![Param::Null; 6];
            params[0] = Param::Json(serde_json::Value::Array(jobs));
            Stmt::new(&self.sql.insert_many, params)
        }
    }
}

impl Worker for SqlLoopWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let insert = self.insert();
        self.conn
            .query(&insert)
            .await
            .map_err(|e| db_error("pg-boss insert", &e))?;
        let fetch = Stmt::new(
            &self.sql.fetch,
            vec![
                Param::Text(self.queue.clone()),
                Param::Int(self.batch as i64),
            ],
        );
        let rows = self
            .conn
            .query(&fetch)
            .await
            .map_err(|e| db_error("pg-boss fetch", &e))?;
        let ids: Vec<Uuid> = rows
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("pg-boss fetch returned no uuid id: {e}"))?;
        let fetched = ids.len() as u64;
        if !ids.is_empty() {
            let complete = Stmt::new(
                &self.sql.complete,
                vec![
                    Param::Text(self.queue.clone()),
                    Param::Uuids(ids),
                    Param::Null,
                ],
            );
            self.conn
                .query(&complete)
                .await
                .map_err(|e| db_error("pg-boss complete", &e))?;
        }
        self.latency.record(started.elapsed());
        self.n += self.batch;
        Ok(fetched)
    }
}
