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
use sea_query_postgres::PostgresBinder;

use schema_model::{Schedule, Schedules, SchemaName, TableModel};

use super::binder::{Binder, table};
use super::define::{Build, statement};
use super::row::get;
use super::{FromRow, One, Optional, RowError, Rows};

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
        let mut schedule = Schedule::default();
        schedule.name = get(row, Schedules::Name)?;
        schedule.spec = get(row, Schedules::Spec)?;
        schedule.every_s = get(row, Schedules::EveryS)?;
        schedule.queue = get(row, Schedules::Queue)?;
        schedule.payload = get(row, Schedules::Payload)?;
        schedule.opts.priority = get(row, Schedules::Priority)?;
        schedule.opts.max_attempts = get(row, Schedules::MaxAttempts)?;
        schedule.opts.visibility_timeout_s = get(row, Schedules::VisibilityTimeoutS)?;
        schedule.opts.backoff_base_s = get(row, Schedules::BackoffBaseS)?;
        schedule.opts.dead_letter_retention_s = get(row, Schedules::DeadLetterRetentionS)?;
        schedule.opts.expires_s = get(row, Schedules::ExpiresS)?;
        schedule.next_fire_at = get(row, Schedules::NextFireAt)?;
        schedule.last_fired_at = get(row, Schedules::LastFiredAt)?;
        schedule.enabled = get(row, Schedules::Enabled)?;
        Ok(schedule)
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

statement! {
    name: "schedule_register",
    returns: One<Schedule>,
    /// Register: inserts `schedule`, or, when one of that name exists,
    /// replaces its definition (spec, interval, target, payload, stamps,
    /// enabled) and keeps its firing state (`next_fire_at`,
    /// `last_fired_at`), so a restart that registers its schedules again
    /// neither re-fires nor skips a boundary. Returns the stored
    /// [`Schedule`].
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
    pub fn register;
    /// A call of [`register`]: returns the stored schedule.
    pub struct Register<'a> {
        /// The schedule.
        pub schedule: &'a Schedule,
    }
}

impl Build for Register<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let schedule = self.schedule;
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
            .take()
    }
}

statement! {
    name: "schedule_due",
    returns: Rows<Schedule>,
    /// Due scan: up to `limit` enabled schedules whose boundary has come
    /// (`next_fire_at <= now`), earliest first, through
    /// `schedules_due_idx`, locked for the tick's transaction (`FOR UPDATE
    /// SKIP LOCKED`: another ticker's rows are skipped, not waited for).
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
    pub fn due;
    /// A call of [`due`]: returns the due schedules, locked for the tick's
    /// transaction.
    pub struct Due {
        /// The current unix second.
        pub now: i64,
        /// The most schedules to fire in this tick.
        pub limit: u32,
    }
}

impl Build for Due {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut select = Query::select();
        select
            .columns(schedule_columns())
            .from(table::<Schedules>(schema))
            .and_where(Expr::col(Schedules::Enabled))
            .and_where(Expr::col(Schedules::NextFireAt).lte(b.now(self.now)))
            .order_by(Schedules::NextFireAt, Order::Asc);
        b.limit(&mut select, self.limit);
        select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        select
    }
}

statement! {
    name: "schedule_advance",
    returns: Optional<Schedule>,
    /// Advance: records that the boundary `last_fired_at` (the
    /// `next_fire_at` the ticker read from [`due`]) fired and moves the
    /// schedule to `next_fire_at`, only if its boundary is still
    /// `last_fired_at` (compare-and-set). Returns the [`Schedule`], or
    /// nothing when another ticker advanced it first: then this tick must
    /// roll back.
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
    pub fn advance;
    /// A call of [`advance`]: returns the advanced schedule, or `None` when
    /// another ticker advanced it first (roll the tick back).
    pub struct Advance<'a> {
        /// The schedule.
        pub name: &'a str,
        /// The boundary that fired (the `next_fire_at` [`due`] returned).
        pub last_fired_at: i64,
        /// The next boundary.
        pub next_fire_at: i64,
    }
}

impl Build for Advance<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self {
            name,
            last_fired_at,
            next_fire_at,
        } = *self;
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
            .take()
    }
}
