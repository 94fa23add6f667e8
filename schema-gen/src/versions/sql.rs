//! The SQL of each upgrade step, for a schema name, and how it is sent
//! ([`Work`]): the one text the executor runs and the dry run prints.
//!
//! Names are quoted with [`render::quote_ident`]; definitions (a column's
//! type, an index from `USING` on, a `CHECK (...)`) are the target version's
//! description, written the way PostgreSQL itself reports them, so the
//! object an upgrade makes reads back exactly as the version describes it
//! (the upgrade verifies that it does). A new table's statements are the
//! target version's own bootstrap statements: the model's rendering for
//! this release's version, the shipped script for an older one.

use sea_query::{
    Alias, Cond, Condition as SeaCondition, Expr, ExprTrait, LockBehavior, LockType,
    PostgresQueryBuilder, Query,
};
use sea_query_postgres::{PostgresBinder, PostgresValues};

use schema_model::SchemaName;
use schema_model::history::{Backfill, Condition, SchemaVersion};

use crate::render::{self, StatementKind, quote_ident, quote_literal};

use super::step::{Action, Step};

/// A step's SQL, by how it is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// In one transaction.
    Transaction(Vec<String>),
    /// Alone, outside any transaction block (`CONCURRENTLY`).
    Alone {
        /// The statement.
        statement: String,
        /// The index it builds, whose invalid leftover (of a build that was
        /// interrupted) is dropped first ([`drop_index`]).
        rebuilds: Option<String>,
    },
    /// A backfill: its batch statement, run once per window of keys, each
    /// window its own transaction; then the vacuum of the table, alone.
    Batches {
        /// The batch statement.
        batch: BatchStatement,
        /// The vacuum that follows batches that changed rows.
        vacuum: String,
    },
}

/// A backfill's statement: `$1` and `$2` are the window of keys (`>= $1`,
/// `< $2`), every further placeholder the unix second it runs at.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStatement {
    /// The `UPDATE`.
    pub sql: String,
    /// How many placeholders it has (2 and then one per `now`).
    pub placeholders: usize,
    /// The table, qualified and quoted.
    pub table: String,
    /// The key column, quoted.
    pub key: String,
}

impl BatchStatement {
    /// `SELECT min(key), max(key) FROM table`: the keys to walk.
    pub fn bounds_sql(&self) -> String {
        format!(
            "SELECT min({k}), max({k}) FROM {}",
            self.table,
            k = self.key
        )
    }
}

impl BatchStatement {
    /// The values of one window: `[lo, hi, now, now, ...]`.
    pub fn values(&self, lo: i64, hi: i64, now: i64) -> Vec<i64> {
        let mut values = vec![lo, hi];
        values.resize(self.placeholders, now);
        values
    }
}

fn qualified(schema: &SchemaName, table: &str) -> String {
    format!("{}.{}", quote_ident(schema.as_str()), quote_ident(table))
}

/// The SQL of `step` for `schema`; `target` is the version the step moves
/// to (where a new table's statements come from).
pub fn work(step: &Step, schema: &SchemaName, target: &SchemaVersion) -> Work {
    let table = qualified(schema, &step.table);
    let alter = |clause: String| Work::Transaction(vec![format!("ALTER TABLE {table} {clause}")]);
    match &step.action {
        Action::CreateTable => Work::Transaction(table_statements(target, schema, &step.table)),
        Action::AddColumn {
            column,
            transitional_default,
        } => {
            let mut clause = format!(
                "ADD COLUMN IF NOT EXISTS {} {}",
                quote_ident(&column.name),
                column.sql_type
            );
            if !column.nullable {
                clause.push_str(" NOT NULL");
            }
            if let Some(default) = transitional_default.as_ref().or(column.default.as_ref()) {
                clause.push_str(&format!(" DEFAULT {default}"));
            }
            Work::Transaction(vec![
                format!("ALTER TABLE {table} {clause}"),
                format!(
                    "COMMENT ON COLUMN {table}.{} IS {}",
                    quote_ident(&column.name),
                    quote_literal(&column.doc)
                ),
            ])
        }
        Action::DropNotNull { column } => alter(format!(
            "ALTER COLUMN {} DROP NOT NULL",
            quote_ident(column)
        )),
        Action::DropDefault { column } => {
            alter(format!("ALTER COLUMN {} DROP DEFAULT", quote_ident(column)))
        }
        Action::DropColumn { column } => {
            alter(format!("DROP COLUMN IF EXISTS {}", quote_ident(column)))
        }
        Action::SetStorageParameters { parameters, reset } => {
            let mut statements = Vec::new();
            if !parameters.is_empty() {
                statements.push(format!(
                    "ALTER TABLE {table} SET ({})",
                    parameters.join(", ")
                ));
            }
            if !reset.is_empty() {
                statements.push(format!("ALTER TABLE {table} RESET ({})", reset.join(", ")));
            }
            Work::Transaction(statements)
        }
        Action::Comment { column: None, doc } => Work::Transaction(vec![format!(
            "COMMENT ON TABLE {table} IS {}",
            quote_literal(doc)
        )]),
        Action::Comment {
            column: Some(column),
            doc,
        } => Work::Transaction(vec![format!(
            "COMMENT ON COLUMN {table}.{} IS {}",
            quote_ident(column),
            quote_literal(doc)
        )]),
        Action::Backfill { backfill } => Work::Batches {
            batch: batch_statement(schema, backfill),
            vacuum: render::vacuum_statement(schema, backfill.table),
        },
        Action::CreateIndex { index, definition } => {
            let (unique, using) = match definition.strip_prefix("UNIQUE ") {
                Some(rest) => ("UNIQUE ", rest),
                None => ("", definition.as_str()),
            };
            Work::Alone {
                statement: format!(
                    "CREATE {unique}INDEX CONCURRENTLY IF NOT EXISTS {} ON {table} {using}",
                    quote_ident(index)
                ),
                rebuilds: Some(index.clone()),
            }
        }
        Action::SwapIndex {
            index,
            replacement,
            legacy,
        } => Work::Transaction(vec![
            format!(
                "ALTER INDEX {} RENAME TO {}",
                qualified(schema, index),
                quote_ident(legacy)
            ),
            format!(
                "ALTER INDEX {} RENAME TO {}",
                qualified(schema, replacement),
                quote_ident(index)
            ),
        ]),
        Action::DropIndex { index } => Work::Alone {
            statement: drop_index(schema, index),
            rebuilds: None,
        },
        Action::AddCheck {
            constraint,
            definition,
        } => alter(format!(
            "ADD CONSTRAINT {} {definition} NOT VALID",
            quote_ident(constraint)
        )),
        Action::ValidateConstraint { constraint } => {
            alter(format!("VALIDATE CONSTRAINT {}", quote_ident(constraint)))
        }
        Action::DropConstraint { constraint } => alter(format!(
            "DROP CONSTRAINT IF EXISTS {}",
            quote_ident(constraint)
        )),
        Action::DropTable => Work::Transaction(vec![format!("DROP TABLE IF EXISTS {table}")]),
    }
}

