//! [`Layout`]: where the engine family lives, one choice for the whole
//! family: on one PostgreSQL server (the default), or on a Citus cluster by
//! schema-based sharding.
//!
//! The layout changes no table: the same DDL creates the family either way.
//! Under [`Layout::CitusSchemaSharding`] the engine schema becomes one
//! *distributed schema*: every engine table is a single-shard distributed
//! table of the schema's one colocation group, so all of one schema's rows
//! live on one node and every statement that names only that schema's
//! tables runs there whole (Citus routes it by the schema). `schema-gen`
//! renders the call after the family's DDL, in the same transaction:
//!
//! ```sql
//! SELECT citus_schema_distribute('alkstore');
//! SELECT truncate_local_data_after_distributing_table('"alkstore"."schema_versions"');
//! ```
//!
//! (the second drops the coordinator's local copy of the one row the
//! bootstrap recorded before distributing; Citus copied it to the shard).
//!
//! Row distribution (`create_distributed_table` by `queue` or `stream`) is
//! not a layout of this model: Citus refuses a primary key that does not
//! hold the distribution column (`jobs (id)`, `stream_events (id)`), so it
//! needs widened keys, a new schema version shipped through an online
//! upgrade.
//!
//! ```
//! use schema_model::{Layout, TableDistribution};
//!
//! assert_eq!(Layout::default(), Layout::SingleServer);
//! assert_eq!(Layout::from_name("citus"), Some(Layout::CitusSchemaSharding));
//! assert_eq!(Layout::CitusSchemaSharding.name(), "citus");
//! assert_eq!(Layout::CitusSchemaSharding.distribution(), TableDistribution::SchemaShard);
//! assert_eq!(Layout::SingleServer.distribution(), TableDistribution::Local);
//! ```

use std::fmt;

use serde::Serialize;

/// Where the engine family lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// One PostgreSQL server (or a primary and its replicas): plain tables.
    #[default]
    SingleServer,
    /// A Citus cluster, by schema-based sharding: the engine schema is a
    /// distributed schema (`citus_schema_distribute`), each engine table a
    /// single-shard table of the schema's colocation group, on one node.
    /// Connect the engine to the coordinator.
    CitusSchemaSharding,
}

/// How one table of the family is placed under a [`Layout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableDistribution {
    /// A plain table of the server.
    Local,
    /// A single-shard distributed table in the colocation group of its
    /// distributed schema (`pg_dist_partition`: `partmethod = 'n'`,
    /// `repmodel = 's'`, the `colocationid` of the schema in
    /// `pg_dist_schema`).
    SchemaShard,
}

impl Layout {
    /// Every layout, in the order the CLI lists them.
    pub const ALL: [Layout; 2] = [Layout::SingleServer, Layout::CitusSchemaSharding];

    /// The layout's name on the command line (`--layout citus`).
    pub const fn name(self) -> &'static str {
        match self {
            Layout::SingleServer => "single-server",
            Layout::CitusSchemaSharding => "citus",
        }
    }

    /// The layout named `name` ([`Layout::name`]), if any.
    pub fn from_name(name: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.name() == name)
    }

    /// Whether the family lives on a Citus cluster.
    pub fn is_citus(self) -> bool {
        matches!(self, Layout::CitusSchemaSharding)
    }

    /// What the layout is, in one line (the CLI's help for `--layout`).
    pub fn summary(self) -> &'static str {
        match self {
            Layout::SingleServer => "One PostgreSQL server: plain tables",
            Layout::CitusSchemaSharding => {
                "A Citus cluster by schema-based sharding: the schema is a distributed schema \
                 (citus_schema_distribute), every table a single-shard table on one node; run \
                 on the coordinator"
            }
        }
    }

    /// How every table of the engine family is placed: the layout is
    /// family-wide, so every table is placed alike.
    pub fn distribution(self) -> TableDistribution {
        match self {
            Layout::SingleServer => TableDistribution::Local,
            Layout::CitusSchemaSharding => TableDistribution::SchemaShard,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for layout in Layout::ALL {
            assert_eq!(Layout::from_name(layout.name()), Some(layout));
        }
        assert_eq!(Layout::from_name("citus-rows"), None);
    }
}
