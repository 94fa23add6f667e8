//! The worker's verdicts on a claimed job: ack (one or a batch), retry,
//! kill. Each acts only while the claim `(id, worker_id, attempts)` holds
//! (the module docs of [`statements`](crate::statements), "Claims are
//! fenced").

use sea_query::{Expr, ExprTrait, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{Jobs, SchemaName};

use super::{bury, ready_at};
use crate::statements::binder::{Binder, table};
use crate::statements::dead_jobs::DeadJobId;
use crate::statements::define::{Build, statement};
use crate::statements::{Optional, RowsAffected};

/// `id = $ AND worker_id = $ AND attempts = $`: the job, while this claim
/// holds.
fn held_claim(b: &mut Binder, id: i64, worker_id: &str, attempts: i32) -> [Expr; 3] {
    [
        Expr::col(Jobs::Id).eq(b.col(Jobs::Id, id)),
        Expr::col(Jobs::WorkerId).eq(b.col(Jobs::WorkerId, worker_id)),
        Expr::col(Jobs::Attempts).eq(b.col(Jobs::Attempts, attempts)),
    ]
}

statement! {
    name: "ack",
    returns: RowsAffected,
    /// Ack: the job is done; deletes it while the claim `(id, worker_id,
    /// attempts)` holds. Affects no row when the claim was lost (reaped,
    /// then perhaps claimed again): the stale worker cannot ack another's
    /// claim.
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::ack(&SchemaName::default(), 42, "worker-1", 1);
    /// assert_eq!(
    ///     s.sql(),
    ///     r#"DELETE FROM "alkstore"."jobs" WHERE "id" = $1 AND "worker_id" = $2 AND "attempts" = $3"#
    /// );
    /// assert_eq!(s.param_names(), ["id", "worker_id", "attempts"]);
    /// ```
    pub fn ack;
    /// A call of [`ack`]: returns 1, or 0 when the claim was lost.
    pub struct Ack<'a> {
        /// The job.
        pub id: i64,
        /// The worker that claimed it.
        pub worker_id: &'a str,
        /// Its `attempts` as the claim returned it.
        pub attempts: i32,
    }
}

impl Build for Ack<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut delete = Query::delete();
        delete.from_table(table::<Jobs>(schema));
        for condition in held_claim(b, self.id, self.worker_id, self.attempts) {
            delete.and_where(condition);
        }
        delete
    }
}

statement! {
    name: "ack_many",
    returns: RowsAffected,
    /// Ack a batch: deletes the jobs of `claims` (each `(id, attempts)`, the
    /// token [`claim`](super::claim) returned) that `worker_id` still holds,
    /// in one statement; the row count says how many. A claim that was lost
    /// is left alone, as with [`ack`].
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::ack_many(&SchemaName::default(), "worker-1", &[(41, 1), (42, 3)]);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"DELETE FROM "alkstore"."jobs" WHERE ("id" = ANY(CAST($1 AS bigint[]))) AND "worker_id" = $2 "#,
    ///         r#"AND ("id", "attempts") IN (SELECT unnest(CAST($1 AS bigint[])), unnest(CAST($3 AS integer[])))"#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["id", "worker_id", "attempts"]);
    /// ```
    pub fn ack_many;
    /// A call of [`ack_many`]: returns how many of the claims it acked.
    pub struct AckMany<'a> {
        /// The worker that claimed them.
        pub worker_id: &'a str,
        /// Each claim's `(id, attempts)`.
        pub claims: &'a [(i64, i32)],
    }
}

impl Build for AckMany<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self { worker_id, claims } = *self;
        let ids = || {
            claims
                .iter()
                .map(|(id, _)| (*id).into())
                .collect::<Vec<_>>()
        };
        let candidates = b.col_array(Jobs::Id, ids());
        let worker = b.col(Jobs::WorkerId, worker_id);
        let tokens = Query::select()
            .expr(sea_query::Func::cust("unnest").arg(b.col_array(Jobs::Id, ids())))
            .expr(
                sea_query::Func::cust("unnest").arg(
                    b.col_array(
                        Jobs::Attempts,
                        claims
                            .iter()
                            .map(|(_, attempts)| (*attempts).into())
                            .collect(),
                    ),
                ),
            )
            .take();
        Query::delete()
            .from_table(table::<Jobs>(schema))
            .and_where(Expr::cust_with_exprs(
                "$1 = ANY($2)",
                [Expr::col(Jobs::Id), candidates],
            ))
            .and_where(Expr::col(Jobs::WorkerId).eq(worker))
            .and_where(
                Expr::tuple([Expr::col(Jobs::Id), Expr::col(Jobs::Attempts)]).in_subquery(tokens),
            )
            .take()
    }
}