/// `DROP INDEX CONCURRENTLY IF EXISTS`: also what clears the invalid
/// leftover of an interrupted `CREATE INDEX CONCURRENTLY`.
pub fn drop_index(schema: &SchemaName, index: &str) -> String {
    format!(
        "DROP INDEX CONCURRENTLY IF EXISTS {}",
        qualified(schema, index)
    )
}

/// A table's statements in `version`'s bootstrap: its `CREATE TABLE`, its
/// indexes and comments.
pub fn table_statements(version: &SchemaVersion, schema: &SchemaName, table: &str) -> Vec<String> {
    let statements = version_statements(version, schema);
    let mut current: Option<String> = None;
    let mut out = Vec::new();
    for (kind, object, sql) in statements {
        if kind == StatementKind::CreateTable {
            current = Some(object.clone());
        }
        // The version record of a fresh bootstrap is no part of a table an
        // upgrade adds: the upgrade records versions itself.
        if current.as_deref() == Some(table)
            && !matches!(
                kind,
                StatementKind::CreateSchema | StatementKind::RecordVersion
            )
        {
            out.push(sql);
        }
    }
    out
}

/// Every bootstrap statement of `version` for `schema`, with its kind and
/// object: the model's own for the version the model is (the one without
/// shipped text), the shipped script's for an older version (printed by its release for the schema `alkstore`, one
/// statement per paragraph, which this reads back).
pub fn version_statements(
    version: &SchemaVersion,
    schema: &SchemaName,
) -> Vec<(StatementKind, String, String)> {
    match &version.shipped {
        None => render::bootstrap_statements(schema)
            .into_iter()
            .map(|s| (s.kind, s.object, s.sql))
            .collect(),
        Some(shipped) => {
            let ours = quote_ident(schema.as_str());
            shipped
                .schema_sql
                .split(";\n\n")
                .map(str::trim)
                .filter_map(|paragraph| {
                    let sql = paragraph.replace("\"alkstore\"", &ours);
                    let kind = if sql.starts_with("CREATE SCHEMA") {
                        StatementKind::CreateSchema
                    } else if sql.starts_with("CREATE TABLE") {
                        StatementKind::CreateTable
                    } else if sql.starts_with("CREATE INDEX") {
                        StatementKind::CreateIndex
                    } else if sql.starts_with("COMMENT ON") {
                        StatementKind::Comment
                    } else {
                        return None;
                    };
                    let object = match kind {
                        StatementKind::CreateTable => sql
                            .split_whitespace()
                            .nth(5)
                            .and_then(|q| q.rsplit('.').next())
                            .map(|q| q.trim_matches('"').to_owned())
                            .unwrap_or_default(),
                        _ => String::new(),
                    };
                    Some((kind, object, sql))
                })
                .collect()
        }
    }
}

