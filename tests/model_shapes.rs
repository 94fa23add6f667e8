//! Ties each value shape the engine reads and writes to its table's columns,
//! in both directions, by name, nullability and type: a field without a
//! column, a column without a field, an `Option` on a `NOT NULL` column or an
//! `i32` on a `bigint` column fails here, never in production.

use std::collections::BTreeSet;

use schema_model::{
    ConsumedEvent, ConsumedEvents, ConsumerOffset, DeadJob, DeadJobs, Job, Jobs, Lock, Locks,
    QueueOpts, Schedule, ScheduleOpts, Schedules, SchemaVersionRecord, SchemaVersions, SqlType,
    StreamEvent, StreamEvents, StreamOffsets, TableModel, engine_family,
};
use sea_query::Iden;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The serialized field names of `S`, from its `Default` value (no field is
/// skipped when `None`, so every field shows up).
fn field_names<S: Serialize + Default>() -> BTreeSet<String> {
    fields_of(&S::default()).keys().cloned().collect()
}

fn fields_of<S: Serialize>(value: &S) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        other => panic!("a value shape must serialize to an object, got {other:?}"),
    }
}

fn accepts<S: DeserializeOwned + Serialize + Default>(field: &str, probe: Value) -> bool {
    let mut object = fields_of(&S::default());
    object.insert(field.to_owned(), probe);
    serde_json::from_value::<S>(Value::Object(object)).is_ok()
}

/// Asserts that `S`'s fields are exactly `T`'s columns minus `filled_by_database`
/// (columns with a database default: identity aside, `tx_id`, `purge_at`) and
/// `filled_by_statements` (bookkeeping the hot-path statements derive, like
/// `jobs.ready` from `run_at`), and that each field's nullability and type
/// agree with its column. Returns the table's name.
fn tie<S, T>(filled_by_database: &[T], filled_by_statements: &[T]) -> String
where
    S: Serialize + DeserializeOwned + Default,
    T: TableModel,
{
    let table = T::table_name();
    for column in filled_by_database {
        let definition = column
            .column()
            .unwrap_or_else(|| panic!("{table}: {column:?} is not a column"));
        assert!(
            definition.default.is_some(),
            "{table}.{column:?} is listed as filled by the database but has no default"
        );
    }
    for column in filled_by_statements {
        let definition = column
            .column()
            .unwrap_or_else(|| panic!("{table}: {column:?} is not a column"));
        assert!(
            definition.default.is_none(),
            "{table}.{column:?} is listed as filled by the statements but has a database default"
        );
    }
    let not_fields: Vec<T> = filled_by_database
        .iter()
        .chain(filled_by_statements)
        .copied()
        .collect();
    let columns: BTreeSet<String> = T::columns()
        .into_iter()
        .filter(|(variant, _)| !not_fields.contains(variant))
        .map(|(variant, _)| variant.to_string())
        .collect();
    let fields = field_names::<S>();
    let without_column: Vec<_> = fields.difference(&columns).collect();
    let without_field: Vec<_> = columns.difference(&fields).collect();
    assert!(
        without_column.is_empty() && without_field.is_empty(),
        "{table}: fields without a column: {without_column:?}; columns without a field: {without_field:?}"
    );

    for (variant, column) in T::columns() {
        if not_fields.contains(&variant) {
            continue;
        }
        let name = variant.to_string();
        assert_eq!(
            accepts::<S>(&name, Value::Null),
            column.nullable,
            "{table}.{name}: the field's Option-ness disagrees with the column's nullability"
        );
        let (fits, does_not_fit) = match column.sql_type {
            SqlType::BigInt => (json!(1_i64 << 40), json!("1")),
            SqlType::Integer => (json!(7), json!(1_i64 << 40)),
            SqlType::Text => (json!("x"), json!(7)),
            SqlType::Bytea => (json!([0, 255]), json!("x")),
            SqlType::Boolean => (json!(true), json!(1)),
            SqlType::Xid8 => panic!("{table}.{name}: xid8 columns are filled by the database"),
        };
        assert!(
            accepts::<S>(&name, fits.clone()),
            "{table}.{name}: the field does not take {fits}, a {:?} value",
            column.sql_type
        );
        assert!(
            !accepts::<S>(&name, does_not_fit.clone()),
            "{table}.{name}: the field takes {does_not_fit}, which a {:?} column does not hold",
            column.sql_type
        );
    }
    table
}

#[test]
fn every_table_of_the_family_has_a_value_shape_tied_to_its_columns() {
    let tied: BTreeSet<String> = [
        tie::<Job, Jobs>(&[], &[Jobs::Ready]),
        tie::<DeadJob, DeadJobs>(&[DeadJobs::PurgeAt], &[]),
        tie::<StreamEvent, StreamEvents>(&[StreamEvents::TxId], &[]),
        tie::<ConsumerOffset, StreamOffsets>(&[], &[]),
        tie::<Schedule, Schedules>(&[], &[]),
        tie::<Lock, Locks>(&[], &[]),
        tie::<ConsumedEvent, ConsumedEvents>(&[], &[]),
        tie::<SchemaVersionRecord, SchemaVersions>(&[], &[]),
    ]
    .into_iter()
    .collect();
    let family: BTreeSet<String> = engine_family().into_iter().map(|t| t.name).collect();
    assert_eq!(
        tied, family,
        "a table of the family has no value shape tied to it"
    );
}

