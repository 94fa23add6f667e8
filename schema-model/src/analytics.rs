//! The analytics sink: the ClickHouse table `webhook_attempts` (one row per
//! webhook delivery attempt), its validated [`DatabaseName`], and the typed
//! rows that go into it: the publisher's [`AttemptEvent`], the table's
//! [`AttemptRow`], and [`shape`] between them.
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

use std::fmt::{self, Debug};

use sea_query::Iden;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::{EnumIter, IntoEnumIterator};

use crate::schema_name::{SchemaNameRule, identifier_syntax_rule};

// ---------------------------------------------------------------------------
// The ClickHouse vocabulary
// ---------------------------------------------------------------------------

/// A ClickHouse column type, spelled by [`ClickHouseType::name`] exactly as
/// `system.columns.type` reports it, so a drift check compares equal strings.
///
/// Nullability is part of a ClickHouse type (`Nullable(T)`), so it is not a
/// separate flag: [`ClickHouseType::is_nullable`] reads it off the type.
///
/// ```
/// use schema_model::ClickHouseType;
///
/// assert_eq!(ClickHouseType::DateTime64 { precision: 3, tz: "UTC" }.name(), "DateTime64(3, 'UTC')");
/// assert_eq!(ClickHouseType::Nullable(&ClickHouseType::UInt16).name(), "Nullable(UInt16)");
/// assert_eq!(ClickHouseType::LowCardinality(&ClickHouseType::String).name(), "LowCardinality(String)");
/// assert!(!ClickHouseType::Uuid.is_nullable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickHouseType {
    /// `UUID`: 16 bytes, read back as lowercase 8-4-4-4-12 hex.
    Uuid,
    /// `DateTime64(precision, 'tz')`: an instant with `precision` sub-second digits.
    DateTime64 {
        /// Sub-second decimal digits kept (3: milliseconds).
        precision: u8,
        /// The time zone values are written and read in.
        tz: &'static str,
    },
    /// `UInt8`: 0 to 255.
    UInt8,
    /// `UInt16`: 0 to 65535.
    UInt16,
    /// `UInt32`: 0 to 4294967295.
    UInt32,
    /// `String`: arbitrary bytes.
    String,
    /// `Nullable(T)`: `T` or `NULL`.
    Nullable(&'static ClickHouseType),
    /// `LowCardinality(T)`: `T`, dictionary-encoded (for a handful of distinct values).
    LowCardinality(&'static ClickHouseType),
}

impl ClickHouseType {
    /// The type as ClickHouse spells it in DDL and in `system.columns.type`.
    pub fn name(self) -> String {
        match self {
            Self::Uuid => "UUID".to_owned(),
            Self::DateTime64 { precision, tz } => format!("DateTime64({precision}, '{tz}')"),
            Self::UInt8 => "UInt8".to_owned(),
            Self::UInt16 => "UInt16".to_owned(),
            Self::UInt32 => "UInt32".to_owned(),
            Self::String => "String".to_owned(),
            Self::Nullable(inner) => format!("Nullable({})", inner.name()),
            Self::LowCardinality(inner) => format!("LowCardinality({})", inner.name()),
        }
    }

    /// Whether the column accepts `NULL`.
    pub fn is_nullable(self) -> bool {
        match self {
            Self::Nullable(_) => true,
            Self::LowCardinality(inner) => inner.is_nullable(),
            _ => false,
        }
    }
}

impl fmt::Display for ClickHouseType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One ClickHouse column's definition: its type (nullability included) and
/// its one-line doc, also emitted as the column's `COMMENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClickHouseColumn {
    /// The column's type.
    pub ch_type: ClickHouseType,
    /// The one-line doc.
    pub doc: &'static str,
}

impl ClickHouseColumn {
    /// A column of `ch_type`.
    pub const fn new(ch_type: ClickHouseType, doc: &'static str) -> Self {
        Self { ch_type, doc }
    }

    /// Whether the column accepts `NULL` (its type is `Nullable(..)`).
    pub fn nullable(&self) -> bool {
        self.ch_type.is_nullable()
    }
}

/// A MergeTree-family table engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickHouseEngine {
    /// `MergeTree`: keeps every row inserted.
    MergeTree,
    /// `ReplacingMergeTree`: rows with equal sorting keys collapse to one at
    /// merge time, or at read time under `FINAL`.
    ReplacingMergeTree,
}

impl ClickHouseEngine {
    /// The engine's name, as in `ENGINE = ...` and `system.tables.engine`.
    pub fn name(self) -> &'static str {
        match self {
            Self::MergeTree => "MergeTree",
            Self::ReplacingMergeTree => "ReplacingMergeTree",
        }
    }
}

/// A table's `PARTITION BY` expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKey<C> {
    /// `toYYYYMM(col)`: one partition per calendar month of a time column.
    Month(C),
}

/// A table's row TTL: `TTL toDateTime(col) + INTERVAL days DAY`.
///
/// The column is wrapped in `toDateTime` because ClickHouse refuses a TTL
/// expression of type `DateTime64` (`Code: 450`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowTtl<C> {
    /// The time column the retention counts from.
    pub column: C,
    /// Days a row is kept.
    pub days: u32,
}

