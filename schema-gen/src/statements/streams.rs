//! `stream_events` and `stream_offsets`: append, the two readers, and the
//! checkpoint; the [`StreamEvent`] and [`ConsumerOffset`] row mappings.
//!
//! Two readers, as `schema_model::streams` explains: [`read`] goes in id
//! order (a tail, an offset lookup; it can skip an id that commits after a
//! higher one), [`read_in_commit_order`] is the gap-free reader (commit
//! order below the snapshot horizon). A consumer that must see every event
//! uses the second and checkpoints the id of the last event it processed.

use sea_query::{Alias, Expr, ExprTrait, Func, OnConflict, Order, Query, SelectStatement};
use sea_query_postgres::PostgresBinder;

use schema_model::{
    ConsumerOffset, SchemaName, SqlType, StreamEvent, StreamEvents, StreamOffsets, TableModel,
};

use super::binder::{Binder, any_of, cast, table};
use super::define::{Build, statement};
use super::row::{get, get_computed};
use super::{Decode, FromRow, One, Optional, RowError, Rows, RowsAffected};

/// The columns of [`StreamEvent`]: every column but `tx_id`, the
/// database's commit-order bookkeeping.
pub fn event_columns() -> Vec<StreamEvents> {
    StreamEvents::columns()
        .into_iter()
        .map(|(column, _)| column)
        .filter(|column| *column != StreamEvents::TxId)
        .collect()
}

impl FromRow for StreamEvent {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        let mut event = StreamEvent::default();
        event.id = get(row, StreamEvents::Id)?;
        event.stream = get(row, StreamEvents::Stream)?;
        event.key = get(row, StreamEvents::Key)?;
        event.payload = get(row, StreamEvents::Payload)?;
        event.created_at = get(row, StreamEvents::CreatedAt)?;
        Ok(event)
    }
}

impl FromRow for ConsumerOffset {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        Ok(ConsumerOffset::new(
            get::<_, String>(row, StreamOffsets::Stream)?,
            get::<_, String>(row, StreamOffsets::Consumer)?,
            get(row, StreamOffsets::Offset)?,
        ))
    }
}

/// The `id` of the `stream_events` row a statement returned (`RETURNING
/// id`): the event's offset in its stream.
#[derive(Debug)]
pub struct EventId;

impl Decode for EventId {
    type Output = i64;

    fn decode(row: &tokio_postgres::Row) -> Result<i64, RowError> {
        get(row, StreamEvents::Id)
    }
}

statement! {
    name: "stream_append",
    returns: One<EventId>,
    /// Append: inserts `event` (its `id` is left out: the database assigns
    /// the offset, and `tx_id` records the appending transaction) and
    /// returns the offset (`RETURNING id`).
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::{SchemaName, StreamEvent};
    ///
    /// let s = streams::append(&SchemaName::default(), &StreamEvent::default());
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."stream_events" ("stream", "key", "payload", "created_at") "#,
    ///         r#"VALUES ($1, $2, $3, $4) RETURNING "id""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "key", "payload", "created_at"]);
    /// ```
    pub fn append;
    /// A call of [`append`]: returns the event's offset.
    pub struct Append<'a> {
        /// The event (its `id` is not read).
        pub event: &'a StreamEvent,
    }
}

impl Build for Append<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let event = self.event;
        let values = [
            b.col(StreamEvents::Stream, event.stream.clone()),
            b.col(StreamEvents::Key, event.key.clone()),
            b.col(StreamEvents::Payload, event.payload.clone()),
            b.col(StreamEvents::CreatedAt, event.created_at),
        ];
        Query::insert()
            .into_table(table::<StreamEvents>(schema))
            .columns([
                StreamEvents::Stream,
                StreamEvents::Key,
                StreamEvents::Payload,
                StreamEvents::CreatedAt,
            ])
            .values_panic(values)
            .returning_col(StreamEvents::Id)
            .take()
    }
}

