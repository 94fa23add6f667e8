//! Promises about numbers: each identity sequence of the family must hand
//! out values above every value already stored from it, in its own column
//! and where its values are kept (a dead job keeps its job id, a consumer's
//! offset is an event id). A sequence restarted by hand (`ALTER ... RESTART`,
//! `TRUNCATE ... RESTART IDENTITY` of one table only) or left behind by a
//! logical-replication failover would hand out ids that collide, fences
//! that go down, offsets that consumers skip.
//!
//! The catalog read asks for the largest value of each such column in the
//! same statement (so in the same round trip): through the column's B-tree
//! (`max()` by a backward index scan, one descent) where the model indexes
//! it, and otherwise over at most [`SCAN_CAP`] rows of a table whose size is
//! set by configuration, not by traffic (`locks`: one row per held lock;
//! `stream_offsets`: one row per stream and consumer).

use schema_model::{TableDescription, engine_family};
use serde::{Deserialize, Serialize};

use crate::render::quote_literal;

/// The most rows read of a column that no index orders: past it, the
/// promise is reported as not verified.
pub const SCAN_CAP: i64 = 100_000;

/// A column whose values come from an identity sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promise {
    /// The table holding the values.
    pub table: String,
    /// The column holding them.
    pub column: String,
    /// The identity column whose sequence draws them.
    pub drawn_from: (String, String),
    /// Whether a B-tree of the model leads with the column (its maximum is
    /// one index descent); otherwise at most [`SCAN_CAP`] rows are read.
    pub indexed: bool,
    /// What breaks when the sequence is behind, in words.
    pub breaks: String,
}

/// Columns that keep values drawn by another table's identity: the table,
/// the column, the identity's table and column, and what breaks.
const KEPT: [(&str, &str, &str, &str, &str); 2] = [
    (
        "dead_jobs",
        "id",
        "jobs",
        "id",
        "job ids would repeat: a job killed or expired later fails on dead_jobs_pkey",
    ),
    (
        "stream_offsets",
        "offset",
        "stream_events",
        "id",
        "consumers would skip events: new events get ids at or below their offsets",
    ),
];

/// What a sequence behind its own column breaks.
fn breaks(table: &str, column: &str) -> String {
    match (table, column) {
        ("locks", "fence") => {
            "fences would go down: a stale holder's fence outranks the new one's".to_owned()
        }
        ("stream_events", "id") => {
            "event ids would repeat: appends fail on stream_events_pkey and consumers skip events"
                .to_owned()
        }
        ("jobs", "id") => "job ids would repeat: enqueues fail on jobs_pkey".to_owned(),
        _ => format!("{table}.{column} would repeat values: inserts fail on its key"),
    }
}

/// The promises of `model`: every identity column, and every column that
/// keeps values drawn by one (when both tables are in the model).
pub fn promises(model: &[TableDescription]) -> Vec<Promise> {
    let indexed = |table: &TableDescription, column: &str| {
        table.primary_key.definition == format!("PRIMARY KEY ({column})")
            || table.indexes.iter().any(|i| {
                i.definition.starts_with(&format!("USING btree ({column})"))
                    || i.definition.starts_with(&format!("USING btree ({column},"))
            })
    };
    let mut out = Vec::new();
    for table in model {
        for column in table.columns.iter().filter(|c| c.identity.is_some()) {
            out.push(Promise {
                table: table.name.clone(),
                column: column.name.clone(),
                drawn_from: (table.name.clone(), column.name.clone()),
                indexed: indexed(table, &column.name),
                breaks: breaks(&table.name, &column.name),
            });
        }
    }
    for (table, column, from_table, from_column, words) in KEPT {
        let Some(kept) = model.iter().find(|t| t.name == table) else {
            continue;
        };
        let drawn = model.iter().any(|t| {
            t.name == from_table
                && t.columns
                    .iter()
                    .any(|c| c.name == from_column && c.identity.is_some())
        });
        if drawn && kept.columns.iter().any(|c| c.name == column) {
            out.push(Promise {
                table: table.to_owned(),
                column: column.to_owned(),
                drawn_from: (from_table.to_owned(), from_column.to_owned()),
                indexed: indexed(kept, column),
                breaks: words.to_owned(),
            });
        }
    }
    out
}