/// The stamps are flattened into the rows; each stamp field must be a column
/// of every table that carries it.
#[test]
fn stamped_options_are_columns_of_the_tables_that_carry_them() {
    let names = |columns: Vec<String>| columns.into_iter().collect::<BTreeSet<_>>();
    let jobs = names(
        Jobs::columns()
            .into_iter()
            .map(|(c, _)| c.to_string())
            .collect(),
    );
    let dead = names(
        DeadJobs::columns()
            .into_iter()
            .map(|(c, _)| c.to_string())
            .collect(),
    );
    let schedules = names(
        Schedules::columns()
            .into_iter()
            .map(|(c, _)| c.to_string())
            .collect(),
    );
    for field in field_names::<QueueOpts>() {
        assert!(
            jobs.contains(&field),
            "QueueOpts.{field} is not a jobs column"
        );
        assert!(
            dead.contains(&field),
            "QueueOpts.{field} is not a dead_jobs column"
        );
    }
    for field in field_names::<ScheduleOpts>() {
        assert!(
            schedules.contains(&field),
            "ScheduleOpts.{field} is not a schedules column"
        );
    }
    assert_eq!(field_names::<QueueOpts>().len(), 4);
    assert_eq!(field_names::<ScheduleOpts>().len(), 6);
}

/// The check above is only worth something if it notices a drift: a shape
/// with a renamed field must be caught.
#[test]
fn a_renamed_field_is_caught() {
    #[derive(Serialize, serde::Deserialize, Default)]
    struct DriftedLock {
        name: String,
        holder: String,
        expires_at: i64,
        fence: i64,
    }
    let message = panic_message(|| tie::<DriftedLock, Locks>(&[], &[]));
    assert!(
        message.contains("fields without a column: [\"holder\"]"),
        "{message}"
    );
    assert!(
        message.contains("columns without a field: [\"owner\"]"),
        "{message}"
    );
}

#[test]
fn a_narrowed_field_type_is_caught() {
    #[derive(Serialize, serde::Deserialize, Default)]
    struct NarrowLock {
        name: String,
        owner: String,
        expires_at: i32,
        fence: i64,
    }
    let message = panic_message(|| tie::<NarrowLock, Locks>(&[], &[]));
    assert!(
        message.contains("locks.expires_at: the field does not take"),
        "{message}"
    );
}

/// A column listed as filled by the database must have a default, one
/// listed as filled by the statements must not.
#[test]
fn a_misfiled_column_is_caught() {
    let message = panic_message(|| tie::<Lock, Locks>(&[Locks::Owner], &[]));
    assert!(
        message.contains("locks.Owner is listed as filled by the database but has no default"),
        "{message}"
    );
    let message = panic_message(|| tie::<StreamEvent, StreamEvents>(&[], &[StreamEvents::TxId]));
    assert!(
        message.contains(
            "stream_events.TxId is listed as filled by the statements but has a database default"
        ),
        "{message}"
    );
}

/// The message `f` panics with ("" if it does not).
fn panic_message<R>(f: impl FnOnce() -> R + std::panic::UnwindSafe) -> String {
    std::panic::catch_unwind(f)
        .err()
        .and_then(|panic| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Asserts that `S` refuses an input without any one of its required
/// fields (the non-nullable columns): a `#[serde(default)]` on one would
/// turn a forgotten field into a plausible row (a job without `run_at`
/// would be claimable at once). Optional fields may be absent.
fn refuses_a_missing_required_field<S, T>(filled: &[T]) -> Vec<String>
where
    S: Serialize + DeserializeOwned + Default,
    T: TableModel,
{
    let table = T::table_name();
    let mut defaulted = Vec::new();
    for (variant, column) in T::columns() {
        if filled.contains(&variant) {
            continue;
        }
        let name = variant.to_string();
        let mut object = fields_of(&S::default());
        assert!(
            object.remove(&name).is_some(),
            "{table}.{name} is not a field"
        );
        let accepted = serde_json::from_value::<S>(Value::Object(object)).is_ok();
        if column.nullable {
            assert!(
                accepted,
                "{table}.{name}: an absent optional field must read as None"
            );
        } else if accepted {
            defaulted.push(format!("{table}.{name}"));
        }
    }
    defaulted
}

#[test]
fn a_required_field_missing_from_the_input_is_refused() {
    let defaulted: Vec<String> = [
        refuses_a_missing_required_field::<Job, Jobs>(&[Jobs::Ready]),
        refuses_a_missing_required_field::<DeadJob, DeadJobs>(&[DeadJobs::PurgeAt]),
        refuses_a_missing_required_field::<StreamEvent, StreamEvents>(&[StreamEvents::TxId]),
        refuses_a_missing_required_field::<ConsumerOffset, StreamOffsets>(&[]),
        refuses_a_missing_required_field::<Schedule, Schedules>(&[]),
        refuses_a_missing_required_field::<Lock, Locks>(&[]),
        refuses_a_missing_required_field::<ConsumedEvent, ConsumedEvents>(&[]),
    ]
    .concat();
    assert!(
        defaulted.is_empty(),
        "required fields that silently take a default when absent: {defaulted:?}"
    );
}

/// The check above catches a defaulted field.
#[test]
fn a_defaulted_required_field_is_caught() {
    #[derive(Serialize, serde::Deserialize, Default)]
    struct LaxLock {
        name: String,
        owner: String,
        #[serde(default)]
        expires_at: i64,
        fence: i64,
    }
    assert_eq!(
        refuses_a_missing_required_field::<LaxLock, Locks>(&[]),
        ["locks.expires_at"]
    );
}
