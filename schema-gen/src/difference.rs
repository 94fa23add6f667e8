//! [`Difference`]: one way a live schema differs from the model, worded for
//! a DBA. It is plain data with no I/O, so both [`crate::verify`](mod@crate::verify) (which
//! finds differences) and [`crate::error`] (whose drift error carries them)
//! depend on it, and neither on the other.

use std::fmt;

use serde::Serialize;

use schema_model::Layout;

/// The layout the distribution differences are about, as the CLI names it.
const CITUS: &str = Layout::CitusSchemaSharding.name();

/// One way the live schema differs from the model.
///
/// `Display` gives the sentence for a DBA, e.g.
/// `jobs.priority: type is bigint, model says integer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Difference {
    /// The schema does not exist (bootstrap creates it).
    MissingSchema {
        /// The schema's name.
        schema: String,
    },
    /// A table of the model does not exist (bootstrap creates it).
    MissingTable {
        /// The table's name.
        table: String,
    },
    /// A relation the model does not declare lives in the engine schema (a
    /// table, view, sequence, ...): foreign, the engine never reads or
    /// writes it, unless its name is one an upgrade from here creates.
    ExtraRelation {
        /// Its name.
        name: String,
        /// What it is, in words (`table`, `view`, ...).
        what: String,
        /// Why it is in the way, in words; `None` for a foreign relation.
        risk: Option<String>,
    },
    /// A table of the model exists as something else than a permanent table.
    RelationKind {
        /// The table's name.
        table: String,
        /// What it is, in words (`a view`, `an unlogged table`, ...).
        found: String,
    },
    /// A column of the model does not exist.
    MissingColumn {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
    },
    /// A column the model does not declare: foreign when it is nullable,
    /// with no default, identity or generation and a type that is no domain
    /// (the engine's statements name their columns, and its inserts leave
    /// it NULL), drift otherwise.
    ExtraColumn {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// Its type, as `format_type` reports it.
        found_type: String,
        /// Why it can change what the engine's statements do, in words;
        /// `None` for a foreign column.
        risk: Option<String>,
    },
    /// A column has another type.
    ColumnType {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// The live type.
        found: String,
        /// The model's type.
        expected: String,
    },
    /// A column's nullability differs.
    Nullability {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// Whether the live column accepts `NULL`.
        found_nullable: bool,
    },
    /// A column's value source differs: default, identity or generation.
    ColumnSource {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// The live source, in SQL words (`no default`, `DEFAULT 0`, ...).
        found: String,
        /// The model's source, in the same words.
        expected: String,
    },
    /// An index of the model does not exist.
    MissingIndex {
        /// The table the model puts it on.
        table: String,
        /// The index's name.
        index: String,
        /// The model's definition (from `USING` on).
        expected: String,
    },
    /// An index the model does not declare: foreign when it is not unique
    /// and all it evaluates on a write (keys, predicate) is PostgreSQL's own
    /// leakproof functions and operators, its operator classes and
    /// collations PostgreSQL's own; drift otherwise.
    ExtraIndex {
        /// The table it is on.
        table: String,
        /// The index's name.
        index: String,
        /// Its definition (from `USING` on).
        found: String,
        /// Why it can change what the engine's statements do, in words;
        /// `None` for a foreign index.
        risk: Option<String>,
        /// Its key columns that the model's indexes of the table have too:
        /// columns the engine's statements search or order by, so the
        /// planner may choose this index for them (with statistics that
        /// have not seen a new queue yet, a claim can then read the whole
        /// queue and sort it). Empty when it shares none.
        engine_columns: Vec<String>,
    },
    /// An index has the model's name and another definition.
    IndexDefinition {
        /// The table it is on.
        table: String,
        /// The index's name.
        index: String,
        /// The live definition (from `USING` on).
        found: String,
        /// The model's definition.
        expected: String,
    },
    /// An index is marked invalid (a failed `CREATE INDEX CONCURRENTLY`):
    /// PostgreSQL keeps maintaining it but never reads it.
    InvalidIndex {
        /// The table it is on.
        table: String,
        /// The index's name.
        index: String,
    },
    /// A constraint of the model does not exist.
    MissingConstraint {
        /// The table's name.
        table: String,
        /// The constraint's name.
        constraint: String,
        /// The model's definition, as `pg_get_constraintdef` prints it.
        expected: String,
    },
    /// A constraint the model does not declare.
    ExtraConstraint {
        /// The table's name.
        table: String,
        /// The constraint's name.
        constraint: String,
        /// Its definition.
        found: String,
    },
    /// A constraint has the model's name and another definition.
    ConstraintDefinition {
        /// The table's name.
        table: String,
        /// The constraint's name.
        constraint: String,
        /// The live definition.
        found: String,
        /// The model's definition.
        expected: String,
    },
    /// An object that is not a relation (a function, procedure, type,
    /// operator, collation, extension, ...) lives in the engine schema; the
    /// model declares none.
    ExtraObject {
        /// The object as PostgreSQL describes it: `function alk.f(integer)`.
        object: String,
    },
    /// A table has another access method than the model's.
    AccessMethod {
        /// The table's name.
        table: String,
        /// The live access method.
        found: String,
        /// The model's (`heap`).
        expected: String,
    },
    /// A table's storage parameters (`reloptions`, `toast.*` for its TOAST
    /// table) are not exactly the model's.
    StorageParameters {
        /// The table's name.
        table: String,
        /// The live parameters, sorted.
        found: Vec<String>,
        /// The model's, sorted.
        expected: Vec<String>,
    },
    /// Row-level security is enabled (or forced) on a table; the model has
    /// none, so roles would silently see and change only some rows.
    RowSecurity {
        /// The table's name.
        table: String,
        /// `ENABLE ROW LEVEL SECURITY`.
        enabled: bool,
        /// `FORCE ROW LEVEL SECURITY` (the owner too).
        forced: bool,
    },
    /// A row-level security policy the model does not declare.
    ExtraPolicy {
        /// The table's name.
        table: String,
        /// The policy's name.
        policy: String,
        /// The policy in `CREATE POLICY` words.
        definition: String,
    },
    /// A trigger the model does not declare (it could rewrite or drop the
    /// rows the engine writes).
    ExtraTrigger {
        /// The table's name.
        table: String,
        /// The trigger's name.
        trigger: String,
        /// `pg_get_triggerdef`.
        definition: String,
        /// Whether it is disabled (`ALTER TABLE ... DISABLE TRIGGER`).
        disabled: bool,
    },
    /// A rewrite rule the model does not declare (it could turn the engine's
    /// statements into others, or into nothing).
    ExtraRule {
        /// The table's name.
        table: String,
        /// The rule's name.
        rule: String,
        /// `pg_get_ruledef`.
        definition: String,
    },
    /// An option of an identity column's sequence differs from the model's
    /// (a sequence that counts backwards, cycles, caches per session or is
    /// unlogged breaks "ids only grow").
    IdentityOption {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// The live option, e.g. `INCREMENT BY -1`.
        found: String,
        /// The model's, e.g. `INCREMENT BY 1`.
        expected: String,
    },
    /// A column's collation differs from its type's default (what the model
    /// declares): comparisons, ordering and indexes on it change.
    Collation {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// The live collation.
        found: String,
    },
    /// A table inherits from another table, or is a partition of one.
    Parent {
        /// The table's name.
        table: String,
        /// The parent, qualified.
        parent: String,
        /// `FOR VALUES ...` when it is a partition.
        partition_bound: Option<String>,
    },
    /// Another table inherits from an engine table (or is its partition):
    /// the engine's reads, updates and deletes on it reach that table's rows too.
    Child {
        /// The engine table's name.
        table: String,
        /// The child, qualified.
        child: String,
    },
    /// A foreign key of another table references an engine table: the
    /// engine's deletes and updates of that table check it (and fail, or
    /// cascade, and wait for locks on the other table). The model declares
    /// none.
    ReferencedBy {
        /// The engine table's name.
        table: String,
        /// The referencing table, qualified.
        by: String,
        /// The foreign key's name.
        constraint: String,
        /// `pg_get_constraintdef`.
        definition: String,
    },
    /// A comment differs from the model's doc (documentation only).
    Comment {
        /// `schema alk`, `table jobs` or `column jobs.queue`.
        object: String,
        /// The live comment, if any.
        found: Option<String>,
        /// The model's doc.
        expected: String,
    },
    /// Under the Citus layout: the engine schema is not a distributed
    /// schema (`pg_dist_schema` has no row for it).
    UndistributedSchema {
        /// The schema's name.
        schema: String,
        /// The call that distributes it, run on the coordinator.
        remedy: String,
    },
    /// Under the Citus layout: a table of the model is placed otherwise than
    /// the layout says (a local table, a hash-distributed or reference
    /// table, a single-shard table of another colocation group).
    TableDistribution {
        /// The table's name.
        table: String,
        /// How it is placed, in words.
        found: String,
        /// How the layout places it, in words.
        expected: String,
    },
}

