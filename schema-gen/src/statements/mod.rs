//! The engine's hot-path statements and the row mapping of its value shapes:
//! the SQL engine code runs, as a public API, so engine code, tests,
//! benchmarks and `schema-gen statements` all run the same text.
//!
//! One function per statement, one file per table family (like the model).
//! Each takes the [`SchemaName`] and typed inputs and returns a
//! [`Statement`]: the SQL text with `$n` placeholders, built with sea-query
//! from the model's typed identifiers; the values to bind, through
//! sea-query's maintained tokio-postgres binder (`sea-query-postgres`), never
//! inlined into the text (literals are re-planned on every call: measured
//! here, about 60% more per claim than a prepared statement); and one
//! [`Param`] per placeholder, named after the value shape's field it carries
//! (`queue`, `run_at`, ...), `now` for the current unix second, `limit` for
//! a batch size. Each name is one placeholder: a value the statement uses
//! twice (`claim` compares and stores `now` three times) is the same `$n`
//! each time. The text depends on the schema name only.
//!
//! # Running them: typed calls on a session
//!
//! Beside each function is its [`Call`]: a type whose fields are the
//! statement's inputs ([`jobs::Claim`] for [`jobs::claim`]), which declares
//! what the statement returns ([`Call::Returns`]: [`Rows`] of a shape, [`One`]
//! id, [`Optional`] lock, [`RowsAffected`], ...) and lists its values without
//! building the text ([`Call::values`]). A [`Session`] holds one connection:
//! it prepares each statement once on it (on first use, or all at once with
//! [`Session::prepare_all`]), then binds only values, and decodes what comes
//! back by the model's typed columns, so engine code never names a column by
//! a string. A failure is a [`StatementError`] naming the statement, with the
//! server's message, SQLSTATE, detail and hint.
//!
//! ```no_run
//! # async fn demo(client: schema_gen::tokio_postgres::Client) -> Result<(), schema_gen::statements::StatementError> {
//! use schema_gen::SchemaName;
//! use schema_gen::statements::{Job, Session, jobs};
//!
//! let session = Session::new(client, SchemaName::default());
//! let now = 1_700_000_000;
//! // The claim path (CLAIM_PATH), in one round trip: promote the queue's due
//! // jobs, then claim. No transaction is needed (see `Session`).
//! let (_promoted, claimed): (u64, Vec<Job>) = session
//!     .run_pipelined(
//!         &jobs::Promote { queue: "mail", now, limit: 100 },
//!         &jobs::Claim { queue: "mail", worker_id: "worker-1", now, limit: 10 },
//!     )
//!     .await?;
//! for job in &claimed {
//!     // ... run it, then ack with the claim's token (id, worker_id, attempts):
//!     let acked: u64 = session
//!         .run(&jobs::Ack { id: job.id, worker_id: "worker-1", attempts: job.attempts })
//!         .await?;
//! }
//! # Ok(()) }
//! ```
//!
//! [`Session`]'s docs hold a whole engine program (`examples/engine.rs`).
//! The [`Statement`] with its values stays available for a one-off run or an
//! `EXPLAIN`: `client.query(statement.sql(), &statement.args())`.
//!
//! # The claim: why ready/scheduled split
//!
//! The claim reads `jobs_claim_idx (queue, priority DESC, run_at, id)`. With
//! only `claimed_at IS NULL` as its predicate, jobs that are not yet due
//! (scheduled jobs, retries backing off) at a higher priority sat in front
//! of the due ones and every claim read past all of them: measured here, at
//! 1M such jobs one claim read about 5,000 buffers, against about 15 with
//! none. The designs weighed (the benchmark compares them, BENCHMARKS.md):
//!
//! - **ready/scheduled split** (chosen; River and Oban do this): a job is in
//!   the claim index only once it is `ready` (`WHERE claimed_at IS NULL AND
//!   ready`). Enqueue and retry set `ready = run_at <= now`; the
//!   [`jobs::promote`] statement flips a queue's due, not-ready jobs to ready
//!   through its own index `jobs_promote_idx (queue, run_at) WHERE NOT
//!   ready`, bounded by a `LIMIT`, with `SKIP LOCKED`. A claim then reads
//!   only claimable entries, whatever the number of not-yet-due jobs at any
//!   priority, and a poll of a queue holding only future jobs stops at the
//!   first entry of each index, like a poll of an empty queue. The price is
//!   one more statement per poll (usually an index probe that finds nothing)
//!   and one more write per scheduled job when it comes due. Measured by
//!   `tests/hot_paths.rs` at 20k and 400k jobs, 100k of them not yet due at
//!   a higher priority than the due ones: a claim of 10 touched 114 and 153
//!   buffers (the old index: 178 and 1,435); a poll of a queue holding only
//!   future jobs 4 and 6, the same as an empty queue (the old index: 27 and
//!   544).
//! - **a skip scan over priorities** (one index probe per distinct priority,
//!   each with `run_at <= now` as a range condition): no extra write, but the
//!   cost grows with the number of priorities in use (the benchmark measured
//!   thousands of buffers per claim with 1,000 distinct priorities ahead),
//!   and the statement text depends on them.
//! - **a separate table for future jobs**: the same split as a move between
//!   tables (a delete and an insert instead of an update), with a second
//!   shape to keep in step.
//!
//! [`CLAIM_PATH`] lists, in order, the statements one claim runs.
//!
//! # Churn: the engine vacuums `jobs`
//!
//! Every claim, promotion, retry and ack leaves a dead entry at the front of
//! `jobs_claim_idx` or `jobs_promote_idx`, exactly where the next claim and
//! promotion start reading, and they stay until a vacuum removes them.
//! Autovacuum comes too late for that: it wakes once a minute
//! (`autovacuum_naptime`), even with the thresholds the model declares on
//! `jobs` (`autovacuum_vacuum_scale_factor = 0`,
//! `autovacuum_vacuum_threshold = 1000`). Measured by the benchmark
//! (BENCHMARKS.md, "Churn") at 1M jobs and 4 clients for 5 minutes: with
//! autovacuum alone the claim statement's buffers grew from 23 to as many as
//! 730 between two autovacuums; with the engine running [`jobs::vacuum`]
//! after every 2,000 claims they stayed at 23–53 the whole time, the claim
//! index stopped growing, and the churn ran 18% faster (each run took about
//! 0.55 s on its own connection and blocked no claim). So the engine runs
//! [`jobs::vacuum`]
//! itself: on a connection of its own, one run at a time, after every so
//! many claims (2,000 is what was measured; a clock of one run a second did
//! as well but vacuums an idle table too).
//!
//! # Claims are fenced by (id, worker_id, attempts)
//!
//! `attempts` counts claims: [`jobs::claim`] increments it, so a job's
//! `(id, worker_id, attempts)` names one claim. [`jobs::ack`],
//! [`jobs::retry`] and [`jobs::kill`] only act on the job while that claim
//! holds; a worker whose claim lapsed and was reaped (and perhaps claimed
//! again, even by the same worker) changes nothing and sees zero rows.
//!
//! # Row mapping
//!
//! [`FromRow`] decodes each value shape ([`Job`], [`DeadJob`],
//! [`StreamEvent`], [`ConsumerOffset`], [`Schedule`], [`Lock`],
//! [`ConsumedEvent`], re-exported here from `schema-model`) from a
//! `tokio_postgres::Row` by the model's typed column names
//! (`Jobs::Priority`, never `"priority"`), and [`jobs::JobId`],
//! [`dead_jobs::DeadJobId`] and [`streams::EventId`] decode a returned id the
//! same way ([`Decode`]); a missing column or a column of the wrong type is a
//! [`RowError`] naming it, never a default. The statements that write a
//! shape take it whole ([`jobs::enqueue`] takes a [`Job`]) and bind each
//! field to its column.

