//! `schedules`: `@every` schedules that enqueue jobs, and the [`Schedule`] /
//! [`ScheduleOpts`] shapes.

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{
    CheckDef, CheckRule, Column, IndexDef, IndexKey, IndexPredicate, SqlType, TableModel,
};

/// The `schedules` table: one row per named schedule.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schedules {
    /// The table itself.
    Table,
    /// Unique schedule name.
    Name,
    /// The spec text as given (`@every 5m`).
    Spec,
    /// The parsed interval, in seconds.
    EveryS,
    /// Target queue.
    Queue,
    /// The encoder's exact bytes, enqueued at every fire.
    Payload,
    /// Stamped `ScheduleOpts`.
    Priority,
    /// Stamped `ScheduleOpts`.
    MaxAttempts,
    /// Stamped `ScheduleOpts`.
    VisibilityTimeoutS,
    /// Stamped `ScheduleOpts`.
    BackoffBaseS,
    /// Stamped `ScheduleOpts`.
    DeadLetterRetentionS,
    /// Stamped `ScheduleOpts`: lifetime of each enqueued job, if set.
    ExpiresS,
    /// The boundary the tick advances.
    NextFireAt,
    /// When the schedule last fired, if ever.
    LastFiredAt,
    /// Whether the tick fires it.
    Enabled,
}

impl TableModel for Schedules {
    const TABLE: Self = Self::Table;
    const DOC: &'static str =
        "An @every schedule that enqueues a job into its queue at each boundary.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Name => Column::required(Text, "Unique name of the schedule."),
            Self::Spec => Column::required(Text, "The schedule spec as given, e.g. '@every 5m'."),
            Self::EveryS => Column::required(BigInt, "The spec's parsed interval, in seconds."),
            Self::Queue => Column::required(Text, "Queue the schedule enqueues into."),
            Self::Payload => Column::required(
                Bytea,
                "Payload of each enqueued job, exactly the bytes the engine's encoder produced.",
            ),
            Self::Priority => Column::required(
                Integer,
                "Stamped ScheduleOpts: priority of each enqueued job.",
            ),
            Self::MaxAttempts => Column::required(
                Integer,
                "Stamped ScheduleOpts: attempts allowed to each enqueued job.",
            ),
            Self::VisibilityTimeoutS => Column::required(
                BigInt,
                "Stamped ScheduleOpts: visibility timeout of each enqueued job, in seconds.",
            ),
            Self::BackoffBaseS => Column::required(
                BigInt,
                "Stamped ScheduleOpts: retry backoff base of each enqueued job, in seconds.",
            ),
            Self::DeadLetterRetentionS => Column::required(
                BigInt,
                "Stamped ScheduleOpts: dead-letter retention of each enqueued job, in seconds.",
            ),
            Self::ExpiresS => Column::nullable(
                BigInt,
                "Stamped ScheduleOpts: seconds after its fire an enqueued job expires; NULL never.",
            ),
            Self::NextFireAt => Column::required(
                BigInt,
                "Unix seconds of the next boundary; the tick fires the schedule and advances it.",
            ),
            Self::LastFiredAt => Column::nullable(
                BigInt,
                "Unix seconds of the boundary last fired; NULL if never fired.",
            ),
            Self::Enabled => Column::required(Boolean, "Whether the tick fires this schedule."),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Name]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        vec![
            IndexDef::new(
                "schedules_due_idx",
                [IndexKey::asc(Self::NextFireAt)],
                "Tick: enabled schedules whose next boundary is due.",
            )
            .partial(IndexPredicate::IsTrue(Self::Enabled)),
        ]
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "schedules_name_not_empty",
                rule: CheckRule::NotEmpty(Self::Name),
            },
            CheckDef {
                name: "schedules_queue_not_empty",
                rule: CheckRule::NotEmpty(Self::Queue),
            },
            CheckDef {
                name: "schedules_every_positive",
                rule: CheckRule::Positive(Self::EveryS),
            },
            CheckDef {
                name: "schedules_max_attempts_at_least_one",
                rule: CheckRule::AtLeast(Self::MaxAttempts, 1),
            },
            CheckDef {
                name: "schedules_visibility_timeout_positive",
                rule: CheckRule::Positive(Self::VisibilityTimeoutS),
            },
            CheckDef {
                name: "schedules_backoff_base_not_negative",
                rule: CheckRule::AtLeast(Self::BackoffBaseS, 0),
            },
            CheckDef {
                name: "schedules_dead_letter_retention_positive",
                rule: CheckRule::Positive(Self::DeadLetterRetentionS),
            },
            CheckDef {
                name: "schedules_expires_positive",
                rule: CheckRule::Positive(Self::ExpiresS),
            },
        ]
    }
}

/// The options a schedule stamps onto every job it enqueues.
///
/// Not exhaustive (a new option is not a breaking change): outside this
/// crate, start from [`ScheduleOpts::default`] and set the fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleOpts {
    /// Priority of each enqueued job.
    pub priority: i32,
    /// Attempts allowed to each enqueued job.
    pub max_attempts: i32,
    /// Visibility timeout of each enqueued job, in seconds.
    pub visibility_timeout_s: i64,
    /// Retry backoff base of each enqueued job, in seconds.
    pub backoff_base_s: i64,
    /// Dead-letter retention of each enqueued job, in seconds.
    pub dead_letter_retention_s: i64,
    /// Seconds after its fire an enqueued job expires, if set.
    pub expires_s: Option<i64>,
}

/// A schedule, as the engine reads and writes a [`Schedules`] row.
///
/// Not exhaustive (a new column is not a breaking change for engines):
/// outside this crate, start from [`Schedule::new`] (or
/// [`Schedule::default`]) and set the fields.
///
/// ```
/// use schema_model::Schedule;
///
/// let mut nightly = Schedule::new("nightly", "@every 24h", 86_400, "reports", b"{}".to_vec());
/// nightly.opts.max_attempts = 3;
/// nightly.next_fire_at = 1_700_000_000;
/// assert!(nightly.enabled);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Schedule {
    /// Unique name.
    pub name: String,
    /// The spec text as given.
    pub spec: String,
    /// The parsed interval, in seconds.
    pub every_s: i64,
    /// Target queue.
    pub queue: String,
    /// The encoder's exact bytes.
    pub payload: Vec<u8>,
    /// The stamped options.
    #[serde(flatten)]
    pub opts: ScheduleOpts,
    /// Unix second of the next boundary.
    pub next_fire_at: i64,
    /// Unix second of the boundary last fired.
    pub last_fired_at: Option<i64>,
    /// Whether the tick fires it.
    pub enabled: bool,
}

impl Schedule {
    /// An enabled schedule `name` that fires every `every_s` seconds (the
    /// parsed `spec`, kept as given) and enqueues `payload` on `queue`;
    /// every other field at its default (zero options, first boundary at
    /// the epoch, never fired: set what the schedule stamps and its first
    /// boundary).
    pub fn new(
        name: impl Into<String>,
        spec: impl Into<String>,
        every_s: i64,
        queue: impl Into<String>,
        payload: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            name: name.into(),
            spec: spec.into(),
            every_s,
            queue: queue.into(),
            payload: payload.into(),
            enabled: true,
            ..Self::default()
        }
    }
}
