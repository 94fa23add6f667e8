//! Drift detection: the differences between the live catalog of a schema and
//! the model, each in words a DBA understands.
//!
//! `IF NOT EXISTS` checks names only, so an object with the right name and
//! the wrong shape would be skipped silently; this module compares shapes.
//! The model's definitions ([`schema_model::engine_family`]) are written the
//! way PostgreSQL reports them, so every comparison is between two strings
//! the server would print.
//!
//! The comparison is strict: the engine schema is engine-owned, so anything
//! in it that the model does not declare (an extra table, column, index or
//! constraint) is a difference too. Comments are compared as well, but a
//! comment difference is documentation only ([`Difference::is_comment`]):
//! `check` reports it, bootstrap does not refuse over it.

use tokio_postgres::GenericClient;

use schema_model::{SchemaName, TableDescription, engine_family};

use crate::catalog::{self, LiveCatalog, LiveColumn, LiveRelation};
pub use crate::difference::Difference;
use crate::error::Error;
use crate::render::SCHEMA_DOC;

/// Returns the differences between the live catalog of `schema` and the
/// model, in one round trip that only reads `pg_catalog` (see
/// [`catalog::read`]). Empty means the schema matches the model exactly,
/// comments included. A schema that does not exist is one difference,
/// [`Difference::MissingSchema`].
///
/// # Errors
///
/// As [`catalog::read`]: a lost connection, a lock timeout, a server error or
/// an undecodable reply.
pub async fn verify<C: GenericClient + Sync>(
    client: &C,
    schema: &SchemaName,
) -> Result<Vec<Difference>, Error> {
    let live = catalog::read(client, schema).await?;
    Ok(compare(&live, schema, &engine_family()))
}

/// Compares a live catalog with a model, table by table in model order, then
/// the relations the model does not declare.
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
            Some(relation) => compare_table(&mut out, relation, table),
        }
    }
    for relation in &live.relations {
        if !model.iter().any(|t| t.name == relation.name) {
            out.push(Difference::ExtraRelation {
                name: relation.name.clone(),
                what: relation_what(relation),
            });
        }
    }
    out
}

