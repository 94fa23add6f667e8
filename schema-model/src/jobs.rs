//! `jobs`: live jobs, pending or processing, and the [`Job`] / [`QueueOpts`]
//! value shapes the engine reads and writes.
//!
//! **Ready and not-yet-due jobs are apart.** A job whose `run_at` is still in
//! the future (a scheduled job, a retry backing off) is written with
//! `ready = false` and is not in `jobs_claim_idx` at all, so a claim never
//! reads past it, whatever its priority and however many there are. The
//! promotion step (`schema_gen::statements::jobs::promote`) flips the due
//! ones of a queue to ready through `jobs_promote_idx`, in `run_at` order,
//! before the claim; this is the ready/scheduled split River and Oban use.
//! `ready` is bookkeeping the statements derive from `run_at` (enqueue and
//! retry set it to `run_at <= now`), so [`Job`] has no such field: the engine
//! cannot set it wrongly. A claimed job is always ready
//! (`jobs_claimed_job_is_ready`).

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{
    CheckDef, CheckRule, Column, ColumnDefault, IndexDef, IndexKey, IndexPredicate, SqlType,
    StorageParameter, TableModel,
};

/// The `jobs` table: one row per live job (pending, or claimed by a worker).
///
/// A job that exhausts its attempts or expires moves to
/// [`DeadJobs`](crate::DeadJobs) with its id kept.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Jobs {
    /// The table itself.
    Table,
    /// Engine-assigned id, monotone in enqueue order.
    Id,
    /// Queue name (queues are rows, not tables).
    Queue,
    /// The encoder's exact bytes.
    Payload,
    /// Higher is claimed first.
    Priority,
    /// Unix seconds before which the job is not claimable.
    RunAt,
    /// Whether the job is in the claim index (`run_at` had passed when the
    /// job was last written); bookkeeping of the statements, not a field.
    Ready,
    /// Unix seconds after which the job dies unclaimed, if set.
    ExpiresAt,
    /// Unix seconds when the job was enqueued.
    EnqueuedAt,
    /// Stamped `QueueOpts`: how long a claim lasts, in seconds.
    VisibilityTimeoutS,
    /// Stamped `QueueOpts`: attempts before the job dies.
    MaxAttempts,
    /// Stamped `QueueOpts`: base of the retry backoff, in seconds.
    BackoffBaseS,
    /// Stamped `QueueOpts`: how long the dead job is kept, in seconds.
    DeadLetterRetentionS,
    /// Claims so far.
    Attempts,
    /// The claiming worker, while claimed.
    WorkerId,
    /// Unix seconds of the current claim, while claimed.
    ClaimedAt,
    /// Unix seconds when the current claim lapses, while claimed.
    ClaimExpiresAt,
    /// The last attempt's error, if any.
    LastError,
}

