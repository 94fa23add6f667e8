//! Benchmark: the online upgrade of a version 1 (`e63468a`) database with
//! 1M jobs, run beneath eight clients running version 1's claim loop, then
//! the contract beneath eight clients running this release's; against the
//! obvious one-transaction upgrade (the benchmark's own strawman,
//! `naive.rs`) on an identical database under the same load, in the same
//! run (the harness's throwaway PostgreSQL cluster, or
//! `ALKSTORE_TEST_DATABASE_URL`).
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench upgrade
//! ```
//!
//! The online part, on one schema:
//!
//! 1. version 1 created from its shipped script and filled (`seed.rs`);
//! 2. eight version 1 clients (`engines::old_client`: its own `claim` +
//!    `claim_mark` in one transaction, then `ack`, one `enqueue` per four
//!    claims, statements from `schema-model/history/v1/statements.json`)
//!    and a plain reader (version 1's `expired_claims` every 50 ms);
//! 3. `schema_gen::upgrade::upgrade` with default options beneath them,
//!    every progress event timed; the version 1 loop and the plain reader
//!    go on a while on the expanded schema, then stop, and the run waits
//!    until their sessions have left `pg_stat_activity` (the contract
//!    refuses while an engine of version 1 is connected, and the plain
//!    reader's last statement is version 1's);
//! 4. eight clients of this release (`engines::new_client`: the product's
//!    `Session`, `jobs::Promote` + `jobs::Claim` pipelined, `jobs::Ack`,
//!    `jobs::Enqueue`), and `schema_gen::upgrade::contract` beneath them;
//! 5. the ledger: every seeded or enqueued job acked exactly once or still
//!    in the table, none claimed twice; `check`'s status.
//!
//! The naive part does 1, 2, the strawman's one transaction, and 5.
//! Throughout, `pg_locks` is sampled every 10 ms for the clients' lock waits
//! and who blocks them (`watch.rs`).
//!
//! `--bench` (what `cargo bench` passes) runs the full scale; without it (as
//! under `cargo test --benches`) a tiny round (3,000 jobs, half-second
//! phases) exercises every part in seconds; its figures mean nothing.
//! `ALKSTORE_BENCH_SCALE=tiny|quick|full` picks a scale (quick: 100k jobs,
//! 5 s phases); `ALKSTORE_BENCH_JOBS`, `ALKSTORE_BENCH_CLIENTS` and
//! `ALKSTORE_BENCH_PHASE_SECS` override parts of it;
//! `ALKSTORE_BENCH_ONLY=online` or `naive` runs one part. The report is
//! printed and written to `target/bench-upgrade.md`. The run fails (after
//! the report) when the online part failed a statement, lost or doubled a
//! job, or let a loop statement take longer than the upgrade's lock bound
//! plus a quarter (a statement queued behind the upgrade's lock request
//! waits up to the bound, then runs).

mod engines;
mod naive;
mod report;
mod seed;
mod watch;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::bench::env_number;

use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_model::SchemaName;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, SimpleQueryMessage};

use engines::{ClientLog, Ledger, Logs, Phase, Shared};
use watch::{Autovacuum, Seen, Wait};

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Scale {
    pub name: String,
    pub jobs: u64,
    pub clients: usize,
    /// How long each steady phase (before, after) lasts.
    pub phase: Duration,
    pub parts: Vec<String>,
}

