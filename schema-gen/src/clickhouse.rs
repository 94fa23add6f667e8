//! The ClickHouse dialect: DDL, the insert statement and the `FINAL` count
//! query of the analytics family, rendered from the model's
//! [`ClickHouseTable`] enums.
//!
//! sea-query has no ClickHouse backend (its MySQL builder quotes and types
//! differently), so this is a small renderer of its own over the same kind
//! of `Iden` enums: column lists come from `EnumIter`, every column,
//! partition, sorting-key and TTL reference goes through the enum, and the
//! only user input, the [`DatabaseName`], is validated before it gets here
//! and backtick-quoted anyway.
//!
//! `schema-gen sql --dialect clickhouse` prints [`script`]; the snapshots
//! record it; the integration tests run its [`statements`] on a real engine.
//!
//! ```
//! use schema_gen::clickhouse::{count_final_query, insert_statement};
//! use schema_model::{DatabaseName, WebhookAttempts};
//!
//! let db = DatabaseName::default();
//! assert_eq!(
//!     insert_statement::<WebhookAttempts>(&db),
//!     "INSERT INTO `relay_analytics`.`webhook_attempts` \
//!      SETTINGS input_format_skip_unknown_fields=0, date_time_input_format='best_effort' \
//!      FORMAT JSONEachRow"
//! );
//! assert_eq!(
//!     count_final_query::<WebhookAttempts>(&db),
//!     "SELECT count() FROM `relay_analytics`.`webhook_attempts` FINAL"
//! );
//! ```

use schema_model::{
    ClickHouseCheckRule, ClickHouseTable, ClickHouseTableVisitor, ClickHouseType,
    ConstraintDescription, DatabaseName, PartitionKey, RowTtl, visit_analytics_family,
};
use serde::Serialize;

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

/// Quotes an identifier with backticks, escaping `\` and `` ` `` with a
/// backslash (ClickHouse's quoted-identifier escapes).
///
/// ```
/// use schema_gen::clickhouse::quote_ident;
///
/// assert_eq!(quote_ident("ts"), "`ts`");
/// assert_eq!(quote_ident("we`ird\\x"), r"`we\`ird\\x`");
/// ```
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', r"\\").replace('`', r"\`"))
}

/// Quotes a string literal with single quotes, escaping `\` and `'` with a
/// backslash.
///
/// ```
/// use schema_gen::clickhouse::quote_string;
///
/// assert_eq!(quote_string("the record's ts"), r"'the record\'s ts'");
/// ```
pub fn quote_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', r"\\").replace('\'', r"\'"))
}

/// An identifier as ClickHouse's own formatter prints it in
/// `system.tables` and `SHOW CREATE`: bare when it is a plain word,
/// backtick-quoted otherwise.
fn engine_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_owned()
    } else {
        quote_ident(name)
    }
}

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
/// found by comparing `system.columns` with [`describe`].
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

