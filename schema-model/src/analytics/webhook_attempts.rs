//! The `webhook_attempts` table: one row per webhook delivery attempt, as
//! its publisher recorded it, and the bounds of its `ts` column.

use sea_query::Iden;
use strum::EnumIter;
use time::UtcDateTime;
use time::macros::utc_datetime;

use super::vocabulary::{
    ClickHouseCheck, ClickHouseCheckRule, ClickHouseColumn, ClickHouseEngine, ClickHouseTable,
    ClickHouseType, PartitionKey, RowTtl,
};

/// `ts_is_real`'s floor: no real attempt predates it, and the column's
/// default (the epoch) is far below it. The table's `CHECK` is rendered from
/// this value and [`shape`](super::shape) compares with it, so the two
/// cannot disagree.
pub const TS_FLOOR: UtcDateTime = utc_datetime!(2020-01-01 00:00:00);

/// [`TS_FLOOR`] as unix milliseconds; [`shape`](super::shape) refuses
/// instants at or below it.
pub const TS_FLOOR_UNIX_MILLIS: i64 = (TS_FLOOR.unix_timestamp_nanos() / 1_000_000) as i64;

/// The last instant the `ts` column (`DateTime64(3)`) can hold:
/// 2299-12-31 23:59:59.999 UTC. ClickHouse does not refuse a value beyond
/// it but stores another instant (2300-01-01 reads back as 2299-12-31
/// 00:00:00), so [`shape`](super::shape) refuses it.
pub const TS_CEILING: UtcDateTime = utc_datetime!(2299-12-31 23:59:59.999);

/// Days a `webhook_attempts` row is kept.
pub const RETENTION_DAYS: u32 = 90;

/// The `webhook_attempts` table: one row per webhook delivery attempt,
/// shaped by what the publisher sends.
///
/// ```
/// use schema_model::{ClickHouseTable, WebhookAttempts};
/// use sea_query::Iden;
///
/// let columns: Vec<String> = WebhookAttempts::columns()
///     .into_iter()
///     .map(|(c, def)| format!("{} {}", c.to_string(), def.ch_type))
///     .collect();
/// assert_eq!(columns, [
///     "environment_id UUID", "ts DateTime64(3, 'UTC')", "delivery_id UUID",
///     "endpoint_id UUID", "event_id UUID", "attempt UInt8", "status Nullable(UInt16)",
///     "error Nullable(String)", "latency_ms UInt32", "outcome LowCardinality(String)",
/// ]);
/// ```
#[derive(Iden, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookAttempts {
    /// The table itself.
    Table,
    /// The tenant's environment.
    EnvironmentId,
    /// When the attempt was made: the record's `attempted_at`.
    Ts,
    /// The delivery the attempt belongs to.
    DeliveryId,
    /// The endpoint that was called.
    EndpointId,
    /// The event being delivered.
    EventId,
    /// Attempt number within the delivery.
    Attempt,
    /// HTTP status, if anything answered.
    Status,
    /// Error text, if there was no status.
    Error,
    /// How long the endpoint took to answer.
    LatencyMs,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    Outcome,
}

/// The `ts` column's type; [`shape`](super::shape) writes instants in its precision.
pub const TS_TYPE: ClickHouseType = ClickHouseType::DateTime64 {
    precision: 3,
    tz: "UTC",
};

impl ClickHouseTable for WebhookAttempts {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "One webhook delivery attempt, as its publisher recorded it.";
    const ENGINE: ClickHouseEngine = ClickHouseEngine::ReplacingMergeTree;

