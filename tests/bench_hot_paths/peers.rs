//! The peers: pg-boss 12 and graphile-worker 0.17, from their npm packages,
//! installed by the benchmark under `target/peers-bench` (never committed),
//! on the same server in the same run.
//!
//! Each peer creates its own schema with its own tooling (pg-boss: `start`
//! and `createQueue` through its API; graphile-worker: its `runMigrations`),
//! and its SQL is taken from the installed package at run time: a small
//! driver script, written next to the packages, makes the calls an
//! application makes (pg-boss: `send`, `insert`, `fetch` with `batchSize`
//! 1, 10 and 100, `complete` of many ids; graphile-worker: `addJob`,
//! `addJobs` and the worker's own `batchGetJobs` of 1, 10 and 100 and
//! `batchCompleteJobs`, its batched modes) through a recording database
//! handle and prints
//! every statement they sent with its values. The benchmark then prepares
//! those statements and sends them through the same Rust driver
//! (tokio-postgres) as alkstore's, binding the values those calls bind.
//! pg-boss's maintenance and cron are off (`supervise: false, schedule:
//! false`), and no graphile-worker runner is started, so nothing but the
//! benchmark touches their tables.

use std::path::{Path, PathBuf};
use std::str::FromStr as _;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio_postgres::config::Host;

use crate::workspace_target;

/// The pg-boss release line measured (npm picks its newest 12.x).
pub const PGBOSS_SPEC: &str = "pg-boss@12";
/// The graphile-worker release line measured (npm picks its newest 0.17.x).
pub const GRAPHILE_SPEC: &str = "graphile-worker@0.17";
const PGBOSS_MAJOR: &str = "12.";
const GRAPHILE_MINOR: &str = "0.17.";

const SETUP_HINT: &str = "install Node.js and npm (apt-get install nodejs npm)";

/// pg-boss's driver: `node boss-prepare.mjs <json>` creates the schema and
/// queue, then records what its API sends.
const BOSS_JS: &str = r#"// Written and run by alkstore's hot-path benchmark (tests/bench_hot_paths/peers.rs):
// creates pg-boss's schema and one queue through its API, then records the SQL
// (and values) its API sends for send, fetch, complete, insert (fetch with
// batchSize 1, 10 and 100: the batch size is written into the SQL).
import { PgBoss } from 'pg-boss'
import pg from 'pg'
import { readFileSync } from 'node:fs'
const arg = JSON.parse(process.argv[2])
const pool = new pg.Pool({ ...arg.connection, max: 2 })
const recorded = []
const db = { executeSql: async (text, values) => { recorded.push({ text, values: values || [] }); return pool.query(text, values) } }
const boss = new PgBoss({ db, schema: arg.schema, supervise: false, schedule: false })
boss.on('error', e => { console.error(e); process.exitCode = 1 })
async function cap (f) { const from = recorded.length; const r = await f(); return { r, calls: recorded.slice(from) } }
try {
  await boss.start()
  const q = arg.queue
  await boss.createQueue(q)
  const send = await cap(() => boss.send(q, { n: 0 }))
  const fetch1 = await cap(() => boss.fetch(q, { batchSize: 1 }))
  const complete1 = await cap(() => boss.complete(q, fetch1.r.map(j => j.id)))
  const insert = await cap(() => boss.insert(q, Array.from({ length: 10 }, (_, k) => ({ data: { n: k } }))))
  const fetch10 = await cap(() => boss.fetch(q, { batchSize: 10 }))
  const complete10 = await cap(() => boss.complete(q, fetch10.r.map(j => j.id)))
  await boss.insert(q, Array.from({ length: 100 }, (_, k) => ({ data: { n: k } })))
  const fetch100 = await cap(() => boss.fetch(q, { batchSize: 100 }))
  const complete100 = await cap(() => boss.complete(q, fetch100.r.map(j => j.id)))
  await boss.stop({ graceful: false, wait: true })
  await pool.end()
  const version = JSON.parse(readFileSync(new URL('./node_modules/pg-boss/package.json', import.meta.url))).version
  const out = { version, send: send.calls, fetch1: fetch1.calls, complete1: complete1.calls, insert: insert.calls, fetch10: fetch10.calls, complete10: complete10.calls, fetch100: fetch100.calls, complete100: complete100.calls, got: [fetch1.r.length, fetch10.r.length, fetch100.r.length] }
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(process.exitCode || 0))
} catch (e) { console.error(e); process.exit(1) }
"#;

