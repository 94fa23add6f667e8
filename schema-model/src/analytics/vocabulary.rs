//! The ClickHouse vocabulary every analytics table declares itself in:
//! column types, engines, partition keys, row TTLs and named `CHECK`s, typed
//! by the table's own `Iden` enum, and the [`ClickHouseTable`] trait that
//! ties them to it (the counterpart of the engine family's
//! [`TableModel`](crate::TableModel)).

use std::fmt::{self, Debug};

use sea_query::Iden;
use strum::IntoEnumIterator;
use time::UtcDateTime;

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
    /// `col > <instant>`, the instant written as a `DateTime64` literal in
    /// the column's precision (the column must be a `DateTime64`; a test
    /// checks it).
    LaterThan {
        /// The time column.
        column: C,
        /// The instant every value must be later than.
        instant: UtcDateTime,
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
        crate::table::declared_columns(Self::column)
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
