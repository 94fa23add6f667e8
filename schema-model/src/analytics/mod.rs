//! The analytics sink: the ClickHouse table `webhook_attempts` (one row per
//! webhook delivery attempt), its validated [`DatabaseName`], and the typed
//! rows that go into it: the publisher's [`AttemptEvent`], the table's
//! [`AttemptRow`], and [`shape`] between them.
//!
//! One file per job, as the engine family has:
//!
//! | module | holds |
//! |---|---|
//! | [`vocabulary`] | the ClickHouse vocabulary: types, engines, partition keys, TTLs, checks, [`ClickHouseTable`] |
//! | [`webhook_attempts`] | the table, and the bounds of its `ts` column |
//! | [`database_name`] | the validated database name and the databases ClickHouse owns |
//! | [`attempt`] | the publisher's record and the table's row |
//! | [`shaping`] | [`shape`]: the record into the row, or the reason it is poison |
//! | `canonical` (private) | the instant and the UUIDs, canonicalised through `time` and `uuid` |
//!
//! # Why this is modelled at all
//!
//! An analytics consumer once acknowledged every record while its table
//! stayed empty. The publisher's field is `attempted_at`, the column is `ts`,
//! and a `JSONEachRow` insert whose keys do not name a column leaves that
//! column at its default with no error. A `DateTime64` default is the epoch,
//! older than the table's 90-day TTL, so the row was deleted at insert: the
//! insert returned OK, the stream drained, and every instrument reported
//! success over an empty table.
//!
//! So the column list is declared once, here, as an `Iden` enum
//! ([`WebhookAttempts`]), and [`AttemptRow`] is tied to it by a test in both
//! directions: renaming a column or a field fails a test before it can empty
//! a table. Three more guards stand behind [`shape`], each catching a
//! different mistake:
//!
//! - `input_format_skip_unknown_fields=0` on the insert refuses a row that
//!   still carries a renamed key (`attempted_at`): ClickHouse `Code: 117`.
//! - The named `CHECK` `ts_is_real` refuses a row with no `ts` at all (the
//!   setting above cannot see an absent key): `Code: 469`.
//! - `ReplacingMergeTree` keyed on `(environment_id, ts, delivery_id,
//!   attempt)` collapses a redelivered record, because `ts` comes from the
//!   record (`attempted_at`), not from when it was consumed. Reads take
//!   `FINAL`: the duplicate is physically present until a merge.
//!
//! # Null is an absence, zero is a measurement
//!
//! A timeout has no HTTP status. An absent `status` or `error` becomes `NULL`,
//! never `0` or `""`: a status of 0 would assert that an endpoint answered
//! with status zero, and every dashboard built on the table would lie in the
//! same direction.
//!
//! # A record that cannot be shaped is terminated, not retried
//!
//! The same bytes fail the same way every time, and the ingester sets no
//! redelivery limit (a restarting store must delay delivery, not lose it), so
//! a poison record that is not terminated at the parse comes back until the
//! stream's retention expires. [`shape`] therefore refuses, with a
//! [`ShapeError`] naming the field, everything the table would refuse
//! deterministically (a malformed UUID, an unparseable or pre-2020 timestamp,
//! a number out of its column's range): such a record must be terminated, and
//! only transport failures retried. The error never quotes the record's
//! values: `error` can echo anything a third-party endpoint sent.
//!
//! ```
//! use schema_model::analytics::{shape, WebhookAttempts};
//! use schema_model::ClickHouseTable;
//! use serde_json::json;
//!
//! assert_eq!(WebhookAttempts::table_name(), "webhook_attempts");
//! let row = shape(&json!({
//!     "environment_id": "6F1C2A3B-0000-4000-8000-00000000E001",
//!     "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001",
//!     "endpoint_id": "6f1c2a3b-0000-4000-8000-00000000a001",
//!     "event_id": "6f1c2a3b-0000-4000-8000-00000000f001",
//!     "attempt": 1,
//!     "attempted_at": "2026-03-01T12:00:00.123+01:00",
//!     "error": "timeout after 30000 ms",
//!     "latency_ms": 30000,
//!     "outcome": "rescheduled"
//! }))
//! .unwrap();
//! assert_eq!(row.ts, "2026-03-01T11:00:00.123Z");
//! assert_eq!(row.environment_id, "6f1c2a3b-0000-4000-8000-00000000e001");
//! assert_eq!(row.status, None); // nothing answered: NULL, not 0
//! ```

pub mod attempt;
mod canonical;
pub mod database_name;
pub mod shaping;
pub mod vocabulary;
pub mod webhook_attempts;

pub use attempt::{AttemptEvent, AttemptRow, EVENT_FIELDS};
pub use database_name::{
    DEFAULT_DATABASE_NAME, DatabaseName, DatabaseNameError, DatabaseNameRule,
    RESERVED_DATABASE_NAMES, ReservedDatabase,
};
pub use shaping::{ShapeError, shape, shape_json};
pub use vocabulary::{
    ClickHouseCheck, ClickHouseCheckRule, ClickHouseColumn, ClickHouseEngine, ClickHouseTable,
    ClickHouseTableVisitor, ClickHouseType, PartitionKey, RowTtl,
};
pub use webhook_attempts::{
    RETENTION_DAYS, TS_CEILING, TS_FLOOR, TS_FLOOR_UNIX_MILLIS, TS_TYPE, WebhookAttempts,
};

/// Visits every table of the analytics family, in creation order. This is
/// the one list of analytics tables.
pub fn visit_analytics_family<V: ClickHouseTableVisitor>(visitor: &mut V) {
    visitor.visit::<WebhookAttempts>();
}