/// `table`, `unlogged table`, `view`, ...
fn relation_what(relation: &LiveRelation) -> String {
    let what = match relation.kind.as_str() {
        "r" => "table",
        "p" => "partitioned table",
        "v" => "view",
        "m" => "materialized view",
        "f" => "foreign table",
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

fn compare_table(out: &mut Vec<Difference>, live: &LiveRelation, model: &TableDescription) {
    let table = &model.name;
    if live.kind != "r" || live.persistence != "p" {
        out.push(Difference::RelationKind {
            table: table.clone(),
            found: relation_word(live),
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
        comment(
            out,
            format!("column {table}.{}", column.name),
            &found.comment,
            &column.doc,
        );
    }
    for found in &live.columns {
        if !model.columns.iter().any(|c| c.name == found.name) {
            out.push(Difference::ExtraColumn {
                table: table.clone(),
                column: found.name.clone(),
                found_type: found.sql_type.clone(),
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
                let definition = found.comparable_definition();
                if definition != index.definition {
                    out.push(Difference::IndexDefinition {
                        table: table.clone(),
                        index: index.name.clone(),
                        found: definition,
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
                found: found.comparable_definition(),
            });
        }
    }
}

fn comment(out: &mut Vec<Difference>, object: String, found: &Option<String>, expected: &str) {
    if found.as_deref() != Some(expected) {
        out.push(Difference::Comment {
            object,
            found: found.clone(),
            expected: expected.to_owned(),
        });
    }
}

/// Where a live column's value comes from, in SQL words.
fn live_source(column: &LiveColumn) -> String {
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
fn model_source(column: &schema_model::ColumnDescription) -> String {
    match (&column.identity, &column.generated, &column.default) {
        (Some(identity), _, _) => {
            format!("GENERATED {} AS IDENTITY", identity.to_uppercase())
        }
        (None, Some(expression), _) => format!("GENERATED ALWAYS AS ({expression}) STORED"),
        (None, None, Some(expression)) => format!("DEFAULT {expression}"),
        (None, None, None) => "no default".to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::{LiveConstraint, LiveIndex, LiveSchema};

    /// The catalog PostgreSQL would report for a schema created from the
    /// model: the fixture every comparison test mutates.
    pub(crate) fn perfect(schema: &SchemaName) -> LiveCatalog {
        let relations = engine_family()
            .into_iter()
            .map(|t| LiveRelation {
                name: t.name.clone(),
                kind: "r".into(),
                persistence: "p".into(),
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
                    })
                    .collect(),
                indexes: t
                    .indexes
                    .iter()
                    .map(|i| LiveIndex {
                        name: i.name.clone(),
                        definition: format!(
                            "CREATE INDEX {} ON {schema}.{} {}",
                            i.name, t.name, i.definition
                        ),
                        unique: false,
                        valid: true,
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
            })
            .collect();
        LiveCatalog {
            role: "app".into(),
            database: "app".into(),
            schema: Some(LiveSchema {
                comment: Some(SCHEMA_DOC.into()),
            }),
            relations,
        }
    }

    fn schema() -> SchemaName {
        SchemaName::new("alk").unwrap()
    }

    fn diff(live: &LiveCatalog) -> Vec<String> {
        compare(live, &schema(), &engine_family())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn table<'a>(live: &'a mut LiveCatalog, name: &str) -> &'a mut LiveRelation {
        live.relations.iter_mut().find(|r| r.name == name).unwrap()
    }

    #[test]
    fn a_schema_built_from_the_model_has_no_difference() {
        assert_eq!(diff(&perfect(&schema())), Vec::<String>::new());
    }

    #[test]
    fn column_drift_is_worded_for_a_dba() {
        let mut live = perfect(&schema());
        let jobs = table(&mut live, "jobs");
        jobs.columns.retain(|c| c.name != "queue");
        let priority = jobs
            .columns
            .iter_mut()
            .find(|c| c.name == "priority")
            .unwrap();
        priority.sql_type = "bigint".into();
        let run_at = jobs
            .columns
            .iter_mut()
            .find(|c| c.name == "run_at")
            .unwrap();
        run_at.not_null = false;
        let expires = jobs
            .columns
            .iter_mut()
            .find(|c| c.name == "expires_at")
            .unwrap();
        expires.not_null = true;
        let id = jobs.columns.iter_mut().find(|c| c.name == "id").unwrap();
        id.identity = "d".into();
        let attempts = jobs
            .columns
            .iter_mut()
            .find(|c| c.name == "attempts")
            .unwrap();
        attempts.expression = Some("0".into());
        jobs.columns.push(LiveColumn {
            name: "foo".into(),
            sql_type: "text".into(),
            not_null: false,
            identity: String::new(),
            generated: String::new(),
            expression: None,
            comment: None,
        });
        assert_eq!(
            diff(&live),
            [
                "jobs.id: has GENERATED BY DEFAULT AS IDENTITY, model says GENERATED ALWAYS AS IDENTITY",
                "missing column jobs.queue",
                "jobs.priority: type is bigint, model says integer",
                "jobs.run_at: accepts NULL, model says NOT NULL",
                "jobs.expires_at: is NOT NULL, model says it accepts NULL",
                "jobs.attempts: has DEFAULT 0, model says no default",
                "extra column jobs.foo (text)",
            ]
        );
    }

    #[test]
    fn generated_and_default_expressions_are_compared() {
        let mut live = perfect(&schema());
        let dead = table(&mut live, "dead_jobs");
        let purge = dead
            .columns
            .iter_mut()
            .find(|c| c.name == "purge_at")
            .unwrap();
        purge.generated = String::new();
        purge.expression = None;
        let events = table(&mut live, "stream_events");
        let tx = events
            .columns
            .iter_mut()
            .find(|c| c.name == "tx_id")
            .unwrap();
        tx.expression = Some("txid_current()".into());
        assert_eq!(
            diff(&live),
            [
                "dead_jobs.purge_at: has no default, model says GENERATED ALWAYS AS ((died_at + dead_letter_retention_s)) STORED",
                "stream_events.tx_id: has DEFAULT txid_current(), model says DEFAULT pg_current_xact_id()",
            ]
        );
    }

    #[test]
    fn index_and_constraint_drift_is_worded_for_a_dba() {
        let mut live = perfect(&schema());
        let jobs = table(&mut live, "jobs");
        jobs.indexes.retain(|i| i.name != "jobs_expiry_idx");
        let claim = jobs
            .indexes
            .iter_mut()
            .find(|i| i.name == "jobs_claim_idx")
            .unwrap();
        claim.definition = "CREATE INDEX jobs_claim_idx ON alk.jobs USING btree (queue, priority, run_at, id) WHERE (claimed_at IS NULL)".into();
        let reaper = jobs
            .indexes
            .iter_mut()
            .find(|i| i.name == "jobs_claim_expiry_idx")
            .unwrap();
        reaper.valid = false;
        jobs.indexes.push(LiveIndex {
            name: "jobs_mine_idx".into(),
            definition: "CREATE UNIQUE INDEX jobs_mine_idx ON alk.jobs USING btree (queue)".into(),
            unique: true,
            valid: true,
        });
        jobs.constraints
            .retain(|c| c.name != "jobs_attempts_not_negative");
        let pk = jobs
            .constraints
            .iter_mut()
            .find(|c| c.name == "jobs_pkey")
            .unwrap();
        pk.definition = "PRIMARY KEY (id, queue)".into();
        jobs.constraints.push(LiveConstraint {
            name: "jobs_fk".into(),
            constraint_type: "f".into(),
            definition: "FOREIGN KEY (queue) REFERENCES queues(name)".into(),
        });
        assert_eq!(
            diff(&live),
            [
                "constraint jobs_pkey: is `PRIMARY KEY (id, queue)`, model says `PRIMARY KEY (id)`",
                "missing CHECK constraint jobs_attempts_not_negative on jobs (model says `CHECK ((attempts >= 0))`)",
                "extra constraint jobs_fk on jobs: `FOREIGN KEY (queue) REFERENCES queues(name)`",
                "index jobs_claim_idx: is `USING btree (queue, priority, run_at, id) WHERE (claimed_at IS NULL)`, model says `USING btree (queue, priority DESC, run_at, id) WHERE ((claimed_at IS NULL) AND ready)`",
                "index jobs_claim_expiry_idx on jobs is INVALID (a failed CREATE INDEX CONCURRENTLY?): PostgreSQL never reads it",
                "missing index jobs_expiry_idx on jobs (model says `USING btree (expires_at) WHERE (expires_at IS NOT NULL)`)",
                "extra index jobs_mine_idx on jobs: `UNIQUE USING btree (queue)`",
            ]
        );
    }

    #[test]
    fn relations_and_comments_are_classified() {
        let mut live = perfect(&schema());
        live.relations.retain(|r| r.name != "locks");
        let offsets = table(&mut live, "stream_offsets");
        offsets.persistence = "u".into();
        offsets.comment = None;
        live.relations.push(LiveRelation {
            name: "orders".into(),
            kind: "v".into(),
            persistence: "p".into(),
            comment: None,
            columns: vec![],
            indexes: vec![],
            constraints: vec![],
        });
        live.schema = Some(LiveSchema {
            comment: Some("mine".into()),
        });
        let differences = compare(&live, &schema(), &engine_family());
        let text: Vec<String> = differences.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                format!("comment on schema alk: is \"mine\", model says {SCHEMA_DOC:?}"),
                "stream_offsets: is an unlogged table, model says a permanent table".to_owned(),
                format!(
                    "comment on table stream_offsets: missing, model says {:?}",
                    schema_model::StreamOffsets::DOC
                ),
                "missing table locks".to_owned(),
                "extra view orders (not in the model)".to_owned(),
            ]
        );
        let kinds: Vec<(bool, bool, bool)> = differences
            .iter()
            .map(|d| (d.is_missing_object(), d.is_comment(), d.is_drift()))
            .collect();
        assert_eq!(
            kinds,
            [
                (false, true, false),
                (false, false, true),
                (false, true, false),
                (true, false, false),
                (false, false, true),
            ]
        );
    }

    use schema_model::TableModel as _;
}
