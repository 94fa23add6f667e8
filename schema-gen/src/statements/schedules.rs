//! `schedules`: register, the due scan and the compare-and-set advance; the
//! [`Schedule`] row mapping.
//!
//! A tick runs, in one transaction: [`due`] (locks the due rows, skipping
//! those another ticker holds), the enqueue of each due schedule's job,
//! and [`advance`] of each. `advance` is a compare-and-set on the boundary
//! the ticker read, so two tickers can never both fire one boundary: the
//! second one's `advance` returns nothing, and it must roll back (its
//! enqueue with it).

use sea_query::{
    Expr, ExprTrait, LockBehavior, LockType, OnConflict, Order, Query, ReturningClause,
};
use sea_query_postgres::PostgresValues;

use schema_model::{Schedule, ScheduleOpts, Schedules, SchemaName, TableModel};

use super::row::get;
use super::{Call, FromRow, One, Optional, RowError, Rows, Statement, build, table, values};

/// The columns of [`Schedule`]: all of them.
pub fn schedule_columns() -> Vec<Schedules> {
    Schedules::columns()
        .into_iter()
        .map(|(column, _)| column)
        .collect()
}

fn returning_schedule() -> ReturningClause {
    Query::returning().columns(schedule_columns())
}

impl FromRow for Schedule {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        Ok(Schedule {
            name: get(row, Schedules::Name)?,
            spec: get(row, Schedules::Spec)?,
            every_s: get(row, Schedules::EveryS)?,
            queue: get(row, Schedules::Queue)?,
            payload: get(row, Schedules::Payload)?,
            opts: ScheduleOpts {
                priority: get(row, Schedules::Priority)?,
                max_attempts: get(row, Schedules::MaxAttempts)?,
                visibility_timeout_s: get(row, Schedules::VisibilityTimeoutS)?,
                backoff_base_s: get(row, Schedules::BackoffBaseS)?,
                dead_letter_retention_s: get(row, Schedules::DeadLetterRetentionS)?,
                expires_s: get(row, Schedules::ExpiresS)?,
            },
            next_fire_at: get(row, Schedules::NextFireAt)?,
            last_fired_at: get(row, Schedules::LastFiredAt)?,
            enabled: get(row, Schedules::Enabled)?,
        })
    }
}

/// The columns a re-registration replaces: the definition, never the
/// firing state (`next_fire_at`, `last_fired_at`).
const DEFINITION: [Schedules; 11] = [
    Schedules::Spec,
    Schedules::EveryS,
    Schedules::Queue,
    Schedules::Payload,
    Schedules::Priority,
    Schedules::MaxAttempts,
    Schedules::VisibilityTimeoutS,
    Schedules::BackoffBaseS,
    Schedules::DeadLetterRetentionS,
    Schedules::ExpiresS,
    Schedules::Enabled,
];