fn column_list<C: ClickHouseTable>(columns: &[C], quote: fn(&str) -> String) -> String {
    columns
        .iter()
        .map(|column| quote(&column.to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn partition_key<C: ClickHouseTable>(key: PartitionKey<C>, quote: fn(&str) -> String) -> String {
    match key {
        PartitionKey::Month(column) => format!("toYYYYMM({})", quote(&column.to_string())),
    }
}

/// `toDateTime(col)`: a TTL expression must be a `Date` or `DateTime`;
/// ClickHouse refuses a `DateTime64` one (`Code: 450`).
fn ttl_column<C: ClickHouseTable>(ttl: RowTtl<C>, quote: fn(&str) -> String) -> String {
    format!("toDateTime({})", quote(&ttl.column.to_string()))
}

fn check_condition<C: ClickHouseTable>(
    rule: &ClickHouseCheckRule<C>,
    quote: fn(&str) -> String,
) -> String {
    match *rule {
        ClickHouseCheckRule::LaterThan { column, instant } => {
            let literal = match column.column().map(|c| c.ch_type) {
                Some(ClickHouseType::DateTime64 { precision, tz }) => format!(
                    "toDateTime64({}, {precision}, {})",
                    quote_string(instant),
                    quote_string(tz)
                ),
                // Not reached by the model (a test pins `LaterThan` to
                // DateTime64 columns); a plain cast is still correct SQL.
                other => format!(
                    "CAST({}, {})",
                    quote_string(instant),
                    quote_string(&other.map(ClickHouseType::name).unwrap_or_default())
                ),
            };
            format!("{} > {literal}", quote(&column.to_string()))
        }
    }
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

/// What `schema-gen describe --dialect clickhouse --format json` prints:
/// stable, for tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnalyticsDescription {
    /// Always `"clickhouse"`.
    pub dialect: &'static str,
    /// The database the tables live in.
    pub database: String,
    /// Every table, in creation order.
    pub tables: Vec<ClickHouseTableDescription>,
}

/// One ClickHouse table, every expression spelled as the engine reports it
/// (`system.tables`, `system.columns`, `SHOW CREATE TABLE`), so a drift
/// check compares equal strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClickHouseTableDescription {
    /// The table's name.
    pub name: String,
    /// What a row is (the table's `COMMENT`).
    pub doc: String,
    /// `system.tables.engine`.
    pub engine: String,
    /// `system.tables.partition_key`.
    pub partition_key: String,
    /// `system.tables.sorting_key`; for `ReplacingMergeTree` also the deduplication key.
    pub sorting_key: String,
    /// The `TTL` clause as `SHOW CREATE TABLE` prints it, if any.
    pub ttl: Option<String>,
    /// Columns in declaration order.
    pub columns: Vec<ClickHouseColumnDescription>,
    /// Named `CHECK` constraints, the definition as `SHOW CREATE TABLE` prints it after `CHECK`.
    pub checks: Vec<ConstraintDescription>,
}

/// One ClickHouse column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClickHouseColumnDescription {
    /// The column's name.
    pub name: String,
    /// `system.columns.type`.
    #[serde(rename = "type")]
    pub ch_type: String,
    /// Whether it accepts `NULL` (its type is `Nullable(..)`).
    pub nullable: bool,
    /// The one-line doc (`system.columns.comment`).
    pub doc: String,
}

impl ClickHouseTableDescription {
    /// Describes one table of the model.
    pub fn of<T: ClickHouseTable>() -> Self {
        Self {
            name: T::table_name(),
            doc: T::DOC.to_owned(),
            engine: T::ENGINE.name().to_owned(),
            partition_key: T::partition_by()
                .map(|key| partition_key(key, engine_ident))
                .unwrap_or_default(),
            sorting_key: column_list(&T::order_by(), engine_ident),
            ttl: T::ttl().map(|ttl| {
                format!(
                    "{} + toIntervalDay({})",
                    ttl_column(ttl, engine_ident),
                    ttl.days
                )
            }),
            columns: T::columns()
                .into_iter()
                .map(|(variant, column)| ClickHouseColumnDescription {
                    name: variant.to_string(),
                    ch_type: column.ch_type.name(),
                    nullable: column.nullable(),
                    doc: column.doc.to_owned(),
                })
                .collect(),
            checks: T::checks()
                .into_iter()
                .map(|check| ConstraintDescription {
                    name: check.name.to_owned(),
                    definition: check_condition(&check.rule, engine_ident),
                })
                .collect(),
        }
    }
}

#[derive(Default)]
struct Describer {
    tables: Vec<ClickHouseTableDescription>,
}

impl ClickHouseTableVisitor for Describer {
    fn visit<T: ClickHouseTable>(&mut self) {
        self.tables.push(ClickHouseTableDescription::of::<T>());
    }
}

/// Describes the analytics family for `database`.
///
/// ```
/// use schema_gen::clickhouse::describe;
/// use schema_model::DatabaseName;
///
/// let family = describe(&DatabaseName::default());
/// let table = &family.tables[0];
/// assert_eq!(table.sorting_key, "environment_id, ts, delivery_id, attempt");
/// assert_eq!(table.ttl.as_deref(), Some("toDateTime(ts) + toIntervalDay(90)"));
/// assert_eq!(
///     table.checks[0].definition,
///     "ts > toDateTime64('2020-01-01 00:00:00', 3, 'UTC')"
/// );
/// ```
pub fn describe(database: &DatabaseName) -> AnalyticsDescription {
    let mut describer = Describer::default();
    visit_analytics_family(&mut describer);
    AnalyticsDescription {
        dialect: "clickhouse",
        database: database.to_string(),
        tables: describer.tables,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_identifiers_are_bare_only_when_plain() {
        assert_eq!(engine_ident("ts"), "ts");
        assert_eq!(engine_ident("order"), "order");
        assert_eq!(engine_ident("weird col"), "`weird col`");
        assert_eq!(engine_ident("9x"), "`9x`");
        assert_eq!(engine_ident(""), "``");
    }

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
