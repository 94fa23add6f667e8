//! What the benchmarks (`tests/bench_*`) share: the clock they stamp jobs
//! with, the machine's load they report beside every figure, their
//! environment overrides and the queue options of their jobs.

use std::time::{SystemTime, UNIX_EPOCH};

use schema_model::QueueOpts;

/// The current unix second.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` has them.
pub fn load_averages() -> Option<[String; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(str::to_owned);
    Some([fields.next()?, fields.next()?, fields.next()?])
}

/// The 1-minute load average.
pub fn load_1m() -> Option<f64> {
    load_averages()?[0].parse().ok()
}

/// The number an environment variable gives (unset or empty: `None`); any
/// other text fails the run, naming the variable.
pub fn env_number(name: &str) -> Option<f64> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {value:?}")),
    )
}

/// The queue options stamped on every benchmark job.
pub fn queue_opts() -> QueueOpts {
    let mut opts = QueueOpts::default();
    opts.visibility_timeout_s = 300;
    opts.max_attempts = 25;
    opts.backoff_base_s = 10;
    opts.dead_letter_retention_s = 604_800;
    opts
}
