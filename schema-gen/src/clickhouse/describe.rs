//! The analytics family described in plain data, every expression spelled
//! as the engine reports it: what `schema-gen describe --dialect clickhouse`
//! prints, and what a drift check compares the engine's catalog with.

use schema_model::{
    ClickHouseTable, ClickHouseTableVisitor, ConstraintDescription, DatabaseName,
    visit_analytics_family,
};
use serde::Serialize;

use super::expression::{check_condition, column_list, partition_key, ttl_column};
use super::quote::engine_ident;

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
