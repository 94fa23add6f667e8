//! Benchmark: the engine's hot paths at scale, beside the floor queue,
//! pg-boss 12 and graphile-worker 0.17, in one run on one server (the
//! harness's throwaway PostgreSQL cluster, or `ALKSTORE_TEST_DATABASE_URL`),
//! with `fsync` and `full_page_writes` set on for the run.
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench hot_paths
//! ```
//!
//! In one run (the default parts): claim p50/p99 and buffers per claim of the
//! product at each size and job mix, at 1 and 8 clients, and polls of a queue
//! holding only not-yet-due jobs (`claims`); the product's claim path beside
//! the floor, the peers and the claim-path candidates (`candidates.rs`) at 1
//! and 8 clients with `synchronous_commit` off and on (`versus.rs`); the
//! enqueue -> claim -> ack loop of every system at 8 clients, batches of 1,
//! 10 and 100, commit on and off, each peer in its batched mode (`loops`);
//! the burn-down of a backlog by 8 clients at the same batches (`burndown`);
//! a steady queue under a `REPEATABLE READ` snapshot held for 120 s
//! (`held`). Only when named: the rejected designs (a) and (c) (`rejected`,
//! `designs.rs`), the churn (`churn`) and the wake-ups' pickup latency and
//! enqueue cost (`wakeups`, `wakeups/`). BENCHMARKS.md explains the
//! figures.
//!
//! `--bench` (what `cargo bench` passes) runs the full scale; without it (as
//! under `cargo test --benches`) a tiny round exercises every part (about
//! 100 s on 2 loaded cores, most of it installing and setting up the peers). `ALKSTORE_BENCH_SCALE=tiny|quick|full` picks a scale explicitly;
//! `ALKSTORE_BENCH_SIZES=10000,100000`, `ALKSTORE_BENCH_VS_SIZES=1000000`,
//! `ALKSTORE_BENCH_LOOP_SECS`, `ALKSTORE_BENCH_CHURN_SECS` override parts of
//! it; `ALKSTORE_BENCH_LOOPS=8x10,1x1` picks the loop's (clients x batch)
//! groups (of the loop and the burn-down);
//! `ALKSTORE_BENCH_ONLY=claims,rejected,versus,loops,burndown,held,churn,wakeups`
//! runs only the parts named; `ALKSTORE_BENCH_CANDS=plain,unnamed` picks
//! the candidates of the claim comparison and `ALKSTORE_BENCH_VS_ROUNDS`
//! its rounds; `ALKSTORE_BENCH_LOOP_CANDS=plain,unnamed`
//! picks the candidates run beside the loops, the burn-down and (the first)
//! the held snapshot (`none`: none); `ALKSTORE_BENCH_BURN_BACKLOG` and
//! `ALKSTORE_BENCH_BURN_SECS` the burn-down's backlog and time cap per
//! system; `ALKSTORE_BENCH_HELD_SECS` and `ALKSTORE_BENCH_HELD_RATE` the
//! held snapshot's hold and the producer's jobs/s; `ALKSTORE_BENCH_CHURN_VARIANTS=declared,naptime`
//! picks the churn variants (`churn.rs`) and `ALKSTORE_BENCH_CHURN_BACKLOG`
//! the churn's backlog; `ALKSTORE_BENCH_LOOP_VACUUM=off` leaves the engine's
//! maintenance step out of the loop; `ALKSTORE_BENCH_FSYNC=keep` leaves the
//! server's `fsync` as it is; `ALKSTORE_BENCH_PEERS=skip` leaves pg-boss and
//! graphile-worker out (local runs only).

mod candidates;
mod churn;
mod claims;
mod designs;
mod explain;
mod held;
mod latency;
mod loops;
mod maintenance;
mod peers;
mod pool;
mod product;
mod report;
mod systems;
mod versus;
mod wakeups;

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use candidates::Cand;
use pool::{Commit, db_error};
use report::Report;

// ---------------------------------------------------------------------------
// Scale

