//! The live side of [`Layout::CitusSchemaSharding`], without I/O: the one
//! question ([`statement`]) that asks a server whether it can take the
//! layout (Citus installed, and this node its coordinator) and how the
//! family is distributed there (`pg_dist_schema`, `pg_dist_partition`),
//! its answer decoded ([`decode`]), the refusal of a node that cannot take
//! the layout ([`CitusNode::refusal`]), and the comparison with the model
//! ([`compare`]). `check` asks the question in the same round trip as the
//! catalog read ([`crate::check`]).
//!
//! Under a single-server layout nothing here runs: a plain server has no
//! Citus catalogs, and `check` without `--layout citus` never reads them.

use serde::Deserialize;

use schema_model::{Layout, SchemaName, TableDescription, TableDistribution};

use crate::difference::Difference;
use crate::error::{Error, ErrorKind};
use crate::render::{self, quote_literal};

/// How one table of the engine schema is placed, as `pg_dist_partition`
/// says (`None` fields: the table is not a Citus table).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LiveTableDistribution {
    /// The table's name.
    pub table: String,
    /// `partmethod`: `h` hash, `n` none (single shard or reference), ...;
    /// `None` for a plain (local) table.
    pub method: Option<String>,
    /// The distribution column, for a hash-distributed table.
    pub column: Option<String>,
    /// `colocationid`.
    pub colocation: Option<i32>,
    /// `repmodel`: `s` single replica (a distributed table), `t` a
    /// reference table.
    pub replication: Option<String>,
}

/// The distribution of the engine schema's tables.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LiveDistribution {
    /// The colocation group of the schema when it is a distributed schema
    /// (`pg_dist_schema`), `None` otherwise.
    pub schema_colocation: Option<i32>,
    /// Every table of the schema, by name.
    pub tables: Vec<LiveTableDistribution>,
}

/// What a server says about Citus, for one engine schema.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CitusNode {
    /// The `citus` extension's version, `None` without it.
    pub version: Option<String>,
    /// On a Citus node: whether it is the coordinator, and how the schema's
    /// tables are distributed.
    pub node: Option<NodeState>,
}

/// What a Citus node says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NodeState {
    /// `citus_is_coordinator()`.
    pub coordinator: bool,
    /// How the schema's tables are distributed.
    pub distribution: LiveDistribution,
}

/// The one `SELECT` (one row, one JSON text) that asks a server about
/// Citus for `schema`; it runs on any server. The questions that need
/// Citus's catalogs and functions are dynamic SQL (`query_to_xml`, decoded
/// by `XMLTABLE`) that runs only when the extension is there, so a plain
/// server answers `{"version": null, "node": null}` instead of failing to
/// parse the statement.
///
/// ```
/// use schema_gen::citus::statement;
/// use schema_model::SchemaName;
///
/// let sql = statement(&SchemaName::new("alk").unwrap());
/// assert!(sql.starts_with("SELECT pg_catalog.json_build_object("), "{sql}");
/// assert!(sql.contains("nspname = ''alk''"), "{sql}");
/// ```
pub fn statement(schema: &SchemaName) -> String {
    let name = quote_literal(schema.as_str());
    let node = format!(
        "SELECT pg_catalog.json_build_object(\
         'coordinator', pg_catalog.citus_is_coordinator(), \
         'distribution', pg_catalog.json_build_object(\
           'schema_colocation', (SELECT ds.colocationid FROM pg_catalog.pg_namespace n \
             JOIN pg_catalog.pg_dist_schema ds ON ds.schemaid = n.oid WHERE n.nspname = {name}), \
           'tables', COALESCE((SELECT pg_catalog.json_agg(pg_catalog.json_build_object(\
             'table', c.relname, 'method', p.partmethod::text, \
             'column', CASE WHEN p.partmethod = 'h' \
               THEN pg_catalog.column_to_column_name(p.logicalrelid, p.partkey) END, \
             'colocation', p.colocationid, 'replication', p.repmodel::text) ORDER BY c.relname) \
             FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             LEFT JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid = c.oid \
             WHERE n.nspname = {name} AND c.relkind IN ('r', 'p')), '[]'::json)))::text AS doc"
    );
    format!(
        "SELECT pg_catalog.json_build_object('version', e.extversion, 'node', \
         CASE WHEN e.extversion IS NOT NULL THEN (\
           SELECT x.doc::json FROM XMLTABLE('/table/row' \
             PASSING pg_catalog.query_to_xml({}, false, false, '') \
             COLUMNS doc text PATH 'doc') x) END)::text \
         FROM (SELECT (SELECT extversion FROM pg_catalog.pg_extension \
                       WHERE extname = 'citus') AS extversion) e",
        quote_literal(&node)
    )
}

/// Decodes the answer to [`statement`].
///
/// # Errors
///
/// [`ErrorKind::UndecodableReply`] when it does not decode.
pub fn decode(answer: Option<&str>, schema: &SchemaName) -> Result<CitusNode, Error> {
    let undecodable = |detail: String| -> Error {
        ErrorKind::UndecodableReply {
            what: format!("the Citus distribution of schema {schema}"),
            detail,
        }
        .into()
    };
    let text = answer.ok_or_else(|| undecodable("the server returned no row".to_owned()))?;
    let mut node: CitusNode =
        serde_json::from_str(text).map_err(|err| undecodable(err.to_string()))?;
    if let Some(state) = &mut node.node {
        state
            .distribution
            .tables
            .sort_by(|a, b| a.table.cmp(&b.table));
    }
    Ok(node)
}