/// What a [`Difference`] means for the engine: the one place that decides
/// whether bootstrap refuses, `check` fails, an upgrade plans around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An engine object that does not exist yet and that bootstrap creates
    /// (a missing schema or table).
    Missing,
    /// A comment: documentation, never a reason to refuse.
    Documentation,
    /// An object the model does not own and that cannot change what the
    /// engine's statements read, write or return (a DBA's reporting index,
    /// a nullable column without default, a table or view of its own):
    /// reported, left alone, never refused; `check`'s policy decides
    /// whether it fails CI.
    Foreign,
    /// Anything else: an engine object with another shape than the model's,
    /// or an object that can change what the engine's statements do (a
    /// unique index, a trigger, a rule, a `CHECK`, a default, row-level
    /// security, a foreign key, a `NOT NULL` extra column, ...). Bootstrap
    /// refuses; an upgrade refuses.
    Drift,
}

impl Difference {
    /// What this difference means for the engine ([`Class`]).
    pub fn class(&self) -> Class {
        match self {
            Self::MissingSchema { .. } | Self::MissingTable { .. } => Class::Missing,
            Self::Comment { .. } => Class::Documentation,
            Self::ExtraRelation { risk: None, .. }
            | Self::ExtraColumn { risk: None, .. }
            | Self::ExtraIndex { risk: None, .. } => Class::Foreign,
            _ => Class::Drift,
        }
    }

