//! The engine's hot-path statements and the row mapping of its value shapes:
//! the SQL engine code runs, as a public API, so engine code, tests,
//! benchmarks and `schema-gen statements` all run the same text.
//!
//! One function per statement, one file per table family (like the model;
//! `jobs` one file per job: enqueue, the claim path, the verdicts, the
//! sweeps). Each takes the [`SchemaName`] and typed inputs and returns a
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
//! rendering the text ([`Call::values`]). The function, the type and its
//! values are generated from one definition (see "Adding a statement"), so
//! they cannot disagree. A [`Session`] holds one connection:
//! it prepares each statement once on its physical connection (on first
//! use, or all at once with [`Session::prepare_all`]), then binds only
//! values, and decodes what comes back by the model's typed columns, so
//! engine code never names a column by a string. Behind a pooler in
//! transaction pooling it sends unnamed statements instead
//! ([`StatementMode::Unnamed`]); on a deadpool or bb8 pool it needs no
//! adapter ([`crate::pool`]); [`Sessions`] is what an engine's sessions
//! share. A failure is a [`StatementError`] naming the statement, with the
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
//!   `tests/hot_paths/` at 20k and 400k jobs, 100k of them not yet due at
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
//!
//! # Layouts: the registry
//!
//! Which statements an engine runs depends on the [`Layout`]: under
//! [`Layout::CitusSchemaSharding`] two single-server statements are replaced
//! by Citus forms (`lock_acquire` by [`locks::clear_lapsed`] and
//! [`locks::acquire_free`], `stream_read_in_commit_order` by
//! [`streams::commit_horizon`] and [`streams::read_in_commit_order_below`];
//! their docs say why). The [`registry()`] of a layout is that list, as data:
//! a [`Session`] created [`with_layout`](Session::with_layout) prepares it
//! ([`Session::prepare_all`]), `schema-gen statements --layout` prints it
//! ([`all_for`]), and the tests walk it (every statement has a hot-path
//! proof, routes to one Citus node, and binds what its call lists).
//!
//! # Adding a statement
//!
//! One place: the family's file (a `jobs` statement goes into the file of
//! its job under `jobs/`), then one line in the registry.
//!
//! 1. Declare it with `statement!` (in `define.rs`): its name (what
//!    `schema-gen statements` lists, unique), what it returns ([`Rows`],
//!    [`One`], [`Optional`], [`RowsAffected`], [`Done`]), the builder
//!    function's docs (what it does, which index it reads, the SQL as a
//!    doc-test) and name, and the [`Call`] type's docs and fields, each
//!    documented. The builder takes the schema and then the fields in order.
//! 2. Write its text in an `impl Build for TheCall<'_>` beside it: build the
//!    statement with sea-query from the model's typed identifiers, and ask
//!    the binder for every value, in the order they appear in the text
//!    (`b.col(Jobs::Queue, queue)` names a value after its column,
//!    `b.now(now)`, `b.limit(&mut select, limit)`; a name asked for again is
//!    the same `$n`). Never put a value into the text, never look at a
//!    value to decide the text. The call's values are what this body asks
//!    for: no list to keep in step.
//! 3. Add one [`registry::Entry`] to the registry (`registry.rs`) with the
//!    layouts it runs on and sample inputs, each value of the statement
//!    different from the others (the tests tell the placeholders apart by
//!    them); a maintenance statement goes to [`maintenance`] instead.
//! 4. Run the tests: the registry's tests build it in every pass (debug
//!    checks: placeholders asked for in text order, one type and one value
//!    per name, each value of its placeholder's wire type, a text that does
//!    not depend on the values) and check that its call binds exactly its
//!    statement's values; a `statement!` missing from the registry fails
//!    them. `tests/hot_paths/` then asks for its plan proof (index,
//!    buffers, no sort), `tests/citus/` for its routing, and the
//!    `statements_sql`/`statements_json` snapshots show its text for review.

mod binder;
mod call;
mod claim_path;
mod connection;
pub mod consumed_events;
pub mod dead_jobs;
mod define;
mod error;
pub mod jobs;
pub mod locks;
pub(crate) mod pinned;
pub mod registry;
mod row;
pub mod schedules;
mod session;
mod statement;
pub mod streams;
pub mod wake;

pub use call::{
    Call, Decode, DecodeError, Done, One, Optional, Output, Returns, Rows, RowsAffected,
};
pub use connection::Connection;
pub use error::{StatementError, StatementErrorKind};
pub use registry::{all, all_for, maintenance, registry};
pub use row::{FromRow, RowError};
pub use session::{Session, Sessions, StatementMode};
pub use statement::{Definition, Param, Statement};

/// The value shapes the statements read and write, from `schema-model`
/// (re-exported here, with their fields, so engine code finds them beside
/// the statements).
#[doc(inline)]
pub use schema_model::{
    ConsumedEvent, ConsumerOffset, DeadJob, Job, Lock, QueueOpts, Schedule, ScheduleOpts,
    StreamEvent,
};

#[cfg(doc)]
use schema_model::{Layout, SchemaName};

/// The statements of the claim path, in order: promote the queue's due
/// jobs, then claim. [`Session::claim`] runs both on a queue's first claim
/// of each second (and after a promote that filled its limit), the claim
/// alone otherwise ([`jobs::PromotePacer`]).
pub const CLAIM_PATH: [&str; 2] = ["promote", "claim"];