/// The rule a named ClickHouse `CHECK` constraint enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClickHouseCheckRule<C> {
    /// `col > <instant>`, the instant written in the column's own
    /// `DateTime64` precision and time zone (the column must be a
    /// `DateTime64`; a test checks it).
    LaterThan {
        /// The time column.
        column: C,
        /// `YYYY-MM-DD hh:mm:ss` in the column's time zone.
        instant: &'static str,
    },
}

/// A named ClickHouse `CHECK` constraint, evaluated on every inserted row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClickHouseCheck<C> {
    /// The constraint's name, a fixed literal (ClickHouse names it in `Code: 469`).
    pub name: &'static str,
    /// What it enforces.
    pub rule: ClickHouseCheckRule<C>,
}

/// A ClickHouse table, declared as a sea-query `Iden` enum: a `Table`
/// variant plus one variant per column, exactly like the engine family's
/// [`TableModel`](crate::TableModel).
///
/// [`ClickHouseTable::column`] is an exhaustive `match`, so a new variant
/// without a type and a doc does not compile; the engine, partition, sorting
/// key and TTL all name columns through the enum.
pub trait ClickHouseTable: Iden + IntoEnumIterator + Copy + Eq + Debug + 'static {
    /// The `Table` variant (renders as the table's name).
    const TABLE: Self;
    /// What a row is, in one line; also emitted as the table's `COMMENT`.
    const DOC: &'static str;
    /// The table engine.
    const ENGINE: ClickHouseEngine;

    /// The column's definition, or `None` for the `Table` variant.
    fn column(self) -> Option<ClickHouseColumn>;

    /// `PARTITION BY`, if any.
    fn partition_by() -> Option<PartitionKey<Self>>;

    /// `ORDER BY`: the sorting key (for `ReplacingMergeTree`, also the
    /// deduplication key).
    fn order_by() -> Vec<Self>;

    /// `TTL`, if rows expire.
    fn ttl() -> Option<RowTtl<Self>>;

    /// The named `CHECK` constraints.
    fn checks() -> Vec<ClickHouseCheck<Self>>;

    /// Every column variant with its definition, in declaration order.
    fn columns() -> Vec<(Self, ClickHouseColumn)> {
        Self::iter()
            .filter_map(|variant| variant.column().map(|column| (variant, column)))
            .collect()
    }

    /// The table's name.
    fn table_name() -> String {
        Self::TABLE.to_string()
    }
}

/// Visits every table of a ClickHouse family with its static type, so that
/// rendering and describing walk the one list.
pub trait ClickHouseTableVisitor {
    /// Called once per table, in family order.
    fn visit<T: ClickHouseTable>(&mut self);
}

/// Visits every table of the analytics family, in creation order. This is
/// the one list of analytics tables.
pub fn visit_analytics_family<V: ClickHouseTableVisitor>(visitor: &mut V) {
    visitor.visit::<WebhookAttempts>();
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// `ts_is_real`'s floor, in the `ts` column's time zone (UTC): no real
/// attempt predates it, and the column's default (the epoch) is far below it.
pub const TS_FLOOR: &str = "2020-01-01 00:00:00";

/// [`TS_FLOOR`] as unix milliseconds; [`shape`] refuses instants at or below it.
pub const TS_FLOOR_UNIX_MILLIS: i64 = days_from_civil(2020, 1, 1) * 86_400_000;

/// Days a `webhook_attempts` row is kept.
pub const RETENTION_DAYS: u32 = 90;

/// The `webhook_attempts` table: one row per webhook delivery attempt,
/// shaped by what the publisher sends.
///
/// ```
/// use schema_model::{ClickHouseTable, WebhookAttempts};
/// use sea_query::Iden;
///
/// let columns: Vec<String> = WebhookAttempts::columns()
///     .into_iter()
///     .map(|(c, def)| format!("{} {}", c.to_string(), def.ch_type))
///     .collect();
/// assert_eq!(columns, [
///     "environment_id UUID", "ts DateTime64(3, 'UTC')", "delivery_id UUID",
///     "endpoint_id UUID", "event_id UUID", "attempt UInt8", "status Nullable(UInt16)",
///     "error Nullable(String)", "latency_ms UInt32", "outcome LowCardinality(String)",
/// ]);
/// ```
#[derive(Iden, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookAttempts {
    /// The table itself.
    Table,
    /// The tenant's environment.
    EnvironmentId,
    /// When the attempt was made: the record's `attempted_at`.
    Ts,
    /// The delivery the attempt belongs to.
    DeliveryId,
    /// The endpoint that was called.
    EndpointId,
    /// The event being delivered.
    EventId,
    /// Attempt number within the delivery.
    Attempt,
    /// HTTP status, if anything answered.
    Status,
    /// Error text, if there was no status.
    Error,
    /// How long the endpoint took to answer.
    LatencyMs,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    Outcome,
}

/// The `ts` column's type; [`shape`] writes instants in its precision.
pub const TS_TYPE: ClickHouseType = ClickHouseType::DateTime64 {
    precision: 3,
    tz: "UTC",
};

impl ClickHouseTable for WebhookAttempts {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "One webhook delivery attempt, as its publisher recorded it.";
    const ENGINE: ClickHouseEngine = ClickHouseEngine::ReplacingMergeTree;

