//! The catalog PostgreSQL would report for a schema holding exactly some
//! tables: what [`compare`](super::compare) finds no difference in, and how the
//! planner and the tests hold two shapes against each other.

use schema_model::history::MODEL_VERSION;
use schema_model::{SchemaName, SchemaVersionRecord, SchemaVersions, TableDescription, TableModel};

use super::column::{index_definition, model_identity};
use crate::catalog::{
    LiveCatalog, LiveColumn, LiveConstraint, LiveIndex, LiveOwner, LiveRelation, LiveSchema,
    LiveSequence, LiveVersions,
};
use crate::render::SCHEMA_DOC;

/// The catalog PostgreSQL would report for a schema holding exactly `tables`
/// (their columns, indexes, constraints, storage parameters, comments and
/// identity sequences), with the schema's own comment: what [`compare`](super::compare)
/// finds no difference in. Upgrade planning compares the shapes of two
/// versions through it.
pub fn catalog_of(schema: &SchemaName, tables: &[TableDescription]) -> LiveCatalog {
    let mut relations: Vec<LiveRelation> = tables
        .iter()
        .map(|t| LiveRelation {
            name: t.name.clone(),
            kind: "r".into(),
            persistence: "p".into(),
            access_method: Some("heap".into()),
            options: t.storage_parameters.clone(),
            comment: Some(t.doc.clone()),
            columns: t
                .columns
                .iter()
                .map(|c| LiveColumn {
                    name: c.name.clone(),
                    sql_type: c.sql_type.clone(),
                    not_null: !c.nullable,
                    identity: match c.identity.as_deref() {
                        Some("always") => "a".into(),
                        _ => String::new(),
                    },
                    generated: if c.generated.is_some() {
                        "s".into()
                    } else {
                        String::new()
                    },
                    expression: c.generated.clone().or_else(|| c.default.clone()),
                    comment: Some(c.doc.clone()),
                    ..LiveColumn::default()
                })
                .collect(),
            indexes: t
                .indexes
                .iter()
                .map(|i| LiveIndex {
                    name: i.name.clone(),
                    definition: index_definition(schema, &t.name, &i.name, &i.definition),
                    valid: true,
                    evaluates: vec![],
                })
                .collect(),
            constraints: std::iter::once(&t.primary_key)
                .chain(&t.checks)
                .map(|c| LiveConstraint {
                    name: c.name.clone(),
                    constraint_type: if c.definition.starts_with("PRIMARY KEY") {
                        "p".into()
                    } else {
                        "c".into()
                    },
                    definition: c.definition.clone(),
                })
                .collect(),
            ..LiveRelation::default()
        })
        .collect();
    // Each identity column's own sequence, as PostgreSQL names it.
    for t in tables {
        for c in t.columns.iter().filter(|c| c.identity.is_some()) {
            relations.push(LiveRelation {
                name: format!("{}_{}_seq", t.name, c.name),
                kind: "S".into(),
                persistence: "p".into(),
                sequence: Some(LiveSequence {
                    owner: Some(LiveOwner {
                        table: t.name.clone(),
                        column: c.name.clone(),
                        identity: true,
                    }),
                    ..model_identity(&c.sql_type, "p")
                }),
                ..LiveRelation::default()
            });
        }
    }
    LiveCatalog {
        role: "app".into(),
        database: "app".into(),
        schema: Some(LiveSchema {
            comment: Some(SCHEMA_DOC.into()),
        }),
        // A schema holding the version table records the model's version, whole.
        versions: tables
            .iter()
            .any(|t| t.name == SchemaVersions::table_name())
            .then(|| LiveVersions {
                readable: true,
                rows: Some(vec![SchemaVersionRecord {
                    version: i32::try_from(MODEL_VERSION).unwrap_or(i32::MAX),
                    release: "schema-gen".into(),
                    started_at: 0,
                    expanded_at: Some(0),
                    contracted_at: Some(0),
                }]),
            }),
        relations,
        objects: vec![],
    }
}