impl CitusNode {
    /// The refusal of a node that cannot take the Citus layout: one without
    /// the `citus` extension, or a Citus node that is not the coordinator (a
    /// worker: tables created there would be local to it, and its sequences
    /// and transaction ids are not the coordinator's). `None` on a
    /// coordinator.
    pub fn refusal(&self, schema: &SchemaName) -> Option<Error> {
        let reason = match (&self.version, &self.node) {
            (None, _) | (Some(_), None) => "the server has no `citus` extension (this is not a \
                 Citus node): run it on the coordinator of a Citus cluster, or leave out \
                 `--layout citus` for a single server; nothing was changed"
                .to_owned(),
            (Some(_), Some(state)) if state.coordinator => return None,
            (Some(version), Some(_)) => format!(
                "this node runs Citus {version} but is a worker, not the coordinator: connect \
                 to the coordinator (tables created on a worker are local to it, and its \
                 transaction ids and sequences are not the cluster's); nothing was changed"
            ),
        };
        Some(
            ErrorKind::Layout {
                schema: schema.clone(),
                layout: Layout::CitusSchemaSharding,
                reason,
            }
            .into(),
        )
    }

    /// How the schema's tables are distributed (on a Citus node).
    pub fn distribution(&self) -> Option<&LiveDistribution> {
        self.node.as_ref().map(|state| &state.distribution)
    }
}

/// The differences between how the family is distributed and how the Citus
/// layout places it: the schema that is not a distributed schema, then each model
/// table that exists and is placed otherwise (a plain table, a hash- or
/// otherwise distributed table, a reference table, a single-shard table of
/// another colocation group). Missing tables are the catalog comparison's
/// business ([`crate::verify::compare`]).
///
/// ```
/// use schema_gen::citus::{LiveDistribution, LiveTableDistribution, compare};
/// use schema_gen::verify::Difference;
/// use schema_model::{SchemaName, engine_family};
///
/// let schema = SchemaName::new("alk").unwrap();
/// let model = engine_family();
/// let shard = |table: &str| LiveTableDistribution {
///     table: table.into(),
///     method: Some("n".into()),
///     column: None,
///     colocation: Some(4),
///     replication: Some("s".into()),
/// };
/// let mut live = LiveDistribution {
///     schema_colocation: Some(4),
///     tables: model.iter().map(|t| shard(&t.name)).collect(),
/// };
/// assert_eq!(compare(&live, &schema, &model), []);
/// live.tables[0].method = Some("h".into());
/// live.tables[0].column = Some("queue".into());
/// live.tables[0].colocation = Some(7);
/// assert_eq!(
///     compare(&live, &schema, &model)[0].to_string(),
///     "jobs is a hash-distributed table on column queue (colocation group 7), \
///      layout citus says a single-shard table of schema alk's colocation group 4"
/// );
/// ```
pub fn compare(
    live: &LiveDistribution,
    schema: &SchemaName,
    model: &[TableDescription],
) -> Vec<Difference> {
    let layout = Layout::CitusSchemaSharding;
    let mut out = Vec::new();
    if live.schema_colocation.is_none() {
        out.push(Difference::UndistributedSchema {
            schema: schema.to_string(),
            remedy: render::layout_statements(schema, layout)
                .first()
                .map(|s| s.sql.clone())
                .unwrap_or_default(),
        });
    }
    for table in model {
        let Some(found) = live.tables.iter().find(|t| t.table == table.name) else {
            continue;
        };
        let expected = match layout.distribution() {
            TableDistribution::Local => continue,
            TableDistribution::SchemaShard => live.schema_colocation,
        };
        let is_schema_shard = found.method.as_deref() == Some("n")
            && found.replication.as_deref() == Some("s")
            && found.colocation.is_some()
            && found.colocation == expected;
        if !is_schema_shard {
            out.push(Difference::TableDistribution {
                table: table.name.clone(),
                found: placement_words(found),
                expected: match expected {
                    Some(group) => format!(
                        "a single-shard table of schema {schema}'s colocation group {group}"
                    ),
                    None => format!("a single-shard table of distributed schema {schema}"),
                },
            });
        }
    }
    out
}

/// How a table is placed, in words.
fn placement_words(found: &LiveTableDistribution) -> String {
    let group = found
        .colocation
        .map(|g| format!(" (colocation group {g})"))
        .unwrap_or_default();
    match (found.method.as_deref(), found.replication.as_deref()) {
        (None, _) => "a local table (not distributed)".to_owned(),
        (Some("h"), _) => format!(
            "a hash-distributed table on column {}{group}",
            found.column.as_deref().unwrap_or("?")
        ),
        (Some("n"), Some("t")) => "a reference table".to_owned(),
        (Some("n"), Some("s")) => format!("a single-shard table{group}"),
        (Some(method), replication) => format!(
            "a Citus table of partition method {method}, replication model {}{group}",
            replication.unwrap_or("?")
        ),
    }
}