    /// Whether this is an engine object that does not exist yet and that
    /// bootstrap creates (a missing schema or table), rather than drift.
    pub fn is_missing_object(&self) -> bool {
        self.class() == Class::Missing
    }

    /// Whether this is a comment difference: documentation, not shape.
    /// `check` reports it; bootstrap never refuses over it, and a re-run of
    /// the printed script (`schema-gen sql | psql`) refreshes comments.
    pub fn is_comment(&self) -> bool {
        self.class() == Class::Documentation
    }

    /// Whether this is a foreign object ([`Class::Foreign`]): reported,
    /// never refused.
    pub fn is_foreign(&self) -> bool {
        self.class() == Class::Foreign
    }

    /// Whether this is drift ([`Class::Drift`]): bootstrap refuses.
    pub fn is_drift(&self) -> bool {
        self.class() == Class::Drift
    }

    /// The same extra object, drift for `reason` (a foreign object whose
    /// name an upgrade from here would create); any other difference as it
    /// is.
    pub fn in_the_way(mut self, reason: String) -> Self {
        if let Self::ExtraRelation { risk, .. }
        | Self::ExtraColumn { risk, .. }
        | Self::ExtraIndex { risk, .. } = &mut self
        {
            *risk = Some(reason);
        }
        self
    }

