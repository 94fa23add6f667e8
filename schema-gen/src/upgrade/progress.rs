//! [`Progress`]: what an upgrade reports while it runs, one event per
//! thing that happened, each with a line for an operator.

use serde::Serialize;

use crate::error::{EngineSession, LockHolder};
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
        /// The attempts it may make in all.
        of: u32,
        /// How long each attempt waits at most (its `lock_timeout`), in
        /// milliseconds.
        waited_ms: u64,
        /// The sessions that held, or were queued ahead for, a lock on the
        /// table when the attempt gave up, as far as the role may see them.
        holders: Vec<LockHolder>,
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
    /// The contract runs while sessions of older engines are connected
    /// (allowed: [`UpgradeOptions::allow_older_engines`](super::UpgradeOptions::allow_older_engines)):
    /// they fail from now on.
    OlderEnginesConnected {
        /// The sessions.
        sessions: Vec<EngineSession>,
    },
    /// Before a contract: sessions of other roles whose release could not
    /// be told (no release in `application_name`, statements hidden).
    SessionsUnseen {
        /// How many.
        count: usize,
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
            Self::LockRetry {
                attempt,
                of,
                waited_ms,
                holders,
                ..
            } => {
                let who = if holders.is_empty() {
                    "no other session held or awaited a lock on the table any more when \
                     schema-gen looked"
                        .to_owned()
                } else {
                    holders
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                };
                let left = of.saturating_sub(*attempt);
                format!(
                    "  gave up waiting for the lock (attempt {attempt}) after {waited_ms}ms, {left} \
                     attempt{} left: {who}; trying again shortly",
                    if left == 1 { "" } else { "s" }
                )
            }
            Self::Batch {
                rows,
                keys_done,
                keys_total,
                ..
            } => format!("  {rows} rows; {keys_done} of {keys_total} keys"),
            Self::OlderEnginesConnected { sessions } => format!(
                "warning: contracting while engines of older versions are connected \
                 (--allow-older-engines); their statements fail from now on: {}",
                sessions
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Self::SessionsUnseen { count } => format!(
                "note: {count} session{} of other roles on this database could not be looked \
                 into (no release in application_name, statements hidden from this role; \
                 pg_read_all_stats shows them): if one is an engine of an older version, it \
                 fails after the contract",
                if *count == 1 { "" } else { "s" }
            ),
            Self::Recorded { version, phase } => {
                format!("version {version}: {} recorded", phase.word())
            }
        }
    }
}
