//! [`Difference`]: one way a live schema differs from the model, worded for
//! a DBA. It is plain data with no I/O, so both [`crate::verify`] (which
//! finds differences) and [`crate::error`] (whose drift error carries them)
//! depend on it, and neither on the other.

use std::fmt;

use serde::Serialize;

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
    /// A relation the model does not declare lives in the engine schema.
    ExtraRelation {
        /// Its name.
        name: String,
        /// What it is, in words (`table`, `view`, ...).
        what: String,
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
    /// A column the model does not declare.
    ExtraColumn {
        /// The table's name.
        table: String,
        /// The column's name.
        column: String,
        /// Its type, as `format_type` reports it.
        found_type: String,
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
    /// An index the model does not declare.
    ExtraIndex {
        /// The table it is on.
        table: String,
        /// The index's name.
        index: String,
        /// Its definition (from `USING` on).
        found: String,
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
    /// A comment differs from the model's doc (documentation only).
    Comment {
        /// `schema alk`, `table jobs` or `column jobs.queue`.
        object: String,
        /// The live comment, if any.
        found: Option<String>,
        /// The model's doc.
        expected: String,
    },
}

impl Difference {
    /// Whether this is an engine object that does not exist yet and that
    /// bootstrap creates (a missing schema or table), rather than drift.
    pub fn is_missing_object(&self) -> bool {
        matches!(self, Self::MissingSchema { .. } | Self::MissingTable { .. })
    }

    /// Whether this is a comment difference: documentation, not shape.
    /// `check` reports it; bootstrap never refuses over it, and a re-run of
    /// the printed script (`schema-gen sql | psql`) refreshes comments.
    pub fn is_comment(&self) -> bool {
        matches!(self, Self::Comment { .. })
    }

    /// Whether this is drift: an object that exists with another shape than
    /// the model's, or that the model does not declare. Bootstrap refuses.
    pub fn is_drift(&self) -> bool {
        !self.is_missing_object() && !self.is_comment()
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingSchema { schema } => write!(f, "missing schema {schema}"),
            Self::MissingTable { table } => write!(f, "missing table {table}"),
            Self::ExtraRelation { name, what } => {
                write!(f, "extra {what} {name} (not in the model)")
            }
            Self::RelationKind { table, found } => {
                write!(f, "{table}: is {found}, model says a permanent table")
            }
            Self::MissingColumn { table, column } => write!(f, "missing column {table}.{column}"),
            Self::ExtraColumn {
                table,
                column,
                found_type,
            } => write!(f, "extra column {table}.{column} ({found_type})"),
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
            } => write!(f, "extra index {index} on {table}: `{found}`"),
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

/// `CHECK`, `PRIMARY KEY`, ...: the leading words of a constraint definition.
fn constraint_word(definition: &str) -> &str {
    definition
        .find(" (")
        .map(|at| &definition[..at])
        .unwrap_or("a")
}
