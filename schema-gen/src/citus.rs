//! The live side of [`Layout::CitusSchemaSharding`]: whether the server can
//! take the layout (Citus installed, and this node its coordinator), and
//! how the family is distributed there (`pg_dist_schema`,
//! `pg_dist_partition`), compared with the model.
//!
//! Under a single-server layout nothing here runs: a plain server has no
//! Citus catalogs, and `check` without `--layout citus` never reads them.

use tokio_postgres::Client;

use schema_model::{Layout, SchemaName, TableDescription, TableDistribution};

use crate::Options;
use crate::difference::Difference;
use crate::error::{Context, Error, ErrorKind, Step, classify};
use crate::render;

/// How one table of the engine schema is placed, as `pg_dist_partition`
/// says (`None` fields: the table is not a Citus table).
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveDistribution {
    /// The colocation group of the schema when it is a distributed schema
    /// (`pg_dist_schema`), `None` otherwise.
    pub schema_colocation: Option<i32>,
    /// Every table of the schema.
    pub tables: Vec<LiveTableDistribution>,
}

/// Refuses a server that cannot take `layout`, before anything is read or
/// changed: under [`Layout::CitusSchemaSharding`], one without the `citus`
/// extension, or a Citus node that is not the coordinator (a worker: tables
/// created there would be local to it, and its sequences and transaction
/// ids are not the coordinator's). One round trip per question, bounded by
/// `options`; nothing at all under [`Layout::SingleServer`].
///
/// # Errors
///
/// [`ErrorKind::Layout`] naming what the server is and what to do;
/// [`ErrorKind::Connection`] / [`ErrorKind::Query`] when asking fails.
pub async fn probe(
    client: &Client,
    schema: &SchemaName,
    layout: Layout,
    options: &Options,
) -> Result<(), Error> {
    if !layout.is_citus() {
        return Ok(());
    }
    let installed = scalar(
        client,
        schema,
        options,
        "SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus')",
    )
    .await?;
    let Some(version) = installed else {
        return Err(ErrorKind::Layout {
            schema: schema.clone(),
            layout,
            reason: "the server has no `citus` extension (this is not a Citus node): run it on \
                     the coordinator of a Citus cluster, or leave out `--layout citus` for a \
                     single server; nothing was changed"
                .to_owned(),
        }
        .into());
    };
    let coordinator = scalar(
        client,
        schema,
        options,
        "SELECT citus_is_coordinator()::text",
    )
    .await?;
    if coordinator.as_deref() != Some("true") {
        return Err(ErrorKind::Layout {
            schema: schema.clone(),
            layout,
            reason: format!(
                "this node runs Citus {version} but is a worker, not the coordinator: connect \
                 to the coordinator (tables created on a worker are local to it, and its \
                 transaction ids and sequences are not the cluster's); nothing was changed"
            ),
        }
        .into());
    }
    Ok(())
}

/// The statement [`read`] runs: the schema's colocation group, then one row
/// per table of the schema.
const READ: &str = "\
SELECT NULL::text AS relname, NULL::text, NULL::text, ds.colocationid, NULL::text \
FROM pg_catalog.pg_namespace n JOIN pg_dist_schema ds ON ds.schemaid = n.oid \
WHERE n.nspname = $1 \
UNION ALL \
SELECT c.relname::text, p.partmethod::text, \
       CASE WHEN p.partmethod = 'h' THEN column_to_column_name(p.logicalrelid, p.partkey) END, \
       p.colocationid, p.repmodel::text \
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid \
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')";

