//! Ties the analytics sink's typed rows to its table, so a renamed column or
//! field fails here and never empties a table (seed 001: the publisher's
//! `attempted_at` had to become the column `ts`, and a JSONEachRow key that
//! names no column is silently dropped while the column takes its default).
//!
//! - `AttemptRow`'s serialized keys are exactly `WebhookAttempts`' columns,
//!   both ways, and each field's type fits its column's ClickHouse type.
//! - The publisher's `AttemptEvent` differs from the row by the one rename.
//! - `shape` does that rename, keeps absences null and names what it refuses.
//! - `DatabaseName` accepts exactly the names its rules allow (its case table
//!   is the unit test in `schema_model::analytics::database_name`).

use std::collections::BTreeSet;

use harness::clickhouse::{delivered_event, shaped, timed_out_event};
use proptest::prelude::*;
use schema_model::analytics::{EVENT_FIELDS, RESERVED_DATABASE_NAMES};
use schema_model::{
    AttemptRow, ClickHouseTable, ClickHouseType, DatabaseName, DatabaseNameRule, ReservedDatabase,
    ShapeError, WebhookAttempts, shape,
};
use sea_query::Iden;
use serde_json::{Map, Value, json};

fn columns() -> Vec<String> {
    WebhookAttempts::columns()
        .into_iter()
        .map(|(column, _)| column.to_string())
        .collect()
}

/// The instant of every record and row here; canonical already, so `shape` keeps it.
const AT: &str = "2026-11-30T12:00:00.123Z";

fn to_object<S: serde::Serialize>(value: &S) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        other => panic!("expected an object, got {other:?}"),
    }
}

fn row() -> AttemptRow {
    shaped(&timed_out_event(AT))
}

#[test]
fn attempt_row_keys_are_exactly_the_table_columns_both_ways() {
    let keys: BTreeSet<String> = to_object(&row()).keys().cloned().collect();
    let columns: BTreeSet<String> = columns().into_iter().collect();
    let without_column: Vec<_> = keys.difference(&columns).collect();
    let without_field: Vec<_> = columns.difference(&keys).collect();
    assert!(
        without_column.is_empty() && without_field.is_empty(),
        "AttemptRow keys without a column (JSONEachRow would refuse them, or drop them \
         silently if unknown fields are skipped): {without_column:?}; columns without a key \
         (they would silently take their default): {without_field:?}"
    );
}

#[test]
fn attempt_row_serializes_its_keys_in_column_order() {
    // Not needed by JSONEachRow, but a reviewer reading a row reads the table.
    let line = serde_json::to_string(&row()).unwrap_or_else(|e| panic!("{e}"));
    let positions: Vec<usize> = columns()
        .iter()
        .map(|c| {
            line.find(&format!("\"{c}\":"))
                .unwrap_or_else(|| panic!("{c} missing from {line}"))
        })
        .collect();
    assert!(positions.is_sorted(), "{line}");
}

#[test]
fn a_row_built_from_the_column_list_deserializes_and_nothing_else_does() {
    // Every column (named by the enum) with a value of its type is a row...
    let mut object = Map::new();
    for (column, definition) in WebhookAttempts::columns() {
        object.insert(column.to_string(), fitting_value(definition.ch_type));
    }
    let parsed: Result<AttemptRow, _> = serde_json::from_value(Value::Object(object.clone()));
    assert!(parsed.is_ok(), "{parsed:?}");
    // ...a key that is not a column is refused...
    let mut extra = object.clone();
    extra.insert("attempted_at".into(), json!(AT));
    assert!(serde_json::from_value::<AttemptRow>(Value::Object(extra)).is_err());
    // ...and a missing non-nullable column is refused.
    for (column, definition) in WebhookAttempts::columns() {
        if definition.nullable() {
            continue;
        }
        let mut missing = object.clone();
        missing.remove(&column.to_string());
        assert!(
            serde_json::from_value::<AttemptRow>(Value::Object(missing)).is_err(),
            "{column:?}"
        );
    }
}

fn fitting_value(ch_type: ClickHouseType) -> Value {
    match ch_type {
        ClickHouseType::Uuid => json!("6f1c2a3b-0000-4000-8000-00000000e001"),
        ClickHouseType::DateTime64 { .. } => json!(AT),
        ClickHouseType::UInt8 => json!(u8::MAX),
        ClickHouseType::UInt16 => json!(u16::MAX),
        ClickHouseType::UInt32 => json!(u32::MAX),
        ClickHouseType::String => json!("text"),
        ClickHouseType::Nullable(inner) | ClickHouseType::LowCardinality(inner) => {
            fitting_value(*inner)
        }
    }
}

/// A JSON value of the right kind that the column's type cannot hold.
fn unfitting_value(ch_type: ClickHouseType) -> Value {
    match ch_type {
        ClickHouseType::Uuid | ClickHouseType::DateTime64 { .. } | ClickHouseType::String => {
            json!(1)
        }
        ClickHouseType::UInt8 => json!(u64::from(u8::MAX) + 1),
        ClickHouseType::UInt16 => json!(u64::from(u16::MAX) + 1),
        ClickHouseType::UInt32 => json!(u64::from(u32::MAX) + 1),
        ClickHouseType::Nullable(inner) | ClickHouseType::LowCardinality(inner) => {
            unfitting_value(*inner)
        }
    }
}

