//! The vocabulary every table family file declares itself in: column types,
//! defaults, indexes and named `CHECK` constraints, typed by the table's own
//! `Iden` enum so a renamed column is a compile error.

use std::fmt::Debug;

use sea_query::{Iden, IdenStatic};
use serde::Serialize;
use strum::IntoEnumIterator;

/// A PostgreSQL column type the engine uses.
///
/// The set is small on purpose: instants are unix seconds and durations are
/// seconds (`BIGINT`), counters and priority are `INTEGER`, payloads are the
/// encoder's exact bytes (`BYTEA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SqlType {
    /// `bigint`: ids, unix-second instants and second durations.
    BigInt,
    /// `integer`: counters and priority.
    Integer,
    /// `text`: names, specs and error messages.
    Text,
    /// `bytea`: payloads, exactly as the engine's encoder produced them.
    Bytea,
    /// `boolean`.
    Boolean,
    /// `xid8`: a full 64-bit transaction id (commit-order bookkeeping).
    Xid8,
}

impl SqlType {
    /// The type's name as PostgreSQL's `format_type` reports it.
    pub fn pg_name(self) -> &'static str {
        match self {
            Self::BigInt => "bigint",
            Self::Integer => "integer",
            Self::Text => "text",
            Self::Bytea => "bytea",
            Self::Boolean => "boolean",
            Self::Xid8 => "xid8",
        }
    }
}

/// Where a column's value comes from when the engine does not write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnDefault<C> {
    /// `GENERATED ALWAYS AS IDENTITY`: assigned by the database, monotone,
    /// never supplied by the engine (an `UPDATE ... SET col = DEFAULT` draws
    /// the next value).
    IdentityAlways,
    /// `DEFAULT pg_current_xact_id()`: the inserting transaction's id.
    CurrentTransactionId,
    /// `GENERATED ALWAYS AS (a + b) STORED`: computed from two columns of the row.
    GeneratedSum(C, C),
}

/// One column's definition: type, nullability, default and one-line doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column<C> {
    /// The column's type.
    pub sql_type: SqlType,
    /// Whether the column accepts `NULL`.
    pub nullable: bool,
    /// The database-side default, if any. Engine-supplied values have none on
    /// purpose: a default would turn a forgotten field into a plausible row.
    pub default: Option<ColumnDefault<C>>,
    /// The one-line doc, also emitted as `COMMENT ON COLUMN`.
    pub doc: &'static str,
}

impl<C> Column<C> {
    /// A `NOT NULL` column with no default.
    pub const fn required(sql_type: SqlType, doc: &'static str) -> Self {
        Self {
            sql_type,
            nullable: false,
            default: None,
            doc,
        }
    }

    /// A nullable column with no default.
    pub const fn nullable(sql_type: SqlType, doc: &'static str) -> Self {
        Self {
            sql_type,
            nullable: true,
            default: None,
            doc,
        }
    }

    /// The same column with a database-side default.
    pub fn with_default(self, default: ColumnDefault<C>) -> Self {
        Self {
            default: Some(default),
            ..self
        }
    }
}

/// Sort direction of one index key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Ascending (PostgreSQL's default, so it is not spelled out).
    Asc,
    /// Descending.
    Desc,
}

/// The `WHERE` clause of a partial index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexPredicate<C> {
    /// `WHERE col IS NULL`.
    IsNull(C),
    /// `WHERE col IS NOT NULL`.
    IsNotNull(C),
    /// `WHERE col` (a boolean column).
    IsTrue(C),
    /// `WHERE NOT col` (a boolean column).
    IsFalse(C),
    /// Every one of the conditions (`a AND b ...`); each is one of the
    /// single-column forms above.
    All(Vec<IndexPredicate<C>>),
}

/// An expression an index key computes from a column of the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexExpression<C> {
    /// `lower(col)` of a text column: a key that ignores case.
    Lower(C),
}

/// One key of an index: a column, or an expression over a column, with its
/// direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKey<C> {
    /// A column.
    Column(C, Order),
    /// An expression ([`IndexExpression`]).
    Expression(IndexExpression<C>, Order),
}

impl<C> IndexKey<C> {
    /// The column, ascending.
    pub const fn asc(column: C) -> Self {
        Self::Column(column, Order::Asc)
    }