statement! {
    name: "stream_read",
    returns: Rows<StreamEvent>,
    /// Read in id order: up to `limit` events of `stream` after `offset`
    /// (`id > offset`, id order). The ids are picked by an index-only scan
    /// of `stream_events_stream_id_idx` and the rows fetched through the
    /// primary key, in id order: the planner cannot trade the ordered index
    /// scan for a bitmap scan and a sort when few events are left after the
    /// offset (it did, on a small table). An id that commits after a higher
    /// one can be skipped by this reader; use [`read_in_commit_order`] to
    /// see every event.
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::SchemaName;
    ///
    /// let s = streams::read(&SchemaName::default(), "orders", 41, 100);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"SELECT "id", "stream", "key", "payload", "created_at" FROM "alkstore"."stream_events" "#,
    ///         r#"WHERE "id" = ANY(ARRAY (SELECT "id" FROM "alkstore"."stream_events" "#,
    ///         r#"WHERE "stream" = $1 AND "id" > $2 ORDER BY "id" ASC LIMIT $3)) ORDER BY "id" ASC"#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "offset", "limit"]);
    /// ```
    pub fn read;
    /// A call of [`read`]: returns up to `limit` events after `offset`, in
    /// id order.
    pub struct Read<'a> {
        /// The stream.
        pub stream: &'a str,
        /// The last offset read (0: from the start).
        pub offset: i64,
        /// The most events to read.
        pub limit: u32,
    }
}

impl Build for Read<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let mut after = Query::select();
        after
            .column(StreamEvents::Id)
            .from(table::<StreamEvents>(schema))
            .and_where(Expr::col(StreamEvents::Stream).eq(b.col(StreamEvents::Stream, self.stream)))
            .and_where(Expr::col(StreamEvents::Id).gt(b.col(StreamOffsets::Offset, self.offset)))
            .order_by(StreamEvents::Id, Order::Asc);
        b.limit(&mut after, self.limit);
        Query::select()
            .columns(event_columns())
            .from(table::<StreamEvents>(schema))
            .and_where(any_of(StreamEvents::Id, after))
            .order_by(StreamEvents::Id, Order::Asc)
            .take()
    }
}

statement! {
    name: "stream_read_in_commit_order",
    returns: Rows<StreamEvent>,
    /// The gap-free reader: up to `limit` events of `stream` after the
    /// checkpoint event `offset`, in commit order (`tx_id, id`), only from
    /// transactions older than every transaction still running (`tx_id <
    /// pg_snapshot_xmin(pg_current_snapshot())`). It resumes after the
    /// `(tx_id, id)` of the event with id `offset` (0: from the start), so
    /// an id that commits late is delivered after the ones read before it,
    /// never skipped. A long transaction anywhere in the database delays
    /// delivery until it ends.
    ///
    /// The ids are picked in commit order by an index-only scan of
    /// `stream_events_commit_order_idx` into an array, and the rows fetched
    /// through the primary key by a nested loop over that array, so they
    /// come in the array's order with no sort (a single `ORDER BY tx_id, id`
    /// query let the planner trade the ordered scan for a bitmap scan and a
    /// sort when few events were left; the hot-path test pins this plan).
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::SchemaName;
    ///
    /// let s = streams::read_in_commit_order(&SchemaName::default(), "orders", 41, 100);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"SELECT "stream_events"."id", "stream_events"."stream", "stream_events"."key", "#,
    ///         r#""stream_events"."payload", "stream_events"."created_at" "#,
    ///         r#"FROM unnest(ARRAY (SELECT "id" FROM "alkstore"."stream_events" WHERE "stream" = $1 "#,
    ///         r#"AND ("tx_id", "id") > (COALESCE((SELECT "tx_id" FROM "alkstore"."stream_events" WHERE "id" = $2), '0'::xid8), $2) "#,
    ///         r#"AND "tx_id" < (pg_snapshot_xmin(pg_current_snapshot())) "#,
    ///         r#"ORDER BY "tx_id" ASC, "id" ASC LIMIT $3)) AS "picked" "#,
    ///         r#"INNER JOIN "alkstore"."stream_events" ON "stream_events"."id" = "picked""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "offset", "limit"]);
    /// ```
    pub fn read_in_commit_order;
    /// A call of [`read_in_commit_order`], the gap-free reader: returns up
    /// to `limit` events after the checkpoint event `offset`, in commit
    /// order.
    pub struct ReadInCommitOrder<'a> {
        /// The stream.
        pub stream: &'a str,
        /// The id of the last event processed (0: from the start).
        pub offset: i64,
        /// The most events to read.
        pub limit: u32,
    }
}

