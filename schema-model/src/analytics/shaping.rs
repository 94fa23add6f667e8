//! [`shape`]: the publisher's record in, the table's row out, or a
//! [`ShapeError`] naming the field and the kind of value it refused.
//!
//! A refused record is poison: the same bytes fail the same way every time,
//! so the consumer terminates it rather than leaving it to be redelivered.
//! `shape` therefore refuses everything the table would refuse
//! deterministically, or corrupt silently.

use serde_json::Value;

use super::attempt::AttemptRow;
use super::canonical::{canonical_ts, canonical_uuid};

/// Why [`shape`] refused a record. A refused record is poison: the same bytes
/// fail the same way every time, so the consumer terminates it (and logs its
/// stream sequence) rather than leaving it to be redelivered.
///
/// Messages name the field and the kind of value found, never the value
/// itself: a record's `error` can echo anything an endpoint sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The bytes are not JSON.
    #[error("the record is not JSON (syntax error at line {line}, column {column})")]
    NotJson {
        /// 1-based line of the syntax error.
        line: usize,
        /// 1-based column of the syntax error.
        column: usize,
    },
    /// The JSON is not an object.
    #[error("the record is {found}, not a JSON object")]
    NotAnObject {
        /// The kind of JSON value found.
        found: &'static str,
    },
    /// A required field is absent.
    #[error("the record lacks the required field `{field}`")]
    MissingField {
        /// The publisher's field name.
        field: &'static str,
    },
    /// A field holds the wrong kind of value, or a number out of its column's range.
    #[error("field `{field}` must be {expected}, found {found}")]
    WrongType {
        /// The publisher's field name.
        field: &'static str,
        /// What the field must hold.
        expected: &'static str,
        /// The kind of value found.
        found: &'static str,
    },
    /// A field has the right kind but a value the table would refuse.
    #[error("field `{field}` is refused: {reason}")]
    Invalid {
        /// The publisher's field name.
        field: &'static str,
        /// Why the value is refused.
        reason: &'static str,
    },
}

impl ShapeError {
    /// The publisher's field the error is about, if it is about one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::NotJson { .. } | Self::NotAnObject { .. } => None,
            Self::MissingField { field }
            | Self::WrongType { field, .. }
            | Self::Invalid { field, .. } => Some(field),
        }
    }
}

/// Shapes one raw record (JSON bytes) into a row: [`shape`] after parsing.
///
/// ```
/// use schema_model::analytics::{shape_json, ShapeError};
///
/// assert_eq!(shape_json(b"{oops").unwrap_err(), ShapeError::NotJson { line: 1, column: 2 });
/// ```
pub fn shape_json(bytes: &[u8]) -> Result<AttemptRow, ShapeError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|err| ShapeError::NotJson {
        line: err.line(),
        column: err.column(),
    })?;
    shape(&value)
}

