//! `jobs`: enqueue, the claim path (promote, claim), the worker's verdicts
//! (ack, retry, kill) and the sweeps (reap, reap_exhausted, expire).

use sea_query::{
    Alias, CommonTableExpression, DeleteStatement, Expr, ExprTrait, IdenStatic, LockBehavior,
    LockType, Order, Query, ReturningClause, WithClause, WithQuery,
};
use sea_query_postgres::PostgresValues;
use strum::IntoEnumIterator;

use schema_model::{DeadJobs, Job, Jobs, QueueOpts, SchemaName, SqlType, TableModel};

use super::dead_jobs::DeadJobId;
use super::row::get;
use super::{
    Binder, Call, Decode, Definition, Done, FromRow, One, Optional, RowError, Rows, RowsAffected,
    Statement, any_of, array_value, build, cast, table, values,
};

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
        Ok(Job {
            id: get(row, Jobs::Id)?,
            queue: get(row, Jobs::Queue)?,
            payload: get(row, Jobs::Payload)?,
            priority: get(row, Jobs::Priority)?,
            run_at: get(row, Jobs::RunAt)?,
            expires_at: get(row, Jobs::ExpiresAt)?,
            enqueued_at: get(row, Jobs::EnqueuedAt)?,
            opts: QueueOpts {
                visibility_timeout_s: get(row, Jobs::VisibilityTimeoutS)?,
                max_attempts: get(row, Jobs::MaxAttempts)?,
                backoff_base_s: get(row, Jobs::BackoffBaseS)?,
                dead_letter_retention_s: get(row, Jobs::DeadLetterRetentionS)?,
            },
            attempts: get(row, Jobs::Attempts)?,
            worker_id: get(row, Jobs::WorkerId)?,
            claimed_at: get(row, Jobs::ClaimedAt)?,
            claim_expires_at: get(row, Jobs::ClaimExpiresAt)?,
            last_error: get(row, Jobs::LastError)?,
        })
    }
}

/// `ready = (run_at <= now)`, both sides cast so the server never has to
/// guess the type of two placeholders compared with each other.
fn ready_at(b: &mut Binder, run_at: i64, now: i64) -> Expr {
    let run_at = cast(b.col(Jobs::RunAt, run_at), SqlType::BigInt);
    let now = cast(b.now(now), SqlType::BigInt);
    run_at.lte(now)
}

/// Enqueue: inserts `job` and returns its id (`RETURNING id`).
///
/// The engine-assigned columns are left out: `id` is drawn by the database,
/// `attempts` starts at 0, the claim columns and `last_error` start NULL (so
/// `job.id`, `job.attempts`, the claim fields and `job.last_error` are not
/// read). `ready` is `run_at <= now`: a job due at once goes straight into
/// the claim index, a job for later waits for [`promote`].
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
pub fn enqueue(schema: &SchemaName, job: &Job, now: i64) -> Statement {
    build("enqueue", |b| {
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
            .to_owned()
    })
}

/// Enqueue a batch: inserts `jobs` in one statement (one array per
/// field, `unnest`ed in lockstep) and returns their ids, in the order of
/// `jobs`. The same columns and rules as [`enqueue`]: engine-assigned
/// columns left out, `attempts` 0, `ready = run_at <= now`. The text does
/// not depend on the batch's size, so one prepared statement serves every
/// batch.
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
pub fn enqueue_many(schema: &SchemaName, jobs: &[Job], now: i64) -> Statement {
    build("enqueue_many", |b| {
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
    })
}

