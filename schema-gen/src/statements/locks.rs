//! `locks`: acquire, renew and release with the fence, and the sweep of
//! lapsed locks; the [`Lock`] row mapping.
//!
//! A lock is held while `now < expires_at`. Acquire, renew and release each
//! return the lock row when they took effect and nothing when they did not,
//! so "held by someone else" and "lost" are an empty result, never an
//! error: the caller decides whether to wait, back off or give up. The
//! fence is drawn by the database at each acquisition and only grows per
//! name, so whatever the holder writes to can refuse a stale holder.

use sea_query::{
    Expr, ExprTrait, LockBehavior, LockType, OnConflict, Order, Query, ReturningClause,
};
use sea_query_postgres::PostgresBinder;

use schema_model::{Lock, Locks, SchemaName};

use super::binder::{Binder, any_of, table};
use super::define::{Build, statement};
use super::row::get;
use super::{FromRow, Optional, RowError, Rows, RowsAffected};

fn returning_lock() -> ReturningClause {
    Query::returning().columns([Locks::Name, Locks::Owner, Locks::ExpiresAt, Locks::Fence])
}

impl FromRow for Lock {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        let mut lock = Lock::default();
        lock.name = get(row, Locks::Name)?;
        lock.owner = get(row, Locks::Owner)?;
        lock.expires_at = get(row, Locks::ExpiresAt)?;
        lock.fence = get(row, Locks::Fence)?;
        Ok(lock)
    }
}

statement! {
    name: "lock_acquire",
    returns: Optional<Lock>,
    /// Acquire: takes the lock `name` for `owner` until `expires_at` if it
    /// is free or lapsed (`expires_at <= now`), drawing a new fence, and
    /// returns the [`Lock`]; returns nothing while anyone holds it, `owner`
    /// included (a holder renews instead; a restarted owner waits for its
    /// old claim to lapse, which is what the fence is for).
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::acquire(&SchemaName::default(), "ticker", "node-a", 1_700_000_030, 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."locks" ("name", "owner", "expires_at") VALUES ($1, $2, $3) "#,
    ///         r#"ON CONFLICT ("name") DO UPDATE SET "owner" = "excluded"."owner", "expires_at" = "excluded"."expires_at", "#,
    ///         r#""fence" = DEFAULT WHERE "locks"."expires_at" <= $4 "#,
    ///         r#"RETURNING "name", "owner", "expires_at", "fence""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["name", "owner", "expires_at", "now"]);
    /// ```
    pub fn acquire;
    /// A call of [`acquire`]: returns the lock with its new fence, or
    /// `None` while anyone holds it.
    pub struct Acquire<'a> {
        /// The lock.
        pub name: &'a str,
        /// Who takes it.
        pub owner: &'a str,
        /// When it lapses, unless renewed.
        pub expires_at: i64,
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for Acquire<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let values = [
            b.col(Locks::Name, self.name),
            b.col(Locks::Owner, self.owner),
            b.col(Locks::ExpiresAt, self.expires_at),
        ];
        let lapsed = Expr::col((Locks::Table, Locks::ExpiresAt)).lte(b.now(self.now));
        Query::insert()
            .into_table(table::<Locks>(schema))
            .columns([Locks::Name, Locks::Owner, Locks::ExpiresAt])
            .values_panic(values)
            .on_conflict(
                OnConflict::column(Locks::Name)
                    .update_columns([Locks::Owner, Locks::ExpiresAt])
                    .value(Locks::Fence, Expr::keyword_default())
                    .action_and_where(lapsed)
                    .to_owned(),
            )
            .returning(returning_lock())
            .take()
    }
}