/// The batch statement of `backfill`: the rows of one window of keys that
/// still need it, locked with `SKIP LOCKED` (rows an engine holds are left
/// for the rerun or the contract), set through the key.
///
/// ```text
/// UPDATE "s"."jobs" SET "ready" = true WHERE "id" = ANY(ARRAY (
///   SELECT "id" FROM "s"."jobs" WHERE "id" >= $1 AND "id" < $2
///     AND (NOT "ready") AND "claimed_at" IS NULL AND "run_at" <= $3
///   FOR UPDATE SKIP LOCKED))
/// ```
pub fn batch_statement(schema: &SchemaName, backfill: &Backfill) -> BatchStatement {
    let table = (Alias::new(schema.as_str()), Alias::new(backfill.table));
    let key = Alias::new(backfill.key);
    let build = |lo: i64, hi: i64, now: i64| {
        let mut rows = Query::select();
        rows.column(key.clone())
            .from(table.clone())
            .and_where(Expr::col(key.clone()).gte(lo))
            .and_where(Expr::col(key.clone()).lt(hi))
            .cond_where(condition(&backfill.rows, now))
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        Query::update()
            .table(table.clone())
            .value(Alias::new(backfill.set), Expr::cust(backfill.value.sql()))
            .and_where(Expr::cust_with_exprs(
                "$1 = ANY(ARRAY $2)",
                [
                    Expr::col(key.clone()),
                    Expr::SubQuery(None, Box::new(rows.into())),
                ],
            ))
            .to_owned()
    };
    let (sql, values): (String, PostgresValues) =
        build(0, 0, 0).build_postgres(PostgresQueryBuilder);
    BatchStatement {
        sql,
        placeholders: values.0.len(),
        table: qualified(schema, backfill.table),
        key: quote_ident(backfill.key),
    }
}

fn condition(rows: &Condition, now: i64) -> SeaCondition {
    match rows {
        Condition::All(all) => all
            .iter()
            .fold(Cond::all(), |c, each| c.add(condition(each, now))),
        Condition::Any(any) => any
            .iter()
            .fold(Cond::any(), |c, each| c.add(condition(each, now))),
        single => Cond::all().add(single_condition(single, now)),
    }
}

fn single_condition(rows: &Condition, now: i64) -> Expr {
    match rows {
        Condition::IsNull(c) => Expr::col(Alias::new(*c)).is_null(),
        Condition::IsNotNull(c) => Expr::col(Alias::new(*c)).is_not_null(),
        Condition::IsFalse(c) => Expr::col(Alias::new(*c)).not(),
        Condition::NotAfterNow(c) => Expr::col(Alias::new(*c)).lte(now),
        Condition::All(_) | Condition::Any(_) => condition(rows, now).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schema_model::history::{MODEL_VERSION, version};
    use schema_model::{SchemaVersions, TableModel};

    #[test]
    fn the_backfill_walks_one_window_of_keys_and_skips_locked_rows() {
        let schema = SchemaName::new("s").unwrap();
        let v2 = version(2).unwrap();
        let statement = batch_statement(&schema, &v2.hints.backfills[0]);
        assert_eq!(
            statement.sql,
            r#"UPDATE "s"."jobs" SET "ready" = true WHERE "id" = ANY(ARRAY (SELECT "id" FROM "s"."jobs" WHERE "id" >= $1 AND "id" < $2 AND (NOT "ready") AND "claimed_at" IS NULL AND "run_at" <= $3 FOR UPDATE SKIP LOCKED))"#
        );
        assert_eq!(statement.placeholders, 3);
        assert_eq!(statement.values(1, 5001, 9), [1, 5001, 9]);
    }

    #[test]
    fn the_vacuum_after_a_backfill_is_the_engines_own() {
        let schema = SchemaName::new("s").unwrap();
        let v2 = version(2).unwrap();
        let step = Step {
            version: 2,
            phase: crate::versions::step::Phase::Expand,
            table: "jobs".into(),
            action: Action::Backfill {
                backfill: v2.hints.backfills[0].clone(),
            },
        };
        let Work::Batches { vacuum, .. } = work(&step, &schema, &v2) else {
            panic!("a backfill runs in batches");
        };
        assert_eq!(vacuum, crate::statements::jobs::vacuum(&schema).sql());
    }

    #[test]
    fn a_shipped_versions_table_statements_come_from_its_script() {
        let schema = SchemaName::new("s").unwrap();
        let v1 = version(1).unwrap();
        let locks = table_statements(&v1, &schema, "locks");
        assert!(
            locks[0].starts_with(r#"CREATE TABLE IF NOT EXISTS "s"."locks" ("#),
            "{locks:?}"
        );
        assert!(locks.iter().any(|s| s.contains(r#""locks_expiry_idx""#)));
        assert!(locks.iter().all(|s| !s.contains("alkstore")));
        let model = table_statements(
            &version(MODEL_VERSION).unwrap(),
            &schema,
            &SchemaVersions::table_name(),
        );
        assert!(model[0].contains(r#""s"."schema_versions""#), "{model:?}");
        assert!(model.iter().all(|s| !s.starts_with("INSERT")), "{model:?}");
    }
}
