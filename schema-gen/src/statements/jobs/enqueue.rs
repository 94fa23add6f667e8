//! Enqueue, one job or a batch.

use sea_query::{Alias, Expr, ExprTrait, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{Job, Jobs, SchemaName, SqlType};

use super::{JobId, ready_at};
use crate::statements::binder::{Binder, cast, table};
use crate::statements::define::{Build, statement};
use crate::statements::{One, Rows};

statement! {
    name: "enqueue",
    returns: One<JobId>,
    /// Enqueue: inserts `job` and returns its id (`RETURNING id`).
    ///
    /// The engine-assigned columns are left out: `id` is drawn by the
    /// database, `attempts` starts at 0, the claim columns and `last_error`
    /// start NULL (so `job.id`, `job.attempts`, the claim fields and
    /// `job.last_error` are not read). `ready` is `run_at <= now`: a job due
    /// at once goes straight into the claim index, a job for later waits for
    /// [`promote`](super::promote).
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::{Job, SchemaName};
    ///
    /// let s = jobs::enqueue(&SchemaName::default(), &Job::default(), 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."jobs" ("queue", "payload", "priority", "run_at", "expires_at", "#,
    ///         r#""enqueued_at", "visibility_timeout_s", "max_attempts", "backoff_base_s", "#,
    ///         r#""dead_letter_retention_s", "attempts", "ready") "#,
    ///         r#"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 0, CAST($4 AS bigint) <= CAST($11 AS bigint)) "#,
    ///         r#"RETURNING "id""#,
    ///     )
    /// );
    /// assert_eq!(
    ///     s.param_names(),
    ///     [
    ///         "queue", "payload", "priority", "run_at", "expires_at", "enqueued_at",
    ///         "visibility_timeout_s", "max_attempts", "backoff_base_s", "dead_letter_retention_s",
    ///         "now",
    ///     ]
    /// );
    /// ```
    pub fn enqueue;
    /// A call of [`enqueue`]: returns the new job's id.
    pub struct Enqueue<'a> {
        /// The job (its engine-assigned fields are not read).
        pub job: &'a Job,
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for Enqueue<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self { job, now } = *self;
        let values = [
            b.col(Jobs::Queue, job.queue.clone()),
            b.col(Jobs::Payload, job.payload.clone()),
            b.col(Jobs::Priority, job.priority),
            b.col(Jobs::RunAt, job.run_at),
            b.col(Jobs::ExpiresAt, job.expires_at),
            b.col(Jobs::EnqueuedAt, job.enqueued_at),
            b.col(Jobs::VisibilityTimeoutS, job.opts.visibility_timeout_s),
            b.col(Jobs::MaxAttempts, job.opts.max_attempts),
            b.col(Jobs::BackoffBaseS, job.opts.backoff_base_s),
            b.col(Jobs::DeadLetterRetentionS, job.opts.dead_letter_retention_s),
            Expr::Constant(0_i32.into()),
            ready_at(b, job.run_at, now),
        ];
        Query::insert()
            .into_table(table::<Jobs>(schema))
            .columns([
                Jobs::Queue,
                Jobs::Payload,
                Jobs::Priority,
                Jobs::RunAt,
                Jobs::ExpiresAt,
                Jobs::EnqueuedAt,
                Jobs::VisibilityTimeoutS,
                Jobs::MaxAttempts,
                Jobs::BackoffBaseS,
                Jobs::DeadLetterRetentionS,
                Jobs::Attempts,
                Jobs::Ready,
            ])
            .values_panic(values)
            .returning_col(Jobs::Id)
            .take()
    }
}