    /// The column, descending.
    pub const fn desc(column: C) -> Self {
        Self::Column(column, Order::Desc)
    }

    /// `lower(column)`, ascending.
    pub const fn lower(column: C) -> Self {
        Self::Expression(IndexExpression::Lower(column), Order::Asc)
    }
}

/// A secondary index, named by a fixed literal (sea-query writes index names
/// unescaped, so they never come from input): its keys (columns or
/// expressions), and optionally `UNIQUE` and a `WHERE` clause (a partial
/// index). Every kind the upgrade planner carries online (a new index is
/// built `CONCURRENTLY`, a changed one built under another name and swapped
/// in) can be declared.
///
/// ```
/// use schema_model::{IndexDef, IndexKey, IndexPredicate, Jobs};
///
/// let index = IndexDef::new(
///     "jobs_one_claim_per_worker_idx",
///     [IndexKey::asc(Jobs::WorkerId)],
///     "At most one claim per worker.",
/// )
/// .unique()
/// .partial(IndexPredicate::IsNotNull(Jobs::ClaimedAt));
/// assert!(index.unique);
/// assert!(index.predicate.is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef<C> {
    /// The index's name, unique within the schema.
    pub name: &'static str,
    /// Key columns and expressions in order, each with its direction.
    pub keys: Vec<IndexKey<C>>,
    /// Restricts the index to the rows a hot path reads.
    pub predicate: Option<IndexPredicate<C>>,
    /// Whether no two rows (of those the predicate keeps) may share a key.
    pub unique: bool,
    /// Which hot path the index serves.
    pub doc: &'static str,
}

impl<C> IndexDef<C> {
    /// A plain (not unique, not partial) index.
    pub fn new(
        name: &'static str,
        keys: impl IntoIterator<Item = IndexKey<C>>,
        doc: &'static str,
    ) -> Self {
        Self {
            name,
            keys: keys.into_iter().collect(),
            predicate: None,
            unique: false,
            doc,
        }
    }

    /// The same index, `UNIQUE`.
    pub fn unique(self) -> Self {
        Self {
            unique: true,
            ..self
        }
    }

    /// The same index, restricted to the rows `predicate` keeps.
    pub fn partial(self, predicate: IndexPredicate<C>) -> Self {
        Self {
            predicate: Some(predicate),
            ..self
        }
    }
}

/// The rule a named `CHECK` constraint enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckRule<C> {
    /// `col <> ''`: a name that must not be empty.
    NotEmpty(C),
    /// `col >= n`.
    AtLeast(C, i64),
    /// `col > 0`.
    Positive(C),
    /// The columns are all `NULL` or all set.
    NullTogether(Vec<C>),
    /// `column IS NULL OR flag`: `column` may only be set on a row whose
    /// boolean `flag` is true.
    SetOnlyIf {
        /// The column that may be set only while `flag` holds.
        column: C,
        /// The boolean column.
        flag: C,
    },
    /// `later >= earlier` (passes while either is `NULL`).
    NotBefore {
        /// The instant that must not precede `earlier`.
        later: C,
        /// The reference instant.
        earlier: C,
    },
}

/// A named `CHECK` constraint: an invariant the engine relies on, so a buggy
/// engine fails loudly with the constraint's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckDef<C> {
    /// The constraint's name, a fixed literal.
    pub name: &'static str,
    /// What it enforces.
    pub rule: CheckRule<C>,
}

