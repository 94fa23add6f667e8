//! `schema_versions`: the schema versions a database has reached, and the
//! [`SchemaVersionRecord`] shape of one.
//!
//! One row per version. A fresh bootstrap writes the model's version with
//! every instant set; `schema-gen upgrade` writes a row when it starts
//! expanding a database to a version, sets `expanded_at` when the expand
//! steps are done (from then on the engines of that version and of every
//! version since the last contract work on it), and `contracted_at` when the
//! contract steps are done (from then on the engines older than it do not).
//! An engine reads the rows at open, in the same round trip as the catalog:
//! engines of versions from the newest contracted one to the newest expanded
//! one are served. Databases created by the releases before version 3 have no
//! such table; their version is recognised by their shape (see
//! [`history`](crate::history)).

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{CheckDef, CheckRule, Column, IndexDef, SqlType, TableModel};

/// The `schema_versions` table: one row per schema version the database
/// has reached or is being upgraded to.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaVersions {
    /// The table itself.
    Table,
    /// The version number.
    Version,
    /// The schema-gen release that wrote the row.
    Release,
    /// When the version was created or its upgrade started.
    StartedAt,
    /// When its expand steps were done.
    ExpandedAt,
    /// When its contract steps were done.
    ContractedAt,
}

impl TableModel for SchemaVersions {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "A schema version this database has reached: written by bootstrap and schema-gen upgrade, read by every engine at open.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Version => Column::required(Integer, "The schema version number."),
            Self::Release => Column::required(
                Text,
                "The schema-gen release that created the version or started its upgrade.",
            ),
            Self::StartedAt => Column::required(
                BigInt,
                "Unix seconds when the version was created or its upgrade started.",
            ),
            Self::ExpandedAt => Column::nullable(
                BigInt,
                "Unix seconds when the expand steps were done: engines of this version work from then on; NULL while expanding.",
            ),
            Self::ContractedAt => Column::nullable(
                BigInt,
                "Unix seconds when the contract steps were done: engines older than this version no longer work; NULL until then.",
            ),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Version]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        Vec::new()
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "schema_versions_version_positive",
                rule: CheckRule::Positive(Self::Version),
            },
            CheckDef {
                name: "schema_versions_release_not_empty",
                rule: CheckRule::NotEmpty(Self::Release),
            },
            CheckDef {
                name: "schema_versions_expanded_after_start",
                rule: CheckRule::NotBefore {
                    later: Self::ExpandedAt,
                    earlier: Self::StartedAt,
                },
            },
            CheckDef {
                name: "schema_versions_contracted_after_expand",
                rule: CheckRule::NotBefore {
                    later: Self::ContractedAt,
                    earlier: Self::ExpandedAt,
                },
            },
        ]
    }
}

/// One row of [`SchemaVersions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersionRecord {
    /// The version number.
    pub version: i32,
    /// The schema-gen release that wrote the row.
    pub release: String,
    /// Unix second the version was created or its upgrade started.
    pub started_at: i64,
    /// Unix second its expand steps were done, if they are.
    pub expanded_at: Option<i64>,
    /// Unix second its contract steps were done, if they are.
    pub contracted_at: Option<i64>,
}

impl SchemaVersionRecord {
    /// Whether engines of this version work on the database (its expand
    /// steps are done).
    pub fn is_expanded(&self) -> bool {
        self.expanded_at.is_some()
    }

    /// Whether engines older than this version no longer work on the
    /// database (its contract steps are done).
    pub fn is_contracted(&self) -> bool {
        self.contracted_at.is_some()
    }
}