/// Promote: makes up to `limit` not-ready jobs of `queue` whose `run_at`
/// has passed ready (oldest `run_at` first, skipping rows another promoter
/// holds), through `jobs_promote_idx`. The first step of
/// [`CLAIM_PATH`](super::CLAIM_PATH); the row count says how many it promoted.
///
/// Priority decides among ready jobs; promotion goes by `run_at`, so with
/// more due jobs waiting than `limit`, the ones due earliest come first.
/// Use a limit above the claim's batch (e.g. 10x) so promotion keeps ahead.
///
/// ```
/// use schema_gen::statements::jobs;
/// use schema_model::SchemaName;
///
/// let s = jobs::promote(&SchemaName::default(), "mail", 1_700_000_000, 100);
/// assert_eq!(
///     s.sql(),
///     concat!(
///         r#"UPDATE "alkstore"."jobs" SET "ready" = TRUE WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."jobs" "#,
///         r#"WHERE "queue" = $1 AND (NOT "ready") AND "run_at" <= $2 ORDER BY "run_at" ASC "#,
///         r#"LIMIT $3 FOR UPDATE SKIP LOCKED))"#,
///     )
/// );
/// assert_eq!(s.param_names(), ["queue", "now", "limit"]);
/// ```
pub fn promote(schema: &SchemaName, queue: &str, now: i64, limit: u32) -> Statement {
    build("promote", |b| {
        let mut due = Query::select();
        due.column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::Queue).eq(b.col(Jobs::Queue, queue)))
            .and_where(Expr::col(Jobs::Ready).not())
            .and_where(Expr::col(Jobs::RunAt).lte(b.now(now)))
            .order_by(Jobs::RunAt, Order::Asc);
        b.limit(&mut due, limit);
        due.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::Ready, Expr::Constant(true.into()))
            .and_where(any_of(Jobs::Id, due))
            .to_owned()
    })
}

/// Claim: takes up to `limit` ready, unclaimed jobs of `queue` for
/// `worker_id`, by `priority DESC, run_at, id` through `jobs_claim_idx`,
/// skipping rows other workers are claiming, and returns them as [`Job`]s
/// (in id order). The claim is taken in the same statement: `worker_id`,
/// `claimed_at = now`, `claim_expires_at = now + visibility_timeout_s`, and
/// `attempts + 1`, so the returned `(id, worker_id, attempts)` is the
/// claim's token for [`ack`], [`retry`] and [`kill`].
///
/// `run_at <= now` is checked too, so a job made ready by a promoter whose
/// clock runs ahead is not claimed early. `expires_at` is not: [`expire`]
/// is what kills expired jobs (a worker handed one may kill it at once).
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
///         r#"WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."jobs" "#,
///         r#"WHERE "queue" = $3 AND "claimed_at" IS NULL AND "ready" AND "run_at" <= $2 "#,
///         r#"ORDER BY "priority" DESC, "run_at" ASC, "id" ASC LIMIT $4 FOR UPDATE SKIP LOCKED)) "#,
///         r#"RETURNING "id", "queue", "payload", "priority", "run_at", "expires_at", "enqueued_at", "#,
///         r#""visibility_timeout_s", "max_attempts", "backoff_base_s", "dead_letter_retention_s", "#,
///         r#""attempts", "worker_id", "claimed_at", "claim_expires_at", "last_error""#,
///     )
/// );
/// assert_eq!(s.param_names(), ["worker_id", "now", "queue", "limit"]);
/// ```
pub fn claim(schema: &SchemaName, queue: &str, worker_id: &str, now: i64, limit: u32) -> Statement {
    build("claim", |b| {
        let worker = b.col(Jobs::WorkerId, worker_id);
        let claimed_at = b.now(now);
        let lapses = b.now(now).add(Expr::col(Jobs::VisibilityTimeoutS));
        let mut next = Query::select();
        next.column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::Queue).eq(b.col(Jobs::Queue, queue)))
            .and_where(Expr::col(Jobs::ClaimedAt).is_null())
            .and_where(Expr::col(Jobs::Ready))
            .and_where(Expr::col(Jobs::RunAt).lte(b.now(now)))
            .order_by(Jobs::Priority, Order::Desc)
            .order_by(Jobs::RunAt, Order::Asc)
            .order_by(Jobs::Id, Order::Asc);
        b.limit(&mut next, limit);
        next.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::WorkerId, worker)
            .value(Jobs::ClaimedAt, claimed_at)
            .value(Jobs::ClaimExpiresAt, lapses)
            .value(
                Jobs::Attempts,
                Expr::col(Jobs::Attempts).add(Expr::Constant(1_i32.into())),
            )
            .and_where(any_of(Jobs::Id, next))
            .returning(returning_job())
            .to_owned()
    })
}

