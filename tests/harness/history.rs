//! Older schema versions on the test server: a schema created exactly as a
//! shipped release created it (its `schema.sql` from
//! `schema-model/history/`), that release's hot-path statements (its
//! `statements.json`) bound by parameter name, and a row dump to show that
//! an upgrade keeps every row, field by field.

use std::collections::BTreeMap;

use schema_model::SchemaName;
use schema_model::history::{self, MODEL_VERSION};
use serde::Deserialize;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, Row};

use crate::pg::{describe_error, exec, rows};

/// Creates `schema` at `version`: the shipped script of that release (the
/// schema name put in place of `alkstore`), or for the model's version this
/// release's own script.
///
/// # Panics
///
/// If the version is unknown or the script fails.
pub async fn create_version(client: &Client, schema: &SchemaName, version: u32) {
    let script = if version == MODEL_VERSION {
        schema_gen::render::script(schema)
    } else {
        let shipped = history::version(version)
            .and_then(|v| v.shipped)
            .unwrap_or_else(|| panic!("version {version} is not a shipped version"));
        shipped
            .schema_sql
            .replace("\"alkstore\"", &format!("\"{}\"", schema.as_str()))
    };
    exec(client, &script).await;
}

/// One hot-path statement of a shipped release, for one schema.
#[derive(Debug, Clone, Deserialize)]
pub struct OldStatement {
    /// Its name in that release (`enqueue`, `claim`, ...).
    pub name: String,
    /// Its SQL, `$n` placeholders.
    pub sql: String,
    /// One per placeholder.
    pub params: Vec<OldParam>,
}

/// A placeholder of an [`OldStatement`].
#[derive(Debug, Clone, Deserialize)]
pub struct OldParam {
    /// The value it carries.
    pub name: String,
    /// Its type (`bigint`, `text[]`, ...).
    #[serde(rename = "type")]
    pub sql_type: String,
}

#[derive(Deserialize)]
struct Statements {
    statements: Vec<OldStatement>,
}

/// The statements of shipped `version`, for `schema`, by name.
///
/// # Panics
///
/// If the version is unknown or its `statements.json` does not parse.
pub fn old_statements(version: u32, schema: &SchemaName) -> BTreeMap<String, OldStatement> {
    let shipped = history::version(version)
        .and_then(|v| v.shipped)
        .unwrap_or_else(|| panic!("version {version} is not a shipped version"));
    let parsed: Statements = serde_json::from_str(shipped.statements_json)
        .unwrap_or_else(|e| panic!("version {version}'s statements.json: {e}"));
    parsed
        .statements
        .into_iter()
        .map(|mut s| {
            s.sql = s
                .sql
                .replace("\"alkstore\"", &format!("\"{}\"", schema.as_str()));
            (s.name.clone(), s)
        })
        .collect()
}

impl OldStatement {
    /// Runs the statement, each placeholder bound to the value named like
    /// it in `values` (a name used twice binds the same value twice).
    ///
    /// # Errors
    ///
    /// The server's refusal.
    ///
    /// # Panics
    ///
    /// If a placeholder's name has no value.
    pub async fn run<C: GenericClient>(
        &self,
        client: &C,
        values: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        client.query(self.sql.as_str(), &self.bind(values)).await
    }

    /// The values of `values` in placeholder order, each placeholder bound
    /// to the value named like it (a name used twice binds the same value
    /// twice): for running the statement prepared once on a connection, as
    /// an engine of that release would.
    ///
    /// # Panics
    ///
    /// If a placeholder's name has no value.
    pub fn bind<'a>(
        &self,
        values: &[(&str, &'a (dyn ToSql + Sync))],
    ) -> Vec<&'a (dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| {
                values
                    .iter()
                    .find(|(name, _)| *name == p.name)
                    .map(|(_, value)| *value)
                    .unwrap_or_else(|| panic!("{}: no value for ${}", self.name, p.name))
            })
            .collect()
    }
}

/// Every row of every table of `schema` as JSON objects, by table, each
/// table's rows in key order: what an upgrade must keep.
///
/// # Panics
///
/// If a query fails.
pub async fn dump_rows(
    client: &Client,
    schema: &SchemaName,
) -> BTreeMap<String, Vec<serde_json::Value>> {
    let tables = rows(
        client,
        &format!(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{}' AND c.relkind = 'r' AND c.relname <> 'schema_versions' \
             ORDER BY 1",
            schema.as_str()
        ),
    )
    .await;
    let mut out = BTreeMap::new();
    for table in tables {
        let name: String = table.get(0);
        let sql = format!(
            "SELECT COALESCE(json_agg(to_jsonb(t) ORDER BY t), '[]')::text FROM \"{}\".\"{name}\" t",
            schema.as_str()
        );
        let row = client
            .query_one(sql.as_str(), &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
        let text: String = row.get(0);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        out.insert(name, value.as_array().cloned().unwrap_or_default());
    }
    out
}

/// The rows of `after` restricted to the columns rows of `before` had, so
/// a dump after an upgrade (which adds columns) compares with one before.
pub fn restricted(
    before: &BTreeMap<String, Vec<serde_json::Value>>,
    after: &BTreeMap<String, Vec<serde_json::Value>>,
) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut out = BTreeMap::new();
    for (table, old_rows) in before {
        let keys: Vec<String> = old_rows
            .first()
            .and_then(|r| r.as_object())
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        let rows = after
            .get(table)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|row| {
                let object: serde_json::Map<String, serde_json::Value> = row
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter(|(k, _)| keys.is_empty() || keys.contains(k))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::Value::Object(object)
            })
            .collect();
        out.insert(table.clone(), rows);
    }
    out
}
