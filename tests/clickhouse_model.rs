//! The analytics sink's model, checked against a real ClickHouse engine
//! (chdb, ClickHouse 26.5, through `harness::clickhouse`). Every statement
//! here is generated from the model; nothing about the table is hand-written.
//!
//! - the generated DDL creates the table, and the engine's catalog
//!   (`system.columns`, `system.tables`, `SHOW CREATE`) equals the model's
//!   description: a drift check;
//! - a row produced by `shape` from the publisher's record is stored and read
//!   back equal;
//! - the same row inserted twice counts twice, but once under the generated
//!   `FINAL` count;
//! - a row still carrying `attempted_at` is refused (Code 117), a row without
//!   `ts` is refused by `ts_is_real` (Code 469);
//! - what `shape` refuses, the engine would either corrupt silently or refuse
//!   for the whole batch on every redelivery.
//!
//! Without the engine these tests fail and name the set-up step (the harness
//! provisions it into `target/chdb-venv`); only
//! `ALKSTORE_SKIP_CLICKHOUSE_TESTS=1` skips, loudly.

use std::collections::BTreeMap;

use harness::clickhouse::{
    self, Step, an_hour_ago_millis, code_of, delivered_event, iso_utc, json_lines, renamed, shaped,
    timed_out_event,
};
use schema_gen::clickhouse::{
    count_final_query, describe, engine_ident, insert_statement, qualified, quote_ident,
    quote_string, statements,
};
use schema_model::analytics::{TS_CEILING, TS_FLOOR_UNIX_MILLIS};
use schema_model::{AttemptRow, ClickHouseTable, DatabaseName, WebhookAttempts, shape};
use serde_json::{Value, json};

fn database(name: &str) -> DatabaseName {
    DatabaseName::new(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The generated DDL, one step per statement.
fn create(db: &DatabaseName) -> Vec<Step> {
    statements(db)
        .into_iter()
        .map(|statement| Step::new(statement.sql))
        .collect()
}

fn insert(db: &DatabaseName, lines: &[Value]) -> Step {
    let data: Vec<String> = lines.iter().map(Value::to_string).collect();
    Step::new(insert_statement::<WebhookAttempts>(db)).with_data(data.join("\n"))
}

fn insert_rows(db: &DatabaseName, rows: &[AttemptRow]) -> Step {
    let lines: Vec<Value> = rows.iter().map(to_value).collect();
    insert(db, &lines)
}

fn to_value<S: serde::Serialize>(value: &S) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("{e}"))
}

/// What a naive reader runs; only to show what `FINAL` changes.
fn bare_count(db: &DatabaseName) -> Step {
    Step::new(format!(
        "SELECT count() FROM {}",
        qualified::<WebhookAttempts>(db)
    ))
}

fn count_final(db: &DatabaseName) -> Step {
    Step::new(count_final_query::<WebhookAttempts>(db))
}

#[test]
fn the_generated_ddl_creates_exactly_the_table_the_model_describes() {
    if clickhouse::skip_requested() {
        return;
    }
    // A non-default name proves the validated name flows into every statement.
    let db = database("analytics_drift");
    let mut steps = create(&db);
    steps.extend(create(&db)); // IF NOT EXISTS: a second run is a no-op
    let catalog_from = steps.len();
    steps.push(
        Step::new(format!(
            "SELECT name, type, comment FROM system.columns \
             WHERE database = '{}' AND table = '{}' ORDER BY position",
            db.as_str(),
            WebhookAttempts::table_name()
        ))
        .with_format("JSONEachRow"),
    );
    steps.push(
        Step::new(format!(
            "SELECT engine, partition_key, sorting_key, primary_key, comment, create_table_query \
             FROM system.tables WHERE database = '{}' AND name = '{}'",
            db.as_str(),
            WebhookAttempts::table_name()
        ))
        .with_format("JSONEachRow"),
    );
    let response = clickhouse::run_full(&steps);
    assert!(
        response.engine_version.starts_with("26.5."),
        "not the engine CI pins: {}",
        response.engine_version
    );
    assert_eq!(
        response.results.len(),
        steps.len(),
        "{:?}",
        response.results
    );
    for (step, result) in steps.iter().zip(&response.results) {
        assert!(result.output().is_some(), "{}: {result:?}", step.sql);
    }

    let model = describe(&db);
    let expected = &model.tables[0];

    // Columns: names, order and types as the engine stores them, and the docs.
    let live_columns = json_lines(response.results[catalog_from].expect_ok());
    let model_columns: Vec<Value> = expected
        .columns
        .iter()
        .map(|c| json!({"name": c.name, "type": c.ch_type, "comment": c.doc}))
        .collect();
    assert_eq!(
        live_columns, model_columns,
        "the engine's system.columns drifted from the model"
    );

    // Engine, keys, TTL, constraint and table doc.
    let tables = json_lines(response.results[catalog_from + 1].expect_ok());
    assert_eq!(tables.len(), 1, "{tables:?}");
    let live = &tables[0];
    assert_eq!(live["engine"], expected.engine);
    assert_eq!(live["partition_key"], expected.partition_key);
    assert_eq!(live["sorting_key"], expected.sorting_key);
    assert_eq!(
        live["primary_key"], expected.sorting_key,
        "no separate PRIMARY KEY"
    );
    assert_eq!(live["comment"], expected.doc);
    let create_query = live["create_table_query"].as_str().unwrap_or_default();
    let ttl = expected.ttl.as_deref().unwrap_or_else(|| panic!("no TTL"));
    assert!(
        create_query.contains(&format!(" TTL {ttl} ")),
        "{create_query}"
    );
    for check in &expected.checks {
        assert!(
            create_query.contains(&format!(
                "CONSTRAINT {} CHECK {}",
                check.name, check.definition
            )),
            "{create_query}"
        );
    }
}