/// `id = $ AND worker_id = $ AND attempts = $`: the job, while this claim holds.
fn held_claim(b: &mut Binder, id: i64, worker_id: &str, attempts: i32) -> [Expr; 3] {
    [
        Expr::col(Jobs::Id).eq(b.col(Jobs::Id, id)),
        Expr::col(Jobs::WorkerId).eq(b.col(Jobs::WorkerId, worker_id)),
        Expr::col(Jobs::Attempts).eq(b.col(Jobs::Attempts, attempts)),
    ]
}

/// Ack: the job is done; deletes it while the claim `(id, worker_id,
/// attempts)` holds. Affects no row when the claim was lost (reaped, then
/// perhaps claimed again): the stale worker cannot ack another's claim.
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
pub fn ack(schema: &SchemaName, id: i64, worker_id: &str, attempts: i32) -> Statement {
    build("ack", |b| {
        let mut delete = Query::delete();
        delete.from_table(table::<Jobs>(schema));
        for condition in held_claim(b, id, worker_id, attempts) {
            delete.and_where(condition);
        }
        delete
    })
}

/// Ack a batch: deletes the jobs of `claims` (each `(id, attempts)`, the
/// token [`claim`] returned) that `worker_id` still holds, in one
/// statement; the row count says how many. A claim that was lost is left
/// alone, as with [`ack`].
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
pub fn ack_many(schema: &SchemaName, worker_id: &str, claims: &[(i64, i32)]) -> Statement {
    build("ack_many", |b| {
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
            .to_owned();
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
            .to_owned()
    })
}

