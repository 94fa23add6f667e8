//! The two values [`shape`](super::shape) canonicalises, each through a
//! maintained crate: the instant (`time`'s RFC 3339 parser, written back as
//! UTC milliseconds, the form `DateTime64(3, 'UTC')` stores) and the UUIDs
//! (`uuid`, written back lowercase and hyphenated, the form ClickHouse
//! reads back). Canonical values make a row read back equal to the one
//! written, and make a redelivered record's sorting key equal to the
//! first delivery's, so `ReplacingMergeTree` collapses it.
//!
//! Each function returns the canonical text, or why the value is refused.

use time::format_description::BorrowedFormatItem;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcDateTime};
use uuid::Uuid;

use super::webhook_attempts::{TS_CEILING, TS_FLOOR};

/// Why an instant that is not RFC 3339 with an offset is refused.
pub(super) const NOT_RFC3339: &str =
    "it is not an RFC 3339 timestamp with a UTC offset (e.g. 2026-01-31T12:00:00.000Z)";
/// Why an instant at or before [`TS_FLOOR`] is refused (a test ties the text to the constant).
pub(super) const NOT_AFTER_FLOOR: &str =
    "it is not after 2020-01-01 00:00:00 UTC (the table's ts_is_real floor)";
/// Why an instant after [`TS_CEILING`] is refused (a test ties the text to the constant).
pub(super) const BEYOND_CEILING: &str = "it is after 2299-12-31, beyond what DateTime64 can hold";
/// Why a string that is not a UUID is refused.
pub(super) const NOT_A_UUID: &str = "it is not a UUID (8-4-4-4-12 hex digits)";

/// How `ts` is written: UTC, exactly three fractional digits.
const CANONICAL_TS: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// `text`, an RFC 3339 timestamp with an offset, as `YYYY-MM-DDThh:mm:ss.mmmZ`
/// in UTC; sub-millisecond digits are truncated, as `DateTime64(3)` would.
/// It must lie after [`TS_FLOOR`] (once truncated: the table's `ts_is_real`
/// would refuse the whole batch) and at or before [`TS_CEILING`] (beyond it
/// ClickHouse stores another instant, silently).
///
/// A timestamp without an offset is refused: its instant would depend on a
/// time zone. A leap second (`23:59:60` at the end of a UTC month) is the
/// last millisecond before it.
pub(super) fn canonical_ts(text: &str) -> Result<String, &'static str> {
    let instant = parse_rfc3339(text).ok_or(NOT_RFC3339)?;
    // None: the instant in UTC falls outside the years `time` holds (e.g.
    // 9999-12-31T23:59:59-23:00), far beyond the ceiling.
    let utc = instant
        .checked_to_utc()
        .ok_or(BEYOND_CEILING)?
        .truncate_to_millisecond();
    if utc <= TS_FLOOR {
        return Err(NOT_AFTER_FLOOR);
    }
    if utc > TS_CEILING {
        return Err(BEYOND_CEILING);
    }
    format_ts(utc)
}

/// RFC 3339 through `time`'s parser, which follows the RFC's grammar (any
/// number of fractional digits, `Z`/`z` or `±hh:mm`, leap seconds only where
/// one can fall) except that it takes any byte as the date-time separator,
/// reading section 5.6's "separated by (say) a space" liberally. The RFC
/// names `T`, `t` and a space; only those are accepted here, so a garbled
/// record is not read as an instant by accident.
fn parse_rfc3339(text: &str) -> Option<OffsetDateTime> {
    let instant = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    // Parsed, so the text starts `YYYY-MM-DD` and byte 10 is the separator.
    matches!(text.as_bytes().get(10), Some(b'T' | b't' | b' ')).then_some(instant)
}

/// The canonical text of an instant between the bounds. `time` fails to
/// format only a component the value lacks or a year it cannot write, and
/// a `UtcDateTime` between 2020 and 2299 has every component with a
/// four-digit year, so the error is not reached; it is still an error, not
/// a panic.
fn format_ts(utc: UtcDateTime) -> Result<String, &'static str> {
    utc.format(CANONICAL_TS).map_err(|_| BEYOND_CEILING)
}

