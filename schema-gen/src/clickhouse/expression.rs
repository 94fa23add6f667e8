//! The model's ClickHouse expressions (sorting keys, partition keys, TTLs,
//! `CHECK` conditions), written once for both their readers: the DDL, which
//! quotes every identifier ([`quote_ident`](super::quote_ident)), and the
//! description, which spells them as the engine reports them
//! ([`engine_ident`](super::engine_ident)).

use schema_model::{ClickHouseCheckRule, ClickHouseTable, ClickHouseType, PartitionKey, RowTtl};
use time::UtcDateTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

use super::quote::quote_string;

/// How an identifier is written: quoted for DDL, as the engine prints it for descriptions.
pub(super) type Quote = fn(&str) -> String;

/// `a, b, c`.
pub(super) fn column_list<C: ClickHouseTable>(columns: &[C], quote: Quote) -> String {
    columns
        .iter()
        .map(|column| quote(&column.to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `toYYYYMM(col)`.
pub(super) fn partition_key<C: ClickHouseTable>(key: PartitionKey<C>, quote: Quote) -> String {
    match key {
        PartitionKey::Month(column) => format!("toYYYYMM({})", quote(&column.to_string())),
    }
}

/// `toDateTime(col)`: a TTL expression must be a `Date` or `DateTime`;
/// ClickHouse refuses a `DateTime64` one (`Code: 450`).
pub(super) fn ttl_column<C: ClickHouseTable>(ttl: RowTtl<C>, quote: Quote) -> String {
    format!("toDateTime({})", quote(&ttl.column.to_string()))
}

/// The condition after `CHECK`.
pub(super) fn check_condition<C: ClickHouseTable>(
    rule: &ClickHouseCheckRule<C>,
    quote: Quote,
) -> String {
    match *rule {
        ClickHouseCheckRule::LaterThan { column, instant } => {
            // A test pins `LaterThan` to DateTime64 columns; a DateTime64
            // literal compares correctly with any time column all the same.
            let precision = match column.column().map(|c| c.ch_type) {
                Some(ClickHouseType::DateTime64 { precision, .. }) => precision,
                _ => 0,
            };
            format!(
                "{} > {}",
                quote(&column.to_string()),
                datetime64_literal(instant, precision)
            )
        }
    }
}

/// `toDateTime64('YYYY-MM-DD hh:mm:ss[.fraction]', precision, 'UTC')`: the
/// instant written in UTC and read in UTC, whatever the column's own zone.
fn datetime64_literal(instant: UtcDateTime, precision: u8) -> String {
    const WHOLE_SECOND: &[BorrowedFormatItem<'static>] =
        format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    const FRACTIONAL: &[BorrowedFormatItem<'static>] =
        format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond]");
    let description = if instant.nanosecond() == 0 {
        WHOLE_SECOND
    } else {
        FRACTIONAL
    };
    // The instants are the model's constants, not input, and `time` fails
    // to format only a component the value lacks (a UtcDateTime has all of
    // these) or a year beyond four digits (which it cannot hold without its
    // large-dates feature).
    let text = instant
        .format(description)
        .expect("a UtcDateTime formats as a date and a time of day");
    format!("toDateTime64({}, {precision}, 'UTC')", quote_string(&text))
}

#[cfg(test)]
mod tests {
    use time::macros::utc_datetime;

    use super::*;

    #[test]
    fn instants_are_written_to_the_second_or_with_their_fraction() {
        assert_eq!(
            datetime64_literal(utc_datetime!(2020-01-01 00:00:00), 3),
            "toDateTime64('2020-01-01 00:00:00', 3, 'UTC')"
        );
        assert_eq!(
            datetime64_literal(utc_datetime!(2299-12-31 23:59:59.999), 3),
            "toDateTime64('2299-12-31 23:59:59.999', 3, 'UTC')"
        );
        assert_eq!(
            datetime64_literal(utc_datetime!(2026-02-03 04:05:06.5), 1),
            "toDateTime64('2026-02-03 04:05:06.5', 1, 'UTC')"
        );
    }
}
