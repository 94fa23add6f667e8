//! `jobs`: enqueue ([`enqueue`], [`enqueue_many`]), the claim path
//! ([`promote`], [`claim`]), the worker's verdicts ([`ack`], [`ack_many`],
//! [`retry`], [`kill`]) and the sweeps ([`reap`], [`reap_exhausted`],
//! [`expire`], and the maintenance step [`vacuum`]); the [`Job`] row
//! mapping.
//!
//! # The claim path is planned once
//!
//! [`promote`] and [`claim`] hide every value the planner would estimate with (the
//! queue, `now` in `run_at <= now`, the limit) in a scalar sub-select,
//! `(SELECT CAST($n AS ...))`, evaluated at execution. A custom plan then
//! knows no more than the generic plan, their estimated costs are equal, and
//! the server's plan cache keeps the generic plan after its first five
//! custom plans, on any data: a session that prepares its statements
//! ([`StatementMode::Prepared`](crate::statements::StatementMode::Prepared):
//! a direct connection or a pool's) plans the claim path five times per
//! connection, not on every call (`tests/plan_cache.rs`). With plain
//! placeholders the cache replanned every call: `LIMIT $n`, estimated as a
//! tenth of the table, made every custom plan look cheaper, and planning
//! was about half the claim path's time (BENCHMARKS.md). The generic plan
//! is the one `tests/hot_paths/` proves bounded on the hostile mixes. In
//! [`StatementMode::Unnamed`](crate::statements::StatementMode::Unnamed)
//! the server plans every call whatever the text (it keeps no statement);
//! the plan it builds is that same generic one.

mod claim;
mod enqueue;
mod pacing;
mod sweeps;
mod verdicts;

pub use claim::{Claim, Promote, claim, promote};
pub use enqueue::{Enqueue, EnqueueMany, enqueue, enqueue_many};
pub use pacing::{PROMOTE_PER_CLAIMED, PromotePacer};
pub use sweeps::{
    EXPIRED, Expire, LAPSED_ON_LAST_ATTEMPT, Reap, ReapExhausted, Vacuum, expire, reap,
    reap_exhausted, vacuum,
};
pub use verdicts::{Ack, AckMany, Kill, Retry, ack, ack_many, kill, retry};

use sea_query::{
    Alias, CommonTableExpression, DeleteStatement, Expr, Query, ReturningClause, WithClause,
    WithQuery,
};
use strum::IntoEnumIterator;

use schema_model::{DeadJobs, Job, Jobs, SchemaName, SqlType, TableModel};

use super::binder::{Binder, cast, table};
use super::pinned::Pinned;
use super::row::get;
use super::{Decode, FromRow, RowError};

/// The columns of [`Job`]: every column but the statements' bookkeeping
/// (`ready`, derived from `run_at`).
pub fn job_columns() -> Vec<Jobs> {
    Jobs::columns()
        .into_iter()
        .map(|(column, _)| column)
        .filter(|column| *column != Jobs::Ready)
        .collect()
}

fn returning_job() -> ReturningClause {
    Query::returning().columns(job_columns())
}

impl FromRow for Job {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        let mut job = Job::default();
        job.id = get(row, Jobs::Id)?;
        job.queue = get(row, Jobs::Queue)?;
        job.payload = get(row, Jobs::Payload)?;
        job.priority = get(row, Jobs::Priority)?;
        job.run_at = get(row, Jobs::RunAt)?;
        job.expires_at = get(row, Jobs::ExpiresAt)?;
        job.enqueued_at = get(row, Jobs::EnqueuedAt)?;
        job.opts.visibility_timeout_s = get(row, Jobs::VisibilityTimeoutS)?;
        job.opts.max_attempts = get(row, Jobs::MaxAttempts)?;
        job.opts.backoff_base_s = get(row, Jobs::BackoffBaseS)?;
        job.opts.dead_letter_retention_s = get(row, Jobs::DeadLetterRetentionS)?;
        job.attempts = get(row, Jobs::Attempts)?;
        job.worker_id = get(row, Jobs::WorkerId)?;
        job.claimed_at = get(row, Jobs::ClaimedAt)?;
        job.claim_expires_at = get(row, Jobs::ClaimExpiresAt)?;
        job.last_error = get(row, Jobs::LastError)?;
        Ok(job)
    }
}

/// The `id` of the `jobs` row a statement returned (`RETURNING id`).
#[derive(Debug)]
pub struct JobId;