impl Build for ReadInCommitOrder<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        commit_order_read(b, schema, self.stream, self.offset, self.limit, None)
    }
}

statement! {
    name: "stream_read_in_commit_order_below",
    returns: Rows<StreamEvent>,
    /// The gap-free reader under
    /// [`Layout::CitusSchemaSharding`](schema_model::Layout):
    /// [`read_in_commit_order`] with the horizon given (`horizon`, what
    /// [`commit_horizon`] returned on the same connection just before: two
    /// round trips, the second binds what the first returned) instead of
    /// computed by the statement itself.
    ///
    /// Why: on Citus both the event's `tx_id` and the horizon must come from
    /// one node's transaction counter, and Citus evaluates them in different
    /// places. An append is an `INSERT`, whose functions and defaults Citus
    /// evaluates on the coordinator before routing it, so `tx_id` is the
    /// coordinator's transaction id; a routed `SELECT` is shipped to the
    /// worker as it is, so [`read_in_commit_order`]'s
    /// `pg_current_snapshot()` is the worker's snapshot, a different
    /// counter: it delivers later events while an earlier append is open and
    /// never the earlier one (worker ahead), or nothing at all (coordinator
    /// ahead). [`commit_horizon`] has no table, so it runs on the
    /// coordinator, and this statement compares the coordinator's `tx_id`
    /// with the coordinator's horizon. It holds because a single-node
    /// transaction's worker part commits before the coordinator's own
    /// commit (Citus commits it in the coordinator's pre-commit): once the
    /// appending coordinator transaction is below the horizon, its event is
    /// visible on the worker. Not for an append in a transaction that also
    /// writes a second node (two phase commit: the worker commits after the
    /// coordinator), which may be skipped; keep appends in single-node
    /// transactions (one engine schema's tables are all on one node).
    ///
    /// On one server it reads the same as [`read_in_commit_order`], with a
    /// horizon at most as recent.
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::SchemaName;
    ///
    /// let s = streams::read_in_commit_order_below(&SchemaName::default(), "orders", 41, 100, 7_000);
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"SELECT "stream_events"."id", "stream_events"."stream", "stream_events"."key", "#,
    ///         r#""stream_events"."payload", "stream_events"."created_at" "#,
    ///         r#"FROM unnest(ARRAY (SELECT "id" FROM "alkstore"."stream_events" WHERE "stream" = $1 "#,
    ///         r#"AND ("tx_id", "id") > (COALESCE((SELECT "tx_id" FROM "alkstore"."stream_events" WHERE "id" = $2), '0'::xid8), $2) "#,
    ///         r#"AND "tx_id" < CAST(CAST(CAST($3 AS bigint) AS text) AS xid8) "#,
    ///         r#"ORDER BY "tx_id" ASC, "id" ASC LIMIT $4)) AS "picked" "#,
    ///         r#"INNER JOIN "alkstore"."stream_events" ON "stream_events"."id" = "picked""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "offset", "horizon", "limit"]);
    /// ```
    pub fn read_in_commit_order_below;
    /// A call of [`read_in_commit_order_below`], the gap-free reader on
    /// Citus: returns up to `limit` events after the checkpoint event
    /// `offset`, in commit order, below `horizon` (from [`CommitHorizon`]).
    pub struct ReadInCommitOrderBelow<'a> {
        /// The stream.
        pub stream: &'a str,
        /// The id of the last event processed (0: from the start).
        pub offset: i64,
        /// The most events to read.
        pub limit: u32,
        /// What [`CommitHorizon`] returned, just before, on the same
        /// connection.
        pub horizon: i64,
    }
}

impl Build for ReadInCommitOrderBelow<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        commit_order_read(
            b,
            schema,
            self.stream,
            self.offset,
            self.limit,
            Some(self.horizon),
        )
    }
}