#[test]
fn a_shaped_row_is_stored_and_read_back_equal() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let at = an_hour_ago_millis();
    // A record in another offset, with sub-millisecond digits and UUIDs in
    // every form uuid parses: shape canonicalises them all to the form the
    // engine reads back (the engine itself refuses the braced and URN forms).
    let mut elsewhere = delivered_event(&iso_utc(at + 2 * 3_600_000).replace('Z', "4567+02:00"));
    elsewhere.attempt = 3;
    elsewhere.environment_id = elsewhere.environment_id.to_uppercase();
    elsewhere.endpoint_id = format!("{{{}}}", elsewhere.endpoint_id);
    elsewhere.event_id = format!("urn:uuid:{}", elsewhere.event_id);
    elsewhere.delivery_id = elsewhere.delivery_id.replace('-', "");
    let rows = [
        shaped(&timed_out_event(&iso_utc(at))),
        shaped(&delivered_event(&iso_utc(at))),
        shaped(&elsewhere),
    ];
    assert_eq!(rows[2].ts, iso_utc(at));

    let mut steps = create(&db);
    steps.push(insert_rows(&db, &rows));
    // date_time_output_format='iso' gives back the ISO-8601 form that went in.
    steps.push(
        Step::new(format!(
            "SELECT * FROM {} FINAL ORDER BY attempt SETTINGS date_time_output_format='iso'",
            qualified::<WebhookAttempts>(&db)
        ))
        .with_format("JSONEachRow"),
    );
    let results = clickhouse::run_checked(&steps);

    let output = results[3].expect_ok();
    let read_back: Vec<AttemptRow> = output
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(read_back, rows);
    // NULL, not 0 and not "": the absence survived the round trip.
    let lines = json_lines(output);
    assert_eq!(lines[0]["status"], Value::Null, "{output}");
    assert_eq!(lines[1]["error"], Value::Null, "{output}");
}

#[test]
fn the_same_row_inserted_twice_counts_once_under_final() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let row = shaped(&timed_out_event(&iso_utc(an_hour_ago_millis())));
    let mut steps = create(&db);
    steps.push(insert_rows(&db, std::slice::from_ref(&row)));
    steps.push(insert_rows(&db, std::slice::from_ref(&row))); // a redelivery
    steps.push(bare_count(&db));
    steps.push(count_final(&db));
    let results = clickhouse::run_checked(&steps);

    assert_eq!(
        results[4].expect_ok(),
        "2\n",
        "the duplicate is physically present until a merge"
    );
    assert_eq!(
        results[5].expect_ok(),
        "1\n",
        "the generated FINAL count collapses it on the sorting key"
    );
}

#[test]
fn a_row_still_carrying_attempted_at_is_refused_with_code_117() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let event = timed_out_event(&iso_utc(an_hour_ago_millis()));
    // The shaped row with the rename undone...
    let unrenamed = renamed(to_value(&shaped(&event)), "ts", "attempted_at");
    // ...and the publisher's record forwarded unshaped: the original bug.
    let forwarded = to_value(&event);

    let mut steps = create(&db);
    steps.push(insert(&db, &[unrenamed]).expecting_error());
    steps.push(insert(&db, &[forwarded]).expecting_error());
    steps.push(count_final(&db));
    let results = clickhouse::run_checked(&steps);

    for result in &results[2..4] {
        let error = result.expect_err();
        assert_eq!(code_of(result), Some(117), "{}", error.message);
        assert_eq!(error.name.as_deref(), Some("INCORRECT_DATA"));
        assert!(
            error.message.starts_with(
                "Code: 117. DB::Exception: Unknown field found while parsing JSONEachRow format: attempted_at:"
            ),
            "{}",
            error.message
        );
    }
    assert_eq!(results[4].expect_ok(), "0\n", "nothing was written");
}

