//! The live catalog of one schema, read in one round trip.
//!
//! [`read`] sends one simple query ([`batch`]): the bounds of
//! [`render::bounds_statement`](crate::render::bounds_statement) (`SET LOCAL lock_timeout`, `SET LOCAL
//! statement_timeout`) followed by one `SELECT` ([`statement`]) that builds a
//! JSON document of everything in the schema from `pg_catalog`, and decodes
//! it. The statements of one simple query run as one implicit transaction,
//! so the `SET LOCAL`s bound the `SELECT` and end with it: one round trip, no
//! `BEGIN`/`COMMIT`, nothing left behind on the session, and an error ends
//! the implicit transaction too (an explicit `BEGIN` whose batch fails would
//! leave the session in an aborted transaction, which costs a `ROLLBACK`
//! round trip and which pgbouncer's statement pooling answers by dropping
//! the connection).
//!
//! What the document holds, per relation of the schema (tables, views,
//! materialized views, foreign and partitioned tables, sequences): kind,
//! persistence, access method, storage parameters (`reloptions`, and the
//! TOAST table's as `toast.name=value`), row-level security, inheritance
//! parents and children, columns (type, nullability, default, identity,
//! generation, collation), every index by its whole `pg_get_indexdef`, every
//! constraint, non-internal triggers, rules, policies, comments; for a
//! sequence its options and the column that owns it; and every other object
//! in the schema (functions, procedures, types, operators, collations, ...). Definitions come from
//! PostgreSQL's own deparsers (`format_type`, `pg_get_expr`,
//! `pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_triggerdef`,
//! `pg_get_ruledef`), the same strings [`schema_model::description`] writes,
//! so comparing is comparing strings.
//!
//! The statement only reads `pg_catalog`, which every role may read: it works
//! for a runtime role that has nothing but `USAGE` on the schema and DML on
//! its tables, and for a role that cannot even see the schema. The deparsers
//! take `ACCESS SHARE` on each table for the length of the statement (what
//! every `SELECT` takes), which conflicts only with `ACCESS EXCLUSIVE` (`ALTER
//! TABLE`, `DROP`, `TRUNCATE`, `VACUUM FULL`, `LOCK TABLE`): that wait is the
//! one `lock_timeout` bounds.

mod holders;
mod query;
mod read;
mod sessions;

use serde::{Deserialize, Serialize};

pub(crate) use holders::{explain, holders, lock_holders};
pub use query::{batch, statement};
pub(crate) use read::parse;
pub use read::{read, read_with};
pub use sessions::LiveSession;
pub(crate) use sessions::sessions;

/// One schema's catalog as PostgreSQL reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveCatalog {
    /// `current_user` of the session that read it.
    pub role: String,
    /// `current_database()`.
    pub database: String,
    /// The schema, or `None` when it does not exist.
    pub schema: Option<LiveSchema>,
    /// The schema's relations, by name (empty when the schema does not exist).
    pub relations: Vec<LiveRelation>,
    /// Every other object in the schema (functions, procedures, types,
    /// operators, collations, extensions, ...), as `pg_describe_object`
    /// words it: `function alk.f(integer)`.
    #[serde(default)]
    pub objects: Vec<String>,
    /// The schema's `schema_versions` table as the role could read it,
    /// `None` when the schema has no such table.
    #[serde(default)]
    pub versions: Option<LiveVersions>,
}

/// The `schema_versions` table of a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVersions {
    /// Whether the role may `SELECT` from it.
    pub readable: bool,
    /// Its rows, oldest version first; `None` when the role may not read
    /// them, or the table lacks a column the model declares.
    pub rows: Option<Vec<schema_model::SchemaVersionRecord>>,
}

/// The schema itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSchema {
    /// `COMMENT ON SCHEMA`, if any.
    pub comment: Option<String>,
}

