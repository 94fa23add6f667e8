//! The claim path ([`CLAIM_PATH`](crate::statements::CLAIM_PATH)): promote a queue's due jobs, then
//! claim.

use sea_query::{Expr, ExprTrait, Order, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{Job, Jobs, SchemaName, SqlType};

use super::returning_job;
use crate::statements::binder::{Binder, any_of_picked, hidden, table};
use crate::statements::define::{Build, statement};
use crate::statements::{Rows, RowsAffected};

statement! {
    name: "promote",
    returns: RowsAffected,
    /// Promote: makes up to `limit` not-ready jobs of `queue` whose `run_at`
    /// has passed ready (oldest `run_at` first, skipping rows another
    /// promoter holds), through `jobs_promote_idx`. The first step of
    /// [`CLAIM_PATH`](crate::statements::CLAIM_PATH); the row count says how many it promoted.
    ///
    /// Priority decides among ready jobs; promotion goes by `run_at`, so
    /// with more due jobs waiting than `limit`, the ones due earliest come
    /// first. Use a limit above the claim's batch (e.g. 10x) so promotion
    /// keeps ahead. Like [`claim`](super::claim), it skips held rows but can
    /// meet PostgreSQL's one update-chain wait. Its queue, `now` and limit
    /// are hidden from the planner, so a prepared session plans it once
    /// ([`jobs`](super), "The claim path is planned once").
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::promote(&SchemaName::default(), "mail", 1_700_000_000, 100);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"UPDATE "alkstore"."jobs" SET "ready" = TRUE WHERE "id" = ANY(ARRAY((SELECT "id" FROM "alkstore"."jobs" "#,
    ///         r#"WHERE "queue" = (SELECT CAST($1 AS text)) AND (NOT "ready") "#,
    ///         r#"AND "run_at" <= (SELECT CAST($2 AS bigint)) ORDER BY "run_at" ASC) "#,
    ///         r#"LIMIT (SELECT CAST($3 AS bigint)) FOR UPDATE SKIP LOCKED))"#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["queue", "now", "limit"]);
    /// ```
    pub fn promote;
    /// A call of [`promote`], the first step of the claim path: returns how
    /// many jobs it made ready.
    pub struct Promote<'a> {
        /// The queue.
        pub queue: &'a str,
        /// The current unix second.
        pub now: i64,
        /// The most jobs to promote (above the claim's batch, e.g. 10x).
        pub limit: u32,
    }
}

impl Build for Promote<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self { queue, now, limit } = *self;
        let mut due = Query::select();
        due.column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::Queue).eq(hidden(b.col(Jobs::Queue, queue), SqlType::Text)))
            .and_where(Expr::col(Jobs::Ready).not())
            .and_where(Expr::col(Jobs::RunAt).lte(hidden(b.now(now), SqlType::BigInt)))
            .order_by(Jobs::RunAt, Order::Asc);
        let limit = b.hidden_limit(limit);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::Ready, Expr::Constant(true.into()))
            .and_where(any_of_picked(Jobs::Id, due, limit))
            .take()
    }
}

statement! {
    name: "claim",
    returns: Rows<Job>,
    /// Claim: takes up to `limit` ready, unclaimed jobs of `queue` for
    /// `worker_id`, by `priority DESC, run_at, id` through `jobs_claim_idx`,
    /// skipping rows other workers are claiming, and returns them as
    /// [`Job`]s (in id order). The claim is taken in the same statement:
    /// `worker_id`, `claimed_at = now`, `claim_expires_at = now +
    /// visibility_timeout_s`, and `attempts + 1`, so the returned `(id,
    /// worker_id, attempts)` is the claim's token for
    /// [`ack`](super::ack), [`retry`](super::retry) and
    /// [`kill`](super::kill).
    ///
    /// `run_at <= now` is checked too, so a job made ready by a promoter
    /// whose clock runs ahead is not claimed early. `expires_at` is not:
    /// [`expire`](super::expire) is what kills expired jobs (a worker handed
    /// one may kill it at once).
    ///
    /// Rows another session holds are skipped, not waited for, with one
    /// exception that is PostgreSQL's: a row whose update commits in the
    /// instant between the check and the skip is followed to its newer
    /// version, and that step waits for whoever holds it (README, "skipping,
    /// and PostgreSQL's one wait"). Keep the engine's transactions short.
    ///
    /// The queue, `now` in `run_at <= now` and the limit are hidden from the
    /// planner, so a prepared session plans it once (module docs, "Planned
    /// once").
    ///
    /// ```
    /// use schema_gen::statements::jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = jobs::claim(&SchemaName::default(), "mail", "worker-1", 1_700_000_000, 10);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"UPDATE "alkstore"."jobs" SET "worker_id" = $1, "claimed_at" = $2, "#,
    ///         r#""claim_expires_at" = $2 + "visibility_timeout_s", "attempts" = "attempts" + 1 "#,
    ///         r#"WHERE "id" = ANY(ARRAY((SELECT "id" FROM "alkstore"."jobs" "#,
    ///         r#"WHERE "queue" = (SELECT CAST($3 AS text)) AND "claimed_at" IS NULL AND "ready" "#,
    ///         r#"AND "run_at" <= (SELECT CAST($2 AS bigint)) "#,
    ///         r#"ORDER BY "priority" DESC, "run_at" ASC, "id" ASC) "#,
    ///         r#"LIMIT (SELECT CAST($4 AS bigint)) FOR UPDATE SKIP LOCKED)) "#,
    ///         r#"RETURNING "id", "queue", "payload", "priority", "run_at", "expires_at", "enqueued_at", "#,
    ///         r#""visibility_timeout_s", "max_attempts", "backoff_base_s", "dead_letter_retention_s", "#,
    ///         r#""attempts", "worker_id", "claimed_at", "claim_expires_at", "last_error""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["worker_id", "now", "queue", "limit"]);
    /// ```
    pub fn claim;
    /// A call of [`claim`]: returns the claimed jobs, each with its claim
    /// token `(id, worker_id, attempts)`.
    pub struct Claim<'a> {
        /// The queue.
        pub queue: &'a str,
        /// The claiming worker.
        pub worker_id: &'a str,
        /// The current unix second.
        pub now: i64,
        /// The most jobs to claim.
        pub limit: u32,
    }
}

impl Build for Claim<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let Self {
            queue,
            worker_id,
            now,
            limit,
        } = *self;
        let worker = b.col(Jobs::WorkerId, worker_id);
        let claimed_at = b.now(now);
        let lapses = b.now(now).add(Expr::col(Jobs::VisibilityTimeoutS));
        let mut next = Query::select();
        next.column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::Queue).eq(hidden(b.col(Jobs::Queue, queue), SqlType::Text)))
            .and_where(Expr::col(Jobs::ClaimedAt).is_null())
            .and_where(Expr::col(Jobs::Ready))
            .and_where(Expr::col(Jobs::RunAt).lte(hidden(b.now(now), SqlType::BigInt)))
            .order_by(Jobs::Priority, Order::Desc)
            .order_by(Jobs::RunAt, Order::Asc)
            .order_by(Jobs::Id, Order::Asc);
        let limit = b.hidden_limit(limit);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::WorkerId, worker)
            .value(Jobs::ClaimedAt, claimed_at)
            .value(Jobs::ClaimExpiresAt, lapses)
            .value(
                Jobs::Attempts,
                Expr::col(Jobs::Attempts).add(Expr::Constant(1_i32.into())),
            )
            .and_where(any_of_picked(Jobs::Id, next, limit))
            .returning(returning_job())
            .take()
    }
}
