//! The typed schema model of alkstore's PostgreSQL engine (and of the
//! ClickHouse analytics sink beside it).
//!
//! Every engine-owned table is declared once, here, as an enum deriving
//! sea-query's [`Iden`](sea_query::Iden) and strum's `EnumIter`: a `Table`
//! variant plus one variant per column. Engine code names columns by these
//! variants (`Jobs::Priority`, never `"priority"`), so a renamed column is a
//! compile error rather than an empty table. Each column's type, nullability,
//! default and doc come from an exhaustive `match` ([`TableModel::column`]);
//! indexes and named `CHECK` constraints are declared next to their table.
//!
//! This crate does no I/O. `schema-gen` renders it to SQL, bootstraps and
//! verifies it.
//!
//! # Payloads are `bytea`, never `jsonb`
//!
//! Payload columns hold exactly the bytes the engine's encoder produced.
//! `jsonb` would normalise them on the way in (it reorders object keys, folds
//! duplicate keys to the last one, drops insignificant whitespace), so a row
//! read back would no longer be byte-identical to the one written, and the
//! contract that payloads round-trip unchanged would break silently.
//!
//! # Versions and upgrades
//!
//! Every shipped schema is a version ([`history`]): the model renders
//! [`history::MODEL_VERSION`], the database records the version it is at
//! ([`SchemaVersions`]), and a database at an older version moves to the
//! model online with `schema-gen upgrade` (expand, then contract), planned
//! from the difference between the versions' shapes and the hints each
//! version declares. Drift is still detected by comparing the live catalog
//! with the shape the recorded version says it has: a database is exactly
//! a known version (or a known step of an upgrade), or loudly not.
//!
//! # Layouts
//!
//! Where the family lives is one family-wide choice, [`Layout`]: a single
//! server (the default), or a Citus cluster by schema-based sharding (the
//! engine schema a distributed schema, every table a single-shard table on
//! one node). The tables are the same under both; `schema-gen` renders the
//! Citus calls after the DDL ([`layout`] shows them).
//!
//! # The families
//!
//! The PostgreSQL engine family, one engine-owned schema ([`SchemaName`]):
//!
//! | table | a row is |
//! |---|---|
//! | [`Jobs`] | a live job, pending or claimed |
//! | [`DeadJobs`] | a job that exhausted its attempts or expired |
//! | [`StreamEvents`] | one stream event; its id is the offset |
//! | [`StreamOffsets`] | a consumer's checkpoint on a stream |
//! | [`Schedules`] | an `@every` schedule |
//! | [`Locks`] | a TTL lock with a fencing token |
//! | [`ConsumedEvents`] | a consumer's dedup-ledger entry |
//! | [`SchemaVersions`] | a schema version the database has reached |
//!
//! The ClickHouse analytics family ([`analytics`], one database,
//! [`DatabaseName`]): [`WebhookAttempts`], one
//! webhook delivery attempt, with the typed rows that feed it
//! ([`AttemptEvent`] in, [`shape`], [`AttemptRow`] out).
//!
//! ```
//! use schema_model::{engine_family, Jobs, TableModel};
//!
//! assert_eq!(Jobs::table_name(), "jobs");
//! let names: Vec<String> = engine_family().into_iter().map(|t| t.name).collect();
//! assert_eq!(
//!     names,
//!     ["jobs", "dead_jobs", "stream_events", "stream_offsets", "schedules", "locks", "consumed_events", "schema_versions"]
//! );
//! ```

#![deny(missing_docs)]

pub mod analytics;
pub mod channel;
pub mod consumed_events;
pub mod dead_jobs;
pub mod description;
pub mod history;
pub mod jobs;
pub mod layout;
pub mod locks;
pub mod name;
pub mod schedules;
pub mod schema_name;
pub mod schema_versions;
pub mod streams;
pub mod table;

pub use analytics::{
    AttemptEvent, AttemptRow, ClickHouseCheck, ClickHouseCheckRule, ClickHouseColumn,
    ClickHouseEngine, ClickHouseTable, ClickHouseTableVisitor, ClickHouseType, DatabaseName,
    DatabaseNameError, DatabaseNameRule, PartitionKey, ReservedDatabase, RowTtl, ShapeError,
    WebhookAttempts, shape, shape_json, visit_analytics_family,
};
pub use channel::WakeChannel;
pub use consumed_events::{ConsumedEvent, ConsumedEvents};
pub use dead_jobs::{DeadJob, DeadJobs};
pub use description::{
    ColumnDescription, ConstraintDescription, IndexDescription, TableDescription,
};
pub use jobs::{Job, Jobs, QueueOpts};
pub use layout::{Layout, TableDistribution};
pub use locks::{Lock, Locks};
pub use name::{NameDialect, NameError, NameRule};
pub use schedules::{Schedule, ScheduleOpts, Schedules};
pub use schema_name::{ReservedSchema, SchemaName, SchemaNameError, SchemaNameRule};
pub use schema_versions::{SchemaVersionRecord, SchemaVersions};
pub use streams::{ConsumerOffset, StreamEvent, StreamEvents, StreamOffsets};
pub use table::{
    CheckDef, CheckRule, Column, ColumnDefault, IndexDef, IndexExpression, IndexKey,
    IndexPredicate, Order, SqlType, StorageParameter, TableModel, TableVisitor,
};

/// Visits every table of the engine family, in creation order. This is the
/// one list of tables: rendering, describing and verifying all walk it.
pub fn visit_engine_family<V: TableVisitor>(visitor: &mut V) {
    visitor.visit::<Jobs>();
    visitor.visit::<DeadJobs>();
    visitor.visit::<StreamEvents>();
    visitor.visit::<StreamOffsets>();
    visitor.visit::<Schedules>();
    visitor.visit::<Locks>();
    visitor.visit::<ConsumedEvents>();
    visitor.visit::<SchemaVersions>();
}

/// The engine family described in plain data, in creation order.
pub fn engine_family() -> Vec<TableDescription> {
    let mut describer = description::Describer::default();
    visit_engine_family(&mut describer);
    describer.tables
}
