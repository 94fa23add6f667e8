//! `locks`: TTL locks with fencing tokens, and the [`Lock`] shape.
//!
//! The fence is an identity column: every insert draws a new value and a
//! re-acquisition does `SET fence = DEFAULT`, so per name it only grows, even
//! across a release that deletes the row. A holder whose fence is lower than
//! the current one is stale and can be refused by whatever it writes to.

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{
    CheckDef, CheckRule, Column, ColumnDefault, IndexDef, IndexKey, SqlType, TableModel,
};

/// The `locks` table: one row per held lock.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Locks {
    /// The table itself.
    Table,
    /// Unique lock name.
    Name,
    /// The current holder.
    Owner,
    /// Unix seconds when the lock lapses.
    ExpiresAt,
    /// Fencing token; only grows.
    Fence,
}

impl TableModel for Locks {
    const TABLE: Self = Self::Table;
    const DOC: &'static str =
        "A TTL lock held by one owner until expires_at, with a fencing token.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Name => Column::required(Text, "Unique name of the lock."),
            Self::Owner => Column::required(Text, "Identity of the current holder."),
            Self::ExpiresAt => Column::required(BigInt, "Unix seconds when the lock lapses unless renewed."),
            Self::Fence => Column::required(BigInt, "Fencing token drawn at each acquisition; only grows, so a stale holder can be refused.")
                .with_default(ColumnDefault::IdentityAlways),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Name]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        vec![IndexDef::new(
            "locks_expiry_idx",
            [IndexKey::asc(Self::ExpiresAt)],
            "Sweep: lapsed locks.",
        )]
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "locks_name_not_empty",
                rule: CheckRule::NotEmpty(Self::Name),
            },
            CheckDef {
                name: "locks_owner_not_empty",
                rule: CheckRule::NotEmpty(Self::Owner),
            },
        ]
    }
}

/// A lock, as the engine reads a [`Locks`] row.
///
/// Not exhaustive (a new column is not a breaking change for engines): the
/// statements build it; outside this crate, start from [`Lock::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Lock {
    /// Unique name.
    pub name: String,
    /// The current holder.
    pub owner: String,
    /// Unix second when it lapses.
    pub expires_at: i64,
    /// The fencing token of this acquisition.
    pub fence: i64,
}