/// graphile-worker's driver: `node gw-prepare.js <json>` runs its
/// migrations, then records what its job helpers and its worker's SQL send.
const GRAPHILE_JS: &str = r#"'use strict'
// Written and run by alkstore's hot-path benchmark (tests/bench_hot_paths/peers.rs):
// runs graphile-worker's migrations, then records the SQL (and values) of
// addJob, addJobs and the worker's batchGetJobs / batchCompleteJobs (the
// batched get and completion of its local queue: 1, 10 and 100 jobs).
const { runMigrations } = require('graphile-worker')
const { processSharedOptions } = require('graphile-worker/dist/lib')
const { batchGetJobs } = require('graphile-worker/dist/sql/getJobs')
const { batchCompleteJobs } = require('graphile-worker/dist/sql/completeJobs')
const { makeAddJob, makeAddJobs } = require('graphile-worker/dist/helpers')
const pg = require('pg')
const arg = JSON.parse(process.argv[2])
async function main () {
  const pool = new pg.Pool({ ...arg.connection, max: 2 })
  pool.on('error', e => console.error(e))
  const options = { pgPool: pool, schema: arg.schema }
  await runMigrations(options)
  const cso = processSharedOptions(options)
  const client = await pool.connect()
  const recorded = []
  const rec = {
    query (q, v) {
      const text = typeof q === 'string' ? q : q.text
      const values = typeof q === 'string' ? v : q.values
      recorded.push({ text, values: values || [] })
      return client.query(text, values)
    }
  }
  const withPgClient = async cb => cb(rec)
  withPgClient.withRetries = withPgClient
  async function cap (f) { const from = recorded.length; const r = await f(); return { r, calls: recorded.slice(from) } }
  const tasks = { [arg.task]: async () => {} }
  // Registers the task (getTaskDetails inserts it) outside the captures.
  await batchGetJobs(cso, withPgClient, tasks, arg.pool, [], 1)
  const add1 = await cap(() => makeAddJob(cso, withPgClient)(arg.task, { n: 0 }))
  const get1 = await cap(() => batchGetJobs(cso, withPgClient, tasks, arg.pool, [], 1))
  const complete1 = await cap(() => batchCompleteJobs(cso, withPgClient, arg.pool, get1.r))
  const add10 = await cap(() => makeAddJobs(cso, withPgClient)(Array.from({ length: 10 }, (_, k) => ({ identifier: arg.task, payload: { n: k } }))))
  const get10 = await cap(() => batchGetJobs(cso, withPgClient, tasks, arg.pool, [], 10))
  const complete10 = await cap(() => batchCompleteJobs(cso, withPgClient, arg.pool, get10.r))
  await makeAddJobs(cso, withPgClient)(Array.from({ length: 100 }, (_, k) => ({ identifier: arg.task, payload: { n: k } })))
  const get100 = await cap(() => batchGetJobs(cso, withPgClient, tasks, arg.pool, [], 100))
  const complete100 = await cap(() => batchCompleteJobs(cso, withPgClient, arg.pool, get100.r))
  client.release()
  await pool.end()
  return { version: require('graphile-worker/package.json').version, add1: add1.calls, get1: get1.calls, complete1: complete1.calls, add10: add10.calls, get10: get10.calls, complete10: complete10.calls, get100: get100.calls, complete100: complete100.calls, got: [get1.r.length, get10.r.length, get100.r.length] }
}
main().then(
  o => process.stdout.write(JSON.stringify(o) + '\n', () => process.exit(0)),
  e => { console.error(e); process.exit(1) }
)
"#;

/// The installed packages and their driver scripts.
pub struct Peers {
    dir: PathBuf,
    pub pgboss_version: String,
    pub graphile_version: String,
    pub node_version: String,
}

/// One statement a peer's API sent, with the values it bound.
#[derive(Debug, Clone, Deserialize)]
pub struct Call {
    pub text: String,
    pub values: Vec<Value>,
}

/// What pg-boss's API sent for one schema and queue (one statement each).
#[derive(Debug, Deserialize)]
pub struct BossCalls {
    pub version: String,
    pub send: Vec<Call>,
    pub fetch1: Vec<Call>,
    pub complete1: Vec<Call>,
    pub insert: Vec<Call>,
    pub fetch10: Vec<Call>,
    pub complete10: Vec<Call>,
    pub fetch100: Vec<Call>,
    pub complete100: Vec<Call>,
    pub got: Vec<u64>,
}

