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

use tokio_postgres::Client;

use schema_model::description::pg_ident;
use schema_model::history::MODEL_VERSION;
use schema_model::{
    ColumnDescription, SchemaName, SchemaVersionRecord, SchemaVersions, TableDescription,
    TableModel, engine_family,
};

use crate::Options;
use crate::catalog::{
    self, LiveCatalog, LiveColumn, LiveConstraint, LiveIndex, LiveOwner, LiveRelation, LiveSchema,
    LiveSequence, LiveVersions,
};
pub use crate::difference::Difference;
use crate::error::{Error, one_line};
use crate::render::{SCHEMA_DOC, TABLE_ACCESS_METHOD};

/// [`verify_with`] under the default [`Options`] (a 5 s lock bound).
///
/// # Errors
///
/// As [`verify_with`].
pub async fn verify(client: &Client, schema: &SchemaName) -> Result<Vec<Difference>, Error> {
    verify_with(client, schema, &Options::default()).await
}

/// Returns the differences between the live catalog of `schema` and the
/// model, in one round trip that only reads `pg_catalog` and waits for a
/// lock at most `options.lock_timeout` (see [`catalog::read`]); under a
/// Citus `options.layout`, also how the family is distributed
/// ([`crate::citus::differences`], a few more round trips). Empty means
/// the schema matches the model exactly, comments included. A schema that
/// does not exist is one difference, [`Difference::MissingSchema`].
///
/// # Errors
///
/// As [`catalog::read`]: a lost connection, a lock timeout (naming the
/// session that holds the lock), a server error or an undecodable reply.
pub async fn verify_with(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Vec<Difference>, Error> {
    crate::citus::probe(client, schema, options.layout, options).await?;
    let live = catalog::read(client, schema, options).await?;
    let mut differences = compare(&live, schema, &engine_family());
    differences
        .extend(crate::citus::differences(client, schema, options, live.schema.is_some()).await?);
    Ok(differences)
}

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
    for relation in &live.relations {
        if !model.iter().any(|t| t.name == relation.name) && !is_identity_sequence(relation) {
            out.push(Difference::ExtraRelation {
                name: relation.name.clone(),
                what: relation_what(relation),
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

fn compare_column(
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
fn index_definition(schema: &SchemaName, table: &str, name: &str, definition: &str) -> String {
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
fn model_identity(sql_type: &str, table_persistence: &str) -> LiveSequence {
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

fn comment(out: &mut Vec<Difference>, object: String, found: &Option<String>, expected: &str) {
    if found.as_deref() != Some(expected) {
        out.push(Difference::Comment {
            object,
            found: found.clone(),
            expected: expected.to_owned(),
        });
    }
}

/// The catalog PostgreSQL would report for a schema holding exactly `tables`
/// (their columns, indexes, constraints, storage parameters, comments and
/// identity sequences), with the schema's own comment: what [`compare`]
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
fn model_source(column: &ColumnDescription) -> String {
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

    /// The catalog PostgreSQL would report for a schema created from the
    /// model: the fixture every comparison test mutates.
    pub(crate) fn perfect(schema: &SchemaName) -> LiveCatalog {
        catalog_of(schema, &engine_family())
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
            ..LiveColumn::default()
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
            ..LiveRelation::default()
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
}