impl Scale {
    fn from_env(bench_flag: bool) -> Scale {
        let name = std::env::var("ALKSTORE_BENCH_SCALE")
            .unwrap_or_else(|_| if bench_flag { "full" } else { "tiny" }.to_owned());
        let (jobs, secs) = match name.as_str() {
            "full" => (1_000_000, 20.0),
            "quick" => (100_000, 5.0),
            "tiny" => (3_000, 0.5),
            other => panic!("ALKSTORE_BENCH_SCALE must be tiny, quick or full, not {other:?}"),
        };
        let jobs = env_number("ALKSTORE_BENCH_JOBS").map_or(jobs, |v| v as u64);
        let clients = env_number("ALKSTORE_BENCH_CLIENTS")
            .map_or(8, |v| v as usize)
            .max(1);
        let secs = env_number("ALKSTORE_BENCH_PHASE_SECS").unwrap_or(secs);
        let parts = std::env::var("ALKSTORE_BENCH_ONLY")
            .ok()
            .filter(|v| !v.is_empty())
            .map_or_else(
                || vec!["online".to_owned(), "naive".to_owned()],
                |v| {
                    v.split(',')
                        .map(|p| {
                            let p = p.trim().to_owned();
                            assert!(
                                p == "online" || p == "naive",
                                "ALKSTORE_BENCH_ONLY names online and naive, not {p:?}"
                            );
                            p
                        })
                        .collect()
                },
            );
        Scale {
            name,
            jobs,
            clients,
            phase: Duration::from_secs_f64(secs),
            parts,
        }
    }
}

pub use harness::bench::unix_now;

fn main() {
    let bench_flag = std::env::args().any(|a| a == "--bench");
    if harness::skip_db_tests() {
        return;
    }
    let scale = Scale::from_env(bench_flag);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    let problems = runtime.block_on(run(&scale));
    assert!(
        problems.is_empty(),
        "the online upgrade missed its targets:\n- {}",
        problems.join("\n- ")
    );
}

/// A timed progress event.
pub type Events = Arc<Mutex<Vec<(u64, Progress)>>>;

/// What one part measured.
pub struct Part {
    pub name: &'static str,
    pub logs: Logs,
    pub waits: Vec<Wait>,
    pub autovacuums: Vec<Autovacuum>,
    /// `jobs`' statistics at moments of the part.
    pub table: Vec<(&'static str, String)>,
    pub load: Vec<f64>,
    pub ledger: Ledger,
    pub status: String,
    /// The online part's progress events; the spans of `upgrade` (or the
    /// strawman's transaction) and `contract`, in microseconds since the
    /// run's start.
    pub events: Vec<(u64, Progress)>,
    pub expand_us: (u64, u64),
    pub contract_us: (u64, u64),
    /// The strawman's run.
    pub naive: Option<naive::NaiveRun>,
    pub seed_secs: f64,
}

async fn run(scale: &Scale) -> Vec<String> {
    let mut admin = harness::connect().await;
    let version: String = admin
        .query_one("SHOW server_version", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    let started = Instant::now();
    let load_before = watch::load_now();
    let mut parts = Vec::new();
    if scale.parts.iter().any(|p| p == "online") {
        parts.push(online(scale, &mut admin, started).await);
    }
    if scale.parts.iter().any(|p| p == "naive") {
        parts.push(naive_part(scale, &mut admin, started).await);
    }
    let report = report::render(scale, &version, load_before, &parts, started.elapsed());
    report::finish(&report);
    report::problems(&parts)
}

/// Spawns `n` clients of a kind.
fn clients<F, Fut>(n: usize, shared: &Shared, spawn: F) -> Vec<JoinHandle<ClientLog>>
where
    F: Fn(usize, Shared) -> Fut,
    Fut: std::future::Future<Output = ClientLog> + Send + 'static,
{
    (0..n)
        .map(|i| tokio::spawn(spawn(i, shared.clone())))
        .collect()
}

/// Waits for `handles` and merges their logs; returns their backend pids.
async fn join_all(handles: Vec<JoinHandle<ClientLog>>, logs: &mut Logs) -> Vec<i32> {
    let mut backends = Vec::new();
    for h in handles {
        let log = h.await.unwrap_or_else(|e| panic!("a client panicked: {e}"));
        backends.push(log.backend);
        logs.add_claims(log);
    }
    backends
}

/// Waits until none of `backends` is among the sessions the contract's
/// check looks at (`schema_gen::catalog::sessions_statement`: the client
/// backends of this database in `pg_stat_activity`). A client's connection
/// closes when it returns; its server backend leaves a moment later.
async fn sessions_gone(admin: &Client, backends: &[i32]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let question = schema_gen::catalog::sessions_statement();
    loop {
        let messages = admin
            .simple_query(&question)
            .await
            .unwrap_or_else(|e| panic!("the sessions: {}", harness::describe_error(&e)));
        let text = messages
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(row) => row.get(0),
                _ => None,
            })
            .unwrap_or("[]");
        let sessions: Vec<serde_json::Value> =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("the sessions: {e}: {text}"));
        let left: Vec<i64> = sessions
            .iter()
            .filter_map(|s| s["pid"].as_i64())
            .filter(|pid| backends.iter().any(|b| i64::from(*b) == *pid))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the sessions {left:?} of stopped clients were still connected after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The watchers of a part: lock waits (behind `upgrader`), the plain reader
/// (stopped on its own, with version 1's loop) and the load average.
struct Watchers {
    shared: Shared,
    waits: JoinHandle<Seen>,
    /// The plain reader and its own stop flag, until it is stopped.
    reader: Option<(Shared, JoinHandle<ClientLog>)>,
    load: JoinHandle<Vec<f64>>,
}

impl Watchers {
    fn start(shared: &Shared, schema: &SchemaName, upgrader: i32) -> Self {
        let shared = shared.fork();
        let reading = shared.fork();
        Self {
            waits: tokio::spawn(watch::lock_waits(
                shared.clone(),
                upgrader,
                schema.as_str().to_owned(),
            )),
            reader: Some((
                reading.clone(),
                tokio::spawn(engines::reader(schema.clone(), reading)),
            )),
            load: tokio::spawn(watch::load(shared.clone())),
            shared,
        }
    }