/// `text` as a lowercase hyphenated UUID. Accepted: the forms `uuid`
/// parses, all spelling one 128-bit value: hyphenated
/// (`6f1c2a3b-0000-4000-8000-00000000d001`), simple (32 hex digits), braced
/// (`{...}`) and URN (`urn:uuid:...`), hex digits in either letter case.
pub(super) fn canonical_uuid(text: &str) -> Result<String, &'static str> {
    Uuid::try_parse(text)
        .map(|uuid| uuid.hyphenated().to_string())
        .map_err(|_| NOT_A_UUID)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical form of `input`, or a panic naming why it was refused.
    fn ts(input: &str) -> String {
        canonical_ts(input).unwrap_or_else(|reason| panic!("{input:?}: {reason}"))
    }

    #[test]
    fn timestamps_are_canonicalised_to_utc_milliseconds() {
        // Fixed examples: each expected value was worked out by hand.
        let cases = [
            ("2026-11-30T12:00:00Z", "2026-11-30T12:00:00.000Z"),
            ("2026-11-30t12:00:00.5z", "2026-11-30T12:00:00.500Z"),
            ("2026-11-30 12:00:00.123999Z", "2026-11-30T12:00:00.123Z"),
            ("2026-03-01T00:30:00+01:00", "2026-02-28T23:30:00.000Z"),
            ("2024-02-28T23:30:00-01:00", "2024-02-29T00:30:00.000Z"),
            ("2026-11-30T12:00:00-00:00", "2026-11-30T12:00:00.000Z"),
            ("2026-11-30T23:59:00+23:59", "2026-11-30T00:00:00.000Z"),
            ("2020-01-01T00:00:00.001Z", "2020-01-01T00:00:00.001Z"),
            ("2299-12-31T23:59:59.999Z", "2299-12-31T23:59:59.999Z"),
            ("2299-12-31T23:59:59.9999999Z", "2299-12-31T23:59:59.999Z"),
            // RFC 3339 puts no limit on fractional digits; the hand-written
            // parser refused more than nine.
            (
                "2026-11-30T12:00:00.1234567891Z",
                "2026-11-30T12:00:00.123Z",
            ),
            // A leap second at the end of a UTC month (RFC 3339 allows it; the
            // hand-written parser refused every :60) is the millisecond before it.
            ("2026-12-31T23:59:60Z", "2026-12-31T23:59:59.999Z"),
            ("2026-06-30T18:59:60.5-05:00", "2026-06-30T23:59:59.999Z"),
        ];
        for (input, expected) in cases {
            assert_eq!(ts(input), expected, "{input:?}");
        }
    }

    #[test]
    fn what_is_not_rfc_3339_with_an_offset_is_refused() {
        for input in [
            "2026-11-30 12:00:00",       // no offset
            "2026-11-30T12:00:00",       // no offset
            "2026-02-30T12:00:00Z",      // no such day
            "2025-02-29T12:00:00Z",      // not a leap year
            "2026-11-30T24:00:00Z",      // no such hour
            "2026-11-30T12:60:00Z",      // no such minute
            "2026-11-30T12:00:60Z",      // a leap second only ends a UTC month
            "2026-11-30T12:00:00.Z",     // empty fraction
            "2026-11-30T12:00:00+0100",  // offset without colon
            "2026-11-30T12:00:00+01",    // offset without minutes
            "2026-11-30T12:00:00+24:00", // no such offset
            "2026-11-30T12:00:00+01:60", // no such offset
            "2026-11-30T12:00Z",         // no seconds
            "2026-11-30T12:00:00Zjunk",  // trailing text
            "2026-11-30T12:00:00Z[UTC]", // RFC 9557 annotation, not RFC 3339
            "2026-11-30x12:00:00Z",      // time's parser takes any separator; the RFC does not
            "2026-11-30_12:00:00Z",      // likewise
            "2026-11-30112:00:00Z",      // likewise: "1" read as the separator
            "20261130T120000Z",          // ISO 8601 basic format
            "+002026-11-30T12:00:00Z",   // expanded year
            " 2026-11-30T12:00:00Z",     // surrounding space
            "",
        ] {
            assert_eq!(canonical_ts(input), Err(NOT_RFC3339), "{input:?}");
        }
    }

    #[test]
    fn the_bounds_are_exclusive_below_and_inclusive_above_once_truncated() {
        for input in [
            "1970-01-01T00:00:00.000Z",
            "2020-01-01T00:00:00.000Z",
            "2020-01-01T01:00:00+01:00",
            // Truncated to the floor itself, which ts_is_real refuses.
            "2020-01-01T00:00:00.000999Z",
        ] {
            assert_eq!(canonical_ts(input), Err(NOT_AFTER_FLOOR), "{input:?}");
        }
        assert_eq!(ts("2020-01-01T00:00:00.001Z"), "2020-01-01T00:00:00.001Z");
        assert_eq!(
            ts("2019-12-31T23:00:00.001-01:00"),
            "2020-01-01T00:00:00.001Z"
        );
        for input in [
            "2300-01-01T00:00:00Z",
            "2299-12-31T23:59:59.999-00:01",
            "9999-12-31T23:59:59Z",
            // In UTC this is in the year 10000, which `time` does not hold.
            "9999-12-31T23:59:59-23:00",
        ] {
            assert_eq!(canonical_ts(input), Err(BEYOND_CEILING), "{input:?}");
        }
    }

    #[test]
    fn the_refusal_reasons_name_the_bounds_they_enforce() {
        let date_time = format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
        let floor = TS_FLOOR.format(date_time).unwrap();
        assert!(
            NOT_AFTER_FLOOR.contains(&format!("after {floor} UTC")),
            "{floor}"
        );
        let ceiling = TS_CEILING
            .format(format_description!("[year]-[month]-[day]"))
            .unwrap();
        assert!(
            BEYOND_CEILING.contains(&format!("after {ceiling},")),
            "{ceiling}"
        );
    }

    #[test]
    fn uuids_in_any_form_uuid_parses_become_lowercase_hyphenated() {
        let canonical = "6f1c2a3b-0000-4000-8000-00000000d001";
        for input in [
            canonical,
            "6F1C2A3B-0000-4000-8000-00000000D001",
            // Accepted since uuid parses them (the hand-written check took only
            // the hyphenated form): each spells the same 128-bit value.
            "6f1c2a3b00004000800000000000d001",
            "{6f1c2a3b-0000-4000-8000-00000000d001}",
            "urn:uuid:6f1c2a3b-0000-4000-8000-00000000D001",
        ] {
            assert_eq!(canonical_uuid(input), Ok(canonical.to_owned()), "{input:?}");
        }
        for input in [
            "",
            "not-a-uuid",
            "6f1c2a3b-0000-4000-8000-00000000d00", // a digit short
            "6f1c2a3b-0000-4000-8000-00000000d0011", // a digit long
            "6f1c2a3b-0000-4000-8000-00000000d0g1", // not hex
            "6f1c2a3b-0000-4000-8000_00000000d001", // wrong separator
            "6f1c2a3b-00004-000-8000-00000000d001", // wrong grouping
            "{6f1c2a3b-0000-4000-8000-00000000d001", // unbalanced brace
            "{6f1c2a3b00004000800000000000d001}",  // braced simple form
            "urn:uuid:6f1c2a3b00004000800000000000d001", // URN of the simple form
            " 6f1c2a3b-0000-4000-8000-00000000d001", // surrounding space
        ] {
            assert_eq!(canonical_uuid(input), Err(NOT_A_UUID), "{input:?}");
        }
    }
}