/// A table storage parameter (`CREATE TABLE ... WITH (...)`), declared where a
/// hot path needs one. Verification compares the live `pg_class.reloptions`
/// with [`StorageParameter::reloption`], so a parameter set by hand that the
/// model does not declare is drift too.
///
/// PostgreSQL stores the text of a reloption as it was given, so the
/// rendering is fixed here and the server keeps exactly this string.
///
/// ```
/// use schema_model::StorageParameter;
///
/// assert_eq!(StorageParameter::Fillfactor(70).reloption(), "fillfactor=70");
/// assert_eq!(
///     StorageParameter::AutovacuumVacuumScaleFactor { per_mille: 0 }.reloption(),
///     "autovacuum_vacuum_scale_factor=0"
/// );
/// assert_eq!(
///     StorageParameter::AutovacuumVacuumScaleFactor { per_mille: 5 }.reloption(),
///     "autovacuum_vacuum_scale_factor=0.005"
/// );
/// assert_eq!(
///     StorageParameter::AutovacuumVacuumThreshold(1000).reloption(),
///     "autovacuum_vacuum_threshold=1000"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageParameter {
    /// `fillfactor`: the percentage of each heap page an insert fills, leaving
    /// the rest for updated row versions on the same page (HOT updates).
    Fillfactor(u8),
    /// `autovacuum_vacuum_scale_factor`, in thousandths: the share of the
    /// table's rows that must be dead (beyond the threshold) before
    /// autovacuum vacuums it. 0 makes the trigger independent of the table's
    /// size.
    AutovacuumVacuumScaleFactor {
        /// The factor times 1000 (`0` is 0, `200` is the default 0.2).
        per_mille: u16,
    },
    /// `autovacuum_vacuum_threshold`: dead rows, beyond the scale factor's
    /// share, before autovacuum vacuums the table.
    AutovacuumVacuumThreshold(u32),
}

impl StorageParameter {
    /// The parameter as PostgreSQL stores it in `pg_class.reloptions`
    /// (`name=value`), which is also valid inside `WITH (...)`.
    pub fn reloption(self) -> String {
        match self {
            Self::Fillfactor(percent) => format!("fillfactor={percent}"),
            Self::AutovacuumVacuumScaleFactor { per_mille } => {
                let (whole, thousandths) = (per_mille / 1000, per_mille % 1000);
                let decimals = format!("{thousandths:03}");
                let decimals = decimals.trim_end_matches('0');
                if decimals.is_empty() {
                    format!("autovacuum_vacuum_scale_factor={whole}")
                } else {
                    format!("autovacuum_vacuum_scale_factor={whole}.{decimals}")
                }
            }
            Self::AutovacuumVacuumThreshold(rows) => {
                format!("autovacuum_vacuum_threshold={rows}")
            }
        }
    }
}

/// A table of the engine's family, declared as a sea-query `Iden` enum: a
/// `Table` variant plus one variant per column.
///
/// [`TableModel::column`] is an exhaustive `match`, so a new variant without a
/// type, nullability and doc does not compile.
pub trait TableModel: Iden + IdenStatic + IntoEnumIterator + Copy + Eq + Debug + 'static {
    /// The `Table` variant (renders as the table's name).
    const TABLE: Self;
    /// What a row is, in one line; also emitted as `COMMENT ON TABLE`.
    const DOC: &'static str;

    /// The column's definition, or `None` for the `Table` variant.
    fn column(self) -> Option<Column<Self>>;

    /// The primary key's columns, in order.
    fn primary_key() -> Vec<Self>;

    /// The secondary indexes that serve the engine's hot paths.
    fn indexes() -> Vec<IndexDef<Self>>;

    /// The named invariants.
    fn checks() -> Vec<CheckDef<Self>>;

    /// Storage parameters (`WITH (...)`); none unless a hot path needs one.
    fn storage_parameters() -> Vec<StorageParameter> {
        Vec::new()
    }

    /// Every column variant with its definition, in declaration order.
    fn columns() -> Vec<(Self, Column<Self>)> {
        declared_columns(Self::column)
    }

    /// The table's name.
    fn table_name() -> String {
        Self::TABLE.to_string()
    }
}

/// Every variant of the table enum `T` that `column` defines, with its
/// definition, in declaration order (the `Table` variant defines none): the
/// one walk of an `Iden` enum behind both dialects' `columns()`, this
/// family's [`TableModel`] and the analytics family's
/// [`ClickHouseTable`](crate::ClickHouseTable).
pub(crate) fn declared_columns<T: IntoEnumIterator + Copy, D>(
    column: fn(T) -> Option<D>,
) -> Vec<(T, D)> {
    T::iter()
        .filter_map(|variant| column(variant).map(|definition| (variant, definition)))
        .collect()
}

/// Visits every table of a family with its static type, so that rendering,
/// describing and verifying all walk the one list.
pub trait TableVisitor {
    /// Called once per table, in family order.
    fn visit<T: TableModel>(&mut self);
}
