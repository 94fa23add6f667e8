//! What a statement is, once built: its [`Definition`] (name, SQL with `$n`
//! placeholders, one [`Param`] per placeholder) and, as a [`Statement`], the
//! values of one call.

use sea_query_postgres::PostgresValues;
use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};

use schema_model::SqlType;

/// The text of one hot-path statement for one schema: its name, its SQL
/// with `$n` placeholders and each placeholder's name and type, without
/// values. It depends only on the schema name, so an engine prepares it
/// once per connection (what [`Session`](super::Session) does) and binds
/// new values on every execution ([`Call::values`](super::Call::values)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub(super) name: &'static str,
    pub(super) sql: String,
    pub(super) params: Vec<Param>,
}

impl Definition {
    /// The statement's name, as `schema-gen statements` lists it (`claim`,
    /// `stream_append`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The SQL, with `$1`, `$2`, ... placeholders.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// One entry per placeholder, in order: `$1` is the first. Each name
    /// appears once: a value the statement uses twice is one placeholder,
    /// written twice in the text.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The placeholders' names, in order.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.params.iter().map(|p| p.name).collect()
    }

    /// The placeholders' types, for `prepare_typed`.
    pub fn param_types(&self) -> Vec<Type> {
        self.params.iter().map(Param::pg_type).collect()
    }
}

/// One hot-path statement with its values: its [`Definition`] (name, SQL
/// with `$n` placeholders, each placeholder's name and type) and the values
/// to bind, one per placeholder.
///
/// Good for a one-off run or an `EXPLAIN`
/// (`client.query(statement.sql(), &statement.args())`). An engine runs
/// the typed [`Call`](super::Call)s through a [`Session`](super::Session)
/// instead, which prepares each definition once per connection and binds
/// only the values afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub(super) definition: Definition,
    pub(super) values: PostgresValues,
}

/// One placeholder of a [`Statement`]: `$1` is the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Param {
    /// The value shape's field it carries (`queue`, `run_at`, ...), or `now`
    /// (the current unix second) or `limit` (a batch size). Each name is one
    /// placeholder of its statement: a value the statement uses twice is
    /// written as the same `$n` twice.
    pub name: &'static str,
    /// Its type (of each element, for an array).
    pub sql_type: SqlType,
    /// Whether it is an array of `sql_type` (the batch statements bind one
    /// array per field).
    pub array: bool,
}

impl Param {
    /// The type as PostgreSQL names it: `bigint`, `text[]`, ...
    pub fn type_name(&self) -> String {
        if self.array {
            format!("{}[]", self.sql_type.pg_name())
        } else {
            self.sql_type.pg_name().to_owned()
        }
    }

    /// The tokio-postgres type, for `prepare_typed`.
    pub fn pg_type(&self) -> Type {
        match (self.sql_type, self.array) {
            (SqlType::BigInt, false) => Type::INT8,
            (SqlType::Integer, false) => Type::INT4,
            (SqlType::Text, false) => Type::TEXT,
            (SqlType::Bytea, false) => Type::BYTEA,
            (SqlType::Boolean, false) => Type::BOOL,
            (SqlType::Xid8, false) => Type::XID8,
            (SqlType::BigInt, true) => Type::INT8_ARRAY,
            (SqlType::Integer, true) => Type::INT4_ARRAY,
            (SqlType::Text, true) => Type::TEXT_ARRAY,
            (SqlType::Bytea, true) => Type::BYTEA_ARRAY,
            (SqlType::Boolean, true) => Type::BOOL_ARRAY,
            (SqlType::Xid8, true) => Type::XID8_ARRAY,
        }
    }
}

impl Statement {
    /// The statement's name, as `schema-gen statements` lists it (`claim`,
    /// `stream_append`, ...).
    pub fn name(&self) -> &'static str {
        self.definition.name
    }

    /// The SQL, with `$1`, `$2`, ... placeholders. It depends only on the
    /// schema name, never on the values, so it can be prepared once.
    pub fn sql(&self) -> &str {
        &self.definition.sql
    }

    /// One entry per placeholder, in order; each name appears once.
    pub fn params(&self) -> &[Param] {
        &self.definition.params
    }

    /// The placeholders' names, in order.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.definition.param_names()
    }

    /// The placeholders' types, for `prepare_typed`.
    pub fn param_types(&self) -> Vec<Type> {
        self.definition.param_types()
    }

    /// The values bound through `sea-query-postgres`, one per placeholder.
    pub fn values(&self) -> &PostgresValues {
        &self.values
    }

    /// The values as tokio-postgres parameters:
    /// `client.query(statement.sql(), &statement.args())`.
    pub fn args(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.as_params()
    }

    /// The text, without the values.
    pub fn definition(&self) -> &Definition {
        &self.definition
    }
}
