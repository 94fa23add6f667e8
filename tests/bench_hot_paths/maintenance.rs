//! The engine's maintenance step as an engine runs it: the product's
//! `jobs::vacuum` on a connection of its own, one run at a time, either on
//! a clock or after every so many claims (counted by the clients).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use schema_gen::statements::jobs;
use schema_model::SchemaName;
use tokio::task::JoinHandle;

use crate::latency::Recorder;
use crate::pool::db_error;

/// When the engine runs `jobs::vacuum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// On a clock: a run every so often (the next one starts on time, or
    /// at once when a run took longer).
    Every(Duration),
    /// After every so many jobs claimed since the last run started.
    EveryClaims(u64),
}

impl Policy {
    pub fn describe(self) -> String {
        match self {
            Policy::Every(every) => {
                format!("`jobs::vacuum` every {:.0} s", every.as_secs_f64())
            }
            Policy::EveryClaims(claims) => {
                format!("`jobs::vacuum` after every {claims} claims")
            }
        }
    }
}

/// What the maintenance step did.
pub struct Runs {
    /// Each run's duration.
    pub durations: Recorder,
    /// Runs PostgreSQL skipped (a conflicting lock was held or awaited).
    pub skipped: u64,
}

/// The maintenance step, running.
pub struct Maintainer {
    claims: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<Runs>,
}

impl Maintainer {
    pub fn start(schema: &SchemaName, policy: Policy) -> Self {
        let claims = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(schema.clone(), policy, claims.clone(), stop.clone()));
        Self { claims, stop, task }
    }

    /// The counter the clients add their claimed jobs to.
    pub fn claims(&self) -> Arc<AtomicU64> {
        self.claims.clone()
    }

    /// Stops after the run in progress, if any.
    pub async fn stop(self) -> Runs {
        self.stop.store(true, Ordering::Relaxed);
        self.task
            .await
            .unwrap_or_else(|e| panic!("the engine's maintenance task: {e}"))
    }
}

async fn run(
    schema: SchemaName,
    policy: Policy,
    claims: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Runs {
    let (client, notices) = harness::connect_with_notices().await;
    let statement = jobs::vacuum(&schema);
    let mut runs = Runs {
        durations: Recorder::new(),
        skipped: 0,
    };
    let mut next = match policy {
        Policy::Every(every) => Instant::now() + every,
        Policy::EveryClaims(_) => Instant::now(),
    };
    let mut claims_at_last_run = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = match policy {
            Policy::Every(every) => {
                let now = Instant::now();
                if now >= next {
                    next = (next + every).max(now);
                    true
                } else {
                    false
                }
            }
            Policy::EveryClaims(every) => {
                let claimed = claims.load(Ordering::Relaxed);
                if claimed >= claims_at_last_run + every {
                    claims_at_last_run = claimed;
                    true
                } else {
                    false
                }
            }
        };
        if !due {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let started = Instant::now();
        client
            .batch_execute(statement.sql())
            .await
            .unwrap_or_else(|e| panic!("{}", db_error("the engine's vacuum", &e)));
        runs.durations.record(started.elapsed());
        runs.skipped += notices
            .take()
            .iter()
            .filter(|n| n.message().contains("skipping"))
            .count() as u64;
    }
    runs
}