#[derive(Debug, Clone)]
pub struct Scale {
    pub name: String,
    pub sizes: Vec<u64>,
    /// Claims before measuring, on one client.
    pub claim_warmup: u64,
    /// Claims measured on one client, at most.
    pub claims_one: u64,
    /// Claims measured per client with eight clients, at most.
    pub claims_eight: u64,
    /// Wall time per claim measurement, at most.
    pub claim_time: Duration,
    /// EXPLAIN runs: settling the plan cache, then measured (median).
    pub explain_warmup: usize,
    pub explain_runs: usize,
    pub loop_time: Duration,
    /// The loop's and the burn-down's (clients, batch) groups
    /// (`ALKSTORE_BENCH_LOOPS=8x10,1x1`).
    pub loop_groups: Vec<(usize, u64)>,
    /// The `synchronous_commit` settings of the loops and the burn-down.
    pub loop_commits: Vec<Commit>,
    /// Candidates run beside the product in the loops, the burn-down and
    /// (the first) the held snapshot (`ALKSTORE_BENCH_LOOP_CANDS`).
    pub loop_cands: Vec<Cand>,
    /// Jobs seeded before a burn-down (`ALKSTORE_BENCH_BURN_BACKLOG`).
    pub burn_backlog: u64,
    /// The burn-down's turn per system, and its time per system at most
    /// (`ALKSTORE_BENCH_BURN_SECS`).
    pub burn_slice: Duration,
    pub burn_cap: Duration,
    /// The held snapshot's timeline: before the hold, the hold
    /// (`ALKSTORE_BENCH_HELD_SECS`), after it; one sample per interval.
    pub held_before: Duration,
    pub held_hold: Duration,
    pub held_after: Duration,
    pub held_sample: Duration,
    /// Jobs enqueued per second under the held snapshot
    /// (`ALKSTORE_BENCH_HELD_RATE`), and the clients claiming them.
    pub held_rate: f64,
    pub held_clients: usize,
    pub churn_time: Duration,
    pub churn_window: Duration,
    pub churn_backlog: u64,
    pub churn_clients: usize,
    /// Buffers per claim and the table's state are sampled this often.
    pub churn_sample: Duration,
    /// The churn variants compared (`ALKSTORE_BENCH_CHURN_VARIANTS`).
    pub churn_variants: Vec<String>,
    /// The sizes of the comparison with the floor, the peers and the
    /// candidates (`ALKSTORE_BENCH_VS_SIZES`).
    pub vs_sizes: Vec<u64>,
    /// Wall time of one cell's round in that comparison, at most.
    pub vs_cell_time: Duration,
    /// Rounds of that comparison (`ALKSTORE_BENCH_VS_ROUNDS`).
    pub vs_rounds: u64,
    /// The candidates of that comparison (`ALKSTORE_BENCH_CANDS`).
    pub cands: Vec<Cand>,
    /// The parts to run (`ALKSTORE_BENCH_ONLY`): [`DEFAULT_PARTS`] unless told.
    pub parts: Vec<&'static str>,
}

const ALL_PARTS: [&str; 8] = [
    "claims", "rejected", "versus", "loops", "burndown", "held", "churn", "wakeups",
];

/// The parts of a run unless `ALKSTORE_BENCH_ONLY` names others: the
/// rejected designs (a) and (c) and the churn (about 20 minutes more at full
/// scale) run only when named.
const DEFAULT_PARTS: [&str; 5] = ["claims", "versus", "loops", "burndown", "held"];

/// The churn variants of a run unless `ALKSTORE_BENCH_CHURN_VARIANTS` names
/// others. `naptime` and `naptime-unthrottled` change the server's
/// configuration (`ALTER SYSTEM`, reset after the run), so they run only
/// when named.
const DEFAULT_CHURN_VARIANTS: [&str; 3] = ["declared", "vacuum-clock", "vacuum-claims"];

