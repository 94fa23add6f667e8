//! One column compared (type, nullability, value source, collation,
//! identity sequence, comment), and the words both sides are put in.

use schema_model::description::pg_ident;
use schema_model::{ColumnDescription, SchemaName};

use crate::catalog::{LiveColumn, LiveRelation, LiveSequence};
use crate::difference::Difference;

pub(super) fn compare_column(
    out: &mut Vec<Difference>,
    table: &str,
    live_table: &LiveRelation,
    identity_sequence: Option<&LiveSequence>,
    found: &LiveColumn,
    column: &ColumnDescription,
) {
    let table = table.to_owned();
    if found.sql_type != column.sql_type {
        out.push(Difference::ColumnType {
            table: table.clone(),
            column: column.name.clone(),
            found: found.sql_type.clone(),
            expected: column.sql_type.clone(),
        });
    }
    if found.not_null == column.nullable {
        out.push(Difference::Nullability {
            table: table.clone(),
            column: column.name.clone(),
            found_nullable: !found.not_null,
        });
    }
    let found_source = live_source(found);
    let expected_source = model_source(column);
    if found_source != expected_source {
        out.push(Difference::ColumnSource {
            table: table.clone(),
            column: column.name.clone(),
            found: found_source,
            expected: expected_source,
        });
    }
    if let Some(collation) = &found.collation {
        out.push(Difference::Collation {
            table: table.clone(),
            column: column.name.clone(),
            found: collation.clone(),
        });
    }
    if column.identity.is_some()
        && let Some(sequence) = identity_sequence
    {
        let expected = model_identity(&column.sql_type, &live_table.persistence);
        for (found, expected) in identity_words(sequence)
            .into_iter()
            .zip(identity_words(&expected))
        {
            if found != expected {
                out.push(Difference::IdentityOption {
                    table: table.clone(),
                    column: column.name.clone(),
                    found,
                    expected,
                });
            }
        }
    }
    comment(
        out,
        format!("column {table}.{}", column.name),
        &found.comment,
        &column.doc,
    );
}

/// The whole `pg_get_indexdef` a model index has: `CREATE [UNIQUE] INDEX
/// name ON schema.table` and the model's definition from `USING` on.
pub(super) fn index_definition(
    schema: &SchemaName,
    table: &str,
    name: &str,
    definition: &str,
) -> String {
    let (unique, definition) = match definition.strip_prefix("UNIQUE ") {
        Some(rest) => ("UNIQUE ", rest),
        None => ("", definition),
    };
    format!(
        "CREATE {unique}INDEX {} ON {}.{} {definition}",
        pg_ident(name),
        pg_ident(schema.as_str()),
        pg_ident(table)
    )
}

/// The sequence PostgreSQL makes for `GENERATED ALWAYS AS IDENTITY` on a
/// column of `sql_type` with no sequence options (what the model renders):
/// from 1 up by 1 to the type's maximum, no cache, no cycle, logged like its
/// table (the table's own persistence is compared on its own).
pub(super) fn model_identity(sql_type: &str, table_persistence: &str) -> LiveSequence {
    let max = match sql_type {
        "smallint" => i64::from(i16::MAX),
        "integer" => i64::from(i32::MAX),
        _ => i64::MAX,
    };
    LiveSequence {
        owner: None,
        sql_type: sql_type.to_owned(),
        start: 1,
        increment: 1,
        min: 1,
        max,
        cache: 1,
        cycle: false,
        persistence: table_persistence.to_owned(),
    }
}

/// A sequence's options in `CREATE SEQUENCE` words, one per option, in a
/// fixed order.
fn identity_words(sequence: &LiveSequence) -> Vec<String> {
    vec![
        format!("AS {}", sequence.sql_type),
        format!("START WITH {}", sequence.start),
        format!("INCREMENT BY {}", sequence.increment),
        format!("MINVALUE {}", sequence.min),
        format!("MAXVALUE {}", sequence.max),
        format!("CACHE {}", sequence.cache),
        if sequence.cycle { "CYCLE" } else { "NO CYCLE" }.to_owned(),
        if sequence.persistence == "u" {
            "UNLOGGED"
        } else {
            "LOGGED"
        }
        .to_owned(),
    ]
}

pub(crate) fn comment(
    out: &mut Vec<Difference>,
    object: String,
    found: &Option<String>,
    expected: &str,
) {
    if found.as_deref() != Some(expected) {
        out.push(Difference::Comment {
            object,
            found: found.clone(),
            expected: expected.to_owned(),
        });
    }
}

/// Where a live column's value comes from, in SQL words.
pub(super) fn live_source(column: &LiveColumn) -> String {
    let expression = column.expression.as_deref().unwrap_or("?");
    match (column.identity.as_str(), column.generated.as_str()) {
        ("a", _) => "GENERATED ALWAYS AS IDENTITY".to_owned(),
        ("d", _) => "GENERATED BY DEFAULT AS IDENTITY".to_owned(),
        (_, "s") => format!("GENERATED ALWAYS AS ({expression}) STORED"),
        (_, "v") => format!("GENERATED ALWAYS AS ({expression}) VIRTUAL"),
        _ => match &column.expression {
            Some(expression) => format!("DEFAULT {expression}"),
            None => "no default".to_owned(),
        },
    }
}

/// Where a model column's value comes from, in the same words as [`live_source`].
pub(super) fn model_source(column: &ColumnDescription) -> String {
    match (&column.identity, &column.generated, &column.default) {
        (Some(identity), _, _) => {
            format!("GENERATED {} AS IDENTITY", identity.to_uppercase())
        }
        (None, Some(expression), _) => format!("GENERATED ALWAYS AS ({expression}) STORED"),
        (None, None, Some(expression)) => format!("DEFAULT {expression}"),
        (None, None, None) => "no default".to_owned(),
    }
}
