//! `dead_jobs`: the retention sweep, and the [`DeadJob`] row mapping.

use sea_query::{Expr, ExprTrait, LockBehavior, LockType, Order, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{DeadJob, DeadJobs, SchemaName, TableModel};

use super::binder::{Binder, any_of, table};
use super::define::{Build, statement};
use super::row::get;
use super::{Decode, FromRow, RowError, Rows};

/// The columns of [`DeadJob`]: every column but `purge_at`, which the
/// database computes.
pub fn dead_job_columns() -> Vec<DeadJobs> {
    DeadJobs::columns()
        .into_iter()
        .map(|(column, _)| column)
        .filter(|column| *column != DeadJobs::PurgeAt)
        .collect()
}

impl FromRow for DeadJob {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        let mut dead = DeadJob::default();
        dead.id = get(row, DeadJobs::Id)?;
        dead.queue = get(row, DeadJobs::Queue)?;
        dead.payload = get(row, DeadJobs::Payload)?;
        dead.priority = get(row, DeadJobs::Priority)?;
        dead.run_at = get(row, DeadJobs::RunAt)?;
        dead.enqueued_at = get(row, DeadJobs::EnqueuedAt)?;
        dead.opts.visibility_timeout_s = get(row, DeadJobs::VisibilityTimeoutS)?;
        dead.opts.max_attempts = get(row, DeadJobs::MaxAttempts)?;
        dead.opts.backoff_base_s = get(row, DeadJobs::BackoffBaseS)?;
        dead.opts.dead_letter_retention_s = get(row, DeadJobs::DeadLetterRetentionS)?;
        dead.attempts = get(row, DeadJobs::Attempts)?;
        dead.worker_id = get(row, DeadJobs::WorkerId)?;
        dead.claimed_at = get(row, DeadJobs::ClaimedAt)?;
        dead.last_error = get(row, DeadJobs::LastError)?;
        dead.died_at = get(row, DeadJobs::DiedAt)?;
        Ok(dead)
    }
}

/// The `id` of the `dead_jobs` row a statement returned (`RETURNING id`):
/// the id the job had in `jobs`.
#[derive(Debug)]
pub struct DeadJobId;

impl Decode for DeadJobId {
    type Output = i64;

    fn decode(row: &tokio_postgres::Row) -> Result<i64, RowError> {
        get(row, DeadJobs::Id)
    }
}

statement! {
    name: "dead_letter_sweep",
    returns: Rows<DeadJob>,
    /// Dead-letter sweep: deletes up to `limit` dead jobs whose own
    /// retention lapsed before `now` (`purge_at < now`), oldest first,
    /// through `dead_jobs_purge_idx`, skipping rows another sweeper holds,
    /// and returns them as [`DeadJob`]s.
    ///
    /// ```
    /// use schema_gen::statements::dead_jobs;
    /// use schema_model::SchemaName;
    ///
    /// let s = dead_jobs::sweep(&SchemaName::default(), 1_700_000_000, 500);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"DELETE FROM "alkstore"."dead_jobs" WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."dead_jobs" "#,
    ///         r#"WHERE "purge_at" < $1 ORDER BY "purge_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED)) "#,
    ///         r#"RETURNING "id", "queue", "payload", "priority", "run_at", "enqueued_at", "visibility_timeout_s", "#,
    ///         r#""max_attempts", "backoff_base_s", "dead_letter_retention_s", "attempts", "worker_id", "#,
    ///         r#""claimed_at", "last_error", "died_at""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["now", "limit"]);
    /// ```
    pub fn sweep;
    /// A call of [`sweep`]: returns the dead jobs it deleted.
    pub struct Sweep {
        /// The current unix second.
        pub now: i64,
        /// The most dead jobs to delete.
        pub limit: u32,
    }
}

impl Build for Sweep {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut lapsed = Query::select();
        lapsed
            .column(DeadJobs::Id)
            .from(table::<DeadJobs>(schema))
            .and_where(Expr::col(DeadJobs::PurgeAt).lt(b.now(self.now)))
            .order_by(DeadJobs::PurgeAt, Order::Asc);
        b.limit(&mut lapsed, self.limit);
        lapsed.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::delete()
            .from_table(table::<DeadJobs>(schema))
            .and_where(any_of(DeadJobs::Id, lapsed))
            .returning(Query::returning().columns(dead_job_columns()))
            .take()
    }
}