mod call;
pub mod consumed_events;
pub mod dead_jobs;
mod error;
pub mod jobs;
pub mod locks;
mod row;
pub mod schedules;
mod session;
pub mod streams;
pub mod wake;

pub use call::{
    Call, Decode, DecodeError, Done, One, Optional, Output, Returns, Rows, RowsAffected,
};
pub use error::{StatementError, StatementErrorKind};
pub use row::{FromRow, RowError};
pub use session::Session;

/// The value shapes the statements read and write, from `schema-model`
/// (re-exported here, with their fields, so engine code finds them beside
/// the statements).
#[doc(inline)]
pub use schema_model::{
    ConsumedEvent, ConsumerOffset, DeadJob, Job, Lock, QueueOpts, Schedule, ScheduleOpts,
    StreamEvent,
};

use sea_query::{
    Alias, ArrayType, Expr, ExprTrait, IdenStatic, IntoIden, Keyword, PostgresQueryBuilder,
    SelectStatement, Value,
};
use sea_query_postgres::{PostgresBinder, PostgresValue, PostgresValues};
use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};

use schema_model::{SchemaName, SqlType, TableModel};

/// The statements one claim runs, in order: promote the queue's due jobs,
/// then claim.
pub const CLAIM_PATH: [&str; 2] = ["promote", "claim"];

/// The text of one hot-path statement for one schema: its name, its SQL
/// with `$n` placeholders and each placeholder's name and type, without
/// values. It depends only on the schema name, so an engine prepares it
/// once per connection (what [`Session`] does) and binds new values on
/// every execution ([`Call::values`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    name: &'static str,
    sql: String,
    params: Vec<Param>,
}