#[test]
fn a_row_without_ts_is_refused_by_ts_is_real_with_code_469() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let mut row = to_value(&shaped(&timed_out_event(&iso_utc(an_hour_ago_millis()))));
    row.as_object_mut()
        .unwrap_or_else(|| panic!("a row is an object"))
        .remove("ts");
    let mut steps = create(&db);
    steps.push(insert(&db, &[row]).expecting_error());
    steps.push(count_final(&db));
    let results = clickhouse::run_checked(&steps);

    let error = results[2].expect_err();
    assert_eq!(code_of(&results[2]), Some(469), "{}", error.message);
    assert_eq!(error.name.as_deref(), Some("VIOLATED_CONSTRAINT"));
    assert!(
        error.message.starts_with(
            "Code: 469. DB::Exception: Constraint `ts_is_real` for table relay_analytics.webhook_attempts ("
        ),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("Column values: ts = '0'"),
        "the column took the epoch: {}",
        error.message
    );
    assert_eq!(results[3].expect_ok(), "0\n", "nothing was written");
}

#[test]
fn what_shape_refuses_the_engine_would_corrupt_or_refuse_for_the_whole_batch() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let good = to_value(&shaped(&timed_out_event(&iso_utc(an_hour_ago_millis()))));
    let with = |key: &str, value: Value| {
        let mut line = good.clone();
        line[key] = value;
        line
    };
    // Each bad line travels in a batch with a good one, as the ingester sends them.
    let cases: BTreeMap<&str, Value> = BTreeMap::from([
        ("attempt_out_of_range", with("attempt", json!(300))),
        ("bad_uuid", with("delivery_id", json!("not-a-uuid"))),
        ("before_2020", with("ts", json!("2019-06-01T00:00:00.000Z"))),
        ("negative_latency", with("latency_ms", json!(-1))),
    ]);
    for (case, line) in &cases {
        let as_event = renamed(line.clone(), "ts", "attempted_at");
        assert!(shape(&as_event).is_err(), "{case}: shape accepted it");
    }

    let mut steps = create(&db);
    for line in cases.values() {
        steps.push(insert(&db, &[good.clone(), line.clone()]).expecting_error());
    }
    let results = clickhouse::run(&steps);
    let codes: Vec<(&str, Option<i64>)> = cases
        .keys()
        .zip(&results[2..])
        .map(|(case, result)| (*case, code_of(result)))
        .collect();
    assert_eq!(
        codes,
        [
            // UInt8 wraps silently: 300 is stored as 44, the insert succeeds.
            ("attempt_out_of_range", None),
            ("bad_uuid", Some(376)),
            ("before_2020", Some(469)),
            ("negative_latency", Some(72)),
        ],
        "{results:?}"
    );
    let read = clickhouse::run_checked(
        &[
            create(&db),
            vec![
                insert(&db, &[cases["attempt_out_of_range"].clone()]),
                Step::new(format!(
                    "SELECT attempt FROM {}",
                    qualified::<WebhookAttempts>(&db)
                )),
            ],
        ]
        .concat(),
    );
    assert_eq!(
        read[3].expect_ok(),
        "44\n",
        "300 wrapped to 44 without an error"
    );
}

/// `row` (a JSON object) with `key` set to `value`.
fn with_key(mut row: Value, key: &str, value: Value) -> Value {
    row[key] = value;
    row
}

