//! Version rows are not trusted over the shape: rows that contradict
//! themselves or the live catalog are named as such, and a database whose
//! rows name a newer version is still checked for everything this
//! release's engines read, write or plan with.

use schema_model::{SchemaName, SchemaVersionRecord, TableDescription};

use super::history::History;
use crate::catalog::LiveCatalog;
use crate::difference::Difference;
use crate::verify::compare;

/// One row in words: `version 3 (started 100, expanded 200, contracted -)`.
pub(super) fn row_words(row: &SchemaVersionRecord) -> String {
    let at = |t: Option<i64>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
    format!(
        "version {} (started {}, expanded {}, contracted {})",
        row.version,
        row.started_at,
        at(row.expanded_at),
        at(row.contracted_at)
    )
}

/// The rows that cannot have been written by upgrades, each with why: a
/// version contracted before it expanded (or never expanded), expanded
/// before it started, or contracted while an older recorded version is not.
pub(super) fn impossible_rows(rows: &[SchemaVersionRecord]) -> Vec<String> {
    let mut out = Vec::new();
    for row in rows {
        let why = match (row.expanded_at, row.contracted_at) {
            (None, Some(_)) => Some("contracted but never expanded"),
            (Some(e), Some(c)) if c < e => Some("contracted before it expanded"),
            (Some(e), _) if e < row.started_at => Some("expanded before its upgrade started"),
            _ => None,
        };
        if let Some(why) = why {
            out.push(format!("{}: {why}", row_words(row)));
        }
        if row.is_contracted()
            && let Some(older) = rows
                .iter()
                .find(|o| o.version < row.version && !o.is_contracted())
        {
            out.push(format!(
                "{}: contracted while the older {} is not",
                row_words(row),
                row_words(older)
            ));
        }
    }
    out
}

/// The difference that names rows no upgrade wrote.
pub(super) fn rows_difference(rows: &[SchemaVersionRecord], why: String) -> Difference {
    Difference::VersionRows {
        rows: rows.iter().map(row_words).collect(),
        why,
    }
}

/// What this release's engines rely on in a database whose rows name a
/// newer version: every table, column, index and constraint of `target`
/// (a newer version adds to them and removes nothing older engines use,
/// until a contract they no longer work after), each as `target` has it,
/// with every index valid, ready and live, identity sequences ahead, and
/// nothing that changes what the engine's statements do (triggers, rules,
/// row-level security, a `NOT NULL` column an insert of this release leaves
/// out). What a newer version may add or change besides is left to that
/// release's check: tables, nullable or defaulted columns, indexes,
/// `CHECK`s, storage parameters, comments, other objects.
pub(super) fn relied_on(
    live: &LiveCatalog,
    schema: &SchemaName,
    target: &[TableDescription],
) -> Vec<Difference> {
    compare(live, schema, target)
        .into_iter()
        .filter(|d| match d {
            Difference::ExtraRelation { .. }
            | Difference::ExtraIndex { .. }
            | Difference::ExtraObject { .. }
            | Difference::StorageParameters { .. }
            | Difference::Comment { .. }
            | Difference::SchemaOwner { .. } => false,
            Difference::ExtraConstraint { found, .. } => !found.starts_with("CHECK "),
            Difference::ExtraColumn { table, column, .. } => {
                inserts_leave_out_a_required_column(live, table, column)
            }
            _ => true,
        })
        .collect()
}

/// Whether `table.column` (a column this release does not know) is `NOT
/// NULL` with nothing to fill it: this release's inserts would fail.
fn inserts_leave_out_a_required_column(live: &LiveCatalog, table: &str, column: &str) -> bool {
    live.relation(table)
        .and_then(|r| r.columns.iter().find(|c| c.name == column))
        .is_some_and(|c| {
            c.not_null && c.expression.is_none() && c.identity.is_empty() && c.generated.is_empty()
        })
}

/// The positions (contracted, expanded) of `history`, other than
/// `recorded`, whose shape `live` is exactly (comments aside): when the
/// rows' own position does not match, the rows contradict the shape.
pub(super) fn matching_positions(
    live: &LiveCatalog,
    schema: &SchemaName,
    history: &History,
    recorded: (u32, u32),
) -> Vec<(u32, u32)> {
    let numbers: Vec<u32> = history.versions().iter().map(|v| v.number()).collect();
    let mut out = Vec::new();
    for &contracted in &numbers {
        for &expanded in numbers.iter().filter(|&&e| e >= contracted) {
            if (contracted, expanded) == recorded {
                continue;
            }
            let Some(shape) = super::verdict::expanded_shape(history, contracted, expanded) else {
                continue;
            };
            if compare(live, schema, &shape)
                .iter()
                .all(Difference::is_comment)
            {
                out.push((contracted, expanded));
            }
        }
    }
    out
}
