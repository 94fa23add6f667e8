//! Drift detection, without I/O: the differences between a live catalog of
//! a schema and a shape (the model's, or a version's), each in words a DBA
//! understands. Reading the catalog is [`crate::catalog`]'s job; asking for
//! the differences of a live database is [`crate::check`]'s.
//!
//! `IF NOT EXISTS` checks names only, so an object with the right name and
//! the wrong shape would be skipped silently; this module compares shapes.
//! The model's definitions ([`schema_model::engine_family`]) are written the
//! way PostgreSQL reports them, so every comparison is between two strings
//! the server would print.
//!
//! The comparison is strict: the engine schema is engine-owned, so anything
//! in it that the model does not declare is a difference too. What is
//! compared, and why each matters to what the engine reads or writes:
//!
//! - **relations**: every relation of the schema (tables, views,
//!   materialized views, foreign and partitioned tables, sequences that no
//!   identity column owns) and every other object in it (functions,
//!   procedures, types, operators, collations, extensions, ...): the model
//!   declares its tables and nothing else;
//! - **per table**: kind and persistence (an unlogged table loses its rows
//!   in a crash), access method (`heap`), storage parameters exactly
//!   (`reloptions` and the TOAST table's `toast.*`: the model declares the
//!   ones it wants, any other is a difference), row-level security (enabled
//!   or forced: rows silently filtered) and policies, inheritance parents and
//!   partitioning (inserts refused or routed) and children (reads, updates
//!   and deletes reach their rows), non-internal triggers and rules (they can
//!   rewrite or drop what the engine writes);
//! - **per column**: type, nullability, default / identity / generation,
//!   collation (comparisons and ordering), and every option of an identity
//!   column's sequence (type, start, increment, min, max, cache, cycle,
//!   logging: a sequence that counts backwards, cycles, caches per session or
//!   restarts after a crash breaks "ids and fences only grow");
//! - **constraints** of every kind (primary key, `CHECK`, `UNIQUE`, foreign
//!   key, exclusion) by their `pg_get_constraintdef`, and **indexes** by
//!   their whole `pg_get_indexdef` (key order, collation, operator class,
//!   `INCLUDE`, `WITH`, `WHERE`) and validity.
//!
//! Comments are compared as well, but a comment difference is documentation
//! only ([`Difference::is_comment`]): `check` reports it without failing,
//! bootstrap does not refuse over it.
//!
//! Not compared, on purpose: ownership and grants (they differ by deployment
//! on the documented DBA path, and a missing privilege fails loudly),
//! replica identity and publication membership (set for replication and
//! CDC, they never change a row the engine reads or writes), tablespaces,
//! column statistics targets, storage and compression modes, and clustering
//! (where bytes live and how plans are costed, not what the rows are).

mod column;
mod foreign;
mod shape;
#[cfg(test)]
pub(crate) mod tests;

use schema_model::{SchemaName, TableDescription};

use crate::catalog::{LiveCatalog, LiveRelation};
pub use crate::difference::{Class, Difference};
use crate::error::one_line;
use crate::render::{SCHEMA_DOC, TABLE_ACCESS_METHOD};

pub(crate) use column::comment;
use column::{compare_column, index_definition};
pub use shape::catalog_of;

/// Compares a live catalog with a model, table by table in model order, then
/// the relations and other objects the model does not declare.
///
/// ```
/// use schema_gen::catalog::LiveCatalog;
/// use schema_gen::verify::{compare, Difference};
/// use schema_model::{engine_family, SchemaName};
///
/// let nothing = LiveCatalog {
///     role: "app".into(),
///     database: "app".into(),
///     schema: None,
///     relations: vec![],
///     objects: vec![],
///     versions: None,
/// };
/// let schema = SchemaName::new("alk").unwrap();
/// assert_eq!(
///     compare(&nothing, &schema, &engine_family()),
///     [Difference::MissingSchema { schema: "alk".into() }]
/// );
/// ```
pub fn compare(
    live: &LiveCatalog,
    schema: &SchemaName,
    model: &[TableDescription],
) -> Vec<Difference> {
    let Some(live_schema) = &live.schema else {
        return vec![Difference::MissingSchema {
            schema: schema.to_string(),
        }];
    };
    let mut out = Vec::new();
    comment(
        &mut out,
        format!("schema {schema}"),
        &live_schema.comment,
        SCHEMA_DOC,
    );
    for table in model {
        match live.relation(&table.name) {
            None => out.push(Difference::MissingTable {
                table: table.name.clone(),
            }),
            Some(relation) => compare_table(&mut out, live, relation, table, schema),
        }
    }
    for table in model {
        if let Some(relation) = live.relation(&table.name) {
            foreign::references(&mut out, relation, &table.name, schema, model);
        }
    }
    for relation in &live.relations {
        if !model.iter().any(|t| t.name == relation.name) && !is_identity_sequence(relation) {
            out.push(Difference::ExtraRelation {
                name: relation.name.clone(),
                what: relation_what(relation),
                risk: None,
            });
        }
    }
    for object in &live.objects {
        out.push(Difference::ExtraObject {
            object: object.clone(),
        });
    }
    out
}

/// An identity column's own sequence: it belongs to its column, whose
/// identity options are compared there (or whose table is reported whole).
fn is_identity_sequence(relation: &LiveRelation) -> bool {
    relation.kind == "S"
        && relation
            .sequence
            .as_ref()
            .and_then(|s| s.owner.as_ref())
            .is_some_and(|owner| owner.identity)
}

