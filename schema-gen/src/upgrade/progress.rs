//! [`Progress`]: what an upgrade reports while it runs, one event per
//! thing that happened, each with a line for an operator.

use serde::Serialize;

use crate::versions::{Phase, Step};

/// What an upgrade reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Progress {
    /// A step starts (`index` counts from 1 within its version and phase).
    StepStarted {
        /// The step.
        step: Step,
        /// Its place.
        index: usize,
        /// The steps of its version and phase.
        of: usize,
    },
    /// A step was already done (the catalog shows its effect): skipped.
    StepSkipped {
        /// The step.
        step: Step,
    },
    /// A step is done.
    StepDone {
        /// The step.
        step: Step,
        /// How long it took, in milliseconds.
        elapsed_ms: u64,
    },
    /// A step (or a backfill batch) gave up waiting for its lock after the
    /// lock bound and will try again.
    LockRetry {
        /// The step.
        step: Step,
        /// The attempt that gave up (from 1).
        attempt: u32,
    },
    /// A step waits (without queueing anyone) for another session to
    /// release a lock stronger than the engine's on its table.
    WaitingFor {
        /// The step.
        step: Step,
        /// The session it waits for.
        pid: i32,
        /// The lock that session holds or awaits, as `pg_locks` names it.
        mode: String,
        /// What that session is (`autovacuum worker`, `client backend`).
        backend: String,
    },
    /// A backfill changed rows, and the table was vacuumed after it.
    Vacuumed {
        /// The step.
        step: Step,
    },
    /// A backfill batch is done.
    Batch {
        /// The step.
        step: Step,
        /// Rows it changed.
        rows: u64,
        /// Keys walked so far.
        keys_done: i64,
        /// Keys to walk in all.
        keys_total: i64,
    },
    /// A version's phase is done and recorded.
    Recorded {
        /// The version.
        version: u32,
        /// The phase.
        phase: Phase,
    },
}

impl Progress {
    /// One line for an operator.
    pub fn line(&self) -> String {
        match self {
            Self::StepStarted { step, index, of } => format!(
                "version {} {} step {index}/{of}: {}",
                step.version,
                step.phase.word(),
                step.describe()
            ),
            Self::StepSkipped { step } => format!("  already done: {}", step.describe()),
            Self::StepDone { elapsed_ms, .. } => format!("  done in {elapsed_ms} ms"),
            Self::WaitingFor {
                pid, mode, backend, ..
            } => format!(
                "  waiting for session {pid} ({backend}) to release its {mode} on the table \
                 (not queueing: the engine is not held up)"
            ),
            Self::Vacuumed { step } => format!("  vacuumed {} after the backfill", step.table),
            Self::LockRetry { attempt, .. } => {
                format!("  gave up waiting for the lock (attempt {attempt}); trying again shortly")
            }
            Self::Batch {
                rows,
                keys_done,
                keys_total,
                ..
            } => format!("  {rows} rows; {keys_done} of {keys_total} keys"),
            Self::Recorded { version, phase } => {
                format!("version {version}: {} recorded", phase.word())
            }
        }
    }
}