/// Retry: releases the claim `(id, worker_id, attempts)` with a new
/// `run_at` (the engine computes the backoff) and `last_error` (the error of
/// the attempt that ended, as given: `None` stores NULL). `ready` becomes
/// `run_at <= now`, so a retry backing off leaves the claim index until
/// [`promote`] brings it back. `attempts` is not changed: it counts claims.
/// Affects no row when the claim was lost. Retry or [`kill`]: the engine
/// kills once `attempts >= max_attempts`.
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
pub fn retry(
    schema: &SchemaName,
    id: i64,
    worker_id: &str,
    attempts: i32,
    run_at: i64,
    last_error: Option<&str>,
    now: i64,
) -> Statement {
    build("retry", |b| {
        let mut update = Query::update();
        update
            .table(table::<Jobs>(schema))
            .value(Jobs::RunAt, b.col(Jobs::RunAt, run_at))
            .value(Jobs::Ready, ready_at(b, run_at, now))
            .value(
                Jobs::LastError,
                b.col(Jobs::LastError, last_error.map(str::to_owned)),
            )
            .value(Jobs::WorkerId, Expr::null())
            .value(Jobs::ClaimedAt, Expr::null())
            .value(Jobs::ClaimExpiresAt, Expr::null());
        for condition in held_claim(b, id, worker_id, attempts) {
            update.and_where(condition);
        }
        update
    })
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
/// (text order).
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

/// Kill: moves the job to `dead_jobs` while the claim `(id, worker_id,
/// attempts)` holds, in one statement, id kept, with `last_error` (the
/// error of the last attempt, as given) and `died_at = now`; returns the id.
/// Affects no row when the claim was lost.
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
pub fn kill(
    schema: &SchemaName,
    id: i64,
    worker_id: &str,
    attempts: i32,
    last_error: Option<&str>,
    now: i64,
) -> Statement {
    build("kill", |b| {
        let mut delete = Query::delete();
        delete.from_table(table::<Jobs>(schema));
        for condition in held_claim(b, id, worker_id, attempts) {
            delete.and_where(condition);
        }
        let last_error = b.col(Jobs::LastError, last_error.map(str::to_owned));
        let died_at = b.now(now);
        bury(schema, delete, last_error, died_at)
    })
}

/// The `last_error` of a job whose last claim lapsed ([`reap_exhausted`]).
pub const LAPSED_ON_LAST_ATTEMPT: &str = "claim lapsed on the last attempt: the worker neither acked, retried nor killed the job in time";

/// The `last_error` of a job that expired ([`expire`]).
pub const EXPIRED: &str = "expired: expires_at passed before the job finished";

/// Up to `limit` claims that lapsed by `now` (`claim_expires_at <= now`),
/// oldest first, through `jobs_claim_expiry_idx`, with `attempts` compared
/// to `max_attempts` by `attempts_left`.
fn lapsed_claims(
    b: &mut Binder,
    schema: &SchemaName,
    now: i64,
    limit: u32,
    attempts_left: bool,
) -> sea_query::SelectStatement {
    let mut lapsed = Query::select();
    lapsed
        .column(Jobs::Id)
        .from(table::<Jobs>(schema))
        .and_where(Expr::col(Jobs::ClaimExpiresAt).lte(b.now(now)))
        .and_where(if attempts_left {
            Expr::col(Jobs::Attempts).lt(Expr::col(Jobs::MaxAttempts))
        } else {
            Expr::col(Jobs::Attempts).gte(Expr::col(Jobs::MaxAttempts))
        })
        .order_by(Jobs::ClaimExpiresAt, Order::Asc);
    b.limit(&mut lapsed, limit);
    lapsed.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    lapsed
}

/// Reap: releases up to `limit` claims that lapsed by `now` on jobs with
/// attempts left (`attempts < max_attempts`), oldest lapse first: the claim
/// columns become NULL and the job is claimable again at once, in its old
/// place (`run_at`, `priority` and `last_error` unchanged; it stays ready).
/// Returns the released ids. A lapsed claim on the last attempt is
/// [`reap_exhausted`]'s.
///
/// ```
/// use schema_gen::statements::jobs;
/// use schema_model::SchemaName;
///
/// let s = jobs::reap(&SchemaName::default(), 1_700_000_000, 100);
/// assert_eq!(
///     s.sql(),
///     concat!(
///         r#"UPDATE "alkstore"."jobs" SET "worker_id" = NULL, "claimed_at" = NULL, "claim_expires_at" = NULL "#,
///         r#"WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."jobs" "#,
///         r#"WHERE "claim_expires_at" <= $1 AND "attempts" < "max_attempts" "#,
///         r#"ORDER BY "claim_expires_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING "id""#,
///     )
/// );
/// assert_eq!(s.param_names(), ["now", "limit"]);
/// ```
pub fn reap(schema: &SchemaName, now: i64, limit: u32) -> Statement {
    build("reap", |b| {
        let lapsed = lapsed_claims(b, schema, now, limit, true);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::WorkerId, Expr::null())
            .value(Jobs::ClaimedAt, Expr::null())
            .value(Jobs::ClaimExpiresAt, Expr::null())
            .and_where(any_of(Jobs::Id, lapsed))
            .returning_col(Jobs::Id)
            .to_owned()
    })
}

/// Reap exhausted: moves up to `limit` jobs whose claim lapsed by `now` on
/// their last attempt (`attempts >= max_attempts`) to `dead_jobs`, ids kept,
/// `died_at = now`, `last_error` = [`LAPSED_ON_LAST_ATTEMPT`]; returns their
/// ids.
///
/// ```
/// use schema_gen::statements::jobs;
/// use schema_model::SchemaName;
///
/// let s = jobs::reap_exhausted(&SchemaName::default(), 1_700_000_000, 100);
/// assert!(s.sql().starts_with(concat!(
///     r#"WITH "dead" AS (DELETE FROM "alkstore"."jobs" WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."jobs" "#,
///     r#"WHERE "claim_expires_at" <= $1 AND "attempts" >= "max_attempts" "#,
///     r#"ORDER BY "claim_expires_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING "id", "#,
/// )));
/// assert!(s.sql().ends_with(
///     r#""claimed_at", CAST('claim lapsed on the last attempt: the worker neither acked, retried nor killed the job in time' AS text), CAST($1 AS bigint) FROM "dead" RETURNING "id""#
/// ));
/// assert_eq!(s.param_names(), ["now", "limit"]);
/// ```
pub fn reap_exhausted(schema: &SchemaName, now: i64, limit: u32) -> Statement {
    build("reap_exhausted", |b| {
        let lapsed = lapsed_claims(b, schema, now, limit, false);
        let mut delete = Query::delete();
        delete
            .from_table(table::<Jobs>(schema))
            .and_where(any_of(Jobs::Id, lapsed));
        let died_at = b.now(now);
        bury(
            schema,
            delete,
            Expr::Constant(LAPSED_ON_LAST_ATTEMPT.into()),
            died_at,
        )
    })
}