impl TableModel for Jobs {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "A live job of a queue: pending, or claimed by a worker.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Id => Column::required(
                BigInt,
                "Engine-assigned job id; monotone, so it is the enqueue order.",
            )
            .with_default(ColumnDefault::IdentityAlways),
            Self::Queue => Column::required(Text, "Name of the queue the job belongs to."),
            Self::Payload => Column::required(
                Bytea,
                "The job payload, exactly the bytes the engine's encoder produced.",
            ),
            Self::Priority => Column::required(Integer, "Claim priority; higher is claimed first."),
            Self::RunAt => Column::required(
                BigInt,
                "Unix seconds before which the job is not claimable.",
            ),
            Self::Ready => Column::required(
                Boolean,
                "Whether the job is in the claim index: run_at had passed when it was enqueued, retried or promoted; a not-ready job waits for the promotion step.",
            ),
            Self::ExpiresAt => Column::nullable(
                BigInt,
                "Unix seconds after which an unfinished job dies; NULL never expires.",
            ),
            Self::EnqueuedAt => Column::required(BigInt, "Unix seconds when the job was enqueued."),
            Self::VisibilityTimeoutS => Column::required(
                BigInt,
                "Stamped QueueOpts: seconds a claim lasts before the job is claimable again.",
            ),
            Self::MaxAttempts => Column::required(
                Integer,
                "Stamped QueueOpts: attempts allowed before the job dies.",
            ),
            Self::BackoffBaseS => Column::required(
                BigInt,
                "Stamped QueueOpts: base of the exponential retry backoff, in seconds.",
            ),
            Self::DeadLetterRetentionS => Column::required(
                BigInt,
                "Stamped QueueOpts: seconds a dead job is kept before the sweep removes it.",
            ),
            Self::Attempts => {
                Column::required(Integer, "Number of times the job has been claimed.")
            }
            Self::WorkerId => Column::nullable(
                Text,
                "Worker holding the current claim; NULL while pending.",
            ),
            Self::ClaimedAt => Column::nullable(
                BigInt,
                "Unix seconds when the current claim was taken; NULL while pending.",
            ),
            Self::ClaimExpiresAt => Column::nullable(
                BigInt,
                "Unix seconds when the current claim lapses; NULL while pending.",
            ),
            Self::LastError => {
                Column::nullable(Text, "Error reported by the last failed attempt, if any.")
            }
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Id]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        vec![
            IndexDef::new(
                "jobs_claim_idx",
                [IndexKey::asc(Self::Queue), IndexKey::desc(Self::Priority), IndexKey::asc(Self::RunAt), IndexKey::asc(Self::Id)],
                "Claim: the next ready, unclaimed job of a queue by priority DESC, run_at, id, without a sort; not-yet-due jobs are not in it.",
            )
            .partial(IndexPredicate::All(vec![
                    IndexPredicate::IsNull(Self::ClaimedAt),
                    IndexPredicate::IsTrue(Self::Ready),
                ])),
            IndexDef::new(
                "jobs_promote_idx",
                [IndexKey::asc(Self::Queue), IndexKey::asc(Self::RunAt)],
                "Promotion: a queue's not-ready jobs by run_at, so the due ones are made ready without reading the rest.",
            )
            .partial(IndexPredicate::IsFalse(Self::Ready)),
            IndexDef::new(
                "jobs_claim_expiry_idx",
                [IndexKey::asc(Self::ClaimExpiresAt)],
                "Reaper: claims whose visibility timeout lapsed.",
            )
            .partial(IndexPredicate::IsNotNull(Self::ClaimExpiresAt)),
            IndexDef::new(
                "jobs_expiry_idx",
                [IndexKey::asc(Self::ExpiresAt)],
                "Sweep: jobs past their expiry.",
            )
            .partial(IndexPredicate::IsNotNull(Self::ExpiresAt)),
        ]
    }

    /// Autovacuum by a fixed count of dead rows, not a share of the table.
    /// Every claim leaves a dead entry at the front of `jobs_claim_idx` and
    /// every ack a dead row; a claim walks the dead entries until vacuum
    /// removes them. The default trigger (20% of the rows dead) waits longer
    /// the bigger the backlog: measured here at 1M jobs and 300 jobs/s, no
    /// autovacuum ran in 200 s and a claim read 541 buffers; with these, 3
    /// ran and a claim read 70. (Faster churn is bound by
    /// `autovacuum_naptime`, a server setting.) No fillfactor: no hot-path
    /// update of `jobs` can be HOT (each changes an indexed column or an
    /// index predicate), so free space per page would only grow the heap.
    fn storage_parameters() -> Vec<StorageParameter> {
        vec![
            StorageParameter::AutovacuumVacuumScaleFactor { per_mille: 0 },
            StorageParameter::AutovacuumVacuumThreshold(1000),
        ]
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "jobs_queue_not_empty",
                rule: CheckRule::NotEmpty(Self::Queue),
            },
            CheckDef {
                name: "jobs_attempts_not_negative",
                rule: CheckRule::AtLeast(Self::Attempts, 0),
            },
            CheckDef {
                name: "jobs_max_attempts_at_least_one",
                rule: CheckRule::AtLeast(Self::MaxAttempts, 1),
            },
            CheckDef {
                name: "jobs_visibility_timeout_positive",
                rule: CheckRule::Positive(Self::VisibilityTimeoutS),
            },
            CheckDef {
                name: "jobs_backoff_base_not_negative",
                rule: CheckRule::AtLeast(Self::BackoffBaseS, 0),
            },
            CheckDef {
                name: "jobs_dead_letter_retention_positive",
                rule: CheckRule::Positive(Self::DeadLetterRetentionS),
            },
            CheckDef {
                name: "jobs_claim_columns_together",
                rule: CheckRule::NullTogether(vec![
                    Self::WorkerId,
                    Self::ClaimedAt,
                    Self::ClaimExpiresAt,
                ]),
            },
            CheckDef {
                name: "jobs_claimed_job_is_ready",
                rule: CheckRule::SetOnlyIf {
                    column: Self::ClaimedAt,
                    flag: Self::Ready,
                },
            },
            CheckDef {
                name: "jobs_claim_expires_after_claim",
                rule: CheckRule::NotBefore {
                    later: Self::ClaimExpiresAt,
                    earlier: Self::ClaimedAt,
                },
            },
        ]
    }
}