    fn column(self) -> Option<ClickHouseColumn> {
        use ClickHouseType::*;
        let column = ClickHouseColumn::new;
        Some(match self {
            Self::Table => return None,
            Self::EnvironmentId => column(Uuid, "The tenant environment the attempt belongs to."),
            Self::Ts => column(
                TS_TYPE,
                "When the attempt was made: the record's attempted_at, not when it was consumed.",
            ),
            Self::DeliveryId => column(Uuid, "The delivery; with attempt, the record's identity."),
            Self::EndpointId => column(Uuid, "The endpoint that was called."),
            Self::EventId => column(Uuid, "The event being delivered."),
            Self::Attempt => column(UInt8, "Attempt number within the delivery."),
            Self::Status => column(
                Nullable(&UInt16),
                "HTTP status the endpoint answered with; NULL when nothing answered, never 0.",
            ),
            Self::Error => column(
                Nullable(&String),
                "Why there was no status; NULL when there was none, never ''.",
            ),
            Self::LatencyMs => column(UInt32, "Milliseconds the endpoint took to answer."),
            Self::Outcome => column(
                LowCardinality(&String),
                "delivered, rescheduled or dead_lettered.",
            ),
        })
    }

    fn partition_by() -> Option<PartitionKey<Self>> {
        Some(PartitionKey::Month(Self::Ts))
    }

    fn order_by() -> Vec<Self> {
        // Tenant then time for range scans; (delivery_id, attempt) makes the
        // key the record's identity, so ReplacingMergeTree deduplicates on it.
        vec![
            Self::EnvironmentId,
            Self::Ts,
            Self::DeliveryId,
            Self::Attempt,
        ]
    }

    fn ttl() -> Option<RowTtl<Self>> {
        Some(RowTtl {
            column: Self::Ts,
            days: RETENTION_DAYS,
        })
    }

    fn checks() -> Vec<ClickHouseCheck<Self>> {
        vec![ClickHouseCheck {
            // A row with no `ts` takes the epoch silently; this refuses it.
            name: "ts_is_real",
            rule: ClickHouseCheckRule::LaterThan {
                column: Self::Ts,
                instant: TS_FLOOR,
            },
        }]
    }
}

// ---------------------------------------------------------------------------
// The database name
// ---------------------------------------------------------------------------

/// The database name used when none is configured.
pub const DEFAULT_DATABASE_NAME: &str = "relay_analytics";

/// Databases ClickHouse itself owns, refused in any letter case (ClickHouse
/// names are case-sensitive and it has both `INFORMATION_SCHEMA` and
/// `information_schema`).
pub const RESERVED_DATABASE_NAMES: &[&str] = &[
    "system",
    "default",
    "information_schema",
    "_temporary_and_external_tables",
];

/// The name of the ClickHouse database holding the analytics tables,
/// validated before any SQL is built.
///
/// The same syntax as [`SchemaName`](crate::SchemaName) (lowercase ASCII
/// letters, digits and `_`, starting with a letter or `_`, at most 63 bytes):
/// ClickHouse is case-sensitive, so one spelling per database keeps the
/// configured name and the stored name from drifting apart. Databases
/// ClickHouse owns ([`RESERVED_DATABASE_NAMES`], in any case) are refused.
///
/// ```
/// use schema_model::DatabaseName;
///
/// assert_eq!(DatabaseName::default().as_str(), "relay_analytics");
/// assert_eq!(DatabaseName::new("analytics_eu").unwrap().as_str(), "analytics_eu");
/// assert_eq!(
///     DatabaseName::new("INFORMATION_SCHEMA").unwrap_err().to_string(),
///     "database name \"INFORMATION_SCHEMA\" is refused: it is a database ClickHouse \
///      owns (system, default, information_schema, _temporary_and_external_tables, \
///      in any letter case); the analytics tables need a database of their own"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatabaseName(String);

/// Which naming rule a refused database name broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseNameRule {
    /// The name is empty.
    Empty,
    /// The name is longer than 63 bytes.
    TooLong {
        /// The name's length in bytes.
        bytes: usize,
    },
    /// The first character is not a lowercase letter or `_`.
    BadFirstCharacter {
        /// The offending character.
        found: char,
    },
    /// A character other than a lowercase ASCII letter, a digit or `_`.
    BadCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset in the name.
        at: usize,
    },
    /// A database ClickHouse owns ([`RESERVED_DATABASE_NAMES`], in any case).
    Reserved,
}

/// A database name that broke one of [`DatabaseName`]'s rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("database name {name:?} is refused: {}", describe_rule(.rule))]
pub struct DatabaseNameError {
    /// The name as given.
    pub name: String,
    /// The first rule it broke.
    pub rule: DatabaseNameRule,
}

fn describe_rule(rule: &DatabaseNameRule) -> String {
    match rule {
        DatabaseNameRule::Empty => {
            format!("it is empty; give a name such as {DEFAULT_DATABASE_NAME:?}")
        }
        DatabaseNameRule::TooLong { bytes } => format!(
            "it is {bytes} bytes long; at most {} are allowed",
            crate::schema_name::MAX_SCHEMA_NAME_BYTES
        ),
        DatabaseNameRule::BadFirstCharacter { found } => {
            format!("it starts with {found:?}; it must start with a lowercase ASCII letter or '_'")
        }
        DatabaseNameRule::BadCharacter { found, at } => format!(
            "it contains {found:?} at byte {at}; only lowercase ASCII letters, digits and '_' \
             are allowed (ClickHouse names are case-sensitive)"
        ),
        DatabaseNameRule::Reserved => format!(
            "it is a database ClickHouse owns ({}, in any letter case); the analytics tables \
             need a database of their own",
            RESERVED_DATABASE_NAMES.join(", ")
        ),
    }
}

