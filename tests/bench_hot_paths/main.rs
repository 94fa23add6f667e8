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
//! the floor, the peers and the claim-path candidates at 1 and 8 clients
//! with `synchronous_commit` off and on (`versus.rs`); the enqueue -> claim
//! -> ack loop of every system at 8 clients, batches of 1 and 10, commit on
//! and off (`loops`). Only when named: the rejected designs (a) and (c)
//! (`rejected`, `designs.rs`), the churn (`churn`) and the wake-ups' pickup
//! latency and enqueue cost (`wakeups`, `wakeups.rs`). BENCHMARKS.md
//! explains the figures.
//!
//! `--bench` (what `cargo bench` passes) runs the full scale; without it (as
//! under `cargo test --benches`) a tiny round exercises every part (about
//! 100 s on 2 loaded cores, most of it installing and setting up the peers). `ALKSTORE_BENCH_SCALE=tiny|quick|full` picks a scale explicitly;
//! `ALKSTORE_BENCH_SIZES=10000,100000`, `ALKSTORE_BENCH_VS_SIZES=1000000`,
//! `ALKSTORE_BENCH_LOOP_SECS`, `ALKSTORE_BENCH_CHURN_SECS` override parts of
//! it; `ALKSTORE_BENCH_LOOPS=8x10,1x1` picks the loop's (clients x batch)
//! groups; `ALKSTORE_BENCH_ONLY=claims,rejected,versus,loops,churn,wakeups` runs
//! only the parts named; `ALKSTORE_BENCH_CHURN_VARIANTS=declared,naptime`
//! picks the churn variants (`churn.rs`) and `ALKSTORE_BENCH_CHURN_BACKLOG`
//! the churn's backlog; `ALKSTORE_BENCH_LOOP_VACUUM=off` leaves the engine's
//! maintenance step out of the loop; `ALKSTORE_BENCH_FSYNC=keep` leaves the
//! server's `fsync` as it is; `ALKSTORE_BENCH_PEERS=skip` leaves pg-boss and
//! graphile-worker out (local runs only).

mod churn;
mod claims;
mod designs;
mod explain;
mod latency;
mod maintenance;
mod peers;
mod pool;
mod product;
mod report;
mod versus;
mod wakeups;

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use pool::db_error;
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
    /// The loop's (clients, batch) groups (`ALKSTORE_BENCH_LOOPS=8x10,1x1`).
    pub loop_groups: Vec<(usize, u64)>,
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
    /// The parts to run (`ALKSTORE_BENCH_ONLY`): [`DEFAULT_PARTS`] unless told.
    pub parts: Vec<&'static str>,
}

const ALL_PARTS: [&str; 6] = ["claims", "rejected", "versus", "loops", "churn", "wakeups"];

/// The parts of a run unless `ALKSTORE_BENCH_ONLY` names others: the
/// rejected designs (a) and (c) and the churn (about 20 minutes more at full
/// scale) run only when named.
const DEFAULT_PARTS: [&str; 3] = ["claims", "versus", "loops"];

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
            loop_time: Duration::from_secs(20),
            loop_groups: vec![(8, 1), (8, 10)],
            churn_time: Duration::from_secs(300),
            churn_window: Duration::from_secs(60),
            churn_backlog: 1_000_000,
            churn_clients: 4,
            churn_sample: Duration::from_secs(10),
            churn_variants: DEFAULT_CHURN_VARIANTS.map(str::to_owned).to_vec(),
            vs_sizes: vec![100_000, 1_000_000],
            vs_cell_time: Duration::from_secs(2),
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
                parts: ALL_PARTS.to_vec(),
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
    let peers = if peers_wanted && (runs("versus") || runs("loops") || runs("wakeups")) {
        progress(&format!(
            "peers: installing {} and {} under target/",
            peers::PGBOSS_SPEC,
            peers::GRAPHILE_SPEC
        ));
        Some(peers::install().unwrap_or_else(|e| panic!("peers: {e}")))
    } else {
        None
    };

    let mut report = Report::default();
    let measured_claims = if runs("claims") || runs("rejected") {
        Some(claims::run(&mut admin, &scale, runs("claims"), runs("rejected")).await)
    } else {
        None
    };
    let measured_versus = if runs("versus") {
        Some(versus::run_claims(&mut admin, &scale, peers.as_ref()).await)
    } else {
        None
    };
    let measured_loops = if runs("loops") {
        Some(versus::run_loops(&mut admin, &scale, peers.as_ref()).await)
    } else {
        None
    };
    let measured_churn = if runs("churn") {
        Some(churn::run(&mut admin, &scale).await)
    } else {
        None
    };
    let measured_wakeups = if runs("wakeups") {
        Some(wakeups::run(&mut admin, &scale, peers.as_ref()).await)
    } else {
        None
    };
    durable.reset(&admin).await;
    let load_after = load_average();

    // ---- The report.
    report.para(&format!(
        "PostgreSQL {version}, {} scale, one run. {}. Load average (1, 5, 15 min) {load_before} \
         at the start, {load_after} at the end, on {} cores.{}",
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
    ));

    if let Some(measured) = &measured_claims {
        claims::report(&mut report, measured, &scale);
    }
    if let Some(measured) = &measured_versus {
        versus::report_claims(&mut report, measured, &scale);
    }
    if let Some(measured) = &measured_loops {
        versus::report_loops(&mut report, measured);
    }
    if let Some(measured) = &measured_churn {
        churn::report(&mut report, measured, &scale);
    }
    if let Some(measured) = &measured_wakeups {
        wakeups::report(&mut report, measured);
    }

    report.finish("Hot paths: measured figures");
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