    fn column(self) -> Option<ClickHouseColumn> {
        use ClickHouseType::*;
        let column = ClickHouseColumn::new;
        Some(match self {
            Self::Table => return None,
            Self::EnvironmentId => column(Uuid, "The tenant environment the attempt belongs to."),
            Self::Ts => column(
                TS_TYPE,
                "When the attempt was made: the record's attempted_at, not when it was consumed.",
            ),
            Self::DeliveryId => column(Uuid, "The delivery; with attempt, the record's identity."),
            Self::EndpointId => column(Uuid, "The endpoint that was called."),
            Self::EventId => column(Uuid, "The event being delivered."),
            Self::Attempt => column(UInt8, "Attempt number within the delivery."),
            Self::Status => column(
                Nullable(&UInt16),
                "HTTP status the endpoint answered with; NULL when nothing answered, never 0.",
            ),
            Self::Error => column(
                Nullable(&String),
                "Why there was no status; NULL when there was none, never ''.",
            ),
            Self::LatencyMs => column(UInt32, "Milliseconds the endpoint took to answer."),
            Self::Outcome => column(
                LowCardinality(&String),
                "delivered, rescheduled or dead_lettered.",
            ),
        })
    }

    fn partition_by() -> Option<PartitionKey<Self>> {
        Some(PartitionKey::Month(Self::Ts))
    }

    fn order_by() -> Vec<Self> {
        // Tenant then time for range scans; (delivery_id, attempt) makes the
        // key the record's identity, so ReplacingMergeTree deduplicates on it.
        vec![
            Self::EnvironmentId,
            Self::Ts,
            Self::DeliveryId,
            Self::Attempt,
        ]
    }

    fn ttl() -> Option<RowTtl<Self>> {
        Some(RowTtl {
            column: Self::Ts,
            days: RETENTION_DAYS,
        })
    }

    fn checks() -> Vec<ClickHouseCheck<Self>> {
        vec![ClickHouseCheck {
            // A row with no `ts` takes the epoch silently; this refuses it.
            name: "ts_is_real",
            rule: ClickHouseCheckRule::LaterThan {
                column: Self::Ts,
                instant: TS_FLOOR,
            },
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ts_check_names_a_datetime64_column() {
        for check in WebhookAttempts::checks() {
            let ClickHouseCheckRule::LaterThan { column, .. } = check.rule;
            assert!(
                matches!(
                    column.column().map(|c| c.ch_type),
                    Some(ClickHouseType::DateTime64 { .. })
                ),
                "{}",
                check.name
            );
        }
        assert_eq!(
            WebhookAttempts::Ts.column().map(|c| c.ch_type),
            Some(TS_TYPE)
        );
    }

    #[test]
    fn the_ts_bounds_are_the_instants_their_docs_name() {
        // Fixed examples, not a computation: 2020-01-01 is 18,262 days after 1970-01-01.
        assert_eq!(TS_FLOOR_UNIX_MILLIS, 1_577_836_800_000);
        assert_eq!(TS_FLOOR.unix_timestamp(), 18_262 * 86_400);
        assert_eq!(
            TS_CEILING.unix_timestamp_nanos(),
            10_413_791_999_999_000_000,
            "2299-12-31 23:59:59.999 UTC"
        );
        // The ts column is UTC and keeps milliseconds, the bounds' own terms.
        assert_eq!(
            TS_TYPE,
            ClickHouseType::DateTime64 {
                precision: 3,
                tz: "UTC"
            }
        );
        assert_eq!(TS_CEILING.nanosecond() % 1_000_000, 0);
    }

    #[test]
    fn the_sorting_key_ttl_and_partition_name_columns_of_the_table() {
        let columns: Vec<WebhookAttempts> = WebhookAttempts::columns()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        for key in WebhookAttempts::order_by() {
            assert!(columns.contains(&key), "{key:?}");
            // A nullable sorting key needs allow_nullable_key; none is nullable.
            assert!(!key.column().is_some_and(|c| c.nullable()), "{key:?}");
        }
        assert!(WebhookAttempts::column(WebhookAttempts::Table).is_none());
        assert_eq!(
            WebhookAttempts::partition_by(),
            Some(PartitionKey::Month(WebhookAttempts::Ts))
        );
        assert_eq!(
            WebhookAttempts::ttl(),
            Some(RowTtl {
                column: WebhookAttempts::Ts,
                days: RETENTION_DAYS
            })
        );
    }
}
