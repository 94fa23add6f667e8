//! Which objects the model does not declare are foreign ([`Class::Foreign`]
//! (crate::difference::Class::Foreign): reported, left alone) and which can
//! change what the engine's statements read, write or return (drift), for
//! the kinds whose answer depends on more than their kind: extra columns
//! and indexes on engine tables, and foreign keys that reference them.
//!
//! The engine's statements name every column they write and read, and read
//! through the model's indexes; so an extra column changes nothing as long
//! as a row the engine inserts (leaving it out) is accepted as it is, and
//! an extra index changes nothing as long as maintaining it cannot refuse
//! or fail a write the engine makes.

use schema_model::{SchemaName, TableDescription};

use crate::catalog::{LiveColumn, LiveIndex, LiveRelation};
use crate::difference::Difference;

use super::column::live_source;

/// Why an extra column can change what the engine's inserts do, or `None`
/// when it cannot (it is nullable, has no default, identity or generation,
/// and its type is no domain).
pub(super) fn column_risk(found: &LiveColumn) -> Option<String> {
    if found.expression.is_some() || !found.identity.is_empty() || !found.generated.is_empty() {
        return Some(format!(
            "{}, evaluated on every insert of the engine (it can fail it)",
            live_source(found)
        ));
    }
    if found.not_null {
        return Some(
            "NOT NULL, so every insert of the engine, which leaves it out, fails".to_owned(),
        );
    }
    if found.domain {
        return Some(format!(
            "its type {} is a domain, whose constraints apply to the NULL every insert of the \
             engine leaves in it",
            found.sql_type
        ));
    }
    None
}

/// Why an extra index can change what the engine's writes do, or `None`
/// when it cannot: it is not unique, and maintaining it evaluates nothing
/// but PostgreSQL's own leakproof functions (which fail for no argument)
/// through PostgreSQL's own operator classes and collations
/// ([`LiveIndex::evaluates`]).
pub(super) fn index_risk(found: &LiveIndex) -> Option<String> {
    if found.definition.starts_with("CREATE UNIQUE INDEX ") {
        return Some(
            "unique, so it refuses rows the model accepts (and the engine writes)".to_owned(),
        );
    }
    if !found.evaluates.is_empty() {
        return Some(format!(
            "every write of the engine to the table evaluates {}, which can fail it",
            found.evaluates.join(", ")
        ));
    }
    None
}

/// The key columns of `found` that the model's indexes (and primary key)
/// of the table have too, in `found`'s order: columns the engine's
/// statements search or order by. Read from the definitions' key lists
/// (plain column names; an expression key is no column).
pub(super) fn engine_columns(found: &LiveIndex, model: &TableDescription) -> Vec<String> {
    let modelled: Vec<String> = model
        .indexes
        .iter()
        .map(|i| i.definition.as_str())
        .chain([model.primary_key.definition.as_str()])
        .flat_map(key_columns)
        .collect();
    key_columns(&found.from_using())
        .into_iter()
        .filter(|c| modelled.contains(c))
        .collect()
}

/// The plain column names in the first parenthesised list of an index or
/// key definition (`USING btree (queue, priority DESC) WHERE ...`,
/// `PRIMARY KEY (id)`), without their order, collation or operator class.
fn key_columns(definition: &str) -> Vec<String> {
    let Some(open) = definition.find('(') else {
        return Vec::new();
    };
    let rest = &definition[open + 1..];
    let mut depth = 0usize;
    let mut keys = Vec::new();
    let mut current = String::new();
    for c in rest.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' if depth == 0 => {
                keys.push(std::mem::take(&mut current));
                break;
            }
            ')' => {
                depth -= 1;
                current.push(c);
            }
            ',' if depth == 0 => keys.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    keys.iter()
        .filter_map(|key| key.split_whitespace().next())
        .filter(|word| !word.starts_with('('))
        .map(|word| word.trim_matches('"').to_owned())
        .collect()
}

/// The foreign keys that reference the engine table `table` from a table
/// the model does not declare (an engine table's own foreign keys are extra
/// constraints of that table, reported there).
pub(super) fn references(
    out: &mut Vec<Difference>,
    live: &LiveRelation,
    table: &str,
    schema: &SchemaName,
    model: &[TableDescription],
) {
    for reference in &live.referenced_by {
        if reference.schema == schema.as_str() && model.iter().any(|t| t.name == reference.table) {
            continue;
        }
        out.push(Difference::ReferencedBy {
            table: table.to_owned(),
            by: format!("{}.{}", reference.schema, reference.table),
            constraint: reference.constraint.clone(),
            definition: reference.definition.clone(),
        });
    }
}
