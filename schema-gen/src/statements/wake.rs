//! Wake-ups: the statement that tells a queue's listening workers that work
//! arrived ([`notify`]), the one a worker asks before it sleeps when the
//! next scheduled job of its queue comes due ([`next_due`]), and the
//! `LISTEN`/`UNLISTEN` commands of a queue's channel ([`listen`],
//! [`unlisten`]). [`crate::wake`] runs them: a coalescing notifier and a
//! listener; its docs say where the notify runs and why.
//!
//! The enqueue statements are unchanged: an engine that does not want
//! wake-ups never sends these.

use sea_query::{Expr, ExprTrait, Func, Order, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{Jobs, SchemaName, SqlType, WakeChannel};

use super::binder::{Binder, table};
use super::define::{Build, statement};
use super::row::get;
use super::{Decode, Done, Optional, RowError};

statement! {
    name: "wake",
    returns: Done,
    /// Wake: notifies the workers listening on `channel` (a queue's
    /// [`WakeChannel`]) that its queue has work: `pg_notify` with an empty
    /// payload, in a transaction of its own. The text names no table and
    /// does not depend on the schema; the channel does.
    ///
    /// Send it after the enqueue (or the promote, or the retry) has
    /// committed, never inside that transaction: a transaction that notified
    /// takes a database-wide lock at commit and holds it through its flush,
    /// so a notify in every enqueue transaction serialises the commits of
    /// all writers (BENCHMARKS.md, "Wake-ups", measures it). Its own
    /// transaction writes no WAL before its commit record, so PostgreSQL
    /// commits it without waiting for a flush, whatever
    /// `synchronous_commit` says: it costs what a `SELECT 1` costs.
    ///
    /// `pg_catalog`'s function, named with its schema: nothing on the
    /// caller's `search_path` can stand in for it.
    ///
    /// ```
    /// use schema_gen::statements::wake;
    /// use schema_model::{SchemaName, WakeChannel};
    ///
    /// let schema = SchemaName::default();
    /// let s = wake::notify(&schema, &WakeChannel::new(&schema, "mail"));
    /// assert_eq!(s.sql(), "SELECT pg_catalog.pg_notify($1, '')");
    /// assert_eq!(s.param_names(), ["channel"]);
    /// ```
    pub fn notify;
    /// A call of [`notify`].
    pub struct Notify<'a> {
        /// The queue's channel.
        pub channel: &'a WakeChannel,
    }
}

impl Build for Notify<'_> {
    fn build(&self, _schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let channel = b.bind("channel", SqlType::Text, self.channel.as_str().into());
        Query::select()
            .expr(Func::cust("pg_catalog.pg_notify").args([channel, Expr::Constant("".into())]))
            .take()
    }
}

statement! {
    name: "next_due",
    returns: Optional<RunAt>,
    /// Next due: the `run_at` of the earliest job of `queue` that is not
    /// ready yet (scheduled for later, or a retry backing off), or no row:
    /// when a worker that found nothing to claim must look again at the
    /// latest, because no notification comes when a scheduled job comes
    /// due. The first entry of `jobs_promote_idx (queue, run_at) WHERE NOT
    /// ready`.
    ///
    /// ```
    /// use schema_gen::statements::wake;
    /// use schema_model::SchemaName;
    ///
    /// let s = wake::next_due(&SchemaName::default(), "mail");
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"SELECT "run_at" FROM "alkstore"."jobs" WHERE "queue" = $1 AND (NOT "ready") "#,
    ///         r#"ORDER BY "run_at" ASC LIMIT $2"#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["queue", "limit"]);
    /// ```
    pub fn next_due;
    /// A call of [`next_due`]: the earliest `run_at` of the queue's jobs
    /// that are not ready yet, or `None`.
    pub struct NextDue<'a> {
        /// The queue.
        pub queue: &'a str,
    }
}

impl Build for NextDue<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut select = Query::select();
        select
            .column(Jobs::RunAt)
            .from(table::<Jobs>(schema))
            .and_where(Expr::col(Jobs::Queue).eq(b.col(Jobs::Queue, self.queue)))
            .and_where(Expr::col(Jobs::Ready).not())
            .order_by(Jobs::RunAt, Order::Asc);
        b.limit(&mut select, 1);
        select
    }
}

/// The `run_at` a statement returned.
#[derive(Debug)]
pub struct RunAt;

impl Decode for RunAt {
    type Output = i64;

    fn decode(row: &tokio_postgres::Row) -> Result<i64, RowError> {
        get(row, Jobs::RunAt)
    }
}

/// `LISTEN "<channel>"`: the channel quoted as every identifier is
/// ([`quote_ident`](crate::render::quote_ident)). A utility command: it
/// takes no parameters.
///
/// ```
/// use schema_gen::statements::wake;
/// use schema_model::{SchemaName, WakeChannel};
///
/// let channel = WakeChannel::new(&SchemaName::default(), "mail");
/// assert_eq!(wake::listen(&channel), r#"LISTEN "alkstore:mail""#);
/// ```
pub fn listen(channel: &WakeChannel) -> String {
    format!("LISTEN {}", crate::render::quote_ident(channel.as_str()))
}

/// `UNLISTEN "<channel>"`.
pub fn unlisten(channel: &WakeChannel) -> String {
    format!("UNLISTEN {}", crate::render::quote_ident(channel.as_str()))
}