/// A table (or view, sequence, ...) of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveRelation {
    /// Its name.
    pub name: String,
    /// `pg_class.relkind`: `r` table, `p` partitioned table, `v` view,
    /// `m` materialized view, `f` foreign table, `S` sequence.
    pub kind: String,
    /// `pg_class.relpersistence`: `p` permanent, `u` unlogged, `t` temporary.
    pub persistence: String,
    /// The table access method (`heap`), `None` for relations without one.
    pub access_method: Option<String>,
    /// `pg_class.reloptions` (`fillfactor=70`), then the TOAST table's, each
    /// prefixed `toast.`, as `ALTER TABLE ... SET (toast.name=value)` writes them.
    pub options: Vec<String>,
    /// `relrowsecurity`: `ALTER TABLE ... ENABLE ROW LEVEL SECURITY`.
    pub row_security: bool,
    /// `relforcerowsecurity`: `... FORCE ROW LEVEL SECURITY` (the owner too).
    pub force_row_security: bool,
    /// `COMMENT ON TABLE`, if any.
    pub comment: Option<String>,
    /// The tables it inherits from, or the one it is a partition of.
    pub parents: Vec<LiveParent>,
    /// The tables that inherit from it, or its partitions, qualified.
    pub children: Vec<String>,
    /// For a sequence: its options and the column that owns it.
    pub sequence: Option<LiveSequence>,
    /// Columns in `attnum` order.
    pub columns: Vec<LiveColumn>,
    /// Indexes that do not back a constraint, by name.
    pub indexes: Vec<LiveIndex>,
    /// Constraints other than `NOT NULL` and constraint triggers, by name.
    pub constraints: Vec<LiveConstraint>,
    /// Triggers that are not internal (not those of foreign keys), by name.
    pub triggers: Vec<LiveTrigger>,
    /// Rewrite rules other than a view's own `_RETURN`, by name.
    pub rules: Vec<LiveRule>,
    /// Row-level security policies, by name.
    pub policies: Vec<LivePolicy>,
    /// The foreign keys of any table (in any schema) that reference it.
    pub referenced_by: Vec<LiveReference>,
}

/// A foreign key that references a relation of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveReference {
    /// The foreign key's name.
    pub constraint: String,
    /// The referencing table's schema.
    pub schema: String,
    /// The referencing table.
    pub table: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
}

/// A parent in `pg_inherits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveParent {
    /// The parent, qualified (`schema.table`).
    pub name: String,
    /// `FOR VALUES ...` when the relation is a partition of it.
    pub partition_bound: Option<String>,
}

/// The column of a table in the same schema that owns a sequence (`pg_depend`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveOwner {
    /// The owning table.
    pub table: String,
    /// The owning column.
    pub column: String,
    /// Whether it is the column's identity sequence (else `OWNED BY`, as
    /// for `serial`).
    pub identity: bool,
}

/// A column.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveColumn {
    /// Its name.
    pub name: String,
    /// `format_type(atttypid, atttypmod)`.
    #[serde(rename = "type")]
    pub sql_type: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// `attidentity`: `a` always, `d` by default, empty for none.
    pub identity: String,
    /// `attgenerated`: `s` stored (`v` virtual on PostgreSQL 18), empty for none.
    pub generated: String,
    /// `pg_get_expr` of the default or generation expression, if any.
    pub expression: Option<String>,
    /// The column's collation when it is not its type's default (`"C"`).
    pub collation: Option<String>,
    /// Whether its type is a domain (whose constraints apply to a NULL too).
    pub domain: bool,
    /// `COMMENT ON COLUMN`, if any.
    pub comment: Option<String>,
}

/// The options of a sequence (`pg_sequence`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSequence {
    /// The column that owns it, if it belongs to a table of the schema.
    pub owner: Option<LiveOwner>,
    /// `AS` type, as `format_type` reports it.
    #[serde(rename = "type")]
    pub sql_type: String,
    /// `START WITH`.
    pub start: i64,
    /// `INCREMENT BY`.
    pub increment: i64,
    /// `MINVALUE`.
    pub min: i64,
    /// `MAXVALUE`.
    pub max: i64,
    /// `CACHE`.
    pub cache: i64,
    /// `CYCLE`.
    pub cycle: bool,
    /// `p` logged, `u` unlogged.
    pub persistence: String,
}

impl LiveCatalog {
    /// The relation named `name`, if the schema has one.
    pub fn relation(&self, name: &str) -> Option<&LiveRelation> {
        self.relations.iter().find(|r| r.name == name)
    }

    /// The identity sequence of `table.column`, if the schema has it.
    pub fn identity_sequence(&self, table: &str, column: &str) -> Option<&LiveSequence> {
        self.relations
            .iter()
            .filter_map(|r| r.sequence.as_ref())
            .find(|s| {
                s.owner
                    .as_ref()
                    .is_some_and(|o| o.identity && o.table == table && o.column == column)
            })
    }
}