/// Shapes the publisher's record into the table's row.
///
/// - **The rename**: `attempted_at` becomes `ts`, an RFC 3339 timestamp
///   with an offset canonicalised to UTC milliseconds
///   (`2026-03-01T12:00:00.123Z`; extra sub-millisecond digits are
///   truncated, as `DateTime64(3)` would). It must lie after
///   [`TS_FLOOR`](super::TS_FLOOR), or the table's `ts_is_real` would
///   refuse the whole batch, and not after [`TS_CEILING`](super::TS_CEILING).
/// - `status` and `error` absent (or `null`) become `None`, never 0 or `""`;
///   an empty `error` string is no error text and also becomes `None`.
/// - UUIDs are parsed (hyphenated, simple, braced or `urn:uuid:`, hex in either case) and
///   written lowercase and hyphenated, the form ClickHouse reads back;
///   integers must be whole and fit their column (`attempt` UInt8, `status`
///   UInt16, `latency_ms` UInt32); `outcome` must be non-empty.
/// - Fields other than [`EVENT_FIELDS`](super::EVENT_FIELDS) are ignored.
///
/// A refused record is poison: terminate it, do not retry it.
///
/// ```
/// use schema_model::analytics::{shape, ShapeError};
/// use serde_json::json;
///
/// let err = shape(&json!({ "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001" })).unwrap_err();
/// assert_eq!(err, ShapeError::MissingField { field: "endpoint_id" });
/// assert_eq!(err.to_string(), "the record lacks the required field `endpoint_id`");
/// ```
pub fn shape(raw: &Value) -> Result<AttemptRow, ShapeError> {
    let Value::Object(record) = raw else {
        return Err(ShapeError::NotAnObject {
            found: kind_of(raw),
        });
    };
    let field = |name: &'static str| record.get(name).filter(|v| !v.is_null());
    let required = |name: &'static str| match record.get(name) {
        None => Err(ShapeError::MissingField { field: name }),
        Some(value) => Ok(value),
    };
    let uuid = |name: &'static str| uuid_field(name, required(name)?);

    let delivery_id = uuid("delivery_id")?;
    let endpoint_id = uuid("endpoint_id")?;
    let environment_id = uuid("environment_id")?;
    let event_id = uuid("event_id")?;
    let attempt = unsigned("attempt", required("attempt")?, "an integer from 0 to 255")?;
    let ts = ts_field(required("attempted_at")?)?;
    let status = field("status")
        .map(|v| unsigned("status", v, "an integer from 0 to 65535"))
        .transpose()?;
    let error = match field("error") {
        None => None,
        Some(Value::String(text)) if text.is_empty() => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(ShapeError::WrongType {
                field: "error",
                expected: "a string",
                found: kind_of(other),
            });
        }
    };
    let latency_ms = unsigned(
        "latency_ms",
        required("latency_ms")?,
        "an integer from 0 to 4294967295",
    )?;
    let outcome = match required("outcome")? {
        Value::String(text) if text.is_empty() => {
            return Err(ShapeError::Invalid {
                field: "outcome",
                reason: "it is empty",
            });
        }
        Value::String(text) => text.clone(),
        other => {
            return Err(ShapeError::WrongType {
                field: "outcome",
                expected: "a string",
                found: kind_of(other),
            });
        }
    };

    Ok(AttemptRow {
        environment_id,
        ts,
        delivery_id,
        endpoint_id,
        event_id,
        attempt,
        status,
        error,
        latency_ms,
        outcome,
    })
}

/// The kind of a JSON value, for error messages that must not quote it.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A whole, non-negative JSON number that fits `T` (the column's width).
fn unsigned<T: TryFrom<u64>>(
    field: &'static str,
    value: &Value,
    expected: &'static str,
) -> Result<T, ShapeError> {
    let wrong = |found| ShapeError::WrongType {
        field,
        expected,
        found,
    };
    let Value::Number(number) = value else {
        return Err(wrong(kind_of(value)));
    };
    match number.as_u64() {
        Some(n) => T::try_from(n).map_err(|_| wrong("a number out of range")),
        None if number.is_i64() => Err(wrong("a negative number")),
        None => Err(wrong("a non-integer number")),
    }
}

/// A UUID string, canonicalised (see [`canonical_uuid`]).
fn uuid_field(field: &'static str, value: &Value) -> Result<String, ShapeError> {
    let Value::String(text) = value else {
        return Err(ShapeError::WrongType {
            field,
            expected: "a UUID string",
            found: kind_of(value),
        });
    };
    canonical_uuid(text).map_err(|reason| ShapeError::Invalid { field, reason })
}

