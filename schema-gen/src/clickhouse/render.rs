//! The SQL the analytics family runs, rendered from the model: the DDL
//! ([`statements`], [`script`]), the insert and the `FINAL` count.

use schema_model::{ClickHouseTable, ClickHouseTableVisitor, DatabaseName, visit_analytics_family};
use serde::Serialize;

use super::expression::{check_condition, column_list, partition_key, ttl_column};
use super::quote::{quote_ident, quote_string};

/// The doc of the analytics database itself, emitted as its `COMMENT`.
pub const DATABASE_DOC: &str =
    "relay analytics sink; created by schema-gen from schema-model (the ClickHouse family).";

/// The settings every insert into the analytics family carries, and why:
///
/// - `input_format_skip_unknown_fields=0`: a key that names no column (a
///   field that was not renamed, such as `attempted_at`) is refused with
///   `Code: 117` instead of being dropped while its column silently takes
///   the default. The server's default is 1.
/// - `date_time_input_format='best_effort'`: parses the ISO-8601 instants
///   rows carry; the server default `basic` refuses them (`Code: 27`).
///
/// Neither catches an absent column; the table's `CHECK` does.
pub const INSERT_SETTINGS: &str =
    "input_format_skip_unknown_fields=0, date_time_input_format='best_effort'";

/// A table of the family qualified by its database, both backtick-quoted:
/// how every generated statement names the table.
///
/// ```
/// use schema_gen::clickhouse::qualified;
/// use schema_model::{DatabaseName, WebhookAttempts};
///
/// assert_eq!(
///     qualified::<WebhookAttempts>(&DatabaseName::default()),
///     "`relay_analytics`.`webhook_attempts`"
/// );
/// ```
pub fn qualified<T: ClickHouseTable>(database: &DatabaseName) -> String {
    format!(
        "{}.{}",
        quote_ident(database.as_str()),
        quote_ident(&T::table_name())
    )
}

/// `CREATE DATABASE IF NOT EXISTS` for the family's database.
///
/// ```
/// use schema_gen::clickhouse::create_database;
/// use schema_model::DatabaseName;
///
/// assert!(create_database(&DatabaseName::new("analytics_eu").unwrap())
///     .starts_with("CREATE DATABASE IF NOT EXISTS `analytics_eu` COMMENT '"));
/// ```
pub fn create_database(database: &DatabaseName) -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {} COMMENT {}",
        quote_ident(database.as_str()),
        quote_string(DATABASE_DOC)
    )
}

/// `CREATE TABLE IF NOT EXISTS` for one table: columns with their types and
/// docs (`COMMENT`), named `CHECK`s, engine, partition, sorting key, TTL and
/// the table's doc, one clause per line.
///
/// Like PostgreSQL's, ClickHouse's `IF NOT EXISTS` checks the name only: a
/// table of that name with another shape is skipped silently, so drift is
/// found by comparing `system.columns` with [`describe`](super::describe()).
///
/// ```
/// use schema_gen::clickhouse::create_table;
/// use schema_model::{DatabaseName, WebhookAttempts};
///
/// let sql = create_table::<WebhookAttempts>(&DatabaseName::default());
/// assert!(sql.starts_with("CREATE TABLE IF NOT EXISTS `relay_analytics`.`webhook_attempts`\n(\n"));
/// assert!(sql.contains("\n    `ts` DateTime64(3, 'UTC') COMMENT '"));
/// assert!(sql.contains(
///     "\n    CONSTRAINT `ts_is_real` CHECK `ts` > toDateTime64('2020-01-01 00:00:00', 3, 'UTC')\n)\n"
/// ));
/// assert!(sql.contains(concat!(
///     "ENGINE = ReplacingMergeTree\n",
///     "PARTITION BY toYYYYMM(`ts`)\n",
///     "ORDER BY (`environment_id`, `ts`, `delivery_id`, `attempt`)\n",
///     "TTL toDateTime(`ts`) + INTERVAL 90 DAY\n",
/// )));
/// ```
pub fn create_table<T: ClickHouseTable>(database: &DatabaseName) -> String {
    let mut elements: Vec<String> = T::columns()
        .into_iter()
        .map(|(variant, column)| {
            format!(
                "{} {} COMMENT {}",
                quote_ident(&variant.to_string()),
                column.ch_type.name(),
                quote_string(column.doc)
            )
        })
        .collect();
    for check in T::checks() {
        elements.push(format!(
            "CONSTRAINT {} CHECK {}",
            quote_ident(check.name),
            check_condition(&check.rule, quote_ident)
        ));
    }
    let mut sql = format!(
        "CREATE TABLE IF NOT EXISTS {}\n(\n    {}\n)\nENGINE = {}\n",
        qualified::<T>(database),
        elements.join(",\n    "),
        T::ENGINE.name()
    );
    if let Some(partition) = T::partition_by() {
        sql.push_str(&format!(
            "PARTITION BY {}\n",
            partition_key(partition, quote_ident)
        ));
    }
    let order_by = T::order_by();
    if order_by.is_empty() {
        sql.push_str("ORDER BY tuple()\n");
    } else {
        sql.push_str(&format!(
            "ORDER BY ({})\n",
            column_list(&order_by, quote_ident)
        ));
    }
    if let Some(ttl) = T::ttl() {
        sql.push_str(&format!(
            "TTL {} + INTERVAL {} DAY\n",
            ttl_column(ttl, quote_ident),
            ttl.days
        ));
    }
    sql.push_str(&format!("COMMENT {}", quote_string(T::DOC)));
    sql
}