/// The largest value of a promised column, as the catalog read found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveMaximum {
    /// The table.
    pub table: String,
    /// The column.
    pub column: String,
    /// Its largest value (`None`: no row, or no readable value).
    pub max: Option<i64>,
    /// Whether the role may read the table (otherwise nothing was read).
    pub readable: bool,
    /// Whether the table held more than [`SCAN_CAP`] rows of an unindexed
    /// column (only the first ones were read).
    pub capped: bool,
}

/// The JSON array of [`LiveMaximum`]s the catalog statement holds: one
/// element per promise whose table exists with its column. `{schema}` is
/// left for the statement to fill in. The maxima the role may read come
/// from one dynamic query (`query_to_xml`), built from the tables that
/// exist, so a missing table never fails the statement when it is parsed
/// (the way the version rows are read).
pub(crate) fn maxima_expression() -> String {
    let promised: Vec<String> = promises(&engine_family())
        .iter()
        .map(|p| {
            format!(
                "({}, {}, {})",
                quote_literal(&p.table),
                quote_literal(&p.column),
                p.indexed
            )
        })
        .collect();
    format!(
        "(WITH promised AS (
            SELECT c.oid, c.relname AS t, a.attname AS c, p.indexed,
                   pg_catalog.has_table_privilege(c.oid, 'SELECT') AS readable
            FROM (VALUES {values}) AS p(t, c, indexed)
            JOIN pg_catalog.pg_class c ON c.relname = p.t AND c.relkind = 'r'
            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = {{schema}}
            JOIN pg_catalog.pg_attribute a
                ON a.attrelid = c.oid AND a.attname = p.c AND NOT a.attisdropped
        ), found AS (
            SELECT x.*
            FROM XMLTABLE('/table/row' PASSING pg_catalog.query_to_xml((
                    SELECT pg_catalog.string_agg(CASE WHEN p.indexed
                        THEN format('SELECT %L AS t, %L AS c, (SELECT max(%I) FROM %I.%I) AS m, \
                                     0 AS n', p.t, p.c, p.c, {{schema}}, p.t)
                        ELSE format('SELECT %L AS t, %L AS c, max(v) AS m, count(*) AS n \
                                     FROM (SELECT %I AS v FROM %I.%I LIMIT {limit}) s',
                                    p.t, p.c, p.c, {{schema}}, p.t) END, ' UNION ALL ')
                    FROM promised p WHERE p.readable), false, false, '')
                COLUMNS t text PATH 't', c text PATH 'c', m bigint PATH 'm', n bigint PATH 'n') x
        )
        SELECT COALESCE(json_agg(json_build_object(
                   'table', p.t, 'column', p.c, 'readable', p.readable,
                   'max', f.m, 'capped', COALESCE(f.n > {cap}, false))
                 ORDER BY p.t, p.c), '[]'::json)
        FROM promised p LEFT JOIN found f ON f.t = p.t AND f.c = p.c)",
        values = promised.join(", "),
        limit = SCAN_CAP + 1,
        cap = SCAN_CAP,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_promises_ids_fences_and_offsets() {
        let promised: Vec<(String, String, bool)> = promises(&engine_family())
            .into_iter()
            .map(|p| {
                (
                    format!("{}.{}", p.table, p.column),
                    format!("{}.{}", p.drawn_from.0, p.drawn_from.1),
                    p.indexed,
                )
            })
            .collect();
        let expected = [
            ("jobs.id", "jobs.id", true),
            ("stream_events.id", "stream_events.id", true),
            ("locks.fence", "locks.fence", false),
            ("dead_jobs.id", "jobs.id", true),
            ("stream_offsets.offset", "stream_events.id", false),
        ];
        for (column, from, indexed) in expected {
            assert!(
                promised.contains(&(column.to_owned(), from.to_owned(), indexed)),
                "{column}: {promised:?}"
            );
        }
    }
}