impl DatabaseName {
    /// Validates `name`, returning the first rule it breaks. A reserved name
    /// is reported as [`DatabaseNameRule::Reserved`] even when its case
    /// would also break the character rules: that is the clearer reason.
    pub fn new(name: &str) -> Result<Self, DatabaseNameError> {
        let refuse = |rule| {
            Err(DatabaseNameError {
                name: name.to_owned(),
                rule,
            })
        };
        if RESERVED_DATABASE_NAMES
            .iter()
            .any(|reserved| reserved.eq_ignore_ascii_case(name))
        {
            return refuse(DatabaseNameRule::Reserved);
        }
        match identifier_syntax_rule(name) {
            None => Ok(Self(name.to_owned())),
            Some(SchemaNameRule::Empty) => refuse(DatabaseNameRule::Empty),
            Some(SchemaNameRule::TooLong { bytes }) => refuse(DatabaseNameRule::TooLong { bytes }),
            Some(SchemaNameRule::BadFirstCharacter { found }) => {
                refuse(DatabaseNameRule::BadFirstCharacter { found })
            }
            Some(SchemaNameRule::BadCharacter { found, at }) => {
                refuse(DatabaseNameRule::BadCharacter { found, at })
            }
            // The syntax rules never report PostgreSQL's reserved names.
            Some(SchemaNameRule::ReservedPrefix | SchemaNameRule::ReservedName) => {
                refuse(DatabaseNameRule::Reserved)
            }
        }
    }

    /// The name, exactly as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::schema_name::validated_name_impls!(DatabaseName, DatabaseNameError, DEFAULT_DATABASE_NAME);

// ---------------------------------------------------------------------------
// The typed rows
// ---------------------------------------------------------------------------

/// The publisher's record, as it arrives on `analytics.webhook.attempt.{env}`.
///
/// Its shape is not the table's: the instant is `attempted_at` (the column is
/// `ts`), and `status` / `error` are absent, not null, when unknown
/// (serializing an `AttemptEvent` omits them, as the publisher does). Use
/// [`shape`] on the raw JSON to get the row; a record that cannot be shaped
/// is terminated, not retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEvent {
    /// The delivery (UUID).
    pub delivery_id: String,
    /// The endpoint called (UUID).
    pub endpoint_id: String,
    /// The tenant environment (UUID).
    pub environment_id: String,
    /// The event delivered (UUID).
    pub event_id: String,
    /// Attempt number within the delivery.
    pub attempt: u8,
    /// When the attempt was made: RFC 3339 with a UTC offset.
    pub attempted_at: String,
    /// Absent when nothing answered: a timeout has no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Present when there was no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Milliseconds the endpoint took to answer.
    pub latency_ms: u32,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    pub outcome: String,
}

/// One row of `webhook_attempts`, keyed by column name: serialized, it is the
/// `JSONEachRow` line the insert sends, with every column present (a `None`
/// is an explicit `null`) and no other key. A test ties its fields to
/// [`WebhookAttempts`]'s columns in both directions.
///
/// Build it with [`shape`], which validates and canonicalises every value, so
/// a row reads back from the table equal to the one written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRow {
    /// The tenant environment: a lowercase UUID.
    pub environment_id: String,
    /// The record's `attempted_at`, canonical: `YYYY-MM-DDThh:mm:ss.mmmZ` in UTC.
    pub ts: String,
    /// The delivery: a lowercase UUID.
    pub delivery_id: String,
    /// The endpoint called: a lowercase UUID.
    pub endpoint_id: String,
    /// The event delivered: a lowercase UUID.
    pub event_id: String,
    /// Attempt number within the delivery.
    pub attempt: u8,
    /// HTTP status; `None` (NULL) when nothing answered, never 0.
    pub status: Option<u16>,
    /// Error text; `None` (NULL) when there was none, never `""`.
    pub error: Option<String>,
    /// Milliseconds the endpoint took to answer.
    pub latency_ms: u32,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    pub outcome: String,
}

/// Why [`shape`] refused a record. A refused record is poison: the same bytes
/// fail the same way every time, so the consumer terminates it (and logs its
/// stream sequence) rather than leaving it to be redelivered.
///
/// Messages name the field and the kind of value found, never the value
/// itself: a record's `error` can echo anything an endpoint sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The bytes are not JSON.
    #[error("the record is not JSON (syntax error at line {line}, column {column})")]
    NotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// The JSON is not an object.
    #[error("the record is {found}, not a JSON object")]
    NotAnObject {
        /// The kind of JSON value found.
        found: &'static str,
    },
    /// A required field is absent.
    #[error("the record lacks the required field `{field}`")]
    MissingField {
        /// The publisher's field name.
        field: &'static str,
    },
    /// A field holds the wrong kind of value, or a number out of its column's range.
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType {
        /// The publisher's field name.
        field: &'static str,
        /// What the field must hold.
        expected: &'static str,
        /// The kind of value found.
        found: &'static str,
    },
    /// A field has the right kind but a value the table would refuse.
    #[error("field `{field}` is refused: {reason}")]
    Invalid {
        /// The publisher's field name.
        field: &'static str,
        /// Why the value is refused.
        reason: &'static str,
    },
}