/// The horizon [`commit_horizon`] returned.
#[derive(Debug)]
pub struct Horizon;

impl Decode for Horizon {
    type Output = i64;

    fn decode(row: &tokio_postgres::Row) -> Result<i64, RowError> {
        get_computed(row, "pg_current_snapshot()", HORIZON)
    }
}

statement! {
    name: "commit_horizon",
    returns: One<Horizon>,
    /// The horizon of [`read_in_commit_order_below`]: the oldest transaction
    /// id still running on the node the connection is to (on Citus the
    /// coordinator: the statement reads no table, so its text does not
    /// depend on `schema`), as a `bigint`.
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::SchemaName;
    ///
    /// let s = streams::commit_horizon(&SchemaName::default());
    /// assert_eq!(
    ///     s.sql(),
    ///     r#"SELECT CAST(CAST((pg_snapshot_xmin(pg_current_snapshot())) AS text) AS bigint) AS "horizon""#
    /// );
    /// assert!(s.param_names().is_empty());
    /// ```
    pub fn commit_horizon;
    /// A call of [`commit_horizon`]: returns the oldest transaction id still
    /// running, for [`ReadInCommitOrderBelow`].
    pub struct CommitHorizon;
}

impl Build for CommitHorizon {
    fn build(&self, _: &SchemaName, _: &mut Binder) -> impl PostgresBinder {
        Query::select()
            .expr_as(
                snapshot_horizon()
                    .cast_as(Alias::new("text"))
                    .cast_as(Alias::new("bigint")),
                Alias::new(HORIZON),
            )
            .take()
    }
}

/// The column [`commit_horizon`] returns.
const HORIZON: &str = "horizon";

/// The oldest transaction still running for this session's snapshot: an
/// event whose `tx_id` is below it has committed or never will.
fn snapshot_horizon() -> Expr {
    Expr::cust("pg_snapshot_xmin(pg_current_snapshot())")
}

/// The gap-free read, below the session's own horizon (`None`) or below a
/// horizon given (`Some`, Citus).
fn commit_order_read(
    b: &mut Binder,
    schema: &SchemaName,
    stream: &str,
    offset: i64,
    limit: u32,
    horizon: Option<i64>,
) -> SelectStatement {
    let stream = Expr::col(StreamEvents::Stream).eq(b.col(StreamEvents::Stream, stream));
    let checkpoint_tx = Query::select()
        .column(StreamEvents::TxId)
        .from(table::<StreamEvents>(schema))
        .and_where(Expr::col(StreamEvents::Id).eq(b.col(StreamOffsets::Offset, offset)))
        .take();
    let resume_after = Expr::tuple([
        Func::coalesce([
            Expr::SubQuery(None, Box::new(checkpoint_tx.into())),
            Expr::cust("'0'::xid8"),
        ])
        .into(),
        b.col(StreamOffsets::Offset, offset),
    ]);
    let below = match horizon {
        None => snapshot_horizon(),
        // bigint first, so the server never infers the placeholder as
        // text; xid8 has no cast from bigint but its text form.
        Some(horizon) => cast(
            b.bind(HORIZON, SqlType::BigInt, horizon.into()),
            SqlType::BigInt,
        )
        .cast_as(Alias::new("text"))
        .cast_as(Alias::new("xid8")),
    };
    let mut next = Query::select();
    next.column(StreamEvents::Id)
        .from(table::<StreamEvents>(schema))
        .and_where(stream)
        .and_where(
            Expr::tuple([Expr::col(StreamEvents::TxId), Expr::col(StreamEvents::Id)])
                .gt(resume_after),
        )
        .and_where(Expr::col(StreamEvents::TxId).lt(below))
        .order_by(StreamEvents::TxId, Order::Asc)
        .order_by(StreamEvents::Id, Order::Asc);
    b.limit(&mut next, limit);
    let picked = Alias::new("picked");
    let ids = Func::cust("unnest").arg(Expr::cust_with_exprs(
        "ARRAY $1",
        [Expr::SubQuery(None, Box::new(next.into()))],
    ));
    Query::select()
        .columns(
            event_columns()
                .into_iter()
                .map(|column| (StreamEvents::Table, column)),
        )
        .from_function(ids, picked.clone())
        .inner_join(
            table::<StreamEvents>(schema),
            Expr::col((StreamEvents::Table, StreamEvents::Id)).equals(picked),
        )
        .take()
}