impl Definition {
    /// The statement's name, as `schema-gen statements` lists it (`claim`,
    /// `stream_append`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The SQL, with `$1`, `$2`, ... placeholders.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// One entry per placeholder, in order: `$1` is the first. Each name
    /// appears once: a value the statement uses twice is one placeholder,
    /// written twice in the text.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The placeholders' names, in order.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.params.iter().map(|p| p.name).collect()
    }

    /// The placeholders' types, for `prepare_typed`.
    pub fn param_types(&self) -> Vec<Type> {
        self.params.iter().map(Param::pg_type).collect()
    }
}

/// One hot-path statement with its values: its [`Definition`] (name, SQL
/// with `$n` placeholders, each placeholder's name and type) and the values
/// to bind, one per placeholder.
///
/// Good for a one-off run or an `EXPLAIN`
/// (`client.query(statement.sql(), &statement.args())`). An engine runs
/// the typed [`Call`]s through a [`Session`] instead, which prepares each
/// definition once per connection and binds only the values afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    definition: Definition,
    values: PostgresValues,
}

/// One placeholder of a [`Statement`]: `$1` is the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Param {
    /// The value shape's field it carries (`queue`, `run_at`, ...), or `now`
    /// (the current unix second) or `limit` (a batch size). Each name is one
    /// placeholder of its statement: a value the statement uses twice is
    /// written as the same `$n` twice.
    pub name: &'static str,
    /// Its type (of each element, for an array).
    pub sql_type: SqlType,
    /// Whether it is an array of `sql_type` (the batch statements bind one
    /// array per field).
    pub array: bool,
}

impl Param {
    /// The type as PostgreSQL names it: `bigint`, `text[]`, ...
    pub fn type_name(&self) -> String {
        if self.array {
            format!("{}[]", self.sql_type.pg_name())
        } else {
            self.sql_type.pg_name().to_owned()
        }
    }

    /// The tokio-postgres type, for `prepare_typed`.
    pub fn pg_type(&self) -> Type {
        match (self.sql_type, self.array) {
            (SqlType::BigInt, false) => Type::INT8,
            (SqlType::Integer, false) => Type::INT4,
            (SqlType::Text, false) => Type::TEXT,
            (SqlType::Bytea, false) => Type::BYTEA,
            (SqlType::Boolean, false) => Type::BOOL,
            (SqlType::Xid8, false) => Type::XID8,
            (SqlType::BigInt, true) => Type::INT8_ARRAY,
            (SqlType::Integer, true) => Type::INT4_ARRAY,
            (SqlType::Text, true) => Type::TEXT_ARRAY,
            (SqlType::Bytea, true) => Type::BYTEA_ARRAY,
            (SqlType::Boolean, true) => Type::BOOL_ARRAY,
            (SqlType::Xid8, true) => Type::XID8_ARRAY,
        }
    }
}

impl Statement {
    /// A definition with the values of one call (see [`Call::values`]).
    pub fn new(definition: Definition, values: PostgresValues) -> Self {
        Self { definition, values }
    }

    /// The statement's name, as `schema-gen statements` lists it (`claim`,
    /// `stream_append`, ...).
    pub fn name(&self) -> &'static str {
        self.definition.name
    }

    /// The SQL, with `$1`, `$2`, ... placeholders. It depends only on the
    /// schema name, never on the values, so it can be prepared once.
    pub fn sql(&self) -> &str {
        &self.definition.sql
    }

    /// One entry per placeholder, in order; each name appears once.
    pub fn params(&self) -> &[Param] {
        &self.definition.params
    }

    /// The placeholders' names, in order.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.definition.param_names()
    }

    /// The placeholders' types, for `prepare_typed`.
    pub fn param_types(&self) -> Vec<Type> {
        self.definition.param_types()
    }

    /// The values bound through `sea-query-postgres`, one per placeholder.
    pub fn values(&self) -> &PostgresValues {
        &self.values
    }

    /// The values as tokio-postgres parameters:
    /// `client.query(statement.sql(), &statement.args())`.
    pub fn args(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.as_params()
    }

    /// The text, without the values.
    pub fn definition(&self) -> &Definition {
        &self.definition
    }

    /// The text and the values, apart.
    pub fn into_parts(self) -> (Definition, PostgresValues) {
        (self.definition, self.values)
    }
}