    /// The name an extra object goes by (in `check --allow-foreign`, and
    /// when an upgrade would create an object of that name): an index's or
    /// relation's name, `table.column` for a column; `None` for every other
    /// difference.
    pub fn foreign_name(&self) -> Option<String> {
        match self {
            Self::ExtraRelation { name, .. } => Some(name.clone()),
            Self::ExtraIndex { index, .. } => Some(index.clone()),
            Self::ExtraColumn { table, column, .. } => Some(format!("{table}.{column}")),
            _ => None,
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingSchema { schema } => write!(f, "missing schema {schema}"),
            Self::MissingTable { table } => write!(f, "missing table {table}"),
            Self::UndistributedSchema { schema, remedy } => write!(
                f,
                "schema {schema} is not a distributed schema, layout {CITUS} says it is one \
                 (`{remedy}` on the coordinator makes it one)"
            ),
            Self::TableDistribution {
                table,
                found,
                expected,
            } => write!(f, "{table} is {found}, layout {CITUS} says {expected}"),
            Self::ExtraRelation { name, what, risk } => {
                write!(f, "extra {what} {name} (not in the model)")?;
                risk_words(f, risk)
            }
            Self::ReferencedBy {
                table,
                by,
                constraint,
                definition,
            } => write!(
                f,
                "{table}: foreign key {constraint} of {by} references it (`{definition}`): the \
                 engine's deletes and updates of {table} check it; model says none"
            ),
            Self::RelationKind { table, found } => {
                write!(f, "{table}: is {found}, model says a permanent table")
            }
            Self::MissingColumn { table, column } => write!(f, "missing column {table}.{column}"),
            Self::ExtraColumn {
                table,
                column,
                found_type,
                risk,
            } => {
                write!(f, "extra column {table}.{column} ({found_type})")?;
                risk_words(f, risk)
            }
            Self::ColumnType {
                table,
                column,
                found,
                expected,
            } => write!(
                f,
                "{table}.{column}: type is {found}, model says {expected}"
            ),
            Self::Nullability {
                table,
                column,
                found_nullable: true,
            } => write!(f, "{table}.{column}: accepts NULL, model says NOT NULL"),
            Self::Nullability {
                table,
                column,
                found_nullable: false,
            } => write!(
                f,
                "{table}.{column}: is NOT NULL, model says it accepts NULL"
            ),
            Self::ColumnSource {
                table,
                column,
                found,
                expected,
            } => write!(f, "{table}.{column}: has {found}, model says {expected}"),
            Self::MissingIndex {
                table,
                index,
                expected,
            } => write!(
                f,
                "missing index {index} on {table} (model says `{expected}`)"
            ),
            Self::ExtraIndex {
                table,
                index,
                found,
                risk,
                engine_columns,
            } => {
                write!(f, "extra index {index} on {table}: `{found}`")?;
                risk_words(f, risk)?;
                if risk.is_none() && !engine_columns.is_empty() {
                    write!(
                        f,
                        " (it keys on {}, which the engine's statements search {table} by: \
                         unless its predicate is one they never state, the planner may choose it \
                         for them)",
                        engine_columns.join(", ")
                    )?;
                }
                Ok(())
            }
            Self::IndexDefinition {
                index,
                found,
                expected,
                ..
            } => write!(f, "index {index}: is `{found}`, model says `{expected}`"),
            Self::InvalidIndex { table, index } => write!(
                f,
                "index {index} on {table} is INVALID (a failed CREATE INDEX CONCURRENTLY?): \
                 PostgreSQL never reads it"
            ),
            Self::MissingConstraint {
                table,
                constraint,
                expected,
            } => write!(
                f,
                "missing {} constraint {constraint} on {table} (model says `{expected}`)",
                constraint_word(expected)
            ),
            Self::ExtraConstraint {
                table,
                constraint,
                found,
            } => write!(f, "extra constraint {constraint} on {table}: `{found}`"),
            Self::ConstraintDefinition {
                constraint,
                found,
                expected,
                ..
            } => write!(
                f,
                "constraint {constraint}: is `{found}`, model says `{expected}`"
            ),
            Self::ExtraObject { object } => write!(f, "extra {object} (not in the model)"),
            Self::AccessMethod {
                table,
                found,
                expected,
            } => write!(
                f,
                "{table}: table access method is {found}, model says {expected}"
            ),
            Self::StorageParameters {
                table,
                found,
                expected,
            } => write!(
                f,
                "{table}: storage parameters are {}, model says {}",
                parameter_list(found),
                parameter_list(expected)
            ),
            Self::RowSecurity {
                table,
                enabled,
                forced,
            } => {
                let state = match (enabled, forced) {
                    (true, true) => "enabled and forced",
                    (true, false) => "enabled",
                    (false, _) => "forced (it takes effect once enabled)",
                };
                write!(
                    f,
                    "{table}: row-level security is {state}, model says disabled (with it, a \
                     role sees and changes only the rows a policy allows, none without a policy)"
                )
            }
            Self::ExtraPolicy {
                table,
                policy,
                definition,
            } => write!(f, "extra policy {policy} on {table}: `{definition}`"),
            Self::ExtraTrigger {
                table,
                trigger,
                definition,
                disabled,
            } => write!(
                f,
                "extra trigger {trigger} on {table}{}: `{definition}`",
                if *disabled { " (disabled)" } else { "" }
            ),
            Self::ExtraRule {
                table,
                rule,
                definition,
            } => write!(f, "extra rule {rule} on {table}: `{definition}`"),
            Self::IdentityOption {
                table,
                column,
                found,
                expected,
            } => write!(
                f,
                "{table}.{column}: identity sequence has {found}, model says {expected}"
            ),
            Self::Collation {
                table,
                column,
                found,
            } => write!(
                f,
                "{table}.{column}: collation is {found}, model says the type's default"
            ),
            Self::Parent {
                table,
                parent,
                partition_bound: Some(bound),
            } => write!(
                f,
                "{table}: is a partition of {parent} {bound}, model says a table of its own"
            ),
            Self::Parent {
                table,
                parent,
                partition_bound: None,
            } => write!(
                f,
                "{table}: inherits from {parent}, model says a table of its own"
            ),
            Self::Child { table, child } => write!(
                f,
                "{table}: {child} inherits from it (or is its partition), so the engine's reads, \
                 updates and deletes of {table} reach its rows too; model says no child"
            ),
            Self::Comment {
                object,
                found: Some(found),
                expected,
            } => write!(
                f,
                "comment on {object}: is {found:?}, model says {expected:?}"
            ),
            Self::Comment {
                object,
                found: None,
                expected,
            } => write!(f, "comment on {object}: missing, model says {expected:?}"),
        }
    }
}

/// `: <why it can change the engine's statements>`, when it can.
fn risk_words(f: &mut fmt::Formatter<'_>, risk: &Option<String>) -> fmt::Result {
    match risk {
        Some(risk) => write!(f, ": {risk}"),
        None => Ok(()),
    }
}

/// `(a=1, b=2)`, or `none`.
fn parameter_list(parameters: &[String]) -> String {
    if parameters.is_empty() {
        "none".to_owned()
    } else {
        format!("({})", parameters.join(", "))
    }
}

/// `CHECK`, `PRIMARY KEY`, ...: the leading words of a constraint definition.
fn constraint_word(definition: &str) -> &str {
    definition
        .find(" (")
        .map(|at| &definition[..at])
        .unwrap_or("a")
}