statement! {
    name: "checkpoint",
    returns: RowsAffected,
    /// Checkpoint: moves `offset.consumer`'s checkpoint on `offset.stream`
    /// to `offset.offset`, only ever forward: a lower or equal offset
    /// changes nothing (the row count is 0), a first checkpoint inserts the
    /// row.
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::{ConsumerOffset, SchemaName};
    ///
    /// let s = streams::checkpoint(&SchemaName::default(), &ConsumerOffset::default());
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."stream_offsets" ("stream", "consumer", "offset") VALUES ($1, $2, $3) "#,
    ///         r#"ON CONFLICT ("stream", "consumer") DO UPDATE SET "offset" = "excluded"."offset" "#,
    ///         r#"WHERE "stream_offsets"."offset" < "excluded"."offset""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "consumer", "offset"]);
    /// ```
    pub fn checkpoint;
    /// A call of [`checkpoint`]: returns 1 when the checkpoint moved, 0 when
    /// the offset was not past it.
    pub struct Checkpoint<'a> {
        /// The consumer's new checkpoint.
        pub offset: &'a ConsumerOffset,
    }
}

impl Build for Checkpoint<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let offset = self.offset;
        let values = [
            b.col(StreamOffsets::Stream, offset.stream.clone()),
            b.col(StreamOffsets::Consumer, offset.consumer.clone()),
            b.col(StreamOffsets::Offset, offset.offset),
        ];
        Query::insert()
            .into_table(table::<StreamOffsets>(schema))
            .columns([
                StreamOffsets::Stream,
                StreamOffsets::Consumer,
                StreamOffsets::Offset,
            ])
            .values_panic(values)
            .on_conflict(
                OnConflict::columns([StreamOffsets::Stream, StreamOffsets::Consumer])
                    .update_column(StreamOffsets::Offset)
                    .action_and_where(
                        Expr::col((StreamOffsets::Table, StreamOffsets::Offset))
                            .lt(Expr::col((Alias::new("excluded"), StreamOffsets::Offset))),
                    )
                    .to_owned(),
            )
            .take()
    }
}

statement! {
    name: "checkpoint_read",
    returns: Optional<ConsumerOffset>,
    /// Read a checkpoint: `consumer`'s checkpoint on `stream` as a
    /// [`ConsumerOffset`], or no row before its first checkpoint (start from
    /// offset 0).
    ///
    /// ```
    /// use schema_gen::statements::streams;
    /// use schema_model::SchemaName;
    ///
    /// let s = streams::read_checkpoint(&SchemaName::default(), "orders", "billing");
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"SELECT "stream", "consumer", "offset" FROM "alkstore"."stream_offsets" "#,
    ///         r#"WHERE "stream" = $1 AND "consumer" = $2"#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["stream", "consumer"]);
    /// ```
    pub fn read_checkpoint;
    /// A call of [`read_checkpoint`]: returns the consumer's checkpoint, or
    /// `None` before its first.
    pub struct ReadCheckpoint<'a> {
        /// The stream.
        pub stream: &'a str,
        /// The consumer.
        pub consumer: &'a str,
    }
}

impl Build for ReadCheckpoint<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        Query::select()
            .columns([
                StreamOffsets::Stream,
                StreamOffsets::Consumer,
                StreamOffsets::Offset,
            ])
            .from(table::<StreamOffsets>(schema))
            .and_where(
                Expr::col(StreamOffsets::Stream).eq(b.col(StreamOffsets::Stream, self.stream)),
            )
            .and_where(
                Expr::col(StreamOffsets::Consumer)
                    .eq(b.col(StreamOffsets::Consumer, self.consumer)),
            )
            .take()
    }
}
