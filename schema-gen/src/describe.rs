//! The family described for reviewers: markdown for people, JSON for tools.

use schema_model::{SchemaName, TableDescription, engine_family};
use serde::Serialize;

/// What `schema-gen describe --format json` prints: stable, for tools.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyDescription {
    /// The schema the tables live in.
    pub schema: String,
    /// Every table, in creation order.
    pub tables: Vec<TableDescription>,
}

/// Describes the engine family for `schema`.
pub fn engine(schema: &SchemaName) -> FamilyDescription {
    FamilyDescription {
        schema: schema.to_string(),
        tables: engine_family(),
    }
}

/// Renders a description (of either family) as pretty JSON with a trailing newline.
pub fn to_json<D: Serialize>(description: &D) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(description).map(|json| json + "\n")
}

/// Renders a description as markdown: a section per table with its columns,
/// indexes and constraints.
pub fn to_markdown(description: &FamilyDescription) -> String {
    let mut out = format!("# Schema `{}`\n", description.schema);
    for table in &description.tables {
        out.push_str(&format!("\n## `{}`\n\n{}\n\n", table.name, table.doc));
        out.push_str("| column | type | null | default | doc |\n|---|---|---|---|---|\n");
        for column in &table.columns {
            let default = match (&column.identity, &column.generated, &column.default) {
                (Some(kind), _, _) => format!("identity ({kind})"),
                (_, Some(expr), _) => format!("generated `{expr}`"),
                (_, _, Some(expr)) => format!("`{expr}`"),
                _ => String::new(),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                column.name,
                column.sql_type,
                if column.nullable { "yes" } else { "no" },
                default,
                column.doc
            ));
        }
        out.push_str(&format!(
            "\nPrimary key `{}`: `{}`\n",
            table.primary_key.name, table.primary_key.definition
        ));
        if !table.indexes.is_empty() {
            out.push_str("\n| index | definition | serves |\n|---|---|---|\n");
            for index in &table.indexes {
                out.push_str(&format!(
                    "| `{}` | `{}` | {} |\n",
                    index.name, index.definition, index.doc
                ));
            }
        }
        if !table.checks.is_empty() {
            out.push_str("\n| constraint | definition |\n|---|---|\n");
            for check in &table.checks {
                out.push_str(&format!("| `{}` | `{}` |\n", check.name, check.definition));
            }
        }
    }
    out
}

/// Renders the analytics description as markdown: a section per table with
/// its engine, keys, TTL, columns and constraints.
pub fn analytics_to_markdown(description: &crate::clickhouse::AnalyticsDescription) -> String {
    let mut out = format!("# ClickHouse database `{}`\n", description.database);
    for table in &description.tables {
        out.push_str(&format!("\n## `{}`\n\n{}\n\n", table.name, table.doc));
        out.push_str(&format!("- engine: `{}`\n", table.engine));
        out.push_str(&format!("- partition key: `{}`\n", table.partition_key));
        out.push_str(&format!(
            "- sorting key (also the deduplication key): `{}`\n",
            table.sorting_key
        ));
        if let Some(ttl) = &table.ttl {
            out.push_str(&format!("- TTL: `{ttl}`\n"));
        }
        out.push_str("\n| column | type | null | doc |\n|---|---|---|---|\n");
        for column in &table.columns {
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} |\n",
                column.name,
                column.ch_type,
                if column.nullable { "yes" } else { "no" },
                column.doc
            ));
        }
        if !table.checks.is_empty() {
            out.push_str("\n| constraint | definition |\n|---|---|\n");
            for check in &table.checks {
                out.push_str(&format!("| `{}` | `{}` |\n", check.name, check.definition));
            }
        }
    }
    out
}