impl Decode for JobId {
    type Output = i64;

    fn decode(row: &tokio_postgres::Row) -> Result<i64, RowError> {
        get(row, Jobs::Id)
    }
}

/// `ready = (run_at <= now)`, both sides cast so the server never has to
/// guess the type of two placeholders compared with each other.
fn ready_at(b: &mut Binder, run_at: i64, now: i64) -> Expr {
    let run_at = cast(b.col(Jobs::RunAt, run_at), SqlType::BigInt);
    let now = cast(b.now(now), SqlType::BigInt);
    run_at.pg_le(now)
}

/// Where each `dead_jobs` column comes from when a job dies. An exhaustive
/// match, so a new `dead_jobs` column cannot be forgotten here.
enum DeadSource {
    /// Copied from the job's column of the same meaning.
    Carried(Jobs),
    /// The reason it died.
    LastError,
    /// The instant it died.
    DiedAt,
    /// Computed by the database.
    Generated,
}

fn dead_source(column: DeadJobs) -> Option<DeadSource> {
    Some(match column {
        DeadJobs::Table => return None,
        DeadJobs::Id => DeadSource::Carried(Jobs::Id),
        DeadJobs::Queue => DeadSource::Carried(Jobs::Queue),
        DeadJobs::Payload => DeadSource::Carried(Jobs::Payload),
        DeadJobs::Priority => DeadSource::Carried(Jobs::Priority),
        DeadJobs::RunAt => DeadSource::Carried(Jobs::RunAt),
        DeadJobs::EnqueuedAt => DeadSource::Carried(Jobs::EnqueuedAt),
        DeadJobs::VisibilityTimeoutS => DeadSource::Carried(Jobs::VisibilityTimeoutS),
        DeadJobs::MaxAttempts => DeadSource::Carried(Jobs::MaxAttempts),
        DeadJobs::BackoffBaseS => DeadSource::Carried(Jobs::BackoffBaseS),
        DeadJobs::DeadLetterRetentionS => DeadSource::Carried(Jobs::DeadLetterRetentionS),
        DeadJobs::Attempts => DeadSource::Carried(Jobs::Attempts),
        DeadJobs::WorkerId => DeadSource::Carried(Jobs::WorkerId),
        DeadJobs::ClaimedAt => DeadSource::Carried(Jobs::ClaimedAt),
        DeadJobs::LastError => DeadSource::LastError,
        DeadJobs::DiedAt => DeadSource::DiedAt,
        DeadJobs::PurgeAt => DeadSource::Generated,
    })
}

/// `WITH "dead" AS (<delete> RETURNING ...) INSERT INTO dead_jobs (...)
/// SELECT ..., <last_error>, <died_at> FROM "dead" RETURNING id`: moves the
/// rows `delete` removes to `dead_jobs` in one statement, ids kept. The
/// caller binds the delete's values before `last_error` and `died_at`
/// (text order). Used by [`kill`], [`reap_exhausted`] and [`expire`].
fn bury(
    schema: &SchemaName,
    mut delete: DeleteStatement,
    last_error: Expr,
    died_at: Expr,
) -> WithQuery {
    let dead = Alias::new("dead");
    let mut carried_jobs = Vec::new();
    let mut dead_columns = Vec::new();
    let mut select = Query::select();
    for column in DeadJobs::iter() {
        match dead_source(column) {
            Some(DeadSource::Carried(job_column)) => {
                carried_jobs.push(job_column);
                dead_columns.push(column);
                select.column(job_column);
            }
            Some(DeadSource::LastError) => {
                dead_columns.push(column);
                select.expr(cast(last_error.clone(), SqlType::Text));
            }
            Some(DeadSource::DiedAt) => {
                dead_columns.push(column);
                select.expr(cast(died_at.clone(), SqlType::BigInt));
            }
            Some(DeadSource::Generated) | None => {}
        }
    }
    select.from(dead.clone());
    delete.returning(Query::returning().columns(carried_jobs));
    let mut insert = Query::insert();
    insert
        .into_table(table::<DeadJobs>(schema))
        .columns(dead_columns)
        .select_from(select)
        .expect("the column list and the select list are built from the same match");
    insert.returning_col(DeadJobs::Id);
    insert.with(
        WithClause::new()
            .cte(
                CommonTableExpression::new()
                    .query(delete)
                    .table_name(dead)
                    .to_owned(),
            )
            .to_owned(),
    )
}