    /// Stops the plain reader (once) and merges its log; returns its
    /// backend pid.
    async fn stop_reader(&mut self, logs: &mut Logs) -> Option<i32> {
        let (reading, reader) = self.reader.take()?;
        reading.stop();
        let log = reader.await.unwrap_or_else(|e| panic!("reader: {e}"));
        let backend = log.backend;
        logs.add_reads(log);
        Some(backend)
    }

    async fn stop(mut self, logs: &mut Logs) -> (Seen, Vec<f64>) {
        self.shared.stop();
        self.stop_reader(logs).await;
        let waits = self
            .waits
            .await
            .unwrap_or_else(|e| panic!("lock sampler: {e}"));
        let load = self
            .load
            .await
            .unwrap_or_else(|e| panic!("load sampler: {e}"));
        (waits, load)
    }
}

async fn session(name: &str) -> (Client, i32) {
    let client = harness::connect().await;
    client
        .batch_execute(&format!("SET application_name = '{name}'"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    (client, pid)
}

fn recorder(events: &Events, shared: &Shared) -> impl FnMut(&Progress) + Send + use<> {
    let events = events.clone();
    let shared = shared.clone();
    move |event: &Progress| {
        if let Ok(mut e) = events.lock() {
            e.push((shared.now_us(), event.clone()));
        }
    }
}

async fn state(admin: &Client, schema: &SchemaName) -> String {
    match schema_gen::check::status(admin, schema, &schema_gen::Options::default()).await {
        Ok(s) => format!("{:?}: {}", s.state, s.message),
        Err(e) => format!("status failed: {e}"),
    }
}

/// `jobs`' row and vacuum statistics (`pg_stat_user_tables`, which lag by
/// up to a second).
async fn table_state(admin: &Client, schema: &SchemaName) -> String {
    let sql = "SELECT n_live_tup, n_dead_tup, vacuum_count, autovacuum_count, autoanalyze_count \
               FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'";
    match admin.query_opt(sql, &[&schema.as_str()]).await {
        Ok(Some(r)) => format!(
            "{} live, {} dead tuples; vacuums {}, autovacuums {}, autoanalyzes {}",
            r.get::<_, i64>(0),
            r.get::<_, i64>(1),
            r.get::<_, i64>(2),
            r.get::<_, i64>(3),
            r.get::<_, i64>(4)
        ),
        Ok(None) => "no statistics".to_owned(),
        Err(e) => format!("statistics unreadable: {e}"),
    }
}

/// Version 1's claim on the `mail` queue under `EXPLAIN (ANALYZE, BUFFERS)`
/// (prepared with its parameter types, run in a transaction rolled back):
/// the shared buffers it touched, the indexes it read and the rows its
/// filters removed, as one line.
async fn v1_claim_work(admin: &Client, schema: &SchemaName) -> String {
    let statements = harness::history::old_statements(1, schema);
    let Some(claim) = statements.get("claim") else {
        return "version 1 has no claim".to_owned();
    };
    let types: Vec<&str> = claim.params.iter().map(|p| p.sql_type.as_str()).collect();
    let setup = format!(
        "BEGIN; PREPARE v1_claim_probe({}) AS {}",
        types.join(", "),
        claim.sql
    );
    if let Err(e) = admin.batch_execute(&setup).await {
        let _ = admin.batch_execute("ROLLBACK").await;
        return format!("could not prepare: {e}");
    }
    let explain = format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE v1_claim_probe('mail', {}, 1)",
        unix_now()
    );
    let result = admin.query_one(&explain, &[]).await;
    let _ = admin
        .batch_execute("ROLLBACK; DEALLOCATE v1_claim_probe")
        .await;
    match result {
        Ok(row) => {
            let plan: serde_json::Value = row.get(0);
            let m = harness::explain::measure(plan[0]["Plan"].clone());
            let time = plan[0]["Execution Time"].as_f64().unwrap_or(0.0);
            format!(
                "{} buffers, {:.2} ms, indexes {:?}, {} rows removed by filters",
                m.buffers, time, m.indexes, m.rows_removed
            )
        }
        Err(e) => format!("EXPLAIN failed: {e}"),
    }
}

async fn drop_schema(admin: &Client, schema: &SchemaName) {
    let _ = admin
        .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", schema.as_str()))
        .await;
}

async fn online(scale: &Scale, admin: &mut Client, started: Instant) -> Part {
    let schema = harness::unique_schema_name("upbench_online");
    eprintln!("online: seeding {} jobs in version 1 ...", scale.jobs);
    let t = Instant::now();
    let seeded = seed::version_1_with_jobs(admin, &schema, scale.jobs).await;
    let seed_secs = t.elapsed().as_secs_f64();
    let mut table = vec![("seeded", table_state(admin, &schema).await)];
    let shared = Shared::new(started, Phase::Before);
    let (mut upgrader, pid) = session("upbench-upgrade").await;
    let mut watchers = Watchers::start(&shared, &schema, pid);
    let mut logs = Logs::default();

    let old = shared.fork();
    let old_clients = clients(scale.clients, &old, |i, s| {
        engines::old_client(schema.clone(), i, s)
    });
    eprintln!("online: version 1's loop, before the upgrade ...");
    tokio::time::sleep(scale.phase).await;
    table.push(("before the upgrade", table_state(admin, &schema).await));
    table.push((
        "version 1's claim, before the upgrade",
        v1_claim_work(admin, &schema).await,
    ));

    eprintln!("online: upgrade (expand) beneath it ...");
    let events: Events = Arc::default();
    let mut progress = recorder(&events, &shared);
    shared.set_phase(Phase::Expand);
    let expand_start = shared.now_us();
    let expanded = upgrade::upgrade(
        &mut upgrader,
        &schema,
        &UpgradeOptions::default(),
        &mut progress,
    )
    .await;
    let expand_us = (expand_start, shared.now_us());
    shared.set_phase(Phase::Expanded);
    table.push(("after `upgrade`", table_state(admin, &schema).await));
    table.push((
        "version 1's claim, after `upgrade`",
        v1_claim_work(admin, &schema).await,
    ));
    let expand_error = expanded.as_ref().err().map(ToString::to_string);
    if let Some(e) = &expand_error {
        eprintln!("online: the upgrade failed: {e}");
    }
    tokio::time::sleep(scale.phase / 2).await;
    table.push((
        "version 1's claim, at the end of its run on the expanded schema",
        v1_claim_work(admin, &schema).await,
    ));
    // Version 1's engines stop: its loop and the plain reader (whose last
    // statement is version 1's); the contract refuses while any of their
    // sessions is connected.
    old.stop();
    let mut old_backends = join_all(old_clients, &mut logs).await;
    old_backends.extend(watchers.stop_reader(&mut logs).await);
    sessions_gone(admin, &old_backends).await;

    let mut contract_us = (0, 0);
    if expand_error.is_none() {
        eprintln!("online: this release's loop, then the contract beneath it ...");
        let new = shared.fork();
        shared.set_phase(Phase::NewBefore);
        let new_clients = clients(scale.clients, &new, |i, s| {
            engines::new_client(schema.clone(), i, s)
        });
        tokio::time::sleep(scale.phase / 2).await;
        table.push(("before `contract`", table_state(admin, &schema).await));
        shared.set_phase(Phase::Contract);
        let contract_start = shared.now_us();
        let contracted = upgrade::contract(
            &mut upgrader,
            &schema,
            &UpgradeOptions::default(),
            &mut progress,
        )
        .await;
        contract_us = (contract_start, shared.now_us());
        table.push(("after `contract`", table_state(admin, &schema).await));
        if let Err(e) = &contracted {
            logs.failures
                .push((Phase::Contract, format!("the contract failed: {e}")));
        }
        new.stop();
        join_all(new_clients, &mut logs).await;
    } else if let Some(e) = expand_error {
        logs.failures
            .push((Phase::Expand, format!("the upgrade failed: {e}")));
    }
    let (seen, load) = watchers.stop(&mut logs).await;
    let left = seed::ids(admin, &schema).await;
    let ledger = logs.ledger(&seeded, &left);
    let status = state(admin, &schema).await;
    drop_schema(admin, &schema).await;
    let events = events.lock().map(|e| e.clone()).unwrap_or_default();
    Part {
        name: "online",
        logs,
        waits: seen.waits,
        autovacuums: seen.autovacuums,
        table,
        load,
        ledger,
        status,
        events,
        expand_us,
        contract_us,
        naive: None,
        seed_secs,
    }
}

async fn naive_part(scale: &Scale, admin: &mut Client, started: Instant) -> Part {
    let schema = harness::unique_schema_name("upbench_naive");
    eprintln!("naive: seeding {} jobs in version 1 ...", scale.jobs);
    let t = Instant::now();
    let seeded = seed::version_1_with_jobs(admin, &schema, scale.jobs).await;
    let seed_secs = t.elapsed().as_secs_f64();
    let mut table = vec![("seeded", table_state(admin, &schema).await)];
    let shared = Shared::new(started, Phase::NaiveBefore);
    let (strawman, pid) = session("upbench-naive").await;
    let watchers = Watchers::start(&shared, &schema, pid);
    let mut logs = Logs::default();
    let old = shared.fork();
    let old_clients = clients(scale.clients, &old, |i, s| {
        engines::old_client(schema.clone(), i, s)
    });
    eprintln!("naive: version 1's loop, before the strawman ...");
    tokio::time::sleep(scale.phase / 2).await;
    table.push(("before the strawman", table_state(admin, &schema).await));
    table.push((
        "version 1's claim, before the strawman",
        v1_claim_work(admin, &schema).await,
    ));
    eprintln!("naive: the strawman's one transaction beneath it ...");
    shared.set_phase(Phase::Naive);
    let run = naive::run(&strawman, &schema, &shared).await;
    shared.set_phase(Phase::NaiveAfter);
    table.push(("after the strawman", table_state(admin, &schema).await));
    table.push((
        "version 1's claim, after the strawman",
        v1_claim_work(admin, &schema).await,
    ));
    tokio::time::sleep(scale.phase / 2).await;
    old.stop();
    join_all(old_clients, &mut logs).await;
    let (seen, load) = watchers.stop(&mut logs).await;
    let left = seed::ids(admin, &schema).await;
    let ledger = logs.ledger(&seeded, &left);
    let status = state(admin, &schema).await;
    drop_schema(admin, &schema).await;
    Part {
        name: "naive",
        logs,
        waits: seen.waits,
        autovacuums: seen.autovacuums,
        table,
        load,
        ledger,
        status,
        events: Vec::new(),
        expand_us: run.span_us,
        contract_us: (0, 0),
        naive: Some(run),
        seed_secs,
    }
}
