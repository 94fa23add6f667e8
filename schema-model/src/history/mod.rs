//! Every schema version of the engine family, and what an upgrade from one to
//! the next needs beyond the difference between their shapes.
//!
//! | version | created by | recorded in the database |
//! |---|---|---|
//! | 1 | the `e63468a` release | no: recognised by its shape |
//! | 2 | the `b8b70fe` release (`jobs.ready`, `jobs_promote_idx`, a new claim-index predicate, `jobs_claimed_job_is_ready`, `jobs`' storage parameters) | no: recognised by its shape |
//! | 3 | this model (adds [`SchemaVersions`](crate::SchemaVersions)) | `schema_versions` |
//!
//! A shipped version is kept as reviewed text in `schema-model/history/vN/`,
//! exactly as its release printed it: `schema.sql` (`schema-gen sql`, which a
//! test runs to create it), `describe.json` (`schema-gen describe --format
//! json`, the shape [`SchemaVersion::description`] returns and drift checks
//! compare with) and `statements.json` (its hot-path statements, which the
//! tests run beside this release's on an upgraded database). The newest
//! version, [`MODEL_VERSION`], is the model itself: its text is the
//! `snapshots/` of this release.
//!
//! # How a database moves from one version to the next
//!
//! `schema_gen::upgrade` plans the steps from the difference between the two
//! versions' descriptions (as `check` computes differences), ordered so the
//! previous release's engines keep working until the contract: new tables,
//! columns, indexes and storage parameters are added in the expand phase
//! (indexes `CONCURRENTLY`, an index whose definition changes is built under
//! another name and swapped in, the old one kept until the contract), and
//! what the previous release still relies on goes in the contract phase. What
//! the difference alone cannot say is declared here per version
//! ([`UpgradeHints`]): the value that rows written by the previous release
//! get in a new `NOT NULL` column, the backfills, and the constraints that
//! the previous release's writes would break (validated only at the contract).
//!
//! # Releasing a version
//!
//! When this release ships, copy `snapshots/ddl_alkstore.snap`,
//! `describe_json.snap` and `statements_json.snap` (without insta's header)
//! into `history/v3/` and list them in [`versions`]; the next model change is
//! then version 4 (bump [`MODEL_VERSION`]), with its hints. The tests pin the
//! text of every shipped version, so a shipped version cannot change.

mod v2;
mod v3;

use serde::{Deserialize, Serialize};

use crate::description::TableDescription;
use crate::table::TableModel;

/// The version of the schema this model renders: what a fresh bootstrap
/// creates and what `schema-gen upgrade` moves an older database to.
///
/// ```
/// assert_eq!(schema_model::history::MODEL_VERSION, 3);
/// ```
pub const MODEL_VERSION: u32 = 3;

/// The oldest version an upgrade starts from.
pub const FIRST_VERSION: u32 = 1;

/// One schema version.
#[derive(Debug, Clone)]
pub struct SchemaVersion {
    /// Its number.
    pub number: u32,
    /// The release that created it (a commit for the releases before version
    /// 3, which did not record a version).
    pub release: &'static str,
    /// Its text as its release printed it; `None` for [`MODEL_VERSION`],
    /// whose text is the model.
    pub shipped: Option<Shipped>,
    /// What its upgrade from the previous version needs (empty for version 1).
    pub hints: UpgradeHints,
}

/// The text of a shipped version, for the schema `alkstore`.
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    /// `schema-gen sql` of that release: a psql-runnable script.
    pub schema_sql: &'static str,
    /// `schema-gen describe --format json` of that release.
    pub describe_json: &'static str,
    /// Its hot-path statements in the shape of `schema-gen statements
    /// --format json` (for version 1, reconstructed: see the file's `note`).
    pub statements_json: &'static str,
}

