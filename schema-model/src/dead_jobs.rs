//! `dead_jobs`: jobs that exhausted their attempts or expired, kept for
//! diagnosis until their own retention lapses, and the [`DeadJob`] shape.

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::jobs::QueueOpts;
use crate::table::{
    CheckDef, CheckRule, Column, ColumnDefault, IndexDef, IndexKey, SqlType, TableModel,
};

/// The `dead_jobs` table: one row per dead job, keyed by the id it had while live.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadJobs {
    /// The table itself.
    Table,
    /// The job's id, kept from `jobs` (never reassigned).
    Id,
    /// Queue name.
    Queue,
    /// The encoder's exact bytes.
    Payload,
    /// Priority it had while live.
    Priority,
    /// Ready time it had while live.
    RunAt,
    /// Unix seconds of enqueue.
    EnqueuedAt,
    /// Stamped `QueueOpts`.
    VisibilityTimeoutS,
    /// Stamped `QueueOpts`.
    MaxAttempts,
    /// Stamped `QueueOpts`.
    BackoffBaseS,
    /// Stamped `QueueOpts`: how long this row is kept.
    DeadLetterRetentionS,
    /// Claims it received.
    Attempts,
    /// The worker of the last claim, if it was ever claimed.
    WorkerId,
    /// Unix seconds of the last claim, if it was ever claimed.
    ClaimedAt,
    /// The last attempt's error.
    LastError,
    /// Unix seconds when the job died.
    DiedAt,
    /// `died_at + dead_letter_retention_s`, computed by the database.
    PurgeAt,
}

impl TableModel for DeadJobs {
    const TABLE: Self = Self::Table;
    const DOC: &'static str =
        "A job that exhausted its attempts or expired, kept for diagnosis until purge_at.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Id => Column::required(BigInt, "The job's id from jobs, kept (never reassigned)."),
            Self::Queue => Column::required(Text, "Name of the queue the job belonged to."),
            Self::Payload => Column::required(Bytea, "The job payload, exactly the bytes the engine's encoder produced."),
            Self::Priority => Column::required(Integer, "Claim priority the job had while live."),
            Self::RunAt => Column::required(BigInt, "Unix seconds the job was ready from while live."),
            Self::EnqueuedAt => Column::required(BigInt, "Unix seconds when the job was enqueued."),
            Self::VisibilityTimeoutS => Column::required(BigInt, "Stamped QueueOpts: seconds a claim lasted."),
            Self::MaxAttempts => Column::required(Integer, "Stamped QueueOpts: attempts the job was allowed."),
            Self::BackoffBaseS => Column::required(BigInt, "Stamped QueueOpts: base of the retry backoff, in seconds."),
            Self::DeadLetterRetentionS => Column::required(BigInt, "Stamped QueueOpts: seconds this dead job is kept."),
            Self::Attempts => Column::required(Integer, "Number of times the job was claimed."),
            Self::WorkerId => Column::nullable(Text, "Worker of the last claim; NULL if never claimed."),
            Self::ClaimedAt => Column::nullable(BigInt, "Unix seconds of the last claim; NULL if never claimed."),
            Self::LastError => Column::nullable(Text, "Error reported by the last failed attempt, if any."),
            Self::DiedAt => Column::required(BigInt, "Unix seconds when the job died."),
            Self::PurgeAt => Column::required(BigInt, "Unix seconds after which the retention sweep removes the row; computed by the database.")
                .with_default(ColumnDefault::GeneratedSum(Self::DiedAt, Self::DeadLetterRetentionS)),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Id]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        vec![IndexDef::new(
            "dead_jobs_purge_idx",
            [IndexKey::asc(Self::PurgeAt)],
            "Retention sweep: dead jobs whose own retention lapsed, oldest first.",
        )]
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "dead_jobs_queue_not_empty",
                rule: CheckRule::NotEmpty(Self::Queue),
            },
            CheckDef {
                name: "dead_jobs_attempts_not_negative",
                rule: CheckRule::AtLeast(Self::Attempts, 0),
            },
            CheckDef {
                name: "dead_jobs_max_attempts_at_least_one",
                rule: CheckRule::AtLeast(Self::MaxAttempts, 1),
            },
            CheckDef {
                name: "dead_jobs_visibility_timeout_positive",
                rule: CheckRule::Positive(Self::VisibilityTimeoutS),
            },
            CheckDef {
                name: "dead_jobs_backoff_base_not_negative",
                rule: CheckRule::AtLeast(Self::BackoffBaseS, 0),
            },
            CheckDef {
                name: "dead_jobs_dead_letter_retention_positive",
                rule: CheckRule::Positive(Self::DeadLetterRetentionS),
            },
            CheckDef {
                name: "dead_jobs_claim_columns_together",
                rule: CheckRule::NullTogether(vec![Self::WorkerId, Self::ClaimedAt]),
            },
        ]
    }
}

/// A dead job, as the engine writes a [`DeadJobs`] row (`purge_at` is
/// computed by the database, so it is not a field).
///
/// Not exhaustive (a new column is not a breaking change for engines): the
/// statements build it; outside this crate, start from
/// [`DeadJob::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadJob {
    /// The job's id, kept from `jobs`.
    pub id: i64,
    /// Queue name.
    pub queue: String,
    /// The encoder's exact bytes.
    pub payload: Vec<u8>,
    /// Priority it had while live.
    pub priority: i32,
    /// Ready time it had while live.
    pub run_at: i64,
    /// Unix second of enqueue.
    pub enqueued_at: i64,
    /// The stamped queue options.
    #[serde(flatten)]
    pub opts: QueueOpts,
    /// Claims it received.
    pub attempts: i32,
    /// Worker of the last claim.
    pub worker_id: Option<String>,
    /// Unix second of the last claim.
    pub claimed_at: Option<i64>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// Unix second of death.
    pub died_at: i64,
}