statement! {
    name: "lock_clear_lapsed",
    returns: RowsAffected,
    /// Acquire on Citus, step 1 of 2: deletes the lock `name` if it has
    /// lapsed (`expires_at <= now`); returns the number of rows deleted (0
    /// or 1). Step 2 is [`acquire_free`]; run both, in this order
    /// (pipelined on one connection,
    /// [`Session::run_pipelined`](super::Session::run_pipelined)), in place
    /// of [`acquire`] under
    /// [`Layout::CitusSchemaSharding`](schema_model::Layout).
    ///
    /// Why two statements: [`acquire`] draws the new fence with `fence =
    /// DEFAULT` in its `DO UPDATE SET`, which Citus refuses (`functions used
    /// in the DO UPDATE SET clause of INSERTs on distributed tables must be
    /// marked IMMUTABLE`: the default is `nextval`), and PostgreSQL allows an
    /// `ALWAYS` identity column nothing else in an update (`fence =
    /// EXCLUDED.fence`: `column "fence" can only be updated to DEFAULT`). So
    /// on Citus the fence is only ever drawn by an insert, on the
    /// coordinator, from the identity's one sequence: fences only grow per
    /// name, as on one server. The pair means what [`acquire`] means: a
    /// lapsed lock is free (deleting it changes nothing any holder may still
    /// do: renew refuses a lapsed lock, and a release by its old holder
    /// finds nothing), and between the two steps another acquirer may take
    /// it, in which case step 2 returns nothing.
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::clear_lapsed(&SchemaName::default(), "ticker", 1_700_000_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     r#"DELETE FROM "alkstore"."locks" WHERE "name" = $1 AND "expires_at" <= $2"#
    /// );
    /// assert_eq!(s.param_names(), ["name", "now"]);
    /// ```
    pub fn clear_lapsed;
    /// A call of [`clear_lapsed`] (acquire on Citus, step 1): returns the
    /// number of lapsed locks deleted, 0 or 1.
    pub struct ClearLapsed<'a> {
        /// The lock.
        pub name: &'a str,
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for ClearLapsed<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        Query::delete()
            .from_table(table::<Locks>(schema))
            .and_where(Expr::col(Locks::Name).eq(b.col(Locks::Name, self.name)))
            .and_where(Expr::col(Locks::ExpiresAt).lte(b.now(self.now)))
            .take()
    }
}

statement! {
    name: "lock_acquire_free",
    returns: Optional<Lock>,
    /// Acquire on Citus, step 2 of 2 (after [`clear_lapsed`]): takes the
    /// lock `name` for `owner` until `expires_at` if nobody holds it (no
    /// row), drawing a new fence (the identity's default, evaluated by the
    /// coordinator), and returns the [`Lock`]; returns nothing when a row is
    /// there (held, by anyone).
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::acquire_free(&SchemaName::default(), "ticker", "node-a", 1_700_000_030);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."locks" ("name", "owner", "expires_at") VALUES ($1, $2, $3) "#,
    ///         r#"ON CONFLICT ("name") DO NOTHING "#,
    ///         r#"RETURNING "name", "owner", "expires_at", "fence""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["name", "owner", "expires_at"]);
    /// ```
    pub fn acquire_free;
    /// A call of [`acquire_free`] (acquire on Citus, step 2): returns the
    /// lock with its new fence, or `None` while a row is there.
    pub struct AcquireFree<'a> {
        /// The lock.
        pub name: &'a str,
        /// Who takes it.
        pub owner: &'a str,
        /// When it lapses, unless renewed.
        pub expires_at: i64,
    }
}

impl Build for AcquireFree<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let values = [
            b.col(Locks::Name, self.name),
            b.col(Locks::Owner, self.owner),
            b.col(Locks::ExpiresAt, self.expires_at),
        ];
        Query::insert()
            .into_table(table::<Locks>(schema))
            .columns([Locks::Name, Locks::Owner, Locks::ExpiresAt])
            .values_panic(values)
            .on_conflict(OnConflict::column(Locks::Name).do_nothing().to_owned())
            .returning(returning_lock())
            .take()
    }
}

statement! {
    name: "lock_renew",
    returns: Optional<Lock>,
    /// Renew: moves the lock's `expires_at` while `owner` still holds it
    /// with `fence` and it has not lapsed (`expires_at > now`); returns the
    /// [`Lock`], or nothing when the lock was lost (lapsed, or taken over: a
    /// lapsed lock must be acquired again, with a new fence).
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::renew(&SchemaName::default(), "ticker", "node-a", 7, 1_700_000_060, 1_700_000_020);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"UPDATE "alkstore"."locks" SET "expires_at" = $1 "#,
    ///         r#"WHERE "name" = $2 AND "owner" = $3 AND "fence" = $4 AND "expires_at" > $5 "#,
    ///         r#"RETURNING "name", "owner", "expires_at", "fence""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["expires_at", "name", "owner", "fence", "now"]);
    /// ```
    pub fn renew;
    /// A call of [`renew`]: returns the renewed lock, or `None` when it was
    /// lost.
    pub struct Renew<'a> {
        /// The lock.
        pub name: &'a str,
        /// Its holder.
        pub owner: &'a str,
        /// The fence the holder got from [`acquire`].
        pub fence: i64,
        /// When it lapses now, unless renewed again.
        pub expires_at: i64,
        /// The current unix second.
        pub now: i64,
    }
}