/// Every statement, in family order, built with placeholder inputs: what
/// `schema-gen statements` prints (the values are not shown).
///
/// ```
/// use schema_gen::statements::{all, CLAIM_PATH};
/// use schema_model::SchemaName;
///
/// let statements = all(&SchemaName::default());
/// let names: Vec<&str> = statements.iter().map(|s| s.name()).collect();
/// assert!(CLAIM_PATH.iter().all(|step| names.contains(step)));
/// ```
pub fn all(schema: &SchemaName) -> Vec<Statement> {
    let job = schema_model::Job::default();
    let now = 0;
    let limit = 1;
    vec![
        jobs::enqueue(schema, &job, now),
        jobs::enqueue_many(schema, std::slice::from_ref(&job), now),
        jobs::promote(schema, "", now, limit),
        jobs::claim(schema, "", "", now, limit),
        jobs::ack(schema, 0, "", 0),
        jobs::ack_many(schema, "", &[(0, 0)]),
        jobs::retry(schema, 0, "", 0, now, None, now),
        jobs::kill(schema, 0, "", 0, None, now),
        jobs::reap(schema, now, limit),
        jobs::reap_exhausted(schema, now, limit),
        jobs::expire(schema, now, limit),
        wake::notify(&schema_model::WakeChannel::new(schema, "")),
        wake::next_due(schema, ""),
        dead_jobs::sweep(schema, now, limit),
        streams::append(schema, &schema_model::StreamEvent::default()),
        streams::read(schema, "", 0, limit),
        streams::read_in_commit_order(schema, "", 0, limit),
        streams::checkpoint(schema, &schema_model::ConsumerOffset::default()),
        streams::read_checkpoint(schema, "", ""),
        schedules::register(schema, &schema_model::Schedule::default()),
        schedules::due(schema, now, limit),
        schedules::advance(schema, "", 0, 0),
        locks::acquire(schema, "", "", 0, now),
        locks::renew(schema, "", "", 0, 0, now),
        locks::release(schema, "", "", 0),
        locks::sweep(schema, now, limit),
        consumed_events::claim(schema, &schema_model::ConsumedEvent::default()),
    ]
}

/// Every statement an engine runs under `layout`, in family order: [`all`]
/// on a single server; under
/// [`Layout::CitusSchemaSharding`](schema_model::Layout), [`all`] with
/// `lock_acquire` replaced by [`locks::clear_lapsed`] and
/// [`locks::acquire_free`], and `stream_read_in_commit_order` by
/// [`streams::commit_horizon`] and [`streams::read_in_commit_order_below`]
/// (their docs say why). What `schema-gen statements --layout` prints.
///
/// ```
/// use schema_gen::statements::{all, all_for};
/// use schema_model::{Layout, SchemaName};
///
/// let schema = SchemaName::default();
/// assert_eq!(all_for(&schema, Layout::SingleServer), all(&schema));
/// let citus: Vec<&str> = all_for(&schema, Layout::CitusSchemaSharding)
///     .iter()
///     .map(|s| s.name())
///     .collect();
/// assert!(citus.contains(&"lock_acquire_free") && !citus.contains(&"lock_acquire"));
/// assert!(citus.contains(&"commit_horizon") && !citus.contains(&"stream_read_in_commit_order"));
/// ```
pub fn all_for(schema: &SchemaName, layout: schema_model::Layout) -> Vec<Statement> {
    let statements = all(schema);
    if !layout.is_citus() {
        return statements;
    }
    let now = 0;
    let limit = 1;
    statements
        .into_iter()
        .flat_map(|statement| match statement.name() {
            <locks::Acquire<'_> as Call>::NAME => vec![
                locks::clear_lapsed(schema, "", now),
                locks::acquire_free(schema, "", "", 0),
            ],
            <streams::ReadInCommitOrder<'_> as Call>::NAME => vec![
                streams::commit_horizon(),
                streams::read_in_commit_order_below(schema, "", 0, limit, 0),
            ],
            _ => vec![statement],
        })
        .collect()
}

/// `"schema"."table"`, as sea-query's table reference.
fn table<T: TableModel>(schema: &SchemaName) -> (Alias, T) {
    (Alias::new(schema.as_str()), T::TABLE)
}

/// `column = ANY(ARRAY(<select>))`: the rows `select` picks (and locks),
/// found through the primary key. The array makes the subquery an InitPlan
/// run once, so the outer scan is always an index scan on the key, never a
/// join the planner could turn into a hash or a sort.
fn any_of<C: TableModel>(column: C, select: SelectStatement) -> Expr {
    Expr::cust_with_exprs(
        "$1 = ANY(ARRAY $2)",
        [
            Expr::col(column),
            Expr::SubQuery(None, Box::new(select.into())),
        ],
    )
}

/// `CAST(<expr> AS <type>)`, for a placeholder whose type the server could
/// not infer from its context.
fn cast(expr: Expr, sql_type: SqlType) -> Expr {
    expr.cast_as(Alias::new(sql_type.pg_name()))
}