/// The queue options stamped onto every job at enqueue, so a later change to
/// the queue's configuration never rewrites the terms of a job already queued.
///
/// Not exhaustive (a new option is not a breaking change): outside this
/// crate, start from [`QueueOpts::default`] and set the fields.
///
/// ```
/// let mut opts = schema_model::QueueOpts::default();
/// opts.visibility_timeout_s = 30;
/// opts.max_attempts = 5;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueOpts {
    /// Seconds a claim lasts before the job is claimable again.
    pub visibility_timeout_s: i64,
    /// Attempts allowed before the job dies.
    pub max_attempts: i32,
    /// Base of the exponential retry backoff, in seconds.
    pub backoff_base_s: i64,
    /// Seconds a dead job is kept.
    pub dead_letter_retention_s: i64,
}

/// A live job, as the engine reads and writes a [`Jobs`] row (`ready` is
/// the statements' bookkeeping, derived from `run_at`, so it is not a field).
///
/// Not exhaustive (a new column is not a breaking change for engines):
/// outside this crate, start from [`Job::new`] (or [`Job::default`]) and
/// set the fields.
///
/// ```
/// use schema_model::Job;
///
/// let mut job = Job::new("mail", b"{}".to_vec());
/// job.priority = 3;
/// job.run_at = 1_700_000_000;
/// job.opts.max_attempts = 5;
/// assert_eq!(job.queue, "mail");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Job {
    /// Engine-assigned id (enqueue order).
    pub id: i64,
    /// Queue name.
    pub queue: String,
    /// The encoder's exact bytes.
    pub payload: Vec<u8>,
    /// Higher is claimed first.
    pub priority: i32,
    /// Not claimable before this unix second.
    pub run_at: i64,
    /// Dies unfinished after this unix second, if set.
    pub expires_at: Option<i64>,
    /// Unix second of enqueue.
    pub enqueued_at: i64,
    /// The stamped queue options.
    #[serde(flatten)]
    pub opts: QueueOpts,
    /// Claims so far.
    pub attempts: i32,
    /// The claiming worker, while claimed.
    pub worker_id: Option<String>,
    /// Unix second of the current claim.
    pub claimed_at: Option<i64>,
    /// Unix second when the current claim lapses.
    pub claim_expires_at: Option<i64>,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

impl Job {
    /// A job for `queue` carrying `payload`, every other field at its
    /// default (priority 0, due at the epoch, no expiry, zero options: set
    /// what the queue stamps).
    pub fn new(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            queue: queue.into(),
            payload: payload.into(),
            ..Self::default()
        }
    }
}