impl Scale {
    fn named(name: &str) -> Self {
        let full = Scale {
            name: "full".to_owned(),
            sizes: vec![10_000, 100_000, 1_000_000],
            claim_warmup: 20,
            claims_one: 600,
            claims_eight: 100,
            claim_time: Duration::from_secs(8),
            explain_warmup: 6,
            explain_runs: 5,
            loop_time: Duration::from_secs(12),
            loop_groups: vec![(8, 1), (8, 10), (8, 100)],
            loop_commits: vec![Commit::On, Commit::Off],
            loop_cands: candidates::LOOP_CANDS.to_vec(),
            burn_backlog: 100_000,
            burn_slice: Duration::from_secs(10),
            burn_cap: Duration::from_secs(40),
            held_before: Duration::from_secs(10),
            held_hold: Duration::from_secs(120),
            held_after: Duration::from_secs(30),
            held_sample: Duration::from_secs(10),
            held_rate: 800.0,
            held_clients: 8,
            churn_time: Duration::from_secs(300),
            churn_window: Duration::from_secs(60),
            churn_backlog: 1_000_000,
            churn_clients: 4,
            churn_sample: Duration::from_secs(10),
            churn_variants: DEFAULT_CHURN_VARIANTS.map(str::to_owned).to_vec(),
            vs_sizes: vec![100_000, 1_000_000],
            vs_cell_time: Duration::from_secs(2),
            vs_rounds: 3,
            cands: candidates::CANDS.to_vec(),
            parts: DEFAULT_PARTS.to_vec(),
        };
        match name {
            "full" => full,
            "quick" => Scale {
                name: "quick".to_owned(),
                sizes: vec![10_000, 100_000],
                claims_one: 300,
                claims_eight: 40,
                claim_time: Duration::from_secs(2),
                explain_warmup: 6,
                explain_runs: 3,
                loop_time: Duration::from_secs(2),
                vs_sizes: vec![50_000],
                vs_cell_time: Duration::from_millis(500),
                churn_time: Duration::from_secs(30),
                churn_window: Duration::from_secs(10),
                churn_backlog: 20_000,
                churn_sample: Duration::from_secs(5),
                burn_backlog: 10_000,
                burn_slice: Duration::from_secs(1),
                burn_cap: Duration::from_secs(3),
                held_before: Duration::from_secs(2),
                held_hold: Duration::from_secs(10),
                held_after: Duration::from_secs(4),
                held_sample: Duration::from_secs(2),
                held_rate: 400.0,
                ..full
            },
            "tiny" => Scale {
                name: "tiny".to_owned(),
                sizes: vec![2_000, 5_000],
                claim_warmup: 5,
                claims_one: 40,
                claims_eight: 8,
                claim_time: Duration::from_secs(2),
                explain_warmup: 1,
                explain_runs: 1,
                loop_time: Duration::from_secs(1),
                churn_time: Duration::from_secs(4),
                churn_window: Duration::from_secs(1),
                churn_backlog: 2_000,
                churn_clients: 2,
                churn_sample: Duration::from_secs(1),
                vs_sizes: vec![5_000],
                vs_cell_time: Duration::from_secs(1),
                vs_rounds: 1,
                parts: ALL_PARTS.to_vec(),
                loop_groups: vec![(2, 1), (2, 100)],
                loop_commits: vec![Commit::Off],
                loop_cands: vec![candidates::LOOP_CANDS[0]],
                burn_backlog: 300,
                burn_slice: Duration::from_secs(1),
                burn_cap: Duration::from_secs(1),
                held_before: Duration::from_secs(1),
                held_hold: Duration::from_secs(2),
                held_after: Duration::from_secs(1),
                held_sample: Duration::from_secs(1),
                held_rate: 100.0,
                held_clients: 2,
                ..full
            },
            other => panic!("ALKSTORE_BENCH_SCALE must be tiny, quick or full, not {other:?}"),
        }
    }