/// Expire: moves up to `limit` jobs whose `expires_at` passed before `now`
/// (`expires_at < now`), claimed or not, soonest expiry first, through
/// `jobs_expiry_idx`, to `dead_jobs`, ids kept, `died_at = now`,
/// `last_error` = [`EXPIRED`]; returns their ids. A worker still running an
/// expired job then finds its claim gone.
///
/// ```
/// use schema_gen::statements::jobs;
/// use schema_model::SchemaName;
///
/// let s = jobs::expire(&SchemaName::default(), 1_700_000_000, 100);
/// assert!(s.sql().starts_with(concat!(
///     r#"WITH "dead" AS (DELETE FROM "alkstore"."jobs" WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."jobs" "#,
///     r#"WHERE "expires_at" < $1 ORDER BY "expires_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED)) RETURNING "id", "#,
/// )));
/// assert!(s.sql().ends_with(r#"CAST($1 AS bigint) FROM "dead" RETURNING "id""#));
/// assert_eq!(s.param_names(), ["now", "limit"]);
/// ```
pub fn expire(schema: &SchemaName, now: i64, limit: u32) -> Statement {
    build("expire", |b| {
        let mut expired = Query::select();
        expired
            .column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::ExpiresAt).lt(b.now(now)))
            .order_by(Jobs::ExpiresAt, Order::Asc);
        b.limit(&mut expired, limit);
        expired.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        let mut delete = Query::delete();
        delete
            .from_table(table::<Jobs>(schema))
            .and_where(any_of(Jobs::Id, expired));
        let died_at = b.now(now);
        bury(schema, delete, Expr::Constant(EXPIRED.into()), died_at)
    })
}

/// Vacuum: removes the dead row versions and index entries that claims,
/// promotions, acks and retries leave in `jobs`, so a claim does not read
/// past them (see the module docs of [`statements`](super), "Churn").
///
/// `SKIP_LOCKED`: when another session holds or waits for a lock that
/// conflicts (DDL, another vacuum), the table is skipped at once with a
/// warning, never queued behind it. `INDEX_CLEANUP ON`: the dead index
/// entries are removed on every run, even when few heap pages hold dead
/// rows (PostgreSQL 14+ would otherwise skip the indexes). `TRUNCATE
/// FALSE`: never takes the `ACCESS EXCLUSIVE` lock that returning empty
/// pages at the end of the table needs (autovacuum still does that).
///
/// Run it outside a transaction block (VACUUM refuses one), as the owner of
/// `jobs` (or a superuser; the database owner up to PostgreSQL 16; a role
/// with the `MAINTAIN` privilege from 17): for any other role PostgreSQL
/// skips the table with a warning and does nothing.
///
/// ```
/// use schema_gen::statements::jobs;
/// use schema_model::SchemaName;
///
/// let s = jobs::vacuum(&SchemaName::default());
/// assert_eq!(
///     s.sql(),
///     r#"VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE FALSE) "alkstore"."jobs""#
/// );
/// assert!(s.params().is_empty());
/// ```
pub fn vacuum(schema: &SchemaName) -> Statement {
    Statement::new(
        Definition {
            name: "vacuum",
            sql: crate::render::vacuum_statement(schema, Jobs::TABLE.as_str()),
            params: Vec::new(),
        },
        values([]),
    )
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

/// A call of [`enqueue`]: returns the new job's id.
#[derive(Debug, Clone, Copy)]
pub struct Enqueue<'a> {
    /// The job (its engine-assigned fields are not read).
    pub job: &'a Job,
    /// The current unix second.
    pub now: i64,
}