impl ShapeError {
    /// The publisher's field the error is about, if it is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::NotJson { .. } | Self::NotAnObject { .. } => None,
            Self::MissingField { field }
            | Self::WrongType { field, .. }
            | Self::Invalid { field, .. } => Some(field),
        }
    }
}

/// The publisher's field names [`shape`] reads, in the publisher's order.
/// Anything else in a record is ignored: the ingester shapes, it does not
/// forward.
pub const EVENT_FIELDS: [&str; 10] = [
    "delivery_id",
    "endpoint_id",
    "environment_id",
    "event_id",
    "attempt",
    "attempted_at",
    "status",
    "error",
    "latency_ms",
    "outcome",
];

/// Shapes one raw record (JSON bytes) into a row: [`shape`] after parsing.
///
/// ```
/// use schema_model::analytics::{shape_json, ShapeError};
///
/// assert_eq!(shape_json(b"{oops").unwrap_err(), ShapeError::NotJson { line: 1, column: 2 });
/// ```
pub fn shape_json(bytes: &[u8]) -> Result<AttemptRow, ShapeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|err| ShapeError::NotJson {
        line: err.line(),
        column: err.column(),
    })?;
    shape(&value)
}

/// Shapes the publisher's record into the table's row.
///
/// - **The rename**: `attempted_at` becomes `ts`, canonicalised to UTC
///   milliseconds (`2026-03-01T12:00:00.123Z`; extra sub-millisecond digits
///   are truncated, as `DateTime64(3)` would). It must carry a UTC offset
///   and lie after [`TS_FLOOR`], or the table's `ts_is_real` would refuse
///   the whole batch.
/// - `status` and `error` absent (or `null`) become `None`, never 0 or `""`;
///   an empty `error` string is no error text and also becomes `None`.
/// - UUIDs are checked (8-4-4-4-12 hex) and lowercased, the form ClickHouse
///   reads back; integers must be whole and fit their column (`attempt`
///   UInt8, `status` UInt16, `latency_ms` UInt32); `outcome` must be non-empty.
/// - Fields other than [`EVENT_FIELDS`] are ignored.
///
/// A refused record is poison: terminate it, do not retry it.
///
/// ```
/// use schema_model::analytics::{shape, ShapeError};
/// use serde_json::json;
///
/// let err = shape(&json!({ "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001" })).unwrap_err();
/// assert_eq!(err, ShapeError::MissingField { field: "endpoint_id" });
/// assert_eq!(err.to_string(), "the record lacks the required field `endpoint_id`");
/// ```
pub fn shape(raw: &Value) -> Result<AttemptRow, ShapeError> {
    let Value::Object(record) = raw else {
        return Err(ShapeError::NotAnObject {
            found: kind_of(raw),
        });
    };
    let field = |name: &'static str| record.get(name).filter(|v| !v.is_null());
    let required = |name: &'static str| match record.get(name) {
        None => Err(ShapeError::MissingField { field: name }),
        Some(value) => Ok(value),
    };
    let uuid = |name: &'static str| canonical_uuid(name, required(name)?);

    let delivery_id = uuid("delivery_id")?;
    let endpoint_id = uuid("endpoint_id")?;
    let environment_id = uuid("environment_id")?;
    let event_id = uuid("event_id")?;
    let attempt = unsigned("attempt", required("attempt")?, "an integer from 0 to 255")?;
    let ts = canonical_ts(required("attempted_at")?)?;
    let status = field("status")
        .map(|v| unsigned("status", v, "an integer from 0 to 65535"))
        .transpose()?;
    let error = match field("error") {
        None => None,
        Some(Value::String(text)) if text.is_empty() => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(ShapeError::WrongType {
                field: "error",
                expected: "a string",
                found: kind_of(other),
            });
        }
    };
    let latency_ms = unsigned(
        "latency_ms",
        required("latency_ms")?,
        "an integer from 0 to 4294967295",
    )?;
    let outcome = match required("outcome")? {
        Value::String(text) if text.is_empty() => {
            return Err(ShapeError::Invalid {
                field: "outcome",
                reason: "it is empty",
            });
        }
        Value::String(text) => text.clone(),
        other => {
            return Err(ShapeError::WrongType {
                field: "outcome",
                expected: "a string",
                found: kind_of(other),
            });
        }
    };

    Ok(AttemptRow {
        environment_id,
        ts,
        delivery_id,
        endpoint_id,
        event_id,
        attempt,
        status,
        error,
        latency_ms,
        outcome,
    })
}

/// The kind of a JSON value, for error messages that must not quote it.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A whole, non-negative JSON number that fits `T` (the column's width).
fn unsigned<T: TryFrom<u64>>(
    field: &'static str,
    value: &Value,
    expected: &'static str,
) -> Result<T, ShapeError> {
    let wrong = |found| ShapeError::WrongType {
        field,
        expected,
        found,
    };
    let Value::Number(number) = value else {
        return Err(wrong(kind_of(value)));
    };
    match number.as_u64() {
        Some(n) => T::try_from(n).map_err(|_| wrong("a number out of range")),
        None if number.is_i64() => Err(wrong("a negative number")),
        None => Err(wrong("a non-integer number")),
    }
}