    fn from_env(bench_flag: bool) -> Self {
        let default = if bench_flag { "full" } else { "tiny" };
        let name = std::env::var("ALKSTORE_BENCH_SCALE").unwrap_or_else(|_| default.to_owned());
        let mut scale = Scale::named(&name);
        if let Ok(sizes) = std::env::var("ALKSTORE_BENCH_SIZES") {
            scale.sizes = sizes
                .split(',')
                .map(|s| {
                    s.trim().parse().unwrap_or_else(|_| {
                        panic!("ALKSTORE_BENCH_SIZES: {s:?} is not a number of jobs")
                    })
                })
                .collect();
            scale.name.push_str(", sizes overridden");
        }
        if let Ok(sizes) = std::env::var("ALKSTORE_BENCH_VS_SIZES") {
            scale.vs_sizes = sizes
                .split(',')
                .map(|s| {
                    s.trim().parse().unwrap_or_else(|_| {
                        panic!("ALKSTORE_BENCH_VS_SIZES: {s:?} is not a number of jobs")
                    })
                })
                .collect();
            scale.name.push_str(", comparison sizes overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_LOOP_SECS") {
            scale.loop_time = secs;
            scale.name.push_str(", loop time overridden");
        }
        if let Ok(groups) = std::env::var("ALKSTORE_BENCH_LOOPS") {
            scale.loop_groups = groups
                .split(',')
                .map(|group| {
                    group
                        .trim()
                        .split_once('x')
                        .and_then(|(c, b)| Some((c.parse().ok()?, b.parse().ok()?)))
                        .unwrap_or_else(|| {
                            panic!("ALKSTORE_BENCH_LOOPS: {group:?} is not CLIENTSxBATCH (8x10)")
                        })
                })
                .collect();
            scale.name.push_str(", loop groups overridden");
        }
        if let Some(cands) = env_cands("ALKSTORE_BENCH_LOOP_CANDS") {
            scale.loop_cands = cands;
            scale.name.push_str(", loop candidates overridden");
        }
        if let Some(cands) = env_cands("ALKSTORE_BENCH_CANDS") {
            scale.cands = cands;
            scale.name.push_str(", candidates overridden");
        }
        if let Some(rounds) = harness::bench::env_number("ALKSTORE_BENCH_VS_ROUNDS") {
            scale.vs_rounds = (rounds as u64).max(1);
            scale.name.push_str(", rounds overridden");
        }
        if let Some(backlog) = harness::bench::env_number("ALKSTORE_BENCH_BURN_BACKLOG") {
            scale.burn_backlog = backlog as u64;
            scale.name.push_str(", burn-down backlog overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_BURN_SECS") {
            scale.burn_cap = secs;
            scale.name.push_str(", burn-down time overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_HELD_SECS") {
            scale.held_hold = secs;
            scale.name.push_str(", hold overridden");
        }
        if let Some(rate) = harness::bench::env_number("ALKSTORE_BENCH_HELD_RATE") {
            scale.held_rate = rate;
            scale.name.push_str(", held-snapshot rate overridden");
        }
        if let Ok(variants) = std::env::var("ALKSTORE_BENCH_CHURN_VARIANTS") {
            scale.churn_variants = variants.split(',').map(|v| v.trim().to_owned()).collect();
            scale.name.push_str(", churn variants overridden");
        }
        if let Ok(backlog) = std::env::var("ALKSTORE_BENCH_CHURN_BACKLOG") {
            scale.churn_backlog = backlog.parse().unwrap_or_else(|_| {
                panic!("ALKSTORE_BENCH_CHURN_BACKLOG: {backlog:?} is not a number of jobs")
            });
            scale.name.push_str(", churn backlog overridden");
        }
        if let Some(secs) = env_secs("ALKSTORE_BENCH_CHURN_SECS") {
            scale.churn_time = secs;
            scale.churn_window = (secs / 5).min(Duration::from_secs(60));
            scale.name.push_str(", churn time overridden");
        }
        if let Ok(only) = std::env::var("ALKSTORE_BENCH_ONLY") {
            scale.parts = only
                .split(',')
                .map(|part| {
                    ALL_PARTS
                        .iter()
                        .copied()
                        .find(|p| *p == part.trim())
                        .unwrap_or_else(|| {
                            panic!("ALKSTORE_BENCH_ONLY: {part:?} is not one of {ALL_PARTS:?}")
                        })
                })
                .collect();
            scale
                .name
                .push_str(&format!(", only {}", scale.parts.join(" and ")));
        }
        scale
    }
}

/// Candidates named by their slugs, comma-separated (`none`: none).
fn env_cands(var: &str) -> Option<Vec<Cand>> {
    let value = std::env::var(var).ok()?;
    if value.trim() == "none" {
        return Some(Vec::new());
    }
    Some(
        value
            .split(',')
            .map(|c| {
                Cand::from_slug(c.trim()).unwrap_or_else(|| {
                    panic!(
                        "{var}: {c:?} is none of {:?} (or none)",
                        candidates::CANDS.map(Cand::slug)
                    )
                })
            })
            .collect(),
    )
}

pub fn env_secs(var: &str) -> Option<Duration> {
    let value = std::env::var(var).ok()?;
    let secs: f64 = value
        .parse()
        .unwrap_or_else(|_| panic!("{var}: {value:?} is not a number of seconds"));
    Some(Duration::from_secs_f64(secs))
}

fn main() {
    let bench_flag = std::env::args().any(|a| a == "--bench");
    let scale = Scale::from_env(bench_flag);
    if harness::skip_db_tests() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
    runtime.block_on(run(scale));
}

// ---------------------------------------------------------------------------
// Helpers

/// The workspace's `target/` (not `CARGO_TARGET_DIR`): where the peers are
/// installed and the report written.
pub fn workspace_target() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits inside the workspace")
        .join("target")
}

pub use harness::bench::unix_now;

pub static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// A progress line on stderr, with the time since the run started.
pub fn progress(text: &str) {
    let started = STARTED.get_or_init(Instant::now);
    eprintln!("[{:>6.1} s] {text}", started.elapsed().as_secs_f64());
}

pub async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{}", db_error(sql, &e)));
}

pub fn load_average() -> String {
    harness::bench::load_averages().map_or_else(|| "unknown".to_owned(), |l| l.join(" "))
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

pub fn times(r: Option<f64>) -> String {
    r.map_or("n/a".to_owned(), |r| format!("{r:.2}x"))
}

pub fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

// ---------------------------------------------------------------------------
// The run

async fn run(scale: Scale) {
    progress(&format!("hot-path benchmark, {} scale", scale.name));
    let mut admin = harness::connect().await;
    let version: String = admin
        .query_one("SHOW server_version", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    let load_before = load_average();
    let durable = Durability::enable(&admin).await;

    // The peers first: a missing Node fails the run before the long parts.
    let peers_wanted = match std::env::var("ALKSTORE_BENCH_PEERS").as_deref() {
        Ok("skip") => {
            assert!(
                std::env::var_os("CI").is_none(),
                "ALKSTORE_BENCH_PEERS=skip is for local runs only and is refused when CI is set"
            );
            eprintln!(
                "\n!!!!!!!! ALKSTORE_BENCH_PEERS=skip: pg-boss and graphile-worker are LEFT OUT of this run !!!!!!!!\n"
            );
            false
        }
        Ok("") | Err(_) => true,
        Ok(other) => panic!("ALKSTORE_BENCH_PEERS must be skip or unset, not {other:?}"),
    };
    let runs = |part: &str| scale.parts.contains(&part);
    let peers = if peers_wanted
        && ["versus", "loops", "burndown", "held", "wakeups"]
            .iter()
            .any(|part| runs(part))
    {
        progress(&format!(
            "peers: installing {} and {} under target/",
            peers::PGBOSS_SPEC,
            peers::GRAPHILE_SPEC
        ));
        Some(peers::install().unwrap_or_else(|e| panic!("peers: {e}")))
    } else {
        None
    };

    let mut measured = Measured::default();
    let header = |load_after: &str| {
        format!(
            "PostgreSQL {version}, {} scale, one run. {}. Load average (1, 5, 15 min) \
             {load_before} at the start, {load_after} at the end, on {} cores.{}",
            scale.name,
            durable.describe(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            peers.as_ref().map_or(
                " pg-boss and graphile-worker left out.".to_owned(),
                |p| format!(
                    " pg-boss {} and graphile-worker {} on Node {}.",
                    p.pgboss_version, p.graphile_version, p.node_version
                )
            )
        )
    };
    // After each part, what is measured so far is written out, so a run
    // that dies later keeps it.
    let partial = |measured: &Measured| {
        let text = format!(
            "(partial: the run is still going) {}",
            header(&load_average())
        );
        measured.report(&text, &scale).write();
    };
    if runs("claims") || runs("rejected") {
        measured.claims =
            Some(claims::run(&mut admin, &scale, runs("claims"), runs("rejected")).await);
        partial(&measured);
    }
    if runs("versus") {
        measured.versus = Some(versus::run_claims(&mut admin, &scale, peers.as_ref()).await);
        partial(&measured);
    }
    if runs("loops") {
        let steady = loops::run_steady(&mut admin, &scale, peers.as_ref()).await;
        measured.loops.extend(steady);
        partial(&measured);
    }
    if runs("burndown") {
        let burn = loops::run_burn_down(&mut admin, &scale, peers.as_ref()).await;
        measured.loops.extend(burn);
        partial(&measured);
    }
    if runs("held") {
        measured.held = Some(held::run(&mut admin, &scale, peers.as_ref()).await);
        partial(&measured);
    }
    if runs("churn") {
        measured.churn = Some(churn::run(&mut admin, &scale).await);
        partial(&measured);
    }
    if runs("wakeups") {
        measured.wakeups = Some(wakeups::run(&mut admin, &scale, peers.as_ref()).await);
    }
    durable.reset(&admin).await;
    measured
        .report(&header(&load_average()), &scale)
        .finish("Hot paths: measured figures");
}

/// What a run measured, part by part.
#[derive(Default)]
struct Measured {
    claims: Option<claims::Measured>,
    versus: Option<Vec<versus::VsClaim>>,
    loops: Vec<loops::LoopResult>,
    held: Option<Vec<held::HeldResult>>,
    churn: Option<Vec<churn::ChurnResult>>,
    wakeups: Option<wakeups::Measured>,
}

impl Measured {
    /// The report of what is measured, under `header`.
    fn report(&self, header: &str, scale: &Scale) -> Report {
        let mut report = Report::default();
        report.para(header);
        if let Some(measured) = &self.claims {
            claims::report(&mut report, measured, scale);
        }
        if let Some(measured) = &self.versus {
            versus::report_claims(&mut report, measured, scale);
        }
        if !self.loops.is_empty() {
            loops::report_loops(&mut report, &self.loops, scale);
        }
        if let Some(measured) = &self.held {
            held::report(&mut report, measured, scale);
        }
        if let Some(measured) = &self.churn {
            churn::report(&mut report, measured, scale);
        }
        if let Some(measured) = &self.wakeups {
            wakeups::report(&mut report, measured);
        }
        report
    }
}

/// The server's durability for the run: `fsync` and `full_page_writes` on
/// (the harness's throwaway cluster starts with them off), so a commit's
/// flush is part of what `synchronous_commit = on` costs; reset after.
struct Durability {
    changed: bool,
    fsync: String,
    full_page_writes: String,
}

impl Durability {
    async fn enable(admin: &Client) -> Self {
        let show = |name: &'static str| async move {
            admin
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_else(|e| panic!("{}", db_error(name, &e)))
        };
        let changed = match std::env::var("ALKSTORE_BENCH_FSYNC").as_deref() {
            Ok("keep") => false,
            Ok("") | Err(_) => {
                // One statement per query: ALTER SYSTEM refuses a transaction block.
                exec(admin, "ALTER SYSTEM SET fsync = on").await;
                exec(admin, "ALTER SYSTEM SET full_page_writes = on").await;
                exec(admin, "SELECT pg_reload_conf()").await;
                // The reload is asynchronous: wait until this session sees it.
                for _ in 0..50 {
                    if show("fsync").await == "on" {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                true
            }
            Ok(other) => panic!("ALKSTORE_BENCH_FSYNC must be keep or unset, not {other:?}"),
        };
        let fsync = show("fsync").await;
        if changed {
            assert_eq!(
                fsync, "on",
                "fsync is still off after ALTER SYSTEM and a reload"
            );
        }
        Self {
            changed,
            fsync,
            full_page_writes: show("full_page_writes").await,
        }
    }

    fn describe(&self) -> String {
        format!(
            "fsync {}, full_page_writes {}{}",
            self.fsync,
            self.full_page_writes,
            if self.changed {
                " (set by the benchmark for the run)"
            } else {
                " (the server's own)"
            }
        )
    }

    async fn reset(&self, admin: &Client) {
        if self.changed {
            exec(admin, "ALTER SYSTEM RESET fsync").await;
            exec(admin, "ALTER SYSTEM RESET full_page_writes").await;
            exec(admin, "SELECT pg_reload_conf()").await;
        }
    }
}