impl Call for Enqueue<'_> {
    const NAME: &'static str = "enqueue";
    type Returns = One<JobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        enqueue(schema, self.job, self.now)
    }

    fn values(&self) -> PostgresValues {
        let job = self.job;
        values([
            job.queue.clone().into(),
            job.payload.clone().into(),
            job.priority.into(),
            job.run_at.into(),
            job.expires_at.into(),
            job.enqueued_at.into(),
            job.opts.visibility_timeout_s.into(),
            job.opts.max_attempts.into(),
            job.opts.backoff_base_s.into(),
            job.opts.dead_letter_retention_s.into(),
            self.now.into(),
        ])
    }
}

/// A call of [`enqueue_many`]: returns the new jobs' ids, in the order of
/// `jobs`.
#[derive(Debug, Clone, Copy)]
pub struct EnqueueMany<'a> {
    /// The jobs (their engine-assigned fields are not read).
    pub jobs: &'a [Job],
    /// The current unix second.
    pub now: i64,
}

impl Call for EnqueueMany<'_> {
    const NAME: &'static str = "enqueue_many";
    type Returns = Rows<JobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        enqueue_many(schema, self.jobs, self.now)
    }

    fn values(&self) -> PostgresValues {
        let field = |column: Jobs, value: fn(&Job) -> sea_query::Value| {
            array_value(column, self.jobs.iter().map(value).collect())
        };
        values([
            self.now.into(),
            field(Jobs::Queue, |j| j.queue.clone().into()),
            field(Jobs::Payload, |j| j.payload.clone().into()),
            field(Jobs::Priority, |j| j.priority.into()),
            field(Jobs::RunAt, |j| j.run_at.into()),
            field(Jobs::ExpiresAt, |j| j.expires_at.into()),
            field(Jobs::EnqueuedAt, |j| j.enqueued_at.into()),
            field(Jobs::VisibilityTimeoutS, |j| {
                j.opts.visibility_timeout_s.into()
            }),
            field(Jobs::MaxAttempts, |j| j.opts.max_attempts.into()),
            field(Jobs::BackoffBaseS, |j| j.opts.backoff_base_s.into()),
            field(Jobs::DeadLetterRetentionS, |j| {
                j.opts.dead_letter_retention_s.into()
            }),
        ])
    }
}

/// A call of [`promote`], the first step of the claim path: returns how
/// many jobs it made ready.
#[derive(Debug, Clone, Copy)]
pub struct Promote<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The current unix second.
    pub now: i64,
    /// The most jobs to promote (above the claim's batch, e.g. 10x).
    pub limit: u32,
}

impl Call for Promote<'_> {
    const NAME: &'static str = "promote";
    type Returns = RowsAffected;

    fn statement(&self, schema: &SchemaName) -> Statement {
        promote(schema, self.queue, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([
            self.queue.into(),
            self.now.into(),
            u64::from(self.limit).into(),
        ])
    }
}

/// A call of [`claim`]: returns the claimed jobs, each with its claim token
/// `(id, worker_id, attempts)`.
#[derive(Debug, Clone, Copy)]
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

impl Call for Claim<'_> {
    const NAME: &'static str = "claim";
    type Returns = Rows<Job>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        claim(schema, self.queue, self.worker_id, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([
            self.worker_id.into(),
            self.now.into(),
            self.queue.into(),
            u64::from(self.limit).into(),
        ])
    }
}

/// A call of [`ack`]: returns 1, or 0 when the claim was lost.
#[derive(Debug, Clone, Copy)]
pub struct Ack<'a> {
    /// The job.
    pub id: i64,
    /// The worker that claimed it.
    pub worker_id: &'a str,
    /// Its `attempts` as the claim returned it.
    pub attempts: i32,
}

impl Call for Ack<'_> {
    const NAME: &'static str = "ack";
    type Returns = RowsAffected;

    fn statement(&self, schema: &SchemaName) -> Statement {
        ack(schema, self.id, self.worker_id, self.attempts)
    }

    fn values(&self) -> PostgresValues {
        values([self.id.into(), self.worker_id.into(), self.attempts.into()])
    }
}

