//! Runs a product statement under `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`
//! with its real bound parameters, and reads what the plan did: which
//! indexes it read, its node types, the shared buffers it touched and the
//! rows its filters threw away.
//!
//! The statement is prepared by name (`PREPARE`) with its declared
//! parameter types, the same `$n` text the engine prepares, and run as
//! `EXPLAIN ... EXECUTE` with its values inside a transaction that is rolled back, so
//! a write leaves the data as it was. `plan_cache_mode` picks the plan the
//! engine gets on its first executions (custom) or after the plan cache
//! switches (generic): both must hold.

use schema_gen::statements::{Param, Statement};
use sea_query::{PostgresQueryBuilder, QueryBuilder};
use serde_json::Value;
use tokio_postgres::Client;

use crate::pg::describe_error;

/// Which plan of a prepared statement to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanMode {
    /// A plan made for these parameter values (the first five executions).
    Custom,
    /// The generic plan the plan cache may switch to.
    Generic,
}

impl PlanMode {
    fn setting(self) -> &'static str {
        match self {
            Self::Custom => "force_custom_plan",
            Self::Generic => "force_generic_plan",
        }
    }
}

/// What one execution's plan did.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The whole plan, for messages.
    pub plan: Value,
    /// Shared buffers touched by the execution (hit + read at the top
    /// node, which includes its children, init plans and writes).
    pub buffers: i64,
    /// Every node's type, depth first.
    pub node_types: Vec<String>,
    /// Every index a node scanned, or that an `ON CONFLICT` arbitrated on.
    pub indexes: Vec<String>,
    /// Every table a node read (scanned, not just wrote).
    pub tables_read: Vec<String>,
    /// The sum of "Rows Removed by Filter" (and by index recheck) over all nodes.
    pub rows_removed: i64,
    /// Rows the top node produced: for an INSERT, UPDATE or DELETE, the
    /// rows it returned (0 without `RETURNING`, whatever it modified).
    pub rows: i64,
    /// Rows the statement did its work on: what the top node produced, or
    /// for an INSERT, UPDATE or DELETE without `RETURNING`, the rows fed
    /// into it (its first child's), so a write that found nothing to write
    /// shows 0.
    pub rows_worked: i64,
}

impl Measured {
    /// Node types that sort: Sort, Incremental Sort, and anything else
    /// whose name says it sorts.
    pub fn sort_nodes(&self) -> Vec<&str> {
        self.node_types
            .iter()
            .map(String::as_str)
            .filter(|t| t.contains("Sort"))
            .collect()
    }

    /// The plan, pretty-printed.
    pub fn pretty(&self) -> String {
        serde_json::to_string_pretty(&self.plan).unwrap_or_default()
    }
}

/// `value` as a literal of the parameter's type; array elements are cast
/// one by one (an array of untyped literals would be `text[]`).
/// A statement's bound values as the arguments of `EXECUTE name(...)`.
///
/// EXPLAIN EXECUTE takes its arguments as expressions (it cannot bind
/// protocol parameters), so the bound values are written as literals by
/// sea-query's own escaping and coerced to the declared types, exactly as
/// binding them would.
pub fn literals(statement: &Statement) -> Vec<String> {
    statement
        .values()
        .0
        .iter()
        .zip(statement.params())
        .map(|(value, param)| literal(&value.0, param))
        .collect()
}

fn literal(value: &sea_query::Value, param: &Param) -> String {
    let element = param.sql_type.pg_name();
    match value {
        sea_query::Value::Array(_, Some(elements)) => {
            let items: Vec<String> = elements
                .iter()
                .map(|e| {
                    format!(
                        "CAST({} AS {element})",
                        PostgresQueryBuilder.value_to_string(e)
                    )
                })
                .collect();
            format!("CAST(ARRAY[{}] AS {element}[])", items.join(", "))
        }
        scalar => format!(
            "CAST({} AS {})",
            PostgresQueryBuilder.value_to_string(scalar),
            param.type_name()
        ),
    }
}

fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            out.extend(nodes(child));
        }
    }
    out
}

/// Runs `statement` under `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` with its
/// bound values, as a prepared statement in `mode`, and rolls back.
///
/// # Panics
///
/// If any step fails; the message names the statement.
pub async fn explain_analyze(client: &Client, statement: &Statement, mode: PlanMode) -> Measured {
    let name = statement.name();
    let types: Vec<String> = statement.params().iter().map(|p| p.type_name()).collect();
    let arguments = literals(statement);
    let setup = format!(
        "BEGIN; SET LOCAL plan_cache_mode = {}; PREPARE hot_path_probe({}) AS {}",
        mode.setting(),
        types.join(", "),
        statement.sql()
    );
    client
        .batch_execute(&setup)
        .await
        .unwrap_or_else(|e| panic!("{name}: preparing failed: {}", describe_error(&e)));
    let explain = if arguments.is_empty() {
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE hot_path_probe".to_owned()
    } else {
        format!(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE hot_path_probe({})",
            arguments.join(", ")
        )
    };
    let result = client.query_one(&explain, &[]).await;
    client
        .batch_execute("ROLLBACK; DEALLOCATE hot_path_probe")
        .await
        .unwrap_or_else(|e| panic!("{name}: rolling back failed: {}", describe_error(&e)));
    let row = result.unwrap_or_else(|e| panic!("{name}: EXPLAIN failed: {}", describe_error(&e)));
    let plan: Value = row.get(0);
    measure(plan[0]["Plan"].clone())
}

/// What the plan `root` (the `Plan` of `EXPLAIN (ANALYZE, BUFFERS, FORMAT
/// JSON)`) did.
pub fn measure(root: Value) -> Measured {
    let all = nodes(&root);
    let mut indexes = Vec::new();
    for node in &all {
        if let Some(index) = node["Index Name"].as_str() {
            indexes.push(index.to_owned());
        }
        if let Some(arbiters) = node["Conflict Arbiter Indexes"].as_array() {
            indexes.extend(
                arbiters
                    .iter()
                    .filter_map(|a| a.as_str().map(str::to_owned)),
            );
        }
    }
    let tables_read = all
        .iter()
        .filter(|node| node["Node Type"] != "ModifyTable")
        .filter_map(|node| node["Relation Name"].as_str().map(str::to_owned))
        .collect();
    Measured {
        tables_read,
        buffers: int(&root, "Shared Hit Blocks") + int(&root, "Shared Read Blocks"),
        node_types: all
            .iter()
            .map(|node| node["Node Type"].as_str().unwrap_or_default().to_owned())
            .collect(),
        indexes,
        rows_removed: all
            .iter()
            .map(|node| {
                int(node, "Rows Removed by Filter") + int(node, "Rows Removed by Index Recheck")
            })
            .sum(),
        rows: int(&root, "Actual Rows"),
        rows_worked: rows_worked(&root),
        plan: root,
    }
}

fn rows_worked(root: &Value) -> i64 {
    match root["Plans"]
        .as_array()
        .and_then(|children| children.first())
    {
        Some(fed) if int(root, "Actual Rows") == 0 && root["Node Type"] == "ModifyTable" => {
            int(fed, "Actual Rows")
        }
        _ => int(root, "Actual Rows"),
    }
}

/// A count of the plan: PostgreSQL 18 writes row counts with decimals
/// (`"Actual Rows": 10.00`), earlier versions as integers.
fn int(node: &Value, key: &str) -> i64 {
    node[key].as_f64().map_or(0, |n| n.round() as i64)
}