/// What graphile-worker sent for one schema (one statement each).
#[derive(Debug, Deserialize)]
pub struct GraphileCalls {
    pub version: String,
    pub add1: Vec<Call>,
    pub get1: Vec<Call>,
    pub complete1: Vec<Call>,
    pub add10: Vec<Call>,
    pub get10: Vec<Call>,
    pub complete10: Vec<Call>,
    pub get100: Vec<Call>,
    pub complete100: Vec<Call>,
    pub got: Vec<u64>,
}

/// pg-boss's statements for one queue, as the benchmark sends them.
#[derive(Debug, Clone)]
pub struct BossSql {
    pub version: String,
    pub queue: String,
    /// The job table the queue's jobs live in (its partition).
    pub table: String,
    /// `send()`: `$1` a JSON array of one job.
    pub send: Call,
    /// `insert()`: `$1` a JSON array of jobs.
    pub insert: Call,
    /// `fetch()` with `batchSize` 1, 10 and 100 (the batch size is in the
    /// text).
    pub fetch1: Call,
    pub fetch10: Call,
    pub fetch100: Call,
    /// `complete()`: `$1` queue, `$2` uuid[], `$3` output.
    pub complete: Call,
}

/// graphile-worker's statements for one schema.
#[derive(Debug, Clone)]
pub struct GraphileSql {
    pub version: String,
    /// `addJob`: nine parameters, `$1` task, `$2` payload.
    pub add1: Call,
    /// `addJobs`: `$1` a JSON array of job specs, `$2` job_key_preserve_run_at.
    pub add10: Call,
    /// The worker's `batchGetJobs` with 1, 10 and 100 (`$1` worker, `$2`
    /// task ids; the count is in the text).
    pub get1: Call,
    pub get10: Call,
    pub get100: Call,
    /// `batchCompleteJobs` of one job (`$1` id) and of several (`$1` bigint[]).
    pub complete1: Call,
    pub complete10: Call,
    /// The task's id (the value of `$2` in the get statements).
    pub task_ids: Vec<i64>,
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

fn installed_version(dir: &Path, package: &str) -> Option<String> {
    let text =
        std::fs::read_to_string(dir.join(format!("node_modules/{package}/package.json"))).ok()?;
    let manifest: Value = serde_json::from_str(&text).ok()?;
    manifest["version"].as_str().map(str::to_owned)
}

/// Installs pg-boss 12 and graphile-worker 0.17 under `target/peers-bench`
/// unless they are already there, and writes the driver scripts. pg-boss 12
/// declares Node 22; on Node 20 npm only warns (`--engine-strict=false`).
pub fn install() -> Result<Peers, String> {
    let node_version = tool_version("node")?;
    tool_version("npm")?;
    let dir = workspace_target().join("peers-bench");
    let have = |package: &str, prefix: &str| {
        installed_version(&dir, package).is_some_and(|v| v.starts_with(prefix))
    };
    if !(have("pg-boss", PGBOSS_MAJOR) && have("graphile-worker", GRAPHILE_MINOR)) {
        // Into a private directory first, then renamed into place, so an
        // interrupted install is never taken for a finished one.
        let staging = workspace_target().join(format!("peers-bench.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .map_err(|e| format!("creating {}: {e}", staging.display()))?;
        let out = std::process::Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--engine-strict=false",
                "--prefix",
            ])
            .arg(&staging)
            .args([PGBOSS_SPEC, GRAPHILE_SPEC, "pg"])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running npm install: {e}; {SETUP_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "`npm install {PGBOSS_SPEC} {GRAPHILE_SPEC} pg` into {} failed ({}): {}\n\
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
    let pgboss_version = installed_version(&dir, "pg-boss")
        .ok_or_else(|| format!("pg-boss is not in {} after npm install", dir.display()))?;
    let graphile_version = installed_version(&dir, "graphile-worker").ok_or_else(|| {
        format!(
            "graphile-worker is not in {} after npm install",
            dir.display()
        )
    })?;
    std::fs::write(dir.join("boss-prepare.mjs"), BOSS_JS)
        .and_then(|()| std::fs::write(dir.join("gw-prepare.js"), GRAPHILE_JS))
        .map_err(|e| format!("writing the peers' driver scripts: {e}"))?;
    Ok(Peers {
        dir,
        pgboss_version,
        graphile_version,
        node_version,
    })
}

/// The test server's connection parameters as node-postgres takes them.
fn connection() -> Value {
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
        "application_name": "peers-bench",
    });
    if let Some(pw) = config.get_password() {
        c["password"] = json!(String::from_utf8_lossy(pw));
    }
    c
}

fn one(calls: Vec<Call>, what: &str) -> Result<Call, String> {
    match <[Call; 1]>::try_from(calls) {
        Ok([call]) => Ok(call),
        Err(calls) => Err(format!(
            "{what} sent {} statements, the benchmark expects one",
            calls.len()
        )),
    }
}

/// The table named in `INSERT INTO <table> (`.
fn insert_target(sql: &str) -> Option<String> {
    let rest = sql.split("INSERT INTO").nth(1)?;
    rest.split_whitespace()
        .next()
        .map(|t| t.trim_end_matches('(').to_owned())
}

impl Peers {
    async fn node<T: for<'de> Deserialize<'de>>(
        &self,
        script: &str,
        argument: Value,
    ) -> Result<T, String> {
        let out = tokio::process::Command::new("node")
            .arg(script)
            .arg(argument.to_string())
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("running node: {e}; {SETUP_HINT}"))?;
        if !out.status.success() {
            return Err(format!(
                "the peer driver (`node {script}`) failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "the peer driver `{script}` printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Creates pg-boss's schema `schema` and `queue` through its API and
    /// returns the statements its API sends for that queue.
    pub async fn pgboss(&self, schema: &str, queue: &str) -> Result<BossSql, String> {
        let calls: BossCalls = self
            .node(
                "boss-prepare.mjs",
                json!({ "connection": connection(), "schema": schema, "queue": queue }),
            )
            .await?;
        if calls.got != [1, 10, 100] {
            return Err(format!(
                "pg-boss's fetch returned {:?} jobs after sending 1, 10 and 100",
                calls.got
            ));
        }
        let send = one(calls.send, "pg-boss send()")?;
        let table =
            insert_target(&send.text).ok_or("pg-boss's send() SQL names no INSERT INTO table")?;
        Ok(BossSql {
            version: calls.version,
            queue: queue.to_owned(),
            table,
            send,
            insert: one(calls.insert, "pg-boss insert()")?,
            fetch1: one(calls.fetch1, "pg-boss fetch()")?,
            fetch10: one(calls.fetch10, "pg-boss fetch(batchSize 10)")?,
            fetch100: one(calls.fetch100, "pg-boss fetch(batchSize 100)")?,
            complete: one(calls.complete1, "pg-boss complete()")?,
        })
        .and_then(|sql| {
            // One statement for any number of ids, the one replayed.
            for (calls, what) in [
                (calls.complete10, "pg-boss complete() of 10"),
                (calls.complete100, "pg-boss complete() of 100"),
            ] {
                if one(calls, what)?.text != sql.complete.text {
                    return Err(format!(
                        "{what} sent another statement than complete() of one"
                    ));
                }
            }
            Ok(sql)
        })
    }

    /// Runs graphile-worker's migrations into `schema` and returns the
    /// statements it sends for task `task`.
    pub async fn graphile(&self, schema: &str, task: &str) -> Result<GraphileSql, String> {
        let calls: GraphileCalls = self
            .node(
                "gw-prepare.js",
                json!({
                    "connection": connection(),
                    "schema": schema,
                    "task": task,
                    "pool": "bench-pool",
                }),
            )
            .await?;
        if calls.got != [1, 10, 100] {
            return Err(format!(
                "graphile-worker's get returned {:?} jobs after adding 1, 10 and 100",
                calls.got
            ));
        }
        let get1 = one(calls.get1, "graphile-worker batchGetJobs(1)")?;
        let task_ids: Vec<i64> = get1
            .values
            .get(1)
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        if task_ids.is_empty() {
            return Err("graphile-worker's get bound no task ids as $2".to_owned());
        }
        Ok(GraphileSql {
            version: calls.version,
            add1: one(calls.add1, "graphile-worker addJob")?,
            add10: one(calls.add10, "graphile-worker addJobs")?,
            get1,
            get10: one(calls.get10, "graphile-worker batchGetJobs(10)")?,
            get100: one(calls.get100, "graphile-worker batchGetJobs(100)")?,
            complete1: one(calls.complete1, "graphile-worker batchCompleteJobs(1)")?,
            complete10: one(calls.complete10, "graphile-worker batchCompleteJobs(10)")?,
            task_ids,
        })
        .and_then(|sql| {
            let complete100 = one(calls.complete100, "graphile-worker batchCompleteJobs(100)")?;
            if complete100.text != sql.complete10.text {
                return Err(
                    "graphile-worker completes 100 jobs with another statement than 10".to_owned(),
                );
            }
            Ok(sql)
        })
    }
}
