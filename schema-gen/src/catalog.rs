//! The live catalog of one schema, read in one round trip.
//!
//! [`read`] sends one statement ([`CATALOG_QUERY`]) that builds a JSON
//! document of the schema's tables, columns, indexes, constraints and
//! comments from `pg_catalog`, and decodes it. Definitions are taken from
//! PostgreSQL's own deparsers (`format_type`, `pg_get_expr`,
//! `pg_get_indexdef`, `pg_get_constraintdef`), the same strings
//! [`schema_model::description`] writes, so comparing is comparing strings.
//!
//! The statement only reads `pg_catalog`, which every role may read: it works
//! for a runtime role that has nothing but `USAGE` on the schema and DML on
//! its tables, and for a role that cannot even see the schema. It takes no
//! lock that an engine workload could wait on: the deparsers take `ACCESS
//! SHARE` on each table for the length of the statement (what every `SELECT`
//! takes), which conflicts only with `ACCESS EXCLUSIVE` (`ALTER TABLE`,
//! `DROP`, `TRUNCATE`, `VACUUM FULL`).

use serde::{Deserialize, Serialize};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;

use schema_model::SchemaName;

use crate::error::{Context, Error, ErrorKind, Step, classify};

/// The one catalog statement; `$1` is the schema name (`text`).
///
/// Relations are the schema's tables, views, materialized views, foreign and
/// partitioned tables (`relkind` r, v, m, f, p); sequences (an identity
/// column owns one) and indexes are not relations here. Indexes that back a
/// primary key, unique or exclusion constraint are reported as that
/// constraint, not as an index. `NOT NULL` constraints (PostgreSQL 18 lists
/// them in `pg_constraint`) are reported through each column's `not_null`.
pub const CATALOG_QUERY: &str = r#"
WITH ns AS (
    SELECT n.oid, obj_description(n.oid, 'pg_namespace') AS comment
    FROM pg_catalog.pg_namespace n
    WHERE n.nspname = $1
)
SELECT json_build_object(
    'role', current_user,
    'database', current_database(),
    'schema', (SELECT json_build_object('comment', ns.comment) FROM ns),
    'relations', COALESCE((
        SELECT json_agg(json_build_object(
            'name', c.relname,
            'kind', c.relkind::text,
            'persistence', c.relpersistence::text,
            'comment', obj_description(c.oid, 'pg_class'),
            'columns', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', a.attname,
                    'type', pg_catalog.format_type(a.atttypid, a.atttypmod),
                    'not_null', a.attnotnull,
                    'identity', a.attidentity::text,
                    'generated', a.attgenerated::text,
                    'expression', pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                    'comment', pg_catalog.col_description(c.oid, a.attnum)
                ) ORDER BY a.attnum)
                FROM pg_catalog.pg_attribute a
                LEFT JOIN pg_catalog.pg_attrdef d
                    ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            ), '[]'::json),
            'indexes', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', i.relname,
                    'definition', pg_catalog.pg_get_indexdef(x.indexrelid),
                    'unique', x.indisunique,
                    'valid', x.indisvalid
                ) ORDER BY i.relname)
                FROM pg_catalog.pg_index x
                JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
                WHERE x.indrelid = c.oid
                  AND NOT EXISTS (
                      SELECT 1 FROM pg_catalog.pg_constraint k
                      WHERE k.conrelid = c.oid AND k.conindid = x.indexrelid
                        AND k.contype IN ('p', 'u', 'x'))
            ), '[]'::json),
            'constraints', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', k.conname,
                    'type', k.contype::text,
                    'definition', pg_catalog.pg_get_constraintdef(k.oid)
                ) ORDER BY k.conname)
                FROM pg_catalog.pg_constraint k
                WHERE k.conrelid = c.oid AND k.contype <> 'n'
            ), '[]'::json)
        ) ORDER BY c.relname)
        FROM pg_catalog.pg_class c
        JOIN ns ON c.relnamespace = ns.oid
        WHERE c.relkind IN ('r', 'v', 'm', 'f', 'p')
    ), '[]'::json)
)::text
"#;

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
}

/// The schema itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSchema {
    /// `COMMENT ON SCHEMA`, if any.
    pub comment: Option<String>,
}

/// A table (or view, ...) of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRelation {
    /// Its name.
    pub name: String,
    /// `pg_class.relkind`: `r` table, `p` partitioned table, `v` view,
    /// `m` materialized view, `f` foreign table.
    pub kind: String,
    /// `pg_class.relpersistence`: `p` permanent, `u` unlogged, `t` temporary.
    pub persistence: String,
    /// `COMMENT ON TABLE`, if any.
    pub comment: Option<String>,
    /// Columns in `attnum` order.
    pub columns: Vec<LiveColumn>,
    /// Indexes that do not back a constraint, by name.
    pub indexes: Vec<LiveIndex>,
    /// Constraints other than `NOT NULL`, by name.
    pub constraints: Vec<LiveConstraint>,
}

/// A column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// `COMMENT ON COLUMN`, if any.
    pub comment: Option<String>,
}

