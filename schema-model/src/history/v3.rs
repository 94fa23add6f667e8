//! Version 3 (this model): the database records its version
//! ([`SchemaVersions`](crate::SchemaVersions)).
//!
//! The difference from version 2 is a new table, which the expand phase
//! creates; nothing else needs a hint.

use super::UpgradeHints;

pub(super) fn hints() -> UpgradeHints {
    UpgradeHints::default()
}