/// Every version, oldest first; the last is [`MODEL_VERSION`].
///
/// ```
/// use schema_model::history::{versions, MODEL_VERSION};
///
/// let numbers: Vec<u32> = versions().iter().map(|v| v.number).collect();
/// assert_eq!(numbers, [1, 2, 3]);
/// assert_eq!(numbers.last(), Some(&MODEL_VERSION));
/// ```
pub fn versions() -> Vec<SchemaVersion> {
    vec![
        SchemaVersion {
            number: 1,
            release: "e63468a",
            shipped: Some(Shipped {
                schema_sql: include_str!("../../history/v1/schema.sql"),
                describe_json: include_str!("../../history/v1/describe.json"),
                statements_json: include_str!("../../history/v1/statements.json"),
            }),
            hints: UpgradeHints::default(),
        },
        SchemaVersion {
            number: 2,
            release: "b8b70fe",
            shipped: Some(Shipped {
                schema_sql: include_str!("../../history/v2/schema.sql"),
                describe_json: include_str!("../../history/v2/describe.json"),
                statements_json: include_str!("../../history/v2/statements.json"),
            }),
            hints: v2::hints(),
        },
        SchemaVersion {
            number: MODEL_VERSION,
            release: env!("CARGO_PKG_VERSION"),
            shipped: None,
            hints: v3::hints(),
        },
    ]
}

/// The version numbered `number`, if there is one.
pub fn version(number: u32) -> Option<SchemaVersion> {
    versions().into_iter().find(|v| v.number == number)
}

/// The JSON `describe` prints: the family's tables for a schema.
#[derive(Deserialize)]
struct DescribedFamily {
    tables: Vec<TableDescription>,
}

impl SchemaVersion {
    /// The version's tables, as `schema-gen describe` of its release
    /// described them (for [`MODEL_VERSION`]: the model's
    /// [`engine_family`](crate::engine_family)).
    ///
    /// # Errors
    ///
    /// When the stored description does not parse (a defect of this crate,
    /// which its tests rule out).
    pub fn description(&self) -> Result<Vec<TableDescription>, serde_json::Error> {
        match &self.shipped {
            None => Ok(crate::engine_family()),
            Some(shipped) => {
                serde_json::from_str::<DescribedFamily>(shipped.describe_json).map(|f| f.tables)
            }
        }
    }

    /// Whether the version records itself in [`SchemaVersions`](crate::SchemaVersions)
    /// (versions 1 and 2 predate the table).
    pub fn records_itself(&self) -> bool {
        self.number >= 3
    }
}

/// What an upgrade to a version needs beyond the difference between the two
/// versions' shapes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeHints {
    /// The value a new `NOT NULL` column (with no default in the model)
    /// holds until the contract, so the previous release's inserts, which do
    /// not name the column, keep working. Added as a constant default (no
    /// table rewrite), dropped by the contract.
    pub transitional_defaults: Vec<TransitionalDefault>,
    /// Backfills run in the expand phase, in bounded batches, once the new
    /// columns exist.
    pub backfills: Vec<Backfill>,
    /// New `CHECK`s that the previous release's writes would break: added
    /// and validated only by the contract (any other new `CHECK` is added
    /// `NOT VALID` and validated in the expand phase).
    pub checks_at_contract: Vec<&'static str>,
    /// Backfills run by the contract before it validates
    /// [`checks_at_contract`](Self::checks_at_contract): the rows the
    /// previous release wrote that the new `CHECK`s would refuse.
    pub contract_backfills: Vec<Backfill>,
}

/// A constant a column holds until the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransitionalDefault {
    /// The table.
    pub table: &'static str,
    /// The new column.
    pub column: &'static str,
    /// The value rows written without the column get.
    pub value: Literal,
}

impl TransitionalDefault {
    /// The transitional default of `column` (typed, so a renamed column is a
    /// compile error here).
    pub fn of<T: TableModel>(column: T, value: Literal) -> Self {
        Self {
            table: T::TABLE.as_str(),
            column: column.as_str(),
            value,
        }
    }
}

/// A constant in an upgrade step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Literal {
    /// `true` / `false`.
    Bool(bool),
}

impl Literal {
    /// As SQL, and as `pg_get_expr` reports it as a column default.
    ///
    /// ```
    /// use schema_model::history::Literal;
    ///
    /// assert_eq!(Literal::Bool(false).sql(), "false");
    /// ```
    pub fn sql(self) -> &'static str {
        match self {
            Self::Bool(true) => "true",
            Self::Bool(false) => "false",
        }
    }
}

