//! Every schema version of the engine family, and what an upgrade from one to
//! the next needs beyond the difference between their shapes.
//!
//! | version | created by | recorded in the database |
//! |---|---|---|
//! | 1 | the `e63468a` release | no: recognised by its shape |
//! | 2 | the `b8b70fe` release (`jobs.ready`, `jobs_promote_idx`, a new claim-index predicate, `jobs_claimed_job_is_ready`, `jobs`' storage parameters) | no: recognised by its shape |
//! | 3 | the `0.3.0` release, this model until the next ships (adds [`SchemaVersions`](crate::SchemaVersions)) | `schema_versions` |
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
//! # Shipping a version: the recipe
//!
//! A model change ships as the next version. Say the model is version 3 and
//! the change is "unique jobs" (a nullable `jobs.unique_key` and a partial
//! unique index on it):
//!
//! 1. `cargo xtask ship-version` freezes the model as the version it is:
//!    it writes `history/v3/{schema.sql, describe.json, statements.json}`
//!    from this build's `schema-gen sql`, `describe --format json` and
//!    `statements --format json`, lists version 3 as shipped in this file
//!    (`shipped!(3, "0.3.0")`, which makes [`MODEL_VERSION`] 4) with its
//!    pins, starts `src/history/v4.rs` (version 4's [`UpgradeHints`]) and
//!    registers it here, bumps the release in the workspace's `Cargo.toml`
//!    and lets cargo update `Cargo.lock`.
//! 2. Change the model: the table's file (`src/jobs.rs`: the column in its
//!    `match`, `IndexDef::new(...).unique().partial(...)`; an index can be
//!    unique, partial and on expressions, every kind the planner builds
//!    online).
//! 3. Declare in `src/history/v4.rs` what the shapes cannot say: a new `NOT
//!    NULL` column's transitional default, backfills, `CHECK`s deferred to
//!    the contract. The planner refuses a change it cannot carry online,
//!    naming the hint to declare (`schema-gen`'s tests plan every version).
//! 4. `cargo test --workspace`, then review the snapshot diffs and move the
//!    `.snap.new` files over: the DDL (`ddl_alkstore`, `ddl_alkstore_citus`,
//!    `ddl_tenant_42`), the description (`describe_json`,
//!    `describe_markdown`), the live catalog (`pg_live_catalog`) and the
//!    version `check` names for a missing schema (`check_json_missing_schema`);
//!    the statements' only if a statement changed.
//!
//! The files a version touches, then: 7 written by the command (the 3
//! frozen texts, this file, the next version's hints file, `Cargo.toml`,
//! `Cargo.lock`), 1 or 2 by hand (the table's file, and the hints when the
//! change needs one), and 7 snapshots the tests regenerate for review (a
//! new column also needs its field in the table's value shape, and the
//! statements that write it). Tried on a copy of this repository: `cargo
//! xtask ship-version`, then an index added to `jobs`, took exactly these
//! files, and every test that names no snapshot passed unchanged. No
//! test, doc-test or README names the current version: they read
//! [`MODEL_VERSION`] and [`versions`]. A version shipped without its pins
//! fails the pin test, which prints the line to paste; a shipped text that
//! changes fails it too. `tests/next_version.rs` (in the tests crate) plans
//! and applies a throwaway version after the model, with a unique partial
//! index and an expression index, through the whole machinery, without
//! shipping it.

mod v2;
mod v3;
// release: hint modules end here

use serde::{Deserialize, Serialize};

use crate::description::TableDescription;
use crate::table::TableModel;

/// A shipped version: its number, its release, and its three files in
/// `schema-model/history/v<number>/`.
macro_rules! shipped {
    ($number:literal, $release:literal) => {
        Shipped {
            number: $number,
            release: $release,
            schema_sql: include_str!(concat!("../../history/v", $number, "/schema.sql")),
            describe_json: include_str!(concat!("../../history/v", $number, "/describe.json")),
            statements_json: include_str!(concat!("../../history/v", $number, "/statements.json")),
        }
    };
}

/// Every shipped version, oldest first, one line each (`cargo xtask
/// ship-version` adds the next). The model is the version after the last.
const SHIPPED: &[Shipped] = &[
    shipped!(1, "e63468a"),
    shipped!(2, "b8b70fe"),
    // release: shipped versions end here
];

/// What an upgrade to `number` needs beyond the difference between the
/// shapes (`cargo xtask ship-version` registers the next version's).
fn hints(number: u32) -> UpgradeHints {
    match number {
        2 => v2::hints(),
        3 => v3::hints(),
        // release: hints end here
        _ => UpgradeHints::default(),
    }
}