/// Reads how the tables of `schema` are distributed (on a node [`probe`]
/// accepted), in one round trip bounded by `options`.
///
/// # Errors
///
/// [`ErrorKind::Connection`] / [`ErrorKind::Query`] when the read fails.
pub async fn read(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<LiveDistribution, Error> {
    let rows = bounded(client, schema, options, async |client: &Client| {
        client.query(READ, &[&schema.as_str()]).await
    })
    .await?;
    let mut live = LiveDistribution {
        schema_colocation: None,
        tables: Vec::new(),
    };
    for row in rows {
        match row.get::<_, Option<String>>(0) {
            None => live.schema_colocation = row.get(3),
            Some(table) => live.tables.push(LiveTableDistribution {
                table,
                method: row.get(1),
                column: row.get(2),
                colocation: row.get(3),
                replication: row.get(4),
            }),
        }
    }
    live.tables.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(live)
}

/// The differences between how the family is distributed and how `layout`
/// places it: the schema that is not a distributed schema, then each model
/// table that exists and is placed otherwise (a plain table, a hash- or
/// otherwise distributed table, a reference table, a single-shard table of
/// another colocation group). Missing tables are the catalog comparison's
/// business ([`crate::verify::compare`]).
///
/// ```
/// use schema_gen::citus::{LiveDistribution, LiveTableDistribution, compare};
/// use schema_gen::verify::Difference;
/// use schema_model::{Layout, SchemaName, engine_family};
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
/// assert_eq!(compare(&live, &schema, &model, Layout::CitusSchemaSharding), []);
/// live.tables[0].method = Some("h".into());
/// live.tables[0].column = Some("queue".into());
/// live.tables[0].colocation = Some(7);
/// assert_eq!(
///     compare(&live, &schema, &model, Layout::CitusSchemaSharding)[0].to_string(),
///     "jobs is a hash-distributed table on column queue (colocation group 7), \
///      layout citus says a single-shard table of schema alk's colocation group 4"
/// );
/// ```
pub fn compare(
    live: &LiveDistribution,
    schema: &SchemaName,
    model: &[TableDescription],
    layout: Layout,
) -> Vec<Difference> {
    let mut out = Vec::new();
    if !layout.is_citus() {
        return out;
    }
    if live.schema_colocation.is_none() {
        out.push(Difference::UndistributedSchema {
            schema: schema.to_string(),
            layout: layout.name().to_owned(),
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
        let expected = match layout.distribution(&table.name) {
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
                layout: layout.name().to_owned(),
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

/// Runs `query` in a transaction of its own bounded by `options` (`BEGIN`
/// and the `SET LOCAL` bounds, the query, `COMMIT`), so nothing outlives it.
async fn bounded<T>(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
    query: impl AsyncFnOnce(&Client) -> Result<T, tokio_postgres::Error>,
) -> Result<T, Error> {
    let step = Step {
        doing: format!("reading the Citus distribution of schema {schema}"),
        ..Step::default()
    };
    let context = Context {
        role: "the current role".to_owned(),
        schema: schema.clone(),
    };
    let fail = |err| classify(err, &step, &context);
    client
        .batch_execute(&format!("BEGIN; {}", render::bounds_statement(options)))
        .await
        .map_err(fail)?;
    match query(client).await {
        Ok(value) => {
            client.batch_execute("COMMIT").await.map_err(fail)?;
            Ok(value)
        }
        Err(err) => {
            // A failed ROLLBACK means the connection is gone, which rolls
            // back too.
            let _ = client.batch_execute("ROLLBACK").await;
            Err(fail(err))
        }
    }
}

async fn scalar(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
    sql: &str,
) -> Result<Option<String>, Error> {
    let rows = bounded(client, schema, options, async |client: &Client| {
        client.query(sql, &[]).await
    })
    .await?;
    Ok(rows.first().and_then(|row| row.get(0)))
}

/// Under a Citus `options.layout`, on a node [`probe`] accepted: [`read`]
/// and [`compare`] for a schema that exists (`exists`); nothing under a
/// single server.
///
/// # Errors
///
/// As [`read`].
pub async fn differences(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
    exists: bool,
) -> Result<Vec<Difference>, Error> {
    if !options.layout.is_citus() {
        return Ok(Vec::new());
    }
    if !exists {
        return Ok(Vec::new());
    }
    let live = read(client, schema, options).await?;
    Ok(compare(
        &live,
        schema,
        &schema_model::engine_family(),
        options.layout,
    ))
}