/// The insert a consumer sends its `JSONEachRow` lines to, with
/// [`INSERT_SETTINGS`] before `FORMAT` (after it, they would be read as data).
pub fn insert_statement<T: ClickHouseTable>(database: &DatabaseName) -> String {
    format!(
        "INSERT INTO {} SETTINGS {INSERT_SETTINGS} FORMAT JSONEachRow",
        qualified::<T>(database)
    )
}

/// The row count a reader may trust: `FINAL` collapses rows with equal
/// sorting keys (a redelivered record) that a merge has not collapsed yet;
/// a bare `count()` over-counts every redelivery.
pub fn count_final_query<T: ClickHouseTable>(database: &DatabaseName) -> String {
    format!("SELECT count() FROM {} FINAL", qualified::<T>(database))
}
/// What one statement of the ClickHouse script creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClickHouseStatementKind {
    /// `CREATE DATABASE IF NOT EXISTS`.
    CreateDatabase,
    /// `CREATE TABLE IF NOT EXISTS`.
    CreateTable,
}

/// One statement of the ClickHouse script, without its terminating `;`
/// (chdb and the HTTP interface take one statement per query).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClickHouseStatement {
    /// What it creates.
    pub kind: ClickHouseStatementKind,
    /// The database or table it is about.
    pub object: String,
    /// The SQL.
    pub sql: String,
}

struct Renderer {
    database: DatabaseName,
    statements: Vec<ClickHouseStatement>,
}

impl ClickHouseTableVisitor for Renderer {
    fn visit<T: ClickHouseTable>(&mut self) {
        self.statements.push(ClickHouseStatement {
            kind: ClickHouseStatementKind::CreateTable,
            object: T::table_name(),
            sql: create_table::<T>(&self.database),
        });
    }
}

/// The statements that create the analytics family in `database`, in order:
/// the database, then each table.
///
/// ```
/// use schema_gen::clickhouse::statements;
/// use schema_model::DatabaseName;
///
/// let objects: Vec<String> = statements(&DatabaseName::default())
///     .into_iter()
///     .map(|s| s.object)
///     .collect();
/// assert_eq!(objects, ["relay_analytics", "webhook_attempts"]);
/// ```
pub fn statements(database: &DatabaseName) -> Vec<ClickHouseStatement> {
    let mut renderer = Renderer {
        database: database.clone(),
        statements: vec![ClickHouseStatement {
            kind: ClickHouseStatementKind::CreateDatabase,
            object: database.to_string(),
            sql: create_database(database),
        }],
    };
    visit_analytics_family(&mut renderer);
    renderer.statements
}

/// The whole family as a script for `clickhouse client --multiquery`: a
/// header, then [`statements`], each terminated by `;`. Idempotent by name.
pub fn script(database: &DatabaseName) -> String {
    let mut out = format!(
        "-- relay analytics database {}: generated by schema-gen from schema-model; do not edit.\n\
         -- Apply with: clickhouse client --multiquery < <this file>\n\
         -- Idempotent by name only: IF NOT EXISTS skips a table of the same name whatever its\n\
         -- shape; compare system.columns with `schema-gen describe --dialect clickhouse`.\n\
         -- Insert with: {}\n\
         -- Count with:  {}\n\n",
        quote_ident(database.as_str()),
        insert_statement::<schema_model::WebhookAttempts>(database),
        count_final_query::<schema_model::WebhookAttempts>(database),
    );
    for statement in statements(database) {
        out.push_str(&statement.sql);
        out.push_str(";\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_holds_every_statement_terminated() {
        let db = DatabaseName::default();
        let script = script(&db);
        for statement in statements(&db) {
            assert!(
                script.contains(&format!("{};\n", statement.sql)),
                "{}",
                statement.object
            );
        }
    }
}