fn canonical_uuid(field: &'static str, value: &Value) -> Result<String, ShapeError> {
    let Value::String(text) = value else {
        return Err(ShapeError::WrongType {
            field,
            expected: "a UUID string",
            found: kind_of(value),
        });
    };
    let well_formed = text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if well_formed {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(ShapeError::Invalid {
            field,
            reason: "it is not a UUID (8-4-4-4-12 hex digits)",
        })
    }
}

/// The last instant `DateTime64(3)` can hold: 2299-12-31 23:59:59.999 UTC.
/// ClickHouse saturates values beyond its range instead of refusing them.
const TS_CEILING_UNIX_MILLIS: i64 = days_from_civil(2299, 12, 31) * 86_400_000 + 86_399_999;

fn canonical_ts(value: &Value) -> Result<String, ShapeError> {
    const FIELD: &str = "attempted_at";
    let Value::String(text) = value else {
        return Err(ShapeError::WrongType {
            field: FIELD,
            expected: "an RFC 3339 timestamp string",
            found: kind_of(value),
        });
    };
    let invalid = |reason| {
        Err(ShapeError::Invalid {
            field: FIELD,
            reason,
        })
    };
    let Some(millis) = rfc3339_unix_millis(text) else {
        return invalid(
            "it is not an RFC 3339 timestamp with a UTC offset (e.g. 2026-01-31T12:00:00.000Z)",
        );
    };
    if millis <= TS_FLOOR_UNIX_MILLIS {
        return invalid("it is not after 2020-01-01 00:00:00 UTC (the table's ts_is_real floor)");
    }
    if millis > TS_CEILING_UNIX_MILLIS {
        return invalid("it is after 2299-12-31, beyond what DateTime64 can hold");
    }
    Ok(format_unix_millis(millis))
}

