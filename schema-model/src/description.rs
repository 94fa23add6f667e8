//! The family described in plain data: what `schema-gen describe` prints for
//! reviewers, and what verification compares the live catalog with.
//!
//! Every definition string is written the way PostgreSQL itself reports it
//! (`format_type`, `pg_get_expr`, `pg_get_indexdef`, `pg_get_constraintdef`),
//! so a comparison with the live catalog is a comparison of equal strings.

use sea_query::{DynIden, PostgresQueryBuilder, QuotedBuilder};
use serde::{Deserialize, Serialize};

use crate::table::{
    CheckRule, ColumnDefault, IndexDef, IndexExpression, IndexKey, IndexPredicate, Order,
    StorageParameter, TableModel, TableVisitor,
};

/// One table of the family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDescription {
    /// The table's name.
    pub name: String,
    /// What a row is.
    pub doc: String,
    /// Columns in declaration order.
    pub columns: Vec<ColumnDescription>,
    /// The primary key constraint.
    pub primary_key: ConstraintDescription,
    /// Secondary indexes.
    pub indexes: Vec<IndexDescription>,
    /// Named `CHECK` constraints.
    pub checks: Vec<ConstraintDescription>,
    /// Storage parameters as `pg_class.reloptions` lists them (`fillfactor=70`).
    /// (Absent from the descriptions of versions that declared none.)
    #[serde(default)]
    pub storage_parameters: Vec<String>,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDescription {
    /// The column's name.
    pub name: String,
    /// The type as `format_type` reports it.
    pub sql_type: String,
    /// Whether it accepts `NULL`.
    pub nullable: bool,
    /// `DEFAULT` expression as `pg_get_expr` reports it, if any.
    pub default: Option<String>,
    /// `"always"` for `GENERATED ALWAYS AS IDENTITY`.
    pub identity: Option<String>,
    /// Stored generation expression as `pg_get_expr` reports it, if any.
    pub generated: Option<String>,
    /// The one-line doc (`COMMENT ON COLUMN`).
    pub doc: String,
}

/// One index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDescription {
    /// The index's name.
    pub name: String,
    /// `pg_get_indexdef` from ` USING ` on (the part that does not depend on
    /// the schema or on `search_path`).
    pub definition: String,
    /// Which hot path it serves.
    pub doc: String,
}

/// One named constraint (primary key or `CHECK`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConstraintDescription {
    /// The constraint's name.
    pub name: String,
    /// As `pg_get_constraintdef` reports it.
    pub definition: String,
}

/// Every keyword that PostgreSQL 15's `quote_ident` quotes: the reserved,
/// type/function-name and column-name keywords, i.e. `SELECT word FROM
/// pg_get_keywords() WHERE catcode <> 'U'`. The integration tests check the
/// model's identifiers against the server's own `quote_ident`.
const QUOTED_KEYWORDS: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

/// An identifier the way PostgreSQL's `quote_ident` writes it (and so the
/// way `pg_get_indexdef` and `pg_get_constraintdef` print it): bare when it
/// is a plain lowercase word that is not one of the keywords above, quoted
/// otherwise. Deciding *when* to quote is the server's rule, written here;
/// the quoting itself is sea-query's PostgreSQL identifier quoting (already
/// this crate's dependency; the same `"`-doubling as postgres-protocol's
/// `escape_identifier`, which would pull PostgreSQL's authentication crates
/// into this no-I/O model crate).
///
/// ```
/// use schema_model::description::pg_ident;
///
/// assert_eq!(pg_ident("queue"), "queue");
/// assert_eq!(pg_ident("offset"), "\"offset\"");
/// assert_eq!(pg_ident("Odd\"Name"), "\"Odd\"\"Name\"");
/// ```
pub fn pg_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain && !QUOTED_KEYWORDS.contains(&name) {
        name.to_owned()
    } else {
        let mut quoted = String::with_capacity(name.len() + 2);
        PostgresQueryBuilder.prepare_iden(&DynIden::from(name.to_owned()), &mut quoted);
        quoted
    }
}

fn col<C: TableModel>(column: C) -> String {
    pg_ident(&column.to_string())
}

impl TableDescription {
    /// Describes one table of the model.
    pub fn of<T: TableModel>() -> Self {
        let table = T::table_name();
        let columns = T::columns()
            .into_iter()
            .map(|(variant, column)| {
                let (default, identity, generated) = match column.default {
                    None => (None, None, None),
                    Some(ColumnDefault::IdentityAlways) => (None, Some("always".to_owned()), None),
                    Some(ColumnDefault::CurrentTransactionId) => {
                        (Some("pg_current_xact_id()".to_owned()), None, None)
                    }
                    Some(ColumnDefault::GeneratedSum(a, b)) => {
                        (None, None, Some(format!("({} + {})", col(a), col(b))))
                    }
                };
                ColumnDescription {
                    name: variant.to_string(),
                    sql_type: column.sql_type.pg_name().to_owned(),
                    nullable: column.nullable,
                    default,
                    identity,
                    generated,
                    doc: column.doc.to_owned(),
                }
            })
            .collect();
        let pk_columns: Vec<String> = T::primary_key().into_iter().map(col).collect();
        let primary_key = ConstraintDescription {
            name: format!("{table}_pkey"),
            definition: format!("PRIMARY KEY ({})", pk_columns.join(", ")),
        };
        let indexes = T::indexes().iter().map(IndexDescription::of).collect();
        let checks = T::checks()
            .into_iter()
            .map(|check| ConstraintDescription {
                name: check.name.to_owned(),
                definition: format!("CHECK ({})", check_condition(&check.rule)),
            })
            .collect();
        Self {
            name: table,
            doc: T::DOC.to_owned(),
            columns,
            primary_key,
            indexes,
            checks,
            storage_parameters: T::storage_parameters()
                .into_iter()
                .map(StorageParameter::reloption)
                .collect(),
        }
    }
}