#[test]
fn the_ts_bounds_are_where_the_engine_puts_them() {
    if clickhouse::skip_requested() {
        return;
    }
    let db = DatabaseName::default();
    let ceiling_millis = i64::try_from(TS_CEILING.unix_timestamp_nanos() / 1_000_000)
        .unwrap_or_else(|e| panic!("{e}"));
    let good = to_value(&shaped(&timed_out_event(&iso_utc(an_hour_ago_millis()))));
    // Written past shape, the way a consumer without it would.
    let at = |millis: i64, attempt: u8| {
        with_key(
            with_key(good.clone(), "ts", json!(iso_utc(millis))),
            "attempt",
            json!(attempt),
        )
    };
    // What shape says about the same instants, as the publisher sends them.
    let shapes = |millis: i64| {
        shape(&renamed(at(millis, 1), "ts", "attempted_at"))
            .map(|row| row.ts)
            .ok()
    };
    assert_eq!(shapes(TS_FLOOR_UNIX_MILLIS), None);
    assert_eq!(
        shapes(TS_FLOOR_UNIX_MILLIS + 1),
        Some(iso_utc(TS_FLOOR_UNIX_MILLIS + 1))
    );
    assert_eq!(shapes(ceiling_millis), Some(iso_utc(ceiling_millis)));
    assert_eq!(shapes(ceiling_millis + 1), None);

    let mut steps = create(&db);
    steps.push(insert(&db, &[at(TS_FLOOR_UNIX_MILLIS, 1)]).expecting_error());
    steps.push(insert(&db, &[at(TS_FLOOR_UNIX_MILLIS + 1, 2)]));
    steps.push(insert(
        &db,
        &[at(ceiling_millis, 3), at(ceiling_millis + 1, 4)],
    ));
    steps.push(Step::new(format!(
        "SELECT attempt, ts FROM {} WHERE attempt >= 3 ORDER BY attempt \
         SETTINGS date_time_output_format='iso'",
        qualified::<WebhookAttempts>(&db)
    )));
    let results = clickhouse::run_checked(&steps);

    // ts_is_real refuses the floor itself and takes the next millisecond:
    // TS_FLOOR_UNIX_MILLIS is the instant the engine reads the CHECK's text as.
    assert_eq!(
        code_of(&results[2]),
        Some(469),
        "{}",
        results[2].expect_err().message
    );
    // The ceiling is stored exactly; one millisecond later is not refused but
    // silently stored as another instant, which is why shape refuses it.
    let stored: Vec<&str> = results[5].expect_ok().lines().collect();
    assert_eq!(stored[0], format!("3\t{}", iso_utc(ceiling_millis)));
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_ne!(stored[1], format!("4\t{}", iso_utc(ceiling_millis + 1)));
}

#[test]
fn quoting_is_what_the_engine_reads_and_how_it_prints() {
    if clickhouse::skip_requested() {
        return;
    }
    let names = [
        "ts",
        "order",
        "key",
        "where",
        "select",
        "Select",
        "from",
        "FROM",
        "distinct",
        "all",
        "table",
        "values",
        "null",
        "NULL",
        "_a1",
        "weird col",
        "9x",
        "x.y",
        "a`b",
        "a\\b",
        "it's",
        "dq\"x",
        "tab\tx",
        "nl\nx",
        "cr\rx",
        "nul\0x",
        "bs\u{8}x",
        "ff\u{c}x",
        "vt\u{b}x",
        "del\u{7f}x",
        "\u{e9}t\u{e9}",
        "sep\u{2028}x",
    ];
    let db = database("quoting");
    let table = format!(
        "{}.{}",
        quote_ident(db.as_str()),
        quote_ident("weird`table")
    );
    let columns: Vec<String> = names
        .iter()
        .map(|name| format!("{} UInt8 COMMENT {}", quote_ident(name), quote_string(name)))
        .collect();
    let keys: Vec<String> = names.iter().map(|name| quote_ident(name)).collect();
    let literals: Vec<String> = names.iter().map(|name| quote_string(name)).collect();
    let steps = [
        Step::new(format!("CREATE DATABASE {}", quote_ident(db.as_str()))),
        Step::new(format!(
            "CREATE TABLE {table} ({}) ENGINE = MergeTree ORDER BY ({})",
            columns.join(", "),
            keys.join(", ")
        )),
        Step::new(format!(
            "SELECT name, comment FROM system.columns WHERE database = {} ORDER BY position",
            quote_string(db.as_str())
        ))
        .with_format("JSONEachRow"),
        Step::new(format!(
            "SELECT name, sorting_key FROM system.tables WHERE database = {}",
            quote_string(db.as_str())
        ))
        .with_format("JSONEachRow"),
        Step::new(format!("SELECT [{}] AS strings", literals.join(", ")))
            .with_format("JSONEachRow"),
    ];
    let results = clickhouse::run_checked(&steps);

    // quote_ident and quote_string: the engine reads back exactly the text quoted.
    let expected: Vec<Value> = names
        .iter()
        .map(|name| json!({"name": name, "comment": name}))
        .collect();
    assert_eq!(json_lines(results[2].expect_ok()), expected);
    assert_eq!(
        json_lines(results[4].expect_ok()),
        [json!({ "strings": names })]
    );
    // engine_ident: the sorting key as the engine's formatter prints it.
    let printed: Vec<String> = names.iter().map(|name| engine_ident(name)).collect();
    assert_eq!(
        json_lines(results[3].expect_ok()),
        [json!({"name": "weird`table", "sorting_key": printed.join(", ")})]
    );
}