/// An index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveIndex {
    /// Its name.
    pub name: String,
    /// `pg_get_indexdef`, whole (`CREATE INDEX name ON schema.table USING ...`).
    pub definition: String,
    /// `indisunique`.
    pub unique: bool,
    /// `indisvalid`: false after a failed `CREATE INDEX CONCURRENTLY`.
    pub valid: bool,
}

/// A constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveConstraint {
    /// Its name.
    pub name: String,
    /// `contype`: `c` check, `p` primary key, `u` unique, `f` foreign key,
    /// `x` exclusion, `t` constraint trigger.
    #[serde(rename = "type")]
    pub constraint_type: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
}

impl LiveIndex {
    /// The definition from ` USING ` on, prefixed with `UNIQUE ` for a unique
    /// index: the part that depends neither on the schema nor on
    /// `search_path`, as [`schema_model::IndexDescription::definition`] has it.
    ///
    /// ```
    /// use schema_gen::catalog::LiveIndex;
    ///
    /// let index = LiveIndex {
    ///     name: "i".into(),
    ///     definition: "CREATE UNIQUE INDEX i ON s.t USING btree (a)".into(),
    ///     unique: true,
    ///     valid: true,
    /// };
    /// assert_eq!(index.comparable_definition(), "UNIQUE USING btree (a)");
    /// ```
    pub fn comparable_definition(&self) -> String {
        let using = self
            .definition
            .find(" USING ")
            .map(|at| &self.definition[at + 1..])
            .unwrap_or(&self.definition);
        if self.unique {
            format!("UNIQUE {using}")
        } else {
            using.to_owned()
        }
    }
}

impl LiveCatalog {
    /// The relation named `name`, if the schema has one.
    pub fn relation(&self, name: &str) -> Option<&LiveRelation> {
        self.relations.iter().find(|r| r.name == name)
    }
}

/// Reads the live catalog of `schema` in one round trip (one statement,
/// sent with its parameter type so no separate prepare is needed).
///
/// # Errors
///
/// [`ErrorKind::Connection`] when the connection is gone,
/// [`ErrorKind::LockTimeout`] when the session's `lock_timeout` hit while
/// another session held `ACCESS EXCLUSIVE` on an engine table,
/// [`ErrorKind::Query`] for any other server error, [`ErrorKind::Other`] when
/// the reply cannot be decoded.
pub async fn read<C: GenericClient + Sync>(
    client: &C,
    schema: &SchemaName,
) -> Result<LiveCatalog, Error> {
    let step = Step {
        doing: format!("reading the catalog of schema {schema}"),
        waiting_for: Some(format!(
            "ACCESS SHARE on a table of schema {schema} while reading the catalog (another \
             session holds ACCESS EXCLUSIVE on it: ALTER TABLE, DROP, TRUNCATE or VACUUM FULL)"
        )),
        ..Step::default()
    };
    let context = Context {
        role: "the current role".to_owned(),
        schema: schema.clone(),
    };
    let row = client
        .query_typed_one(CATALOG_QUERY, &[(&schema.as_str(), Type::TEXT)])
        .await
        .map_err(|err| classify(err, &step, &context))?;
    let text: String = row.try_get(0).map_err(|err| {
        Error::from(ErrorKind::Other {
            message: format!("decoding the catalog of schema {schema}: {err}"),
        })
    })?;
    parse(&text, schema)
}

fn parse(text: &str, schema: &SchemaName) -> Result<LiveCatalog, Error> {
    serde_json::from_str(text).map_err(|err| {
        ErrorKind::Other {
            message: format!(
                "decoding the catalog of schema {schema}: {err} (a bug in schema-gen, or a \
                 PostgreSQL version whose catalog it does not know)"
            ),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_missing_schema_and_a_table() {
        let schema = SchemaName::new("alk").unwrap();
        let missing = parse(
            r#"{"role":"r","database":"d","schema":null,"relations":[]}"#,
            &schema,
        )
        .unwrap();
        assert!(missing.schema.is_none());
        let one = parse(
            r#"{"role":"r","database":"d","schema":{"comment":null},"relations":[
                {"name":"t","kind":"r","persistence":"p","comment":"c",
                 "columns":[{"name":"a","type":"bigint","not_null":true,"identity":"a",
                             "generated":"","expression":null,"comment":null}],
                 "indexes":[{"name":"i","definition":"CREATE INDEX i ON alk.t USING btree (a)",
                             "unique":false,"valid":true}],
                 "constraints":[{"name":"t_pkey","type":"p","definition":"PRIMARY KEY (a)"}]}]}"#,
            &schema,
        )
        .unwrap();
        let t = one.relation("t").unwrap();
        assert_eq!(t.columns[0].sql_type, "bigint");
        assert_eq!(t.indexes[0].comparable_definition(), "USING btree (a)");
        assert_eq!(t.constraints[0].constraint_type, "p");
    }

    #[test]
    fn an_undecodable_reply_is_an_error_not_a_panic() {
        let schema = SchemaName::new("alk").unwrap();
        let err = parse("{", &schema).unwrap_err();
        assert!(err.to_string().contains("decoding the catalog"), "{err}");
    }
}