/// A call of [`ack_many`]: returns how many of the claims it acked.
#[derive(Debug, Clone, Copy)]
pub struct AckMany<'a> {
    /// The worker that claimed them.
    pub worker_id: &'a str,
    /// Each claim's `(id, attempts)`.
    pub claims: &'a [(i64, i32)],
}

impl Call for AckMany<'_> {
    const NAME: &'static str = "ack_many";
    type Returns = RowsAffected;

    fn statement(&self, schema: &SchemaName) -> Statement {
        ack_many(schema, self.worker_id, self.claims)
    }

    fn values(&self) -> PostgresValues {
        values([
            array_value(
                Jobs::Id,
                self.claims.iter().map(|(id, _)| (*id).into()).collect(),
            ),
            self.worker_id.into(),
            array_value(
                Jobs::Attempts,
                self.claims
                    .iter()
                    .map(|(_, attempts)| (*attempts).into())
                    .collect(),
            ),
        ])
    }
}

/// A call of [`retry`]: returns 1, or 0 when the claim was lost.
#[derive(Debug, Clone, Copy)]
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

impl Call for Retry<'_> {
    const NAME: &'static str = "retry";
    type Returns = RowsAffected;

    fn statement(&self, schema: &SchemaName) -> Statement {
        retry(
            schema,
            self.id,
            self.worker_id,
            self.attempts,
            self.run_at,
            self.last_error,
            self.now,
        )
    }

    fn values(&self) -> PostgresValues {
        values([
            self.run_at.into(),
            self.now.into(),
            self.last_error.map(str::to_owned).into(),
            self.id.into(),
            self.worker_id.into(),
            self.attempts.into(),
        ])
    }
}

/// A call of [`kill`]: returns the dead job's id, or `None` when the claim
/// was lost.
#[derive(Debug, Clone, Copy)]
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

impl Call for Kill<'_> {
    const NAME: &'static str = "kill";
    type Returns = Optional<DeadJobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        kill(
            schema,
            self.id,
            self.worker_id,
            self.attempts,
            self.last_error,
            self.now,
        )
    }

    fn values(&self) -> PostgresValues {
        values([
            self.id.into(),
            self.worker_id.into(),
            self.attempts.into(),
            self.last_error.map(str::to_owned).into(),
            self.now.into(),
        ])
    }
}

/// A call of [`reap`]: returns the ids of the jobs whose claims it released.
#[derive(Debug, Clone, Copy)]
pub struct Reap {
    /// The current unix second.
    pub now: i64,
    /// The most claims to release.
    pub limit: u32,
}

impl Call for Reap {
    const NAME: &'static str = "reap";
    type Returns = Rows<JobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        reap(schema, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([self.now.into(), u64::from(self.limit).into()])
    }
}

/// A call of [`reap_exhausted`]: returns the ids of the jobs it moved to
/// `dead_jobs`.
#[derive(Debug, Clone, Copy)]
pub struct ReapExhausted {
    /// The current unix second.
    pub now: i64,
    /// The most jobs to move.
    pub limit: u32,
}

impl Call for ReapExhausted {
    const NAME: &'static str = "reap_exhausted";
    type Returns = Rows<DeadJobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        reap_exhausted(schema, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([self.now.into(), u64::from(self.limit).into()])
    }
}

/// A call of [`expire`]: returns the ids of the jobs it moved to
/// `dead_jobs`.
#[derive(Debug, Clone, Copy)]
pub struct Expire {
    /// The current unix second.
    pub now: i64,
    /// The most jobs to move.
    pub limit: u32,
}

impl Call for Expire {
    const NAME: &'static str = "expire";
    type Returns = Rows<DeadJobId>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        expire(schema, self.now, self.limit)
    }

    fn values(&self) -> PostgresValues {
        values([self.now.into(), u64::from(self.limit).into()])
    }
}

/// A call of [`vacuum`] (on a connection of its own, outside a
/// transaction).
#[derive(Debug, Clone, Copy)]
pub struct Vacuum;

impl Call for Vacuum {
    const NAME: &'static str = "vacuum";
    type Returns = Done;

    fn statement(&self, schema: &SchemaName) -> Statement {
        vacuum(schema)
    }

    fn values(&self) -> PostgresValues {
        values([])
    }
}