/// Register: inserts `schedule`, or, when one of that name exists, replaces
/// its definition (spec, interval, target, payload, stamps, enabled) and
/// keeps its firing state (`next_fire_at`, `last_fired_at`), so a restart
/// that registers its schedules again neither re-fires nor skips a
/// boundary. Returns the stored [`Schedule`].
///
/// ```
/// use schema_gen::statements::schedules;
/// use schema_model::{Schedule, SchemaName};
///
/// let s = schedules::register(&SchemaName::default(), &Schedule::default());
/// assert_eq!(
///     s.sql(),
///     concat!(
///         r#"INSERT INTO "alkstore"."schedules" ("name", "spec", "every_s", "queue", "payload", "priority", "#,
///         r#""max_attempts", "visibility_timeout_s", "backoff_base_s", "dead_letter_retention_s", "expires_s", "#,
///         r#""next_fire_at", "last_fired_at", "enabled") "#,
///         r#"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) "#,
///         r#"ON CONFLICT ("name") DO UPDATE SET "spec" = "excluded"."spec", "every_s" = "excluded"."every_s", "#,
///         r#""queue" = "excluded"."queue", "payload" = "excluded"."payload", "priority" = "excluded"."priority", "#,
///         r#""max_attempts" = "excluded"."max_attempts", "visibility_timeout_s" = "excluded"."visibility_timeout_s", "#,
///         r#""backoff_base_s" = "excluded"."backoff_base_s", "#,
///         r#""dead_letter_retention_s" = "excluded"."dead_letter_retention_s", "#,
///         r#""expires_s" = "excluded"."expires_s", "enabled" = "excluded"."enabled" "#,
///         r#"RETURNING "name", "spec", "every_s", "queue", "payload", "priority", "max_attempts", "#,
///         r#""visibility_timeout_s", "backoff_base_s", "dead_letter_retention_s", "expires_s", "#,
///         r#""next_fire_at", "last_fired_at", "enabled""#,
///     )
/// );
/// assert_eq!(s.param_names()[..3], ["name", "spec", "every_s"]);
/// ```
pub fn register(schema: &SchemaName, schedule: &Schedule) -> Statement {
    build("schedule_register", |b| {
        let values = [
            b.col(Schedules::Name, schedule.name.clone()),
            b.col(Schedules::Spec, schedule.spec.clone()),
            b.col(Schedules::EveryS, schedule.every_s),
            b.col(Schedules::Queue, schedule.queue.clone()),
            b.col(Schedules::Payload, schedule.payload.clone()),
            b.col(Schedules::Priority, schedule.opts.priority),
            b.col(Schedules::MaxAttempts, schedule.opts.max_attempts),
            b.col(
                Schedules::VisibilityTimeoutS,
                schedule.opts.visibility_timeout_s,
            ),
            b.col(Schedules::BackoffBaseS, schedule.opts.backoff_base_s),
            b.col(
                Schedules::DeadLetterRetentionS,
                schedule.opts.dead_letter_retention_s,
            ),
            b.col(Schedules::ExpiresS, schedule.opts.expires_s),
            b.col(Schedules::NextFireAt, schedule.next_fire_at),
            b.col(Schedules::LastFiredAt, schedule.last_fired_at),
            b.col(Schedules::Enabled, schedule.enabled),
        ];
        Query::insert()
            .into_table(table::<Schedules>(schema))
            .columns(schedule_columns())
            .values_panic(values)
            .on_conflict(
                OnConflict::column(Schedules::Name)
                    .update_columns(DEFINITION)
                    .to_owned(),
            )
            .returning(returning_schedule())
            .to_owned()
    })
}

/// Due scan: up to `limit` enabled schedules whose boundary has come
/// (`next_fire_at <= now`), earliest first, through `schedules_due_idx`,
/// locked for the tick's transaction (`FOR UPDATE SKIP LOCKED`: another
/// ticker's rows are skipped, not waited for).
///
/// ```
/// use schema_gen::statements::schedules;
/// use schema_model::SchemaName;
///
/// let s = schedules::due(&SchemaName::default(), 1_700_000_000, 50);
/// assert!(s.sql().ends_with(concat!(
///     r#"FROM "alkstore"."schedules" WHERE "enabled" AND "next_fire_at" <= $1 "#,
///     r#"ORDER BY "next_fire_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED"#,
/// )));
/// assert_eq!(s.param_names(), ["now", "limit"]);
/// ```
pub fn due(schema: &SchemaName, now: i64, limit: u32) -> Statement {
    build("schedule_due", |b| {
        let mut select = Query::select();
        select
            .columns(schedule_columns())
            .from(table::<Schedules>(schema))
            .and_where(Expr::col(Schedules::Enabled))
            .and_where(Expr::col(Schedules::NextFireAt).lte(b.now(now)))
            .order_by(Schedules::NextFireAt, Order::Asc);
        b.limit(&mut select, limit);
        select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        select
    })
}