/// Collects the placeholders of a statement while it is built, in the order
/// the builder asks for them (which [`build`] checks is the order sea-query
/// numbers them).
///
/// A name asked for again is the same placeholder: the builder gets `$n`
/// of the first request written as text, so each name is bound once. (The
/// names follow the value shape's fields, so two requests of one name carry
/// one value; [`build`] checks that in debug builds.)
#[derive(Default)]
struct Binder {
    params: Vec<Param>,
    /// The values bound so far, to check that a name asked for again
    /// carries the same value.
    #[cfg(debug_assertions)]
    values: Vec<Value>,
    /// Marking pass: every value is its placeholder's index, so the rendered
    /// values show the order sea-query numbered them in.
    marking: bool,
}

impl Binder {
    fn bind(&mut self, name: &'static str, sql_type: SqlType, value: Value) -> Expr {
        self.bind_param(
            Param {
                name,
                sql_type,
                array: false,
            },
            value,
        )
    }

    fn bind_param(&mut self, param: Param, value: Value) -> Expr {
        if let Some(at) = self.params.iter().position(|p| p.name == param.name) {
            debug_assert_eq!(
                self.params[at], param,
                "{} is asked for with two types",
                param.name
            );
            #[cfg(debug_assertions)]
            debug_assert!(
                self.marking || self.values[at] == value,
                "{} is asked for with two values: {:?} and {value:?}",
                param.name,
                self.values[at]
            );
            // sea-query numbers only the values it binds and has no
            // expression for "placeholder $k again": it is written as its
            // number (the order check of `build` proves the k-th request is
            // sea-query's `$k`). A custom keyword, not `Expr::cust`, which
            // sea-query would wrap in parentheses as an operand.
            return Expr::Keyword(Keyword::Custom(
                Alias::new(format!("${}", at + 1)).into_iden(),
            ));
        }
        let index = self.params.len() as u64;
        self.params.push(param);
        #[cfg(debug_assertions)]
        self.values.push(value.clone());
        if self.marking {
            Expr::val(index)
        } else {
            Expr::val(value)
        }
    }

    /// An array of values for `column`, one per row of a batch, named and
    /// typed after the column and cast to its array type (so the server
    /// never guesses it).
    fn col_array<C: TableModel + IdenStatic>(&mut self, column: C, values: Vec<Value>) -> Expr {
        let param = array_param(column);
        let type_name = param.type_name();
        let value = self.bind_param(param, array_value(column, values));
        value.cast_as(Alias::new(type_name))
    }

    /// A value for `column`, named and typed after it.
    fn col<C: TableModel + IdenStatic>(&mut self, column: C, value: impl Into<Value>) -> Expr {
        self.bind(column.as_str(), column_type(column), value.into())
    }

    /// The current unix second.
    fn now(&mut self, now: i64) -> Expr {
        self.bind("now", SqlType::BigInt, now.into())
    }

    /// `LIMIT $n` on `select` (sea-query binds the limit itself).
    fn limit(&mut self, select: &mut SelectStatement, limit: u32) {
        debug_assert!(
            !self.params.iter().any(|p| p.name == "limit"),
            "a statement has one limit"
        );
        let index = self.params.len() as u64;
        self.params.push(Param {
            name: "limit",
            sql_type: SqlType::BigInt,
            array: false,
        });
        #[cfg(debug_assertions)]
        self.values.push(u64::from(limit).into());
        select.limit(if self.marking {
            index
        } else {
            u64::from(limit)
        });
    }
}

/// The placeholder of an array of `column`'s values.
fn array_param<C: TableModel + IdenStatic>(column: C) -> Param {
    Param {
        name: column.as_str(),
        sql_type: column_type(column),
        array: true,
    }
}

/// `values` as an array of `column`'s type, as sea-query-postgres binds it.
fn array_value<C: TableModel>(column: C, values: Vec<Value>) -> Value {
    let element = match column_type(column) {
        SqlType::BigInt => ArrayType::BigInt,
        SqlType::Integer => ArrayType::Int,
        SqlType::Text | SqlType::Xid8 => ArrayType::String,
        SqlType::Bytea => ArrayType::Bytes,
        SqlType::Boolean => ArrayType::Bool,
    };
    Value::Array(element, Some(Box::new(values)))
}

/// The values of one call, in placeholder order, as sea-query-postgres
/// binds them: what [`Call::values`] returns without building the text.
fn values<const N: usize>(values: [Value; N]) -> PostgresValues {
    PostgresValues(values.into_iter().map(PostgresValue).collect())
}

/// The declared type of `column` (`Text` for the table variant, which is
/// no column).
fn column_type<C: TableModel>(column: C) -> SqlType {
    column
        .column()
        .map_or(SqlType::Text, |definition| definition.sql_type)
}