impl IndexDescription {
    /// Describes one index of table `T` the way `pg_get_indexdef` prints it
    /// from ` USING ` on, `UNIQUE ` first for a unique index: its keys
    /// (columns, and expressions such as `lower(queue)`, each `DESC` where
    /// it descends) and its `WHERE` clause.
    ///
    /// ```
    /// use schema_model::{IndexDef, IndexDescription, IndexKey, IndexPredicate, Jobs};
    ///
    /// let index = IndexDef::new(
    ///     "i",
    ///     [IndexKey::lower(Jobs::Queue), IndexKey::desc(Jobs::Priority)],
    ///     "doc",
    /// )
    /// .unique()
    /// .partial(IndexPredicate::IsNotNull(Jobs::ClaimedAt));
    /// assert_eq!(
    ///     IndexDescription::of(&index).definition,
    ///     "UNIQUE USING btree (lower(queue), priority DESC) WHERE (claimed_at IS NOT NULL)"
    /// );
    /// ```
    pub fn of<T: TableModel>(index: &IndexDef<T>) -> Self {
        let keys: Vec<String> = index
            .keys
            .iter()
            .map(|key| {
                let (text, order) = match *key {
                    IndexKey::Column(column, order) => (col(column), order),
                    IndexKey::Expression(IndexExpression::Lower(column), order) => {
                        (format!("lower({})", col(column)), order)
                    }
                };
                match order {
                    Order::Asc => text,
                    Order::Desc => format!("{text} DESC"),
                }
            })
            .collect();
        let predicate = index
            .predicate
            .as_ref()
            .map(|p| format!(" WHERE {}", index_predicate(p)))
            .unwrap_or_default();
        IndexDescription {
            name: index.name.to_owned(),
            definition: format!(
                "{}USING btree ({}){predicate}",
                if index.unique { "UNIQUE " } else { "" },
                keys.join(", ")
            ),
            doc: index.doc.to_owned(),
        }
    }
}

/// A partial index's condition as `pg_get_indexdef` prints it after `WHERE`:
/// `(claimed_at IS NULL)`, `enabled`, `(NOT ready)`,
/// `((claimed_at IS NULL) AND ready)`.
fn index_predicate<C: TableModel>(predicate: &IndexPredicate<C>) -> String {
    match predicate {
        IndexPredicate::IsNull(c) => format!("({} IS NULL)", col(*c)),
        IndexPredicate::IsNotNull(c) => format!("({} IS NOT NULL)", col(*c)),
        IndexPredicate::IsTrue(c) => col(*c),
        IndexPredicate::IsFalse(c) => format!("(NOT {})", col(*c)),
        IndexPredicate::All(conditions) => format!(
            "({})",
            conditions
                .iter()
                .map(index_predicate)
                .collect::<Vec<_>>()
                .join(" AND ")
        ),
    }
}

/// The condition as `pg_get_constraintdef` prints it (inside `CHECK (...)`).
fn check_condition<C: TableModel>(rule: &CheckRule<C>) -> String {
    match rule {
        CheckRule::NotEmpty(c) => format!("({} <> ''::text)", col(*c)),
        CheckRule::AtLeast(c, n) => format!("({} >= {n})", col(*c)),
        CheckRule::Positive(c) => format!("({} > 0)", col(*c)),
        CheckRule::NullTogether(columns) => {
            let all = |test: &str| {
                columns
                    .iter()
                    .map(|c| format!("({} {test})", col(*c)))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            };
            format!("(({}) OR ({}))", all("IS NULL"), all("IS NOT NULL"))
        }
        CheckRule::SetOnlyIf { column, flag } => {
            format!("(({} IS NULL) OR {})", col(*column), col(*flag))
        }
        CheckRule::NotBefore { later, earlier } => {
            format!("({} >= {})", col(*later), col(*earlier))
        }
    }
}

/// Collects [`TableDescription`]s while visiting a family.
#[derive(Debug, Default)]
pub struct Describer {
    /// The tables visited so far.
    pub tables: Vec<TableDescription>,
}

impl TableVisitor for Describer {
    fn visit<T: TableModel>(&mut self) {
        self.tables.push(TableDescription::of::<T>());
    }
}
