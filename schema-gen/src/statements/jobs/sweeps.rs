//! The sweeps an engine runs on a clock: release lapsed claims ([`reap`]),
//! bury jobs whose last claim lapsed ([`reap_exhausted`]) or that expired
//! ([`expire`]); and the maintenance step [`vacuum`].

use sea_query::{
    Expr, ExprTrait, IdenStatic, LockBehavior, LockType, Order, Query, SelectStatement,
};
use sea_query_postgres::PostgresBinder;

use schema_model::{Jobs, SchemaName, TableModel};

use super::{JobId, bury};
use crate::statements::binder::{Binder, Raw, any_of, table};
use crate::statements::dead_jobs::DeadJobId;
use crate::statements::define::{Build, statement};
use crate::statements::{Done, Rows};

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
) -> SelectStatement {
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

statement! {
    name: "reap",
    returns: Rows<JobId>,
    /// Reap: releases up to `limit` claims that lapsed by `now` on jobs with
    /// attempts left (`attempts < max_attempts`), oldest lapse first: the
    /// claim columns become NULL and the job is claimable again at once, in
    /// its old place (`run_at`, `priority` and `last_error` unchanged; it
    /// stays ready). Returns the released ids. A lapsed claim on the last
    /// attempt is [`reap_exhausted`]'s.
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
    pub fn reap;
    /// A call of [`reap`]: returns the ids of the jobs whose claims it
    /// released.
    pub struct Reap {
        /// The current unix second.
        pub now: i64,
        /// The most claims to release.
        pub limit: u32,
    }
}

impl Build for Reap {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let lapsed = lapsed_claims(b, schema, self.now, self.limit, true);
        Query::update()
            .table(table::<Jobs>(schema))
            .value(Jobs::WorkerId, Expr::null())
            .value(Jobs::ClaimedAt, Expr::null())
            .value(Jobs::ClaimExpiresAt, Expr::null())
            .and_where(any_of(Jobs::Id, lapsed))
            .returning_col(Jobs::Id)
            .take()
    }
}

statement! {
    name: "reap_exhausted",
    returns: Rows<DeadJobId>,
    /// Reap exhausted: moves up to `limit` jobs whose claim lapsed by `now`
    /// on their last attempt (`attempts >= max_attempts`) to `dead_jobs`,
    /// ids kept, `died_at = now`, `last_error` =
    /// [`LAPSED_ON_LAST_ATTEMPT`]; returns their ids.
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
    pub fn reap_exhausted;
    /// A call of [`reap_exhausted`]: returns the ids of the jobs it moved to
    /// `dead_jobs`.
    pub struct ReapExhausted {
        /// The current unix second.
        pub now: i64,
        /// The most jobs to move.
        pub limit: u32,
    }
}

impl Build for ReapExhausted {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let lapsed = lapsed_claims(b, schema, self.now, self.limit, false);
        let mut delete = Query::delete();
        delete
            .from_table(table::<Jobs>(schema))
            .and_where(any_of(Jobs::Id, lapsed));
        let died_at = b.now(self.now);
        bury(
            schema,
            delete,
            Expr::Constant(LAPSED_ON_LAST_ATTEMPT.into()),
            died_at,
        )
    }
}

statement! {
    name: "expire",
    returns: Rows<DeadJobId>,
    /// Expire: moves up to `limit` jobs whose `expires_at` passed before
    /// `now` (`expires_at < now`), claimed or not, soonest expiry first,
    /// through `jobs_expiry_idx`, to `dead_jobs`, ids kept, `died_at = now`,
    /// `last_error` = [`EXPIRED`]; returns their ids. A worker still running
    /// an expired job then finds its claim gone.
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
    pub fn expire;
    /// A call of [`expire`]: returns the ids of the jobs it moved to
    /// `dead_jobs`.
    pub struct Expire {
        /// The current unix second.
        pub now: i64,
        /// The most jobs to move.
        pub limit: u32,
    }
}

impl Build for Expire {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut expired = Query::select();
        expired
            .column(Jobs::Id)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::ExpiresAt).lt(b.now(self.now)))
            .order_by(Jobs::ExpiresAt, Order::Asc);
        b.limit(&mut expired, self.limit);
        expired.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        let mut delete = Query::delete();
        delete
            .from_table(table::<Jobs>(schema))
            .and_where(any_of(Jobs::Id, expired));
        let died_at = b.now(self.now);
        bury(schema, delete, Expr::Constant(EXPIRED.into()), died_at)
    }
}

statement! {
    name: "vacuum",
    returns: Done,
    /// Vacuum: removes the dead row versions and index entries that claims,
    /// promotions, acks and retries leave in `jobs`, so a claim does not
    /// read past them (see the module docs of
    /// [`statements`](crate::statements), "Churn").
    ///
    /// `SKIP_LOCKED`: when another session holds or waits for a lock that
    /// conflicts (DDL, another vacuum), the table is skipped at once with a
    /// warning, never queued behind it. `INDEX_CLEANUP ON`: the dead index
    /// entries are removed on every run, even when few heap pages hold dead
    /// rows (PostgreSQL 14+ would otherwise skip the indexes). `TRUNCATE
    /// FALSE`: never takes the `ACCESS EXCLUSIVE` lock that returning empty
    /// pages at the end of the table needs (autovacuum still does that).
    ///
    /// Run it outside a transaction block (VACUUM refuses one), as the owner
    /// of `jobs` (or a superuser; the database owner up to PostgreSQL 16; a
    /// role with the `MAINTAIN` privilege from 17): for any other role
    /// PostgreSQL skips the table with a warning and does nothing.
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
    pub fn vacuum;
    /// A call of [`vacuum`] (on a connection of its own, outside a
    /// transaction).
    pub struct Vacuum;
}

impl Build for Vacuum {
    fn build(&self, schema: &SchemaName, _: &mut Binder) -> impl PostgresBinder {
        Raw(crate::render::vacuum_statement(
            schema,
            Jobs::TABLE.as_str(),
        ))
    }
}