/// `attempted_at`, canonicalised into `ts` (see [`canonical_ts`]).
fn ts_field(value: &Value) -> Result<String, ShapeError> {
    const FIELD: &str = "attempted_at";
    let Value::String(text) = value else {
        return Err(ShapeError::WrongType {
            field: FIELD,
            expected: "an RFC 3339 timestamp string",
            found: kind_of(value),
        });
    };
    canonical_ts(text).map_err(|reason| ShapeError::Invalid {
        field: FIELD,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::EVENT_FIELDS;
    use serde_json::json;

    fn event() -> Value {
        json!({
            "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001",
            "endpoint_id": "6f1c2a3b-0000-4000-8000-00000000a001",
            "environment_id": "6f1c2a3b-0000-4000-8000-00000000e001",
            "event_id": "6f1c2a3b-0000-4000-8000-00000000f001",
            "attempt": 2,
            "attempted_at": "2026-11-30T12:00:00.123Z",
            "status": 200,
            "latency_ms": 87,
            "outcome": "delivered"
        })
    }

    fn with(mut value: Value, key: &str, field: Option<Value>) -> Value {
        let map = value.as_object_mut().unwrap();
        match field {
            Some(v) => map.insert(key.to_owned(), v),
            None => map.remove(key),
        };
        value
    }

    #[test]
    fn shape_renames_attempted_at_to_ts_and_copies_the_rest() {
        let row = shape(&event()).unwrap();
        assert_eq!(
            row,
            AttemptRow {
                environment_id: "6f1c2a3b-0000-4000-8000-00000000e001".into(),
                ts: "2026-11-30T12:00:00.123Z".into(),
                delivery_id: "6f1c2a3b-0000-4000-8000-00000000d001".into(),
                endpoint_id: "6f1c2a3b-0000-4000-8000-00000000a001".into(),
                event_id: "6f1c2a3b-0000-4000-8000-00000000f001".into(),
                attempt: 2,
                status: Some(200),
                error: None,
                latency_ms: 87,
                outcome: "delivered".into(),
            }
        );
        let line = serde_json::to_value(&row).unwrap();
        assert_eq!(line["ts"], "2026-11-30T12:00:00.123Z");
        assert!(line.get("attempted_at").is_none(), "{line}");
    }

    #[test]
    fn absent_status_and_error_become_null_never_zero_or_empty() {
        let timed_out = with(
            with(event(), "status", None),
            "error",
            Some(json!("timeout")),
        );
        let row = shape(&timed_out).unwrap();
        assert_eq!(row.status, None);
        let line = serde_json::to_value(&row).unwrap();
        assert_eq!(line["status"], Value::Null, "not 0: {line}");
        assert_eq!(line["error"], "timeout");

        let delivered = shape(&event()).unwrap();
        let line = serde_json::to_value(&delivered).unwrap();
        assert_eq!(line["error"], Value::Null, "not \"\": {line}");
        assert!(line.as_object().unwrap().contains_key("error"));

        // An explicit null means the same as absent; so does an empty error text.
        assert_eq!(
            shape(&with(event(), "status", Some(Value::Null)))
                .unwrap()
                .status,
            None
        );
        assert_eq!(
            shape(&with(event(), "error", Some(json!(""))))
                .unwrap()
                .error,
            None
        );
        // A measured zero stays a zero.
        assert_eq!(
            shape(&with(event(), "status", Some(json!(0))))
                .unwrap()
                .status,
            Some(0)
        );
    }

    #[test]
    fn every_missing_required_field_is_named() {
        for field in EVENT_FIELDS {
            if matches!(field, "status" | "error") {
                continue;
            }
            let err = shape(&with(event(), field, None)).unwrap_err();
            assert_eq!(err, ShapeError::MissingField { field }, "{field}");
            assert_eq!(err.field(), Some(field));
            assert!(err.to_string().contains(&format!("`{field}`")), "{err}");
        }
    }

    #[test]
    fn a_record_already_carrying_ts_still_needs_attempted_at() {
        let renamed = with(
            with(event(), "attempted_at", None),
            "ts",
            Some(json!("2026-11-30T12:00:00.123Z")),
        );
        assert_eq!(
            shape(&renamed).unwrap_err(),
            ShapeError::MissingField {
                field: "attempted_at"
            }
        );
    }

    #[test]
    fn wrong_types_are_refused_naming_the_field_not_the_value() {
        let cases = [
            ("attempt", json!("2"), "a string"),
            ("attempt", json!(2.5), "a non-integer number"),
            ("attempt", json!(-1), "a negative number"),
            ("attempt", json!(256), "a number out of range"),
            ("status", json!("500"), "a string"),
            ("status", json!(65_536), "a number out of range"),
            ("latency_ms", json!(1_u64 << 32), "a number out of range"),
            ("latency_ms", Value::Null, "null"),
            ("error", json!(42), "a number"),
            ("outcome", json!(["delivered"]), "an array"),
            ("delivery_id", json!(7), "a number"),
            ("attempted_at", json!(1_796_040_000_123_i64), "a number"),
            ("attempted_at", json!({"secret": "s3cr3t"}), "an object"),
        ];
        for (field, value, found) in cases {
            let err = shape(&with(event(), field, Some(value.clone()))).unwrap_err();
            match &err {
                ShapeError::WrongType {
                    field: f, found: k, ..
                } => {
                    assert_eq!((*f, *k), (field, found), "{field} = {value}");
                }
                other => panic!("{field} = {value}: {other:?}"),
            }
            assert!(!err.to_string().contains("s3cr3t"), "{err}");
        }
        assert_eq!(
            shape(&json!([1])).unwrap_err(),
            ShapeError::NotAnObject { found: "an array" }
        );
        assert_eq!(
            shape(&Value::Null).unwrap_err(),
            ShapeError::NotAnObject { found: "null" }
        );
    }

    #[test]
    fn values_the_table_would_refuse_are_refused_here_naming_the_field() {
        let invalid =
            |field: &str, value: Value| match shape(&with(event(), field, Some(value.clone())))
                .unwrap_err()
            {
                ShapeError::Invalid { field: f, reason } => {
                    assert_eq!(f, field, "{value}");
                    reason
                }
                other => panic!("{field} = {value}: {other:?}"),
            };
        // The values themselves are judged in `canonical`; here, that each
        // judgement reaches the right field.
        for field in ["delivery_id", "endpoint_id", "environment_id", "event_id"] {
            assert!(invalid(field, json!("not-a-uuid")).contains("not a UUID"));
            assert!(invalid(field, json!("")).contains("not a UUID"));
        }
        assert!(invalid("outcome", json!("")).contains("empty"));
        assert!(invalid("attempted_at", json!("2026-11-30T12:00:00")).contains("RFC 3339"));
        assert!(invalid("attempted_at", json!("")).contains("RFC 3339"));
        assert!(invalid("attempted_at", json!("2020-01-01T00:00:00.000Z")).contains("ts_is_real"));
        assert!(invalid("attempted_at", json!("2300-01-01T00:00:00Z")).contains("2299"));
    }

    #[test]
    fn timestamps_and_uuids_reach_the_row_canonical() {
        let record = with(
            with(
                with(
                    event(),
                    "attempted_at",
                    Some(json!("2026-03-01t00:30:00.123999+01:00")),
                ),
                "environment_id",
                Some(json!("{6F1C2A3B-0000-4000-8000-00000000E001}")),
            ),
            "event_id",
            Some(json!("6F1C2A3B00004000800000000000F001")),
        );
        let row = shape(&record).unwrap();
        assert_eq!(row.ts, "2026-02-28T23:30:00.123Z");
        assert_eq!(row.environment_id, "6f1c2a3b-0000-4000-8000-00000000e001");
        assert_eq!(row.event_id, "6f1c2a3b-0000-4000-8000-00000000f001");
    }

    #[test]
    fn uuids_are_lowercased_and_unknown_fields_ignored() {
        let upper = with(
            with(
                event(),
                "delivery_id",
                Some(json!("6F1C2A3B-0000-4000-8000-00000000D001")),
            ),
            "publisher_added_later",
            Some(json!(1)),
        );
        assert_eq!(
            shape(&upper).unwrap().delivery_id,
            "6f1c2a3b-0000-4000-8000-00000000d001"
        );
    }

    #[test]
    fn shape_json_parses_then_shapes() {
        let bytes = serde_json::to_vec(&event()).unwrap();
        assert_eq!(shape_json(&bytes).unwrap(), shape(&event()).unwrap());
        assert!(matches!(shape_json(b""), Err(ShapeError::NotJson { .. })));
        assert_eq!(
            shape_json(b"\"x\"").unwrap_err(),
            ShapeError::NotAnObject { found: "a string" }
        );
    }
}