/// `table`, `unlogged table`, `view`, ...
fn relation_what(relation: &LiveRelation) -> String {
    let what = match relation.kind.as_str() {
        "r" => "table",
        "p" => "partitioned table",
        "v" => "view",
        "m" => "materialized view",
        "f" => "foreign table",
        "S" => "sequence",
        _ => "relation",
    };
    match relation.persistence.as_str() {
        "u" => format!("unlogged {what}"),
        "t" => format!("temporary {what}"),
        _ => what.to_owned(),
    }
}

/// `a table`, `an unlogged table`, `a view`, ...
fn relation_word(relation: &LiveRelation) -> String {
    let what = relation_what(relation);
    let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {what}")
}

fn compare_table(
    out: &mut Vec<Difference>,
    catalog: &LiveCatalog,
    live: &LiveRelation,
    model: &TableDescription,
    schema: &SchemaName,
) {
    let table = &model.name;
    if live.kind != "r" || live.persistence != "p" {
        out.push(Difference::RelationKind {
            table: table.clone(),
            found: relation_word(live),
        });
    }
    if let Some(found) = &live.access_method
        && found != TABLE_ACCESS_METHOD
    {
        out.push(Difference::AccessMethod {
            table: table.clone(),
            found: found.clone(),
            expected: TABLE_ACCESS_METHOD.to_owned(),
        });
    }
    let mut found_parameters = live.options.clone();
    found_parameters.sort();
    let mut expected_parameters = model.storage_parameters.clone();
    expected_parameters.sort();
    if found_parameters != expected_parameters {
        out.push(Difference::StorageParameters {
            table: table.clone(),
            found: found_parameters,
            expected: expected_parameters,
        });
    }
    if live.row_security || live.force_row_security {
        out.push(Difference::RowSecurity {
            table: table.clone(),
            enabled: live.row_security,
            forced: live.force_row_security,
        });
    }
    for parent in &live.parents {
        out.push(Difference::Parent {
            table: table.clone(),
            parent: parent.name.clone(),
            partition_bound: parent.partition_bound.clone(),
        });
    }
    for child in &live.children {
        out.push(Difference::Child {
            table: table.clone(),
            child: child.clone(),
        });
    }
    comment(out, format!("table {table}"), &live.comment, &model.doc);

    for column in &model.columns {
        let Some(found) = live.columns.iter().find(|c| c.name == column.name) else {
            out.push(Difference::MissingColumn {
                table: table.clone(),
                column: column.name.clone(),
            });
            continue;
        };
        compare_column(
            out,
            table,
            live,
            catalog.identity_sequence(table, &column.name),
            found,
            column,
        );
    }
    for found in &live.columns {
        if !model.columns.iter().any(|c| c.name == found.name) {
            out.push(Difference::ExtraColumn {
                table: table.clone(),
                column: found.name.clone(),
                found_type: found.sql_type.clone(),
                risk: foreign::column_risk(found),
            });
        }
    }

    let constraints = std::iter::once(&model.primary_key).chain(&model.checks);
    for constraint in constraints.clone() {
        match live.constraints.iter().find(|c| c.name == constraint.name) {
            None => out.push(Difference::MissingConstraint {
                table: table.clone(),
                constraint: constraint.name.clone(),
                expected: constraint.definition.clone(),
            }),
            Some(found) if found.definition != constraint.definition => {
                out.push(Difference::ConstraintDefinition {
                    table: table.clone(),
                    constraint: constraint.name.clone(),
                    found: found.definition.clone(),
                    expected: constraint.definition.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for found in &live.constraints {
        if !constraints.clone().any(|c| c.name == found.name) {
            out.push(Difference::ExtraConstraint {
                table: table.clone(),
                constraint: found.name.clone(),
                found: found.definition.clone(),
            });
        }
    }

    for index in &model.indexes {
        match live.indexes.iter().find(|i| i.name == index.name) {
            None => out.push(Difference::MissingIndex {
                table: table.clone(),
                index: index.name.clone(),
                expected: index.definition.clone(),
            }),
            Some(found) => {
                let expected = index_definition(schema, table, &index.name, &index.definition);
                if found.definition != expected {
                    let prefix_matches = expected
                        .strip_suffix(index.definition.as_str())
                        .is_some_and(|prefix| found.definition.starts_with(prefix));
                    out.push(Difference::IndexDefinition {
                        table: table.clone(),
                        index: index.name.clone(),
                        found: if prefix_matches {
                            found.from_using()
                        } else {
                            found.definition.clone()
                        },
                        expected: index.definition.clone(),
                    });
                }
                if !found.valid {
                    out.push(Difference::InvalidIndex {
                        table: table.clone(),
                        index: index.name.clone(),
                    });
                }
            }
        }
    }
    for found in &live.indexes {
        if !model.indexes.iter().any(|i| i.name == found.name) {
            out.push(Difference::ExtraIndex {
                table: table.clone(),
                index: found.name.clone(),
                found: found.from_using(),
                risk: foreign::index_risk(found),
                engine_columns: foreign::engine_columns(found, model),
            });
        }
    }

    for trigger in &live.triggers {
        out.push(Difference::ExtraTrigger {
            table: table.clone(),
            trigger: trigger.name.clone(),
            definition: one_line(&trigger.definition),
            disabled: trigger.enabled == "D",
        });
    }
    for rule in &live.rules {
        // pg_get_ruledef breaks lines and ends with `;`.
        let definition = one_line(&rule.definition);
        out.push(Difference::ExtraRule {
            table: table.clone(),
            rule: rule.name.clone(),
            definition: definition.trim_end_matches(';').to_owned(),
        });
    }
    for policy in &live.policies {
        out.push(Difference::ExtraPolicy {
            table: table.clone(),
            policy: policy.name.clone(),
            definition: policy.describe(),
        });
    }
}