/// Parses `YYYY-MM-DD(T|t| )hh:mm:ss[.fraction](Z|z|±hh:mm)` into unix
/// milliseconds (the fraction truncated to milliseconds). A timestamp
/// without an offset is refused: its instant would depend on a time zone.
fn rfc3339_unix_millis(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |from: usize, to: usize| -> Option<i64> {
        let part = b.get(from..to)?;
        part.iter().try_fold(0_i64, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
        })
    };
    let at = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 7)?, digits(8, 10)?);
    let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if at(i, b".") {
        let start = i + 1;
        let end = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if end == start || end - start > 9 {
            return None;
        }
        let kept = (end - start).min(3);
        millis = digits(start, start + kept)? * 10_i64.pow(3 - kept as u32);
        i = end;
    }
    let offset_minutes = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (digits(i + 1, i + 3)?, digits(i + 4, i + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'+' {
                h * 60 + m
            } else {
                -(h * 60 + m)
            }
        }
        _ => return None,
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
const fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix milliseconds as `YYYY-MM-DDThh:mm:ss.mmmZ` (Hinnant's `civil_from_days`).
fn format_unix_millis(unix_millis: i64) -> String {
    let (secs, millis) = (unix_millis.div_euclid(1000), unix_millis.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> Value {
        json!({
            "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001",
            "endpoint_id": "6f1c2a3b-0000-4000-8000-00000000a001",
            "environment_id": "6f1c2a3b-0000-4000-8000-00000000e001",
            "event_id": "6f1c2a3b-0000-4000-8000-00000000f001",
            "attempt": 2,
            "attempted_at": "2026-11-30T12:00:00.123Z",
            "status": 200,
            "latency_ms": 87,
            "outcome": "delivered"
        })
    }

    fn with(mut value: Value, key: &str, field: Option<Value>) -> Value {
        let map = value.as_object_mut().unwrap();
        match field {
            Some(v) => map.insert(key.to_owned(), v),
            None => map.remove(key),
        };
        value
    }

    #[test]
    fn shape_renames_attempted_at_to_ts_and_copies_the_rest() {
        let row = shape(&event()).unwrap();
        assert_eq!(
            row,
            AttemptRow {
                environment_id: "6f1c2a3b-0000-4000-8000-00000000e001".into(),
                ts: "2026-11-30T12:00:00.123Z".into(),
                delivery_id: "6f1c2a3b-0000-4000-8000-00000000d001".into(),
                endpoint_id: "6f1c2a3b-0000-4000-8000-00000000a001".into(),
                event_id: "6f1c2a3b-0000-4000-8000-00000000f001".into(),
                attempt: 2,
                status: Some(200),
                error: None,
                latency_ms: 87,
                outcome: "delivered".into(),
            }
        );
        let line = serde_json::to_value(&row).unwrap();
        assert_eq!(line["ts"], "2026-11-30T12:00:00.123Z");
        assert!(line.get("attempted_at").is_none(), "{line}");
    }

    #[test]
    fn absent_status_and_error_become_null_never_zero_or_empty() {
        let timed_out = with(
            with(event(), "status", None),
            "error",
            Some(json!("timeout")),
        );
        let row = shape(&timed_out).unwrap();
        assert_eq!(row.status, None);
        let line = serde_json::to_value(&row).unwrap();
        assert_eq!(line["status"], Value::Null, "not 0: {line}");
        assert_eq!(line["error"], "timeout");

        let delivered = shape(&event()).unwrap();
        let line = serde_json::to_value(&delivered).unwrap();
        assert_eq!(line["error"], Value::Null, "not \"\": {line}");
        assert!(line.as_object().unwrap().contains_key("error"));

        // An explicit null means the same as absent; so does an empty error text.
        assert_eq!(
            shape(&with(event(), "status", Some(Value::Null)))
                .unwrap()
                .status,
            None
        );
        assert_eq!(
            shape(&with(event(), "error", Some(json!(""))))
                .unwrap()
                .error,
            None
        );
        // A measured zero stays a zero.
        assert_eq!(
            shape(&with(event(), "status", Some(json!(0))))
                .unwrap()
                .status,
            Some(0)
        );
    }

    #[test]
    fn every_missing_required_field_is_named() {
        for field in EVENT_FIELDS {
            if matches!(field, "status" | "error") {
                continue;
            }
            let err = shape(&with(event(), field, None)).unwrap_err();
            assert_eq!(err, ShapeError::MissingField { field }, "{field}");
            assert_eq!(err.field(), Some(field));
            assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
        }
    }

    #[test]
    fn a_record_already_carrying_ts_still_needs_attempted_at() {
        let renamed = with(
            with(event(), "attempted_at", None),
            "ts",
            Some(json!("2026-11-30T12:00:00.123Z")),
        );
        assert_eq!(
            shape(&renamed).unwrap_err(),
            ShapeError::MissingField {
                field: "attempted_at"
            }
        );
    }

    #[test]
    fn wrong_types_are_refused_naming_the_field_not_the_value() {
        let cases = [
            ("attempt", json!("2"), "a string"),
            ("attempt", json!(2.5), "a non-integer number"),
            ("attempt", json!(-1), "a negative number"),
            ("attempt", json!(256), "a number out of range"),
            ("status", json!("500"), "a string"),
            ("status", json!(65_536), "a number out of range"),
            ("latency_ms", json!(1_u64 << 32), "a number out of range"),
            ("latency_ms", Value::Null, "null"),
            ("error", json!(42), "a number"),
            ("outcome", json!(["delivered"]), "an array"),
            ("delivery_id", json!(7), "a number"),
            ("attempted_at", json!(1_796_040_000_123_i64), "a number"),
            ("attempted_at", json!({"secret": "s3cr3t"}), "an object"),
        ];
        for (field, value, found) in cases {
            let err = shape(&with(event(), field, Some(value.clone()))).unwrap_err();
            match &err {
                ShapeError::WrongType {
                    field: f, found: k, ..
                } => {
                    assert_eq!((*f, *k), (field, found), "{field} = {value}");
                }
                other => panic!("{field} = {value}: {other:?}"),
            }
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
        }
        assert_eq!(
            shape(&json!([1])).unwrap_err(),
            ShapeError::NotAnObject { found: "an array" }
        );
        assert_eq!(
            shape(&Value::Null).unwrap_err(),
            ShapeError::NotAnObject { found: "null" }
        );
    }

    #[test]
    fn values_the_table_would_refuse_are_refused_here() {
        let invalid =
            |field: &str, value: Value| match shape(&with(event(), field, Some(value.clone())))
                .unwrap_err()
            {
                ShapeError::Invalid { field: f, reason } => {
                    assert_eq!(f, field, "{value}");
                    reason
                }
                other => panic!("{field} = {value}: {other:?}"),
            };
        assert!(invalid("delivery_id", json!("not-a-uuid")).contains("not a UUID"));
        assert!(invalid("event_id", json!("")).contains("not a UUID"));
        assert!(invalid("event_id", json!("6f1c2a3b00004000800000000000f001")).contains("UUID"));
        assert!(invalid("outcome", json!("")).contains("empty"));
        for ts in [
            "2026-11-30 12:00:00",             // no offset
            "2026-11-30T12:00:00",             // no offset
            "2026-02-30T12:00:00Z",            // no such day
            "2026-11-30T24:00:00Z",            // no such hour
            "2026-11-30T12:00:00.Z",           // empty fraction
            "2026-11-30T12:00:00.1234567891Z", // more than nanoseconds
            "2026-11-30T12:00:00+0100",        // offset without colon
            "2026-11-30T12:00:00Zjunk",
            "20261130T120000Z",
            "",
        ] {
            assert!(
                invalid("attempted_at", json!(ts)).contains("RFC 3339"),
                "{ts:?}"
            );
        }
        for ts in [
            "1970-01-01T00:00:00.000Z",
            "2020-01-01T00:00:00.000Z",
            "2020-01-01T01:00:00+01:00",
        ] {
            assert!(
                invalid("attempted_at", json!(ts)).contains("ts_is_real"),
                "{ts:?}"
            );
        }
        assert!(invalid("attempted_at", json!("2300-01-01T00:00:00Z")).contains("2299"));
    }

    #[test]
    fn timestamps_are_canonicalised_to_utc_milliseconds() {
        let ts = |input: &str| {
            shape(&with(event(), "attempted_at", Some(json!(input))))
                .unwrap()
                .ts
        };
        assert_eq!(ts("2026-11-30T12:00:00Z"), "2026-11-30T12:00:00.000Z");
        assert_eq!(ts("2026-11-30t12:00:00.5z"), "2026-11-30T12:00:00.500Z");
        assert_eq!(
            ts("2026-11-30 12:00:00.123999Z"),
            "2026-11-30T12:00:00.123Z"
        );
        assert_eq!(ts("2026-03-01T00:30:00+01:00"), "2026-02-28T23:30:00.000Z");
        assert_eq!(ts("2024-02-28T23:30:00-01:00"), "2024-02-29T00:30:00.000Z");
        assert_eq!(ts("2020-01-01T00:00:00.001Z"), "2020-01-01T00:00:00.001Z");
        assert_eq!(ts("2299-12-31T23:59:59.999Z"), "2299-12-31T23:59:59.999Z");
    }

    #[test]
    fn uuids_are_lowercased_and_unknown_fields_ignored() {
        let upper = with(
            with(
                event(),
                "delivery_id",
                Some(json!("6F1C2A3B-0000-4000-8000-00000000D001")),
            ),
            "publisher_added_later",
            Some(json!(1)),
        );
        assert_eq!(
            shape(&upper).unwrap().delivery_id,
            "6f1c2a3b-0000-4000-8000-00000000d001"
        );
    }

    #[test]
    fn shape_json_parses_then_shapes() {
        let bytes = serde_json::to_vec(&event()).unwrap();
        assert_eq!(shape_json(&bytes).unwrap(), shape(&event()).unwrap());
        assert!(matches!(shape_json(b""), Err(ShapeError::NotJson { .. })));
        assert_eq!(
            shape_json(b"\"x\"").unwrap_err(),
            ShapeError::NotAnObject { found: "a string" }
        );
    }

    #[test]
    fn the_floor_constant_agrees_with_its_text() {
        assert_eq!(
            rfc3339_unix_millis(&format!("{TS_FLOOR}Z")),
            Some(TS_FLOOR_UNIX_MILLIS)
        );
        assert_eq!(
            format_unix_millis(TS_CEILING_UNIX_MILLIS),
            "2299-12-31T23:59:59.999Z"
        );
        assert_eq!(format_unix_millis(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn the_ts_check_names_a_datetime64_column() {
        for check in WebhookAttempts::checks() {
            let ClickHouseCheckRule::LaterThan { column, .. } = check.rule;
            assert!(
                matches!(
                    column.column().map(|c| c.ch_type),
                    Some(ClickHouseType::DateTime64 { .. })
                ),
                "{}",
                check.name
            );
        }
        assert_eq!(
            WebhookAttempts::Ts.column().map(|c| c.ch_type),
            Some(TS_TYPE)
        );
    }

    #[test]
    fn the_sorting_key_ttl_and_partition_name_columns_of_the_table() {
        let columns: Vec<WebhookAttempts> = WebhookAttempts::columns()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        for key in WebhookAttempts::order_by() {
            assert!(columns.contains(&key), "{key:?}");
            // A nullable sorting key needs allow_nullable_key; none is nullable.
            assert!(!key.column().is_some_and(|c| c.nullable()), "{key:?}");
        }
        assert!(WebhookAttempts::column(WebhookAttempts::Table).is_none());
        assert_eq!(
            WebhookAttempts::partition_by(),
            Some(PartitionKey::Month(WebhookAttempts::Ts))
        );
    }

    fn rule(name: &str) -> Option<DatabaseNameRule> {
        DatabaseName::new(name).err().map(|e| e.rule)
    }

    #[test]
    fn database_names_follow_the_schema_name_syntax() {
        assert_eq!(rule("relay_analytics"), None);
        assert_eq!(rule("_x9"), None);
        assert_eq!(rule(&"a".repeat(63)), None);
        assert_eq!(
            rule("pg_ok_here"),
            None,
            "pg_ is PostgreSQL's prefix, not ClickHouse's"
        );
        assert_eq!(
            rule("public"),
            None,
            "public is PostgreSQL's, not ClickHouse's"
        );
        let cases = [
            ("", DatabaseNameRule::Empty),
            (&*"a".repeat(64), DatabaseNameRule::TooLong { bytes: 64 }),
            ("Relay", DatabaseNameRule::BadFirstCharacter { found: 'R' }),
            ("1relay", DatabaseNameRule::BadFirstCharacter { found: '1' }),
            (
                "relay-x",
                DatabaseNameRule::BadCharacter { found: '-', at: 5 },
            ),
            (
                "relay`x",
                DatabaseNameRule::BadCharacter { found: '`', at: 5 },
            ),
            (
                "relay.x",
                DatabaseNameRule::BadCharacter { found: '.', at: 5 },
            ),
            (
                "relayX",
                DatabaseNameRule::BadCharacter { found: 'X', at: 5 },
            ),
        ];
        for (name, expected) in cases {
            assert_eq!(rule(name), Some(expected), "{name:?}");
        }
    }

    #[test]
    fn clickhouse_owned_databases_are_refused_in_any_case() {
        for name in [
            "system",
            "SYSTEM",
            "default",
            "Default",
            "information_schema",
            "INFORMATION_SCHEMA",
            "_temporary_and_external_tables",
        ] {
            assert_eq!(rule(name), Some(DatabaseNameRule::Reserved), "{name:?}");
        }
        let err = DatabaseName::new("system").unwrap_err();
        assert!(err.to_string().contains("ClickHouse owns"), "{err}");
        assert_eq!("x".parse::<DatabaseName>().unwrap().as_str(), "x");
    }
}