/// An index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveIndex {
    /// Its name.
    pub name: String,
    /// `pg_get_indexdef`, whole (`CREATE INDEX name ON schema.table USING ...`):
    /// key columns with their collation, operator class and order, `INCLUDE`,
    /// `NULLS NOT DISTINCT`, `WITH (...)` and `WHERE`.
    pub definition: String,
    /// `indisvalid`: false after a failed `CREATE INDEX CONCURRENTLY`.
    pub valid: bool,
    /// What a write evaluates to maintain it beyond PostgreSQL's own
    /// leakproof functions and operators on plain columns, as
    /// `pg_describe_object` words it: functions and operators' functions
    /// that are not leakproof (they can fail: `function int4div(integer,
    /// integer)`) or not in `pg_catalog`, expression nodes other than
    /// plain operators, functions, boolean and null tests (`expression node
    /// coerceviaio`), operator classes and collations outside `pg_catalog`.
    /// Empty for an index on plain columns.
    #[serde(default)]
    pub evaluates: Vec<String>,
}

/// A constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveConstraint {
    /// Its name.
    pub name: String,
    /// `contype`: `c` check, `p` primary key, `u` unique, `f` foreign key,
    /// `x` exclusion.
    #[serde(rename = "type")]
    pub constraint_type: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
}

/// A trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveTrigger {
    /// Its name.
    pub name: String,
    /// `pg_get_triggerdef`.
    pub definition: String,
    /// `tgenabled`: `O` origin, `D` disabled, `R` replica, `A` always.
    pub enabled: String,
}

/// A rewrite rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRule {
    /// Its name.
    pub name: String,
    /// `pg_get_ruledef`.
    pub definition: String,
}

/// A row-level security policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePolicy {
    /// Its name.
    pub name: String,
    /// `polcmd`: `r` SELECT, `a` INSERT, `w` UPDATE, `d` DELETE, `*` ALL.
    pub command: String,
    /// `PERMISSIVE` (true) or `RESTRICTIVE`.
    pub permissive: bool,
    /// The roles it applies to (`public` for everyone).
    pub roles: Option<Vec<String>>,
    /// `USING (...)`.
    pub using: Option<String>,
    /// `WITH CHECK (...)`.
    pub check: Option<String>,
}

impl LiveIndex {
    /// The definition without its `CREATE [UNIQUE] INDEX name ON schema.table `
    /// prefix (from `USING` on, prefixed `UNIQUE ` for a unique index), the
    /// way [`schema_model::IndexDescription::definition`] has it, for messages.
    ///
    /// ```
    /// use schema_gen::catalog::LiveIndex;
    ///
    /// let index = LiveIndex {
    ///     name: "i".into(),
    ///     definition: "CREATE UNIQUE INDEX i ON s.t USING btree (a) WHERE (b IS NULL)".into(),
    ///     valid: true,
    ///     evaluates: vec![],
    /// };
    /// assert_eq!(index.from_using(), "UNIQUE USING btree (a) WHERE (b IS NULL)");
    /// ```
    pub fn from_using(&self) -> String {
        let using = self
            .definition
            .find(" USING ")
            .map(|at| &self.definition[at + 1..])
            .unwrap_or(&self.definition);
        if self.definition.starts_with("CREATE UNIQUE INDEX ") {
            format!("UNIQUE {using}")
        } else {
            using.to_owned()
        }
    }
}

impl LivePolicy {
    /// The policy in `CREATE POLICY` words, for messages.
    pub fn describe(&self) -> String {
        let command = match self.command.as_str() {
            "r" => "SELECT",
            "a" => "INSERT",
            "w" => "UPDATE",
            "d" => "DELETE",
            _ => "ALL",
        };
        let mut text = format!(
            "AS {} FOR {command} TO {}",
            if self.permissive {
                "PERMISSIVE"
            } else {
                "RESTRICTIVE"
            },
            self.roles.as_deref().unwrap_or_default().join(", ")
        );
        if let Some(using) = &self.using {
            text.push_str(&format!(" USING ({using})"));
        }
        if let Some(check) = &self.check {
            text.push_str(&format!(" WITH CHECK ({check})"));
        }
        text
    }
}