/// A batched `UPDATE table SET set = value WHERE rows`, walking the table's
/// single-column primary key `key` in windows, each window its own
/// transaction, skipping rows another session holds (they are the engines'
/// rows in flight; a rerun, or the contract's backfill, takes them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backfill {
    /// The table.
    pub table: &'static str,
    /// The integer primary-key column walked in windows.
    pub key: &'static str,
    /// The column set.
    pub set: &'static str,
    /// The value it is set to.
    pub value: Literal,
    /// Which rows: also the rows a finished backfill leaves none of.
    pub rows: Condition,
}

impl Backfill {
    /// A backfill of `table` (typed: a renamed column is a compile error here).
    pub fn of<T: TableModel>(key: T, set: T, value: Literal, rows: Condition) -> Self {
        Self {
            table: T::TABLE.as_str(),
            key: key.as_str(),
            set: set.as_str(),
            value,
            rows,
        }
    }
}

/// Which rows a [`Backfill`] changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// `column IS NULL`.
    IsNull(&'static str),
    /// `column IS NOT NULL`.
    IsNotNull(&'static str),
    /// `NOT column` (a boolean).
    IsFalse(&'static str),
    /// `column <= now`, `now` the unix second the batch runs at.
    NotAfterNow(&'static str),
    /// All of them.
    All(Vec<Condition>),
    /// Any of them.
    Any(Vec<Condition>),
}

impl Condition {
    /// `column IS NOT NULL`.
    pub fn is_not_null<T: TableModel>(column: T) -> Self {
        Self::IsNotNull(column.as_str())
    }

    /// `column IS NULL`.
    pub fn is_null<T: TableModel>(column: T) -> Self {
        Self::IsNull(column.as_str())
    }

    /// `NOT column`.
    pub fn is_false<T: TableModel>(column: T) -> Self {
        Self::IsFalse(column.as_str())
    }

    /// `column <= now`.
    pub fn not_after_now<T: TableModel>(column: T) -> Self {
        Self::NotAfterNow(column.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a over the bytes: enough to notice an edit (this is no
    /// security check, and needs no hashing crate in a no-I/O model crate).
    fn fingerprint(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// A shipped version's text is what its release printed and deployed
    /// databases hold: it never changes. (A new model is a new version.)
    #[test]
    fn shipped_versions_are_pinned() {
        let pinned: [(u32, [u64; 3]); 2] = [
            (
                1,
                [
                    0xd9b2_07c2_14b1_dcb7,
                    0xc36a_1f1c_d621_fdac,
                    0xb15c_e665_e6b1_0be9,
                ],
            ),
            (
                2,
                [
                    0xd871_b136_915b_65a9,
                    0x091b_5313_f9ed_5b2b,
                    0xae68_5bb2_1e51_6155,
                ],
            ),
        ];
        for (number, [sql, describe, statements]) in pinned {
            let shipped = version(number).and_then(|v| v.shipped).unwrap();
            assert_eq!(
                [
                    fingerprint(shipped.schema_sql),
                    fingerprint(shipped.describe_json),
                    fingerprint(shipped.statements_json)
                ],
                [sql, describe, statements],
                "version {number}'s shipped text changed: a shipped version is never edited"
            );
        }
        let shipped: Vec<u32> = versions()
            .iter()
            .filter(|v| v.shipped.is_some())
            .map(|v| v.number)
            .collect();
        assert_eq!(shipped, [1, 2], "a newly shipped version gets its pin here");
    }

    #[test]
    fn every_version_is_numbered_in_order_and_describes_itself() {
        let versions = versions();
        for (index, version) in versions.iter().enumerate() {
            assert_eq!(version.number, FIRST_VERSION + index as u32);
            let tables = version.description().unwrap();
            assert!(
                tables.iter().any(|t| t.name == "jobs"),
                "v{}",
                version.number
            );
        }
        assert_eq!(versions.last().map(|v| v.number), Some(MODEL_VERSION));
        assert!(versions.last().is_some_and(|v| v.shipped.is_none()));
    }
}
