//! The engine's hot-path queries, built with sea-query from the model's typed
//! identifiers (as engine code builds them: `Jobs::Priority`, never
//! `"priority"`), and the `EXPLAIN` check that an index serves each one.
//!
//! Values are inlined (`to_string`), so each query is one plain statement.

use schema_model::{DeadJobs, Jobs, Locks, Schedules, SchemaName, StreamEvents, StreamOffsets};
use sea_query::{
    Alias, Expr, ExprTrait, Func, LockBehavior, LockType, OnConflict, Order, PostgresQueryBuilder,
    Query, SelectStatement,
};
use serde_json::Value;
use tokio_postgres::Client;

use crate::pg::describe_error;

fn render(select: &SelectStatement) -> String {
    select.to_string(PostgresQueryBuilder)
}

/// Claim: the next pending jobs of `queue` that are ready at `now`, by
/// `priority DESC, run_at, id`, skipping rows other workers hold.
pub fn claim(schema: &SchemaName, queue: &str, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(Jobs::Id)
            .from((schema.clone(), Jobs::Table))
            .and_where(Expr::col(Jobs::Queue).eq(queue))
            .and_where(Expr::col(Jobs::ClaimedAt).is_null())
            .and_where(Expr::col(Jobs::Ready))
            .and_where(Expr::col(Jobs::RunAt).lte(now))
            .order_by(Jobs::Priority, Order::Desc)
            .order_by(Jobs::RunAt, Order::Asc)
            .order_by(Jobs::Id, Order::Asc)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked),
    )
}

/// Reaper: claims whose visibility timeout lapsed before `now`.
pub fn expired_claims(schema: &SchemaName, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(Jobs::Id)
            .from((schema.clone(), Jobs::Table))
            .and_where(Expr::col(Jobs::ClaimExpiresAt).is_not_null())
            .and_where(Expr::col(Jobs::ClaimExpiresAt).lt(now))
            .order_by(Jobs::ClaimExpiresAt, Order::Asc)
            .limit(limit),
    )
}

/// Sweep: jobs whose expiry passed before `now`.
pub fn expired_jobs(schema: &SchemaName, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(Jobs::Id)
            .from((schema.clone(), Jobs::Table))
            .and_where(Expr::col(Jobs::ExpiresAt).is_not_null())
            .and_where(Expr::col(Jobs::ExpiresAt).lt(now))
            .order_by(Jobs::ExpiresAt, Order::Asc)
            .limit(limit),
    )
}

/// Retention sweep: dead jobs whose own retention lapsed before `now`.
pub fn dead_letter_sweep(schema: &SchemaName, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(DeadJobs::Id)
            .from((schema.clone(), DeadJobs::Table))
            .and_where(Expr::col(DeadJobs::PurgeAt).lt(now))
            .order_by(DeadJobs::PurgeAt, Order::Asc)
            .limit(limit),
    )
}

/// A stream's events after `offset`, in id order (a tail or an offset lookup).
pub fn stream_after(schema: &SchemaName, stream: &str, offset: i64, limit: Option<u64>) -> String {
    let mut select = Query::select();
    select
        .columns([StreamEvents::Id, StreamEvents::Key, StreamEvents::Payload])
        .from((schema.clone(), StreamEvents::Table))
        .and_where(Expr::col(StreamEvents::Stream).eq(stream))
        .and_where(Expr::col(StreamEvents::Id).gt(offset))
        .order_by(StreamEvents::Id, Order::Asc);
    if let Some(limit) = limit {
        select.limit(limit);
    }
    render(&select)
}

/// The gap-free reader of `schema_model::streams`: a stream's events after
/// the `(tx_id, id)` of the checkpoint event `offset`, in commit order, below
/// the snapshot horizon.
pub fn stream_after_in_commit_order(
    schema: &SchemaName,
    stream: &str,
    offset: i64,
    limit: Option<u64>,
) -> String {
    let checkpoint_tx = Query::select()
        .column(StreamEvents::TxId)
        .from((schema.clone(), StreamEvents::Table))
        .and_where(Expr::col(StreamEvents::Id).eq(offset))
        .to_owned();
    let resume_after = Expr::tuple([
        Func::coalesce([
            Expr::SubQuery(None, Box::new(checkpoint_tx.into())),
            Expr::cust("'0'::xid8"),
        ])
        .into(),
        Expr::val(offset),
    ]);
    let mut select = Query::select();
    select
        .columns([StreamEvents::Id, StreamEvents::Payload])
        .from((schema.clone(), StreamEvents::Table))
        .and_where(Expr::col(StreamEvents::Stream).eq(stream))
        .and_where(
            Expr::tuple([Expr::col(StreamEvents::TxId), Expr::col(StreamEvents::Id)])
                .gt(resume_after),
        )
        .and_where(
            Expr::col(StreamEvents::TxId).lt(Expr::cust("pg_snapshot_xmin(pg_current_snapshot())")),
        )
        .order_by(StreamEvents::TxId, Order::Asc)
        .order_by(StreamEvents::Id, Order::Asc);
    if let Some(limit) = limit {
        select.limit(limit);
    }
    render(&select)
}