/// Builds a statement with `build`, which asks the [`Binder`] for every
/// placeholder value in the order they appear in the text.
fn build<Q, F>(name: &'static str, build: F) -> Statement
where
    Q: PostgresBinder,
    F: Fn(&mut Binder) -> Q,
{
    let mut binder = Binder::default();
    let (sql, values) = build(&mut binder).build_postgres(PostgresQueryBuilder);
    // The names are recorded in call order, the values come out in
    // placeholder order: a statement that asked in another order would name
    // its placeholders wrongly. Every statement is built by the tests, which
    // run with debug assertions, so this cannot ship unnoticed.
    #[cfg(debug_assertions)]
    {
        let mut marking = Binder {
            marking: true,
            ..Binder::default()
        };
        let (marked_sql, marks) = build(&mut marking).build_postgres(PostgresQueryBuilder);
        let order: Vec<Value> = marks.0.into_iter().map(|v| v.0).collect();
        let expected: Vec<Value> = (0..binder.params.len() as u64).map(Value::from).collect();
        debug_assert_eq!(marked_sql, sql, "{name}: the text depends on the values");
        debug_assert_eq!(
            order, expected,
            "{name}: placeholders were asked for out of text order"
        );
        for (param, value) in binder.params.iter().zip(&values.0) {
            debug_assert!(
                value_fits(param, &value.0),
                "{name}: {} is a {:?} placeholder bound to {:?}",
                param.name,
                param.sql_type,
                value.0
            );
        }
    }
    Statement {
        definition: Definition {
            name,
            sql,
            params: binder.params,
        },
        values,
    }
}

/// Whether a bound value has the wire type of its placeholder (the binder
/// sends each value in its own binary format, so an `i32` bound for a
/// `bigint` would be refused by the server).
#[cfg(debug_assertions)]
fn value_fits(param: &Param, value: &Value) -> bool {
    let scalar = |value: &Value| {
        matches!(
            (param.sql_type, value),
            (SqlType::BigInt, Value::BigInt(_) | Value::BigUnsigned(_))
                | (SqlType::Integer, Value::Int(_))
                | (SqlType::Text, Value::String(_))
                | (SqlType::Bytea, Value::Bytes(_))
                | (SqlType::Boolean, Value::Bool(_))
        )
    };
    match (param.array, value) {
        (true, Value::Array(_, Some(elements))) => elements.iter().all(scalar),
        (true, _) => false,
        (false, value) => scalar(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_has_a_unique_name_and_one_param_per_placeholder() {
        let statements = all(&SchemaName::default());
        let mut names: Vec<&str> = statements.iter().map(Statement::name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), statements.len(), "duplicate statement names");
        for statement in &statements {
            let count = statement.params().len();
            assert_eq!(statement.values().0.len(), count, "{}", statement.name());
            for n in 1..=count {
                assert!(
                    statement.sql().contains(&format!("${n}")),
                    "{}: no ${n} in {}",
                    statement.name(),
                    statement.sql()
                );
            }
            assert!(
                !statement.sql().contains(&format!("${}", count + 1)),
                "{}: more placeholders than params",
                statement.name()
            );
        }
    }

    #[test]
    fn each_name_is_one_placeholder() {
        for statement in all(&SchemaName::default()) {
            let mut names = statement.param_names();
            names.sort_unstable();
            let count = names.len();
            names.dedup();
            assert_eq!(
                names.len(),
                count,
                "{}: a name binds two placeholders: {:?}",
                statement.name(),
                statement.param_names()
            );
        }
    }

    /// Builds `call`'s statement and checks that the values it binds alone
    /// are the ones the whole statement binds, in the same places.
    fn check<C: Call>(call: C, checked: &mut Vec<&'static str>) {
        let statement = call.statement(&SchemaName::default());
        assert_eq!(statement.name(), C::NAME);
        assert_eq!(
            &call.values(),
            statement.values(),
            "{}: the values listed alone differ from the statement's",
            C::NAME
        );
        checked.push(C::NAME);
    }

    /// Every statement has a [`Call`], and each call's [`Call::values`]
    /// (written without building the text) are its statement's values: the
    /// inputs all differ from each other, so a value listed in another
    /// place than the text binds it cannot pass.
    #[test]
    fn every_call_binds_what_its_statement_binds() {
        let job = |n: i64| Job {
            id: n,
            queue: format!("queue-{n}"),
            payload: vec![n as u8, 0xff],
            priority: n as i32 + 1,
            run_at: n + 2,
            expires_at: Some(n + 3),
            enqueued_at: n + 4,
            opts: QueueOpts {
                visibility_timeout_s: n + 5,
                max_attempts: n as i32 + 6,
                backoff_base_s: n + 7,
                dead_letter_retention_s: n + 8,
            },
            attempts: n as i32 + 9,
            worker_id: Some(format!("worker-{n}")),
            claimed_at: Some(n + 10),
            claim_expires_at: Some(n + 11),
            last_error: Some(format!("error-{n}")),
        };
        let batch = [job(100), job(200)];
        let schedule = Schedule {
            name: "name".into(),
            spec: "@every 1m".into(),
            every_s: 60,
            queue: "queue".into(),
            payload: vec![1, 2],
            opts: ScheduleOpts {
                priority: 3,
                max_attempts: 4,
                visibility_timeout_s: 5,
                backoff_base_s: 6,
                dead_letter_retention_s: 7,
                expires_s: Some(8),
            },
            next_fire_at: 9,
            last_fired_at: Some(10),
            enabled: true,
        };
        let event = StreamEvent {
            id: 1,
            stream: "stream".into(),
            key: Some("key".into()),
            payload: vec![3],
            created_at: 4,
        };
        let offset = ConsumerOffset {
            stream: "stream".into(),
            consumer: "consumer".into(),
            offset: 5,
        };
        let consumed = ConsumedEvent {
            consumer: "consumer".into(),
            event_id: "event".into(),
            consumed_at: 6,
        };
        let mut checked = Vec::new();
        let c = &mut checked;
        check(
            jobs::Enqueue {
                job: &job(0),
                now: 50,
            },
            c,
        );
        check(
            jobs::EnqueueMany {
                jobs: &batch,
                now: 50,
            },
            c,
        );
        check(
            jobs::Promote {
                queue: "queue",
                now: 50,
                limit: 7,
            },
            c,
        );
        check(
            jobs::Claim {
                queue: "queue",
                worker_id: "worker",
                now: 50,
                limit: 7,
            },
            c,
        );
        check(
            jobs::Ack {
                id: 1,
                worker_id: "worker",
                attempts: 2,
            },
            c,
        );
        check(
            jobs::AckMany {
                worker_id: "worker",
                claims: &[(1, 2), (3, 4)],
            },
            c,
        );
        check(
            jobs::Retry {
                id: 1,
                worker_id: "worker",
                attempts: 2,
                run_at: 3,
                last_error: Some("error"),
                now: 4,
            },
            c,
        );
        check(
            jobs::Kill {
                id: 1,
                worker_id: "worker",
                attempts: 2,
                last_error: Some("error"),
                now: 4,
            },
            c,
        );
        check(jobs::Reap { now: 1, limit: 2 }, c);
        check(jobs::ReapExhausted { now: 1, limit: 2 }, c);
        check(jobs::Expire { now: 1, limit: 2 }, c);
        check(jobs::Vacuum, c);
        check(
            wake::Notify {
                channel: &schema_model::WakeChannel::new(&SchemaName::default(), "queue"),
            },
            c,
        );
        check(wake::NextDue { queue: "queue" }, c);
        check(dead_jobs::Sweep { now: 1, limit: 2 }, c);
        check(streams::Append { event: &event }, c);
        check(
            streams::Read {
                stream: "stream",
                offset: 1,
                limit: 2,
            },
            c,
        );
        check(
            streams::ReadInCommitOrder {
                stream: "stream",
                offset: 1,
                limit: 2,
            },
            c,
        );
        check(streams::Checkpoint { offset: &offset }, c);
        check(
            streams::ReadCheckpoint {
                stream: "stream",
                consumer: "consumer",
            },
            c,
        );
        check(
            schedules::Register {
                schedule: &schedule,
            },
            c,
        );
        check(schedules::Due { now: 1, limit: 2 }, c);
        check(
            schedules::Advance {
                name: "name",
                last_fired_at: 1,
                next_fire_at: 2,
            },
            c,
        );
        check(
            locks::Acquire {
                name: "name",
                owner: "owner",
                expires_at: 1,
                now: 2,
            },
            c,
        );
        check(
            locks::Renew {
                name: "name",
                owner: "owner",
                fence: 1,
                expires_at: 2,
                now: 3,
            },
            c,
        );
        check(
            locks::Release {
                name: "name",
                owner: "owner",
                fence: 1,
            },
            c,
        );
        check(locks::Sweep { now: 1, limit: 2 }, c);
        check(consumed_events::Claim { event: &consumed }, c);
        checked.sort_unstable();
        let mut statements: Vec<&str> = all(&SchemaName::default())
            .iter()
            .map(Statement::name)
            .chain([jobs::Vacuum::NAME])
            .collect();
        statements.sort_unstable();
        assert_eq!(checked, statements, "a statement without a call");
    }

    /// The binder's guard fires on one name asked for with two values (a
    /// name is one placeholder, so it can carry only one).
    #[test]
    #[should_panic(expected = "queue is asked for with two values")]
    fn a_name_asked_for_with_two_values_is_caught() {
        use sea_query::Query;
        build("two_queues", |b| {
            Query::select()
                .expr(b.col(schema_model::Jobs::Queue, "a"))
                .expr(b.col(schema_model::Jobs::Queue, "b"))
                .to_owned()
        });
    }

    /// ... and on one name asked for with two types.
    #[test]
    #[should_panic(expected = "now is asked for with two types")]
    fn a_name_asked_for_with_two_types_is_caught() {
        use sea_query::Query;
        build("two_nows", |b| {
            Query::select()
                .expr(b.now(1))
                .expr(b.bind("now", SqlType::Integer, 1_i32.into()))
                .to_owned()
        });
    }

    /// ... and on a second limit (sea-query binds each limit anew).
    #[test]
    #[should_panic(expected = "a statement has one limit")]
    fn a_second_limit_is_caught() {
        use sea_query::Query;
        build("two_limits", |b| {
            let mut inner = Query::select();
            inner.expr(b.now(1));
            b.limit(&mut inner, 1);
            let mut outer = Query::select();
            outer.expr(Expr::SubQuery(None, Box::new(inner.into())));
            b.limit(&mut outer, 2);
            outer
        });
    }

    /// A name asked for again is written as the first placeholder's number.
    #[test]
    fn a_name_asked_for_again_is_the_same_placeholder() {
        use sea_query::Query;
        let statement = build("twice", |b| {
            Query::select()
                .expr(b.col(schema_model::Jobs::Queue, "q"))
                .expr(b.now(5))
                .expr(b.col(schema_model::Jobs::Queue, "q"))
                .to_owned()
        });
        assert_eq!(statement.sql(), "SELECT $1, $2, $1");
        assert_eq!(statement.param_names(), ["queue", "now"]);
        assert_eq!(statement.values().0.len(), 2);
    }

    /// A session's futures can move between threads (`tokio::spawn`).
    #[test]
    fn a_session_runs_on_any_thread() {
        fn send<T: Send>(_: &T) {}
        fn check(session: &Session) {
            let call = jobs::Reap { now: 1, limit: 1 };
            send(&session.run(&call));
            send(&session.run_pipelined(&call, &call));
            send(&session.prepare_all());
        }
        let _ = check;
    }

    /// The type check of [`build`] fires on a value of another wire type
    /// than its placeholder (an `i32` for a `bigint` column).
    #[test]
    #[should_panic(expected = "is a BigInt placeholder bound to Int")]
    fn a_value_of_another_wire_type_is_caught() {
        use sea_query::Query;
        build("narrow", |b| {
            Query::select()
                .expr(b.col(schema_model::Jobs::RunAt, 5_i32))
                .to_owned()
        });
    }

    /// The text check of [`build`] fires on a statement whose text changes
    /// with the values it binds.
    #[test]
    #[should_panic(expected = "peeking: the text depends on the values")]
    fn a_statement_whose_text_depends_on_its_values_is_caught() {
        use sea_query::Query;
        build("peeking", |b| {
            let queue = b.col(schema_model::Jobs::Queue, "q");
            let mut select = Query::select();
            select.expr(queue);
            if b.marking {
                select.expr(Expr::cust("1"));
            }
            select
        });
    }

    /// A value bound past the [`Binder`] (`Expr::val`) has no name: the
    /// order check of [`build`] catches it too.
    #[test]
    #[should_panic(expected = "unnamed: placeholders were asked for out of text order")]
    fn a_value_bound_past_the_binder_is_caught() {
        use sea_query::Query;
        build("unnamed", |b| {
            Query::select()
                .expr(b.now(1))
                .expr(Expr::val(2_i64))
                .to_owned()
        });
    }

    /// ... and on an array whose elements are of another wire type.
    #[test]
    #[should_panic(expected = "is a BigInt placeholder bound to Array")]
    fn an_array_of_another_wire_type_is_caught() {
        use sea_query::Query;
        build("narrow_array", |b| {
            Query::select()
                .expr(b.col_array(schema_model::Jobs::RunAt, vec![5_i32.into()]))
                .to_owned()
        });
    }

    /// The order check of [`build`] fires on a statement that asks for its
    /// values out of text order.
    #[test]
    #[should_panic(expected = "placeholders were asked for out of text order")]
    fn a_statement_that_asks_out_of_order_is_caught() {
        use sea_query::Query;
        build("backwards", |b| {
            let second = b.now(2);
            let first = b.col(schema_model::Jobs::Queue, "q");
            Query::select().expr(first).expr(second).to_owned()
        });
    }
}
