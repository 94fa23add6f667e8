//! The latency recorder: an HDR histogram of durations (1 µs .. 10 min, three
//! significant digits), so percentiles over hundreds of thousands of samples
//! cost constant memory and per-client recorders merge exactly.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Durations recorded in microseconds.
#[derive(Clone)]
pub struct Recorder {
    histogram: Histogram<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        let histogram = Histogram::new_with_bounds(1, 600_000_000, 3)
            .unwrap_or_else(|e| panic!("histogram bounds: {e}"));
        Self { histogram }
    }

    pub fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(micros.max(1));
    }

    pub fn merge(&mut self, other: &Recorder) {
        self.histogram
            .add(&other.histogram)
            .unwrap_or_else(|e| panic!("merging histograms: {e}"));
    }

    /// One recorder holding every worker's samples.
    pub fn merged<W>(workers: &[W], recorder: impl Fn(&W) -> &Recorder) -> Recorder {
        let mut all = Recorder::new();
        for w in workers {
            all.merge(recorder(w));
        }
        all
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The `q` quantile (0.5 = median) in milliseconds; `None` without samples.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        (self.count() > 0).then(|| self.histogram.value_at_quantile(q) as f64 / 1000.0)
    }

    pub fn p50_ms(&self) -> Option<f64> {
        self.quantile_ms(0.5)
    }

    pub fn p99_ms(&self) -> Option<f64> {
        self.quantile_ms(0.99)
    }
}

/// `12.34 ms`, or `n/a` without samples.
pub fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v >= 100.0 => format!("{v:.0} ms"),
        Some(v) if v >= 10.0 => format!("{v:.1} ms"),
        Some(v) => format!("{v:.3} ms"),
        None => "n/a".to_owned(),
    }
}