statement! {
    name: "enqueue_many",
    returns: Rows<JobId>,
    /// Enqueue a batch: inserts `jobs` in one statement (one array per
    /// field, `unnest`ed in lockstep) and returns their ids, in the order of
    /// `jobs`. The same columns and rules as [`enqueue`]: engine-assigned
    /// columns left out, `attempts` 0, `ready = run_at <= now`. The text
    /// does not depend on the batch's size, so one prepared statement serves
    /// every batch.
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::{Job, SchemaName};
    ///
    /// let s = jobs::enqueue_many(&SchemaName::default(), &[Job::default(), Job::default()], 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."jobs" ("queue", "payload", "priority", "run_at", "expires_at", "#,
    ///         r#""enqueued_at", "visibility_timeout_s", "max_attempts", "backoff_base_s", "#,
    ///         r#""dead_letter_retention_s", "attempts", "ready") "#,
    ///         r#"SELECT "queue", "payload", "priority", "run_at", "expires_at", "enqueued_at", "#,
    ///         r#""visibility_timeout_s", "max_attempts", "backoff_base_s", "dead_letter_retention_s", "#,
    ///         r#"0, "run_at" <= CAST($1 AS bigint) FROM (SELECT "#,
    ///         r#"unnest(CAST($2 AS text[])) AS "queue", unnest(CAST($3 AS bytea[])) AS "payload", "#,
    ///         r#"unnest(CAST($4 AS integer[])) AS "priority", unnest(CAST($5 AS bigint[])) AS "run_at", "#,
    ///         r#"unnest(CAST($6 AS bigint[])) AS "expires_at", unnest(CAST($7 AS bigint[])) AS "enqueued_at", "#,
    ///         r#"unnest(CAST($8 AS bigint[])) AS "visibility_timeout_s", unnest(CAST($9 AS integer[])) AS "max_attempts", "#,
    ///         r#"unnest(CAST($10 AS bigint[])) AS "backoff_base_s", "#,
    ///         r#"unnest(CAST($11 AS bigint[])) AS "dead_letter_retention_s") AS "batch" "#,
    ///         r#"RETURNING "id""#,
    ///     )
    /// );
    /// let types: Vec<String> = s.params().iter().map(|p| p.type_name()).collect();
    /// assert_eq!(types[..4], ["bigint", "text[]", "bytea[]", "integer[]"]);
    /// assert_eq!(s.param_names()[..3], ["now", "queue", "payload"]);
    /// ```
    pub fn enqueue_many;
    /// A call of [`enqueue_many`]: returns the new jobs' ids, in the order
    /// of `jobs`.
    pub struct EnqueueMany<'a> {
        /// The jobs (their engine-assigned fields are not read).
        pub jobs: &'a [Job],
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for EnqueueMany<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self { jobs, now } = *self;
        let column = |b: &mut Binder, column: Jobs, value: &dyn Fn(&Job) -> sea_query::Value| {
            let array = b.col_array(column, jobs.iter().map(value).collect());
            (column, array)
        };
        // `now` comes first in the text (the select list), the arrays after.
        let ready = Expr::col(Jobs::RunAt).lte(cast(b.now(now), SqlType::BigInt));
        let fields = [
            column(b, Jobs::Queue, &|j| j.queue.clone().into()),
            column(b, Jobs::Payload, &|j| j.payload.clone().into()),
            column(b, Jobs::Priority, &|j| j.priority.into()),
            column(b, Jobs::RunAt, &|j| j.run_at.into()),
            column(b, Jobs::ExpiresAt, &|j| j.expires_at.into()),
            column(b, Jobs::EnqueuedAt, &|j| j.enqueued_at.into()),
            column(b, Jobs::VisibilityTimeoutS, &|j| {
                j.opts.visibility_timeout_s.into()
            }),
            column(b, Jobs::MaxAttempts, &|j| j.opts.max_attempts.into()),
            column(b, Jobs::BackoffBaseS, &|j| j.opts.backoff_base_s.into()),
            column(b, Jobs::DeadLetterRetentionS, &|j| {
                j.opts.dead_letter_retention_s.into()
            }),
        ];
        let mut rows = Query::select();
        for (column, array) in &fields {
            rows.expr_as(sea_query::Func::cust("unnest").arg(array.clone()), *column);
        }
        let mut select = Query::select();
        for (column, _) in &fields {
            select.column(*column);
        }
        select
            .expr(Expr::Constant(0_i32.into()))
            .expr(ready)
            .from_subquery(rows, Alias::new("batch"));
        let mut columns: Vec<Jobs> = fields.iter().map(|(column, _)| *column).collect();
        columns.extend([Jobs::Attempts, Jobs::Ready]);
        let mut insert = Query::insert();
        insert
            .into_table(table::<Jobs>(schema))
            .columns(columns)
            .select_from(select)
            .expect("the column list and the select list are built from the same fields");
        insert.returning_col(Jobs::Id);
        insert
    }
}