#[test]
fn each_field_holds_what_its_column_holds_and_null_only_where_nullable() {
    let base = to_object(&row());
    let accepts = |column: &str, value: Value| {
        let mut object = base.clone();
        object.insert(column.to_owned(), value);
        serde_json::from_value::<AttemptRow>(Value::Object(object)).is_ok()
    };
    for (column, definition) in WebhookAttempts::columns() {
        let name = column.to_string();
        let ch_type = definition.ch_type;
        assert!(accepts(&name, fitting_value(ch_type)), "{name}: {ch_type}");
        assert!(
            !accepts(&name, unfitting_value(ch_type)),
            "{name}: the field holds values a {ch_type} column cannot"
        );
        assert_eq!(
            accepts(&name, Value::Null),
            definition.nullable(),
            "{name}: the field's Option-ness disagrees with {ch_type}"
        );
    }
}

#[test]
fn the_publisher_record_differs_from_the_row_by_the_one_rename() {
    let mut event = timed_out_event(AT);
    event.status = Some(504);
    let fields: BTreeSet<String> = to_object(&event).keys().cloned().collect();
    let declared: BTreeSet<String> = EVENT_FIELDS.iter().map(|f| (*f).to_owned()).collect();
    assert_eq!(fields, declared, "AttemptEvent vs the fields shape reads");

    let renamed: BTreeSet<String> = EVENT_FIELDS
        .iter()
        .map(|f| if *f == "attempted_at" { "ts" } else { f })
        .map(str::to_owned)
        .collect();
    let columns: BTreeSet<String> = columns().into_iter().collect();
    assert_eq!(
        renamed, columns,
        "attempted_at -> ts is the only difference"
    );
}

#[test]
fn the_publisher_omits_unknown_status_and_error_rather_than_sending_null() {
    let object = to_object(&timed_out_event(AT));
    assert!(!object.contains_key("status"), "{object:?}");
    assert!(!to_object(&delivered_event(AT)).contains_key("error"));
}

#[test]
fn shape_renames_attempted_at_and_copies_every_other_field() {
    let event = timed_out_event(AT);
    let row = row();
    assert_eq!(row.ts, event.attempted_at);
    assert_eq!(
        (
            &row.environment_id,
            &row.delivery_id,
            &row.endpoint_id,
            &row.event_id
        ),
        (
            &event.environment_id,
            &event.delivery_id,
            &event.endpoint_id,
            &event.event_id
        )
    );
    assert_eq!(
        (row.attempt, row.latency_ms, &row.outcome),
        (event.attempt, event.latency_ms, &event.outcome)
    );
    let line = to_object(&row);
    assert!(!line.contains_key("attempted_at"), "{line:?}");
}

#[test]
fn absent_status_is_null_not_zero_and_absent_error_is_null_not_empty() {
    let line = to_object(&row());
    assert_eq!(line.get("status"), Some(&Value::Null), "{line:?}");

    let line = to_object(&shaped(&delivered_event(AT)));
    assert_eq!(line.get("error"), Some(&Value::Null), "{line:?}");
    assert_eq!(line.get("status"), Some(&json!(200)));
}

#[test]
fn a_record_lacking_a_required_field_is_refused_naming_it() {
    let full = to_object(&timed_out_event(AT));
    for field in EVENT_FIELDS {
        if matches!(field, "status" | "error") {
            continue;
        }
        let mut record = full.clone();
        record.remove(field);
        let err = shape(&Value::Object(record)).expect_err(field);
        assert_eq!(err, ShapeError::MissingField { field });
        assert_eq!(
            err.to_string(),
            format!("the record lacks the required field `{field}`")
        );
    }
}

#[test]
fn wrong_types_are_refused_naming_the_field() {
    let full = to_object(&timed_out_event(AT));
    for (field, value) in [
        ("attempt", json!("1")),
        ("attempt", json!(256)),
        ("status", json!("200")),
        ("latency_ms", json!(-5)),
        ("latency_ms", json!(1.5)),
        ("error", json!(false)),
        ("attempted_at", json!(1_796_040_000_123_i64)),
        ("environment_id", json!(null)),
    ] {
        let mut record = full.clone();
        record.insert(field.to_owned(), value.clone());
        let err = shape(&Value::Object(record)).expect_err(field);
        assert!(
            matches!(err, ShapeError::WrongType { .. }),
            "{field} = {value}: {err:?}"
        );
        assert_eq!(err.field(), Some(field), "{err}");
    }
}

/// The rules DatabaseName documents, written independently of it.
fn oracle_accepts(name: &str) -> bool {
    harness::names::follows_identifier_syntax(name)
        && ![
            "system",
            "default",
            "information_schema",
            "_temporary_and_external_tables",
        ]
        .contains(&name)
}

proptest! {
    #[test]
    fn database_name_accepts_exactly_what_its_rules_allow(name in "[a-zA-Z0-9_`. -]{0,70}") {
        let accepted = DatabaseName::new(&name);
        prop_assert_eq!(accepted.is_ok(), oracle_accepts(&name), "{:?}: {:?}", name, accepted);
        if let Ok(database) = accepted {
            prop_assert_eq!(database.as_str(), name.as_str());
        }
    }

    #[test]
    fn reserved_names_are_refused_in_any_case(
        index in 0..RESERVED_DATABASE_NAMES.len(),
        mask in proptest::collection::vec(any::<bool>(), 32),
    ) {
        let name: String = RESERVED_DATABASE_NAMES[index]
            .chars()
            .zip(mask.iter().cycle())
            .map(|(c, upper)| if *upper { c.to_ascii_uppercase() } else { c })
            .collect();
        prop_assert_eq!(
            DatabaseName::new(&name).map_err(|e| e.rule),
            Err(DatabaseNameRule::Reserved(ReservedDatabase))
        );
    }
}
