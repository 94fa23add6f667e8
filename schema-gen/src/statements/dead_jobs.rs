//! `dead_jobs`: the retention sweep, and the [`DeadJob`] row mapping.

use sea_query::{Expr, ExprTrait, LockBehavior, LockType, Order, Query};

use schema_model::{DeadJob, DeadJobs, QueueOpts, SchemaName, TableModel};

use sea_query_postgres::PostgresValues;

use super::row::get;
use super::{Call, Decode, FromRow, RowError, Rows, Statement, any_of, build, table, values};

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
        Ok(DeadJob {
            id: get(row, DeadJobs::Id)?,
            queue: get(row, DeadJobs::Queue)?,
            payload: get(row, DeadJobs::Payload)?,
            priority: get(row, DeadJobs::Priority)?,
            run_at: get(row, DeadJobs::RunAt)?,
            enqueued_at: get(row, DeadJobs::EnqueuedAt)?,
            opts: QueueOpts {
                visibility_timeout_s: get(row, DeadJobs::VisibilityTimeoutS)?,
                max_attempts: get(row, DeadJobs::MaxAttempts)?,
                backoff_base_s: get(row, DeadJobs::BackoffBaseS)?,
                dead_letter_retention_s: get(row, DeadJobs::DeadLetterRetentionS)?,
            },
            attempts: get(row, DeadJobs::Attempts)?,
            worker_id: get(row, DeadJobs::WorkerId)?,
            claimed_at: get(row, DeadJobs::ClaimedAt)?,
            last_error: get(row, DeadJobs::LastError)?,
            died_at: get(row, DeadJobs::DiedAt)?,
        })
    }
}

/// Dead-letter sweep: deletes up to `limit` dead jobs whose own retention
/// lapsed before `now` (`purge_at < now`), oldest first, through
/// `dead_jobs_purge_idx`, skipping rows another sweeper holds, and returns
/// them as [`DeadJob`]s.
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
pub fn sweep(schema: &SchemaName, now: i64, limit: u32) -> Statement {
    build("dead_letter_sweep", |b| {
        let mut lapsed = Query::select();
        lapsed
            .column(DeadJobs::Id)
            .from(table::<DeadJobs>(schema))
            .and_where(Expr::col(DeadJobs::PurgeAt).lt(b.now(now)))
            .order_by(DeadJobs::PurgeAt, Order::Asc);
        b.limit(&mut lapsed, limit);
        lapsed.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::delete()
            .from_table(table::<DeadJobs>(schema))
            .and_where(any_of(DeadJobs::Id, lapsed))
            .returning(Query::returning().columns(dead_job_columns()))
            .to_owned()
    })
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

/// A call of [`sweep`]: returns the dead jobs it deleted.
#[derive(Debug, Clone, Copy)]
pub struct Sweep {
    /// The current unix second.
    pub now: i64,
    /// The most dead jobs to delete.
    pub limit: u32,
}

impl Call for Sweep {
    const NAME: &'static str = "dead_letter_sweep";
    type Returns = Rows<DeadJob>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        sweep(schema, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([self.now.into(), u64::from(self.limit).into()])
    }
}