statement! {
    name: "retry",
    returns: RowsAffected,
    /// Retry: releases the claim `(id, worker_id, attempts)` with a new
    /// `run_at` (the engine computes the backoff) and `last_error` (the
    /// error of the attempt that ended, as given: `None` stores NULL).
    /// `ready` becomes `run_at <= now`, so a retry backing off leaves the
    /// claim index until [`promote`](super::promote) brings it back.
    /// `attempts` is not changed: it counts claims. Affects no row when the
    /// claim was lost. Retry or [`kill`]: the engine kills once `attempts >=
    /// max_attempts`.
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::retry(&SchemaName::default(), 42, "worker-1", 1, 1_700_000_060, Some("timeout"), 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"UPDATE "alkstore"."jobs" SET "run_at" = $1, "#,
    ///         r#""ready" = CAST($1 AS bigint) <= CAST($2 AS bigint), "last_error" = $3, "#,
    ///         r#""worker_id" = NULL, "claimed_at" = NULL, "claim_expires_at" = NULL "#,
    ///         r#"WHERE "id" = $4 AND "worker_id" = $5 AND "attempts" = $6"#,
    ///     )
    /// );
    /// assert_eq!(
    ///     s.param_names(),
    ///     ["run_at", "now", "last_error", "id", "worker_id", "attempts"]
    /// );
    /// ```
    pub fn retry;
    /// A call of [`retry`]: returns 1, or 0 when the claim was lost.
    pub struct Retry<'a> {
        /// The job.
        pub id: i64,
        /// The worker that claimed it.
        pub worker_id: &'a str,
        /// Its `attempts` as the claim returned it.
        pub attempts: i32,
        /// When it may run again (the engine computes the backoff).
        pub run_at: i64,
        /// The error of the attempt that ended (`None` stores NULL).
        pub last_error: Option<&'a str>,
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for Retry<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut update = Query::update();
        update
            .table(table::<Jobs>(schema))
            .value(Jobs::RunAt, b.col(Jobs::RunAt, self.run_at))
            .value(Jobs::Ready, ready_at(b, self.run_at, self.now))
            .value(
                Jobs::LastError,
                b.col(Jobs::LastError, self.last_error.map(str::to_owned)),
            )
            .value(Jobs::WorkerId, Expr::null())
            .value(Jobs::ClaimedAt, Expr::null())
            .value(Jobs::ClaimExpiresAt, Expr::null());
        for condition in held_claim(b, self.id, self.worker_id, self.attempts) {
            update.and_where(condition);
        }
        update
    }
}

statement! {
    name: "kill",
    returns: Optional<DeadJobId>,
    /// Kill: moves the job to `dead_jobs` while the claim `(id, worker_id,
    /// attempts)` holds, in one statement, id kept, with `last_error` (the
    /// error of the last attempt, as given) and `died_at = now`; returns the
    /// id. Affects no row when the claim was lost.
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::kill(&SchemaName::default(), 42, "worker-1", 5, Some("poison"), 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"WITH "dead" AS (DELETE FROM "alkstore"."jobs" WHERE "id" = $1 AND "worker_id" = $2 AND "attempts" = $3 "#,
    ///         r#"RETURNING "id", "queue", "payload", "priority", "run_at", "enqueued_at", "visibility_timeout_s", "#,
    ///         r#""max_attempts", "backoff_base_s", "dead_letter_retention_s", "attempts", "worker_id", "claimed_at") "#,
    ///         r#"INSERT INTO "alkstore"."dead_jobs" ("id", "queue", "payload", "priority", "run_at", "enqueued_at", "#,
    ///         r#""visibility_timeout_s", "max_attempts", "backoff_base_s", "dead_letter_retention_s", "attempts", "#,
    ///         r#""worker_id", "claimed_at", "last_error", "died_at") "#,
    ///         r#"SELECT "id", "queue", "payload", "priority", "run_at", "enqueued_at", "visibility_timeout_s", "#,
    ///         r#""max_attempts", "backoff_base_s", "dead_letter_retention_s", "attempts", "worker_id", "claimed_at", "#,
    ///         r#"CAST($4 AS text), CAST($5 AS bigint) FROM "dead" RETURNING "id""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["id", "worker_id", "attempts", "last_error", "now"]);
    /// ```
    pub fn kill;
    /// A call of [`kill`]: returns the dead job's id, or `None` when the
    /// claim was lost.
    pub struct Kill<'a> {
        /// The job.
        pub id: i64,
        /// The worker that claimed it.
        pub worker_id: &'a str,
        /// Its `attempts` as the claim returned it.
        pub attempts: i32,
        /// The error of the last attempt (`None` stores NULL).
        pub last_error: Option<&'a str>,
        /// The current unix second (`died_at`).
        pub now: i64,
    }
}

impl Build for Kill<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut delete = Query::delete();
        delete.from_table(table::<Jobs>(schema));
        for condition in held_claim(b, self.id, self.worker_id, self.attempts) {
            delete.and_where(condition);
        }
        let last_error = b.col(Jobs::LastError, self.last_error.map(str::to_owned));
        let died_at = b.now(self.now);
        bury(schema, delete, last_error, died_at)
    }
}