/// The version of the schema this model renders: what a fresh bootstrap
/// creates and what `schema-gen upgrade` moves an older database to. It is
/// the version after the last shipped one, so shipping a version moves it.
///
/// ```
/// use schema_model::history::{MODEL_VERSION, versions};
///
/// let shipped = versions().iter().filter(|v| v.shipped.is_some()).count();
/// assert_eq!(MODEL_VERSION as usize, shipped + 1);
/// ```
pub const MODEL_VERSION: u32 = SHIPPED.len() as u32 + 1;

/// The oldest version an upgrade starts from.
pub const FIRST_VERSION: u32 = 1;

/// The first version that records itself in
/// [`SchemaVersions`](crate::SchemaVersions): databases of the versions
/// before it are recognised by their shape.
pub const FIRST_RECORDED_VERSION: u32 = 3;

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
    /// Its number.
    pub number: u32,
    /// The release that created it.
    pub release: &'static str,
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
/// use schema_model::history::{versions, FIRST_VERSION, MODEL_VERSION};
///
/// let numbers: Vec<u32> = versions().iter().map(|v| v.number).collect();
/// assert_eq!(numbers, (FIRST_VERSION..=MODEL_VERSION).collect::<Vec<_>>());
/// ```
pub fn versions() -> Vec<SchemaVersion> {
    SHIPPED
        .iter()
        .map(|shipped| SchemaVersion {
            number: shipped.number,
            release: shipped.release,
            shipped: Some(*shipped),
            hints: hints(shipped.number),
        })
        .chain(std::iter::once(SchemaVersion {
            number: MODEL_VERSION,
            release: env!("CARGO_PKG_VERSION"),
            shipped: None,
            hints: hints(MODEL_VERSION),
        }))
        .collect()
}

/// The version numbered `number`, if there is one.
pub fn version(number: u32) -> Option<SchemaVersion> {
    versions().into_iter().find(|v| v.number == number)
}

/// The line of a version's pins in the pin test (`(N, [0x..., 0x...,
/// 0x...]),`): the fingerprints of its `schema.sql`, `describe.json` and
/// `statements.json`, as `cargo xtask ship-version` writes it and the pin
/// test asks for it.
pub fn pin_line(number: u32, texts: [&str; 3]) -> String {
    let pins = texts.map(|text| {
        let hex = format!("{:016x}", fingerprint(text));
        format!(
            "0x{}_{}_{}_{}",
            &hex[0..4],
            &hex[4..8],
            &hex[8..12],
            &hex[12..16]
        )
    });
    format!("({number}, [{}]),", pins.join(", "))
}

/// The pin of a shipped text: FNV-1a over its bytes, enough to notice an
/// edit (this is no security check, and needs no hashing crate in a no-I/O
/// model crate). The pin test holds every shipped version to its pins.
pub fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
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
    /// (the versions before [`FIRST_RECORDED_VERSION`] predate the table).
    pub fn records_itself(&self) -> bool {
        self.number >= FIRST_RECORDED_VERSION
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

    /// The pins of every shipped version's three files (`schema.sql`,
    /// `describe.json`, `statements.json`), one line each (`cargo xtask
    /// ship-version` adds the next).
    const PINS: &[(u32, [u64; 3])] = &[
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
        // release: pins end here
    ];

    /// The line of [`PINS`] for `shipped`, as it is to be pasted.
    fn pin_of(shipped: &Shipped) -> String {
        pin_line(
            shipped.number,
            [
                shipped.schema_sql,
                shipped.describe_json,
                shipped.statements_json,
            ],
        )
    }

    /// A shipped version's text is what its release printed and deployed
    /// databases hold: it never changes. (A new model is a new version.) A
    /// version shipped without a pin fails here with the line to paste.
    #[test]
    fn shipped_versions_are_pinned() {
        for shipped in SHIPPED {
            let line = pin_of(shipped);
            let Some((_, pins)) = PINS.iter().find(|(number, _)| *number == shipped.number) else {
                panic!(
                    "version {} is shipped without a pin: add this line to PINS in \
                     schema-model/src/history/mod.rs:\n        {line}",
                    shipped.number
                );
            };
            let found = [
                shipped.schema_sql,
                shipped.describe_json,
                shipped.statements_json,
            ]
            .map(fingerprint);
            assert_eq!(
                found, *pins,
                "version {}'s shipped text changed: a shipped version is never edited (its pins \
                 now would be {line})",
                shipped.number
            );
        }
        assert_eq!(PINS.len(), SHIPPED.len(), "a pin for a version not shipped");
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

    #[test]
    fn a_shipped_versions_description_is_the_json_its_release_printed() {
        for shipped in SHIPPED {
            let parsed: serde_json::Value = serde_json::from_str(shipped.describe_json).unwrap();
            assert_eq!(parsed["schema"], "alkstore", "v{}", shipped.number);
            assert!(
                shipped
                    .schema_sql
                    .contains("CREATE SCHEMA IF NOT EXISTS \"alkstore\""),
                "v{}",
                shipped.number
            );
        }
    }
}