impl Build for Renew<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        Query::update()
            .table(table::<Locks>(schema))
            .value(Locks::ExpiresAt, b.col(Locks::ExpiresAt, self.expires_at))
            .and_where(Expr::col(Locks::Name).eq(b.col(Locks::Name, self.name)))
            .and_where(Expr::col(Locks::Owner).eq(b.col(Locks::Owner, self.owner)))
            .and_where(Expr::col(Locks::Fence).eq(b.col(Locks::Fence, self.fence)))
            .and_where(Expr::col(Locks::ExpiresAt).gt(b.now(self.now)))
            .returning(returning_lock())
            .take()
    }
}

statement! {
    name: "lock_release",
    returns: Optional<Lock>,
    /// Release: deletes the lock while `owner` holds it with `fence` (lapsed
    /// or not: nobody else has taken it); returns the [`Lock`], or nothing
    /// when it was taken over. The fence keeps growing after a release (it
    /// is an identity), so the next holder's is higher.
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::release(&SchemaName::default(), "ticker", "node-a", 7);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"DELETE FROM "alkstore"."locks" WHERE "name" = $1 AND "owner" = $2 AND "fence" = $3 "#,
    ///         r#"RETURNING "name", "owner", "expires_at", "fence""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["name", "owner", "fence"]);
    /// ```
    pub fn release;
    /// A call of [`release`]: returns the released lock, or `None` when it
    /// was taken over.
    pub struct Release<'a> {
        /// The lock.
        pub name: &'a str,
        /// Its holder.
        pub owner: &'a str,
        /// The fence the holder got from [`acquire`].
        pub fence: i64,
    }
}

impl Build for Release<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        Query::delete()
            .from_table(table::<Locks>(schema))
            .and_where(Expr::col(Locks::Name).eq(b.col(Locks::Name, self.name)))
            .and_where(Expr::col(Locks::Owner).eq(b.col(Locks::Owner, self.owner)))
            .and_where(Expr::col(Locks::Fence).eq(b.col(Locks::Fence, self.fence)))
            .returning(returning_lock())
            .take()
    }
}

statement! {
    name: "lock_sweep",
    returns: Rows<Lock>,
    /// Sweep: deletes up to `limit` lapsed locks (`expires_at <= now`),
    /// oldest first, through `locks_expiry_idx`, and returns them.
    /// Housekeeping only: [`acquire`] takes a lapsed lock over without it.
    ///
    /// ```
    /// use schema_gen::statements::locks;
    /// use schema_model::SchemaName;
    ///
    /// let s = locks::sweep(&SchemaName::default(), 1_700_000_000, 100);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"DELETE FROM "alkstore"."locks" WHERE "name" = ANY(ARRAY (SELECT "name" FROM "alkstore"."locks" "#,
    ///         r#"WHERE "expires_at" <= $1 ORDER BY "expires_at" ASC LIMIT $2 FOR UPDATE SKIP LOCKED)) "#,
    ///         r#"RETURNING "name", "owner", "expires_at", "fence""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["now", "limit"]);
    /// ```
    pub fn sweep;
    /// A call of [`sweep`]: returns the lapsed locks it deleted.
    pub struct Sweep {
        /// The current unix second.
        pub now: i64,
        /// The most locks to delete.
        pub limit: u32,
    }
}

impl Build for Sweep {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut lapsed = Query::select();
        lapsed
            .column(Locks::Name)
            .from(table::<Locks>(schema))
            .and_where(Expr::col(Locks::ExpiresAt).lte(b.now(self.now)))
            .order_by(Locks::ExpiresAt, Order::Asc);
        b.limit(&mut lapsed, self.limit);
        lapsed.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::delete()
            .from_table(table::<Locks>(schema))
            .and_where(any_of(Locks::Name, lapsed))
            .returning(returning_lock())
            .take()
    }
}