/// Advance: records that the boundary `last_fired_at` (the `next_fire_at`
/// the ticker read from [`due`]) fired and moves the schedule to
/// `next_fire_at`, only if its boundary is still `last_fired_at`
/// (compare-and-set). Returns the [`Schedule`], or nothing when another
/// ticker advanced it first: then this tick must roll back.
///
/// ```
/// use schema_gen::statements::schedules;
/// use schema_model::SchemaName;
///
/// let s = schedules::advance(&SchemaName::default(), "nightly", 1_700_000_000, 1_700_086_400);
/// assert_eq!(
///     s.sql(),
///     concat!(
///         r#"UPDATE "alkstore"."schedules" SET "last_fired_at" = $1, "next_fire_at" = $2 "#,
///         r#"WHERE "name" = $3 AND "next_fire_at" = $1 "#,
///         r#"RETURNING "name", "spec", "every_s", "queue", "payload", "priority", "max_attempts", "#,
///         r#""visibility_timeout_s", "backoff_base_s", "dead_letter_retention_s", "expires_s", "#,
///         r#""next_fire_at", "last_fired_at", "enabled""#,
///     )
/// );
/// assert_eq!(s.param_names(), ["last_fired_at", "next_fire_at", "name"]);
/// ```
pub fn advance(
    schema: &SchemaName,
    name: &str,
    last_fired_at: i64,
    next_fire_at: i64,
) -> Statement {
    build("schedule_advance", |b| {
        Query::update()
            .table(table::<Schedules>(schema))
            .value(
                Schedules::LastFiredAt,
                b.col(Schedules::LastFiredAt, last_fired_at),
            )
            .value(
                Schedules::NextFireAt,
                b.col(Schedules::NextFireAt, next_fire_at),
            )
            .and_where(Expr::col(Schedules::Name).eq(b.col(Schedules::Name, name)))
            .and_where(
                Expr::col(Schedules::NextFireAt).eq(b.col(Schedules::LastFiredAt, last_fired_at)),
            )
            .returning(returning_schedule())
            .to_owned()
    })
}

/// A call of [`register`]: returns the stored schedule.
#[derive(Debug, Clone, Copy)]
pub struct Register<'a> {
    /// The schedule.
    pub schedule: &'a Schedule,
}

impl Call for Register<'_> {
    const NAME: &'static str = "schedule_register";
    type Returns = One<Schedule>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        register(schema, self.schedule)
    }

    fn values(&self) -> PostgresValues {
        let schedule = self.schedule;
        values([
            schedule.name.clone().into(),
            schedule.spec.clone().into(),
            schedule.every_s.into(),
            schedule.queue.clone().into(),
            schedule.payload.clone().into(),
            schedule.opts.priority.into(),
            schedule.opts.max_attempts.into(),
            schedule.opts.visibility_timeout_s.into(),
            schedule.opts.backoff_base_s.into(),
            schedule.opts.dead_letter_retention_s.into(),
            schedule.opts.expires_s.into(),
            schedule.next_fire_at.into(),
            schedule.last_fired_at.into(),
            schedule.enabled.into(),
        ])
    }
}

/// A call of [`due`]: returns the due schedules, locked for the tick's
/// transaction.
#[derive(Debug, Clone, Copy)]
pub struct Due {
    /// The current unix second.
    pub now: i64,
    /// The most schedules to fire in this tick.
    pub limit: u32,
}

impl Call for Due {
    const NAME: &'static str = "schedule_due";
    type Returns = Rows<Schedule>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        due(schema, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([self.now.into(), u64::from(self.limit).into()])
    }
}

/// A call of [`advance`]: returns the advanced schedule, or `None` when
/// another ticker advanced it first (roll the tick back).
#[derive(Debug, Clone, Copy)]
pub struct Advance<'a> {
    /// The schedule.
    pub name: &'a str,
    /// The boundary that fired (the `next_fire_at` [`due`] returned).
    pub last_fired_at: i64,
    /// The next boundary.
    pub next_fire_at: i64,
}

impl Call for Advance<'_> {
    const NAME: &'static str = "schedule_advance";
    type Returns = Optional<Schedule>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        advance(schema, self.name, self.last_fired_at, self.next_fire_at)
    }

    fn values(&self) -> PostgresValues {
        values([
            self.last_fired_at.into(),
            self.next_fire_at.into(),
            self.name.into(),
        ])
    }
}