/// Tick: enabled schedules due at `now`, skipping rows another ticker holds.
pub fn due_schedules(schema: &SchemaName, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(Schedules::Name)
            .from((schema.clone(), Schedules::Table))
            .and_where(Expr::col(Schedules::Enabled))
            .and_where(Expr::col(Schedules::NextFireAt).lte(now))
            .order_by(Schedules::NextFireAt, Order::Asc)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked),
    )
}

/// Sweep: locks that lapsed before `now`.
pub fn lapsed_locks(schema: &SchemaName, now: i64, limit: u64) -> String {
    render(
        Query::select()
            .column(Locks::Name)
            .from((schema.clone(), Locks::Table))
            .and_where(Expr::col(Locks::ExpiresAt).lt(now))
            .order_by(Locks::ExpiresAt, Order::Asc)
            .limit(limit),
    )
}

/// Append: one event to `stream`, returning its offset (the database assigns it).
pub fn append_event(schema: &SchemaName, stream: &str, payload: &[u8]) -> String {
    Query::insert()
        .into_table((schema.clone(), StreamEvents::Table))
        .columns([
            StreamEvents::Stream,
            StreamEvents::Payload,
            StreamEvents::CreatedAt,
        ])
        .values_panic([stream.into(), payload.to_vec().into(), 1_i64.into()])
        .returning_col(StreamEvents::Id)
        .to_string(PostgresQueryBuilder)
}

/// Acquire or take over the lock `name`: a new row draws a fence, a taken-over
/// row draws the next one (`fence = DEFAULT`). Returns the fence.
pub fn acquire_lock(schema: &SchemaName, name: &str, owner: &str, expires_at: i64) -> String {
    Query::insert()
        .into_table((schema.clone(), Locks::Table))
        .columns([Locks::Name, Locks::Owner, Locks::ExpiresAt])
        .values_panic([name.into(), owner.into(), expires_at.into()])
        .on_conflict(
            OnConflict::column(Locks::Name)
                .update_columns([Locks::Owner, Locks::ExpiresAt])
                .value(Locks::Fence, Expr::cust("DEFAULT"))
                .to_owned(),
        )
        .returning_col(Locks::Fence)
        .to_string(PostgresQueryBuilder)
}

/// The checkpoint upsert: moves `consumer`'s offset on `stream` to `offset`,
/// only ever forward.
pub fn advance_offset(schema: &SchemaName, stream: &str, consumer: &str, offset: i64) -> String {
    Query::insert()
        .into_table((schema.clone(), StreamOffsets::Table))
        .columns([
            StreamOffsets::Stream,
            StreamOffsets::Consumer,
            StreamOffsets::Offset,
        ])
        .values_panic([stream.into(), consumer.into(), offset.into()])
        .on_conflict(
            OnConflict::columns([StreamOffsets::Stream, StreamOffsets::Consumer])
                .update_column(StreamOffsets::Offset)
                .action_and_where(
                    Expr::col((StreamOffsets::Table, StreamOffsets::Offset))
                        .lt(Expr::col((Alias::new("excluded"), StreamOffsets::Offset))),
                )
                .to_owned(),
        )
        .to_string(PostgresQueryBuilder)
}

/// Every node of a JSON plan, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            out.extend(nodes(child));
        }
    }
    out
}

/// Asserts that `query` is planned through `index` without a `Sort` node.
pub async fn assert_served_by(client: &Client, index: &str, query: &str) {
    let row = client
        .query_one(&format!("EXPLAIN (FORMAT JSON) {query}"), &[])
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {query}: {}", describe_error(&e)));
    let plan: Value = row.get(0);
    let root = &plan[0]["Plan"];
    let all = nodes(root);
    let uses_index = all
        .iter()
        .any(|node| node["Index Name"].as_str() == Some(index));
    let sorts = all
        .iter()
        .any(|node| node["Node Type"].as_str() == Some("Sort"));
    assert!(
        uses_index && !sorts,
        "{query}\nexpected an index scan on {index} with no Sort; plan:\n{}",
        serde_json::to_string_pretty(root).unwrap_or_default()
    );
}
