//! The ClickHouse engine behaves as the analytics write-up (seed 001) says,
//! on the hand-written `relay_analytics.webhook_attempts` DDL.
//!
//! That table stayed empty in production because a JSONEachRow key
//! (`attempted_at`) did not match the column (`ts`): the column silently took
//! its default. These tests pin the engine behaviours the fix relies on, so
//! a later generated DDL can be checked against the same facts:
//! the DDL is accepted and stored as expected; a row round-trips; a duplicate
//! is physically kept and collapsed under `FINAL`; a renamed key is refused
//! (Code 117); an absent `ts` is refused by the `ts_is_real` constraint
//! (Code 469).
//!
//! And the harness keeps its promise: an engine that cannot run fails the
//! test with the set-up step, and the skip opt-out skips loudly and is
//! refused under CI (each checked in a child process of this binary).

use harness::clickhouse::{
    self, Step, StepResult, an_hour_ago_millis, code_of, iso_utc, json_lines, renamed,
};
use serde_json::{Value, json};

const CREATE_DATABASE: &str = "CREATE DATABASE IF NOT EXISTS relay_analytics";

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS relay_analytics.webhook_attempts (
    environment_id UUID, ts DateTime64(3, 'UTC'), delivery_id UUID, endpoint_id UUID, event_id UUID,
    attempt UInt8, status Nullable(UInt16), error Nullable(String), latency_ms UInt32,
    outcome LowCardinality(String),
    CONSTRAINT ts_is_real CHECK ts > toDateTime64('2020-01-01 00:00:00', 3, 'UTC')
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(ts) ORDER BY (environment_id, ts, delivery_id, attempt) TTL toDateTime(ts) + INTERVAL 90 DAY";

/// The insert as the ingester must send it: unknown keys refused, ISO-8601 parsed.
/// Both settings are explicit: chdb's defaults differ from a server's.
const INSERT: &str = "INSERT INTO relay_analytics.webhook_attempts \
    SETTINGS input_format_skip_unknown_fields=0, date_time_input_format='best_effort' \
    FORMAT JSONEachRow";

const COUNT: &str = "SELECT count() FROM relay_analytics.webhook_attempts";
const COUNT_FINAL: &str = "SELECT count() FROM relay_analytics.webhook_attempts FINAL";

/// The two DDL statements, as steps.
fn create() -> Vec<Step> {
    vec![Step::new(CREATE_DATABASE), Step::new(CREATE_TABLE)]
}

/// A timed-out attempt: no status (nothing answered), an error text.
fn timed_out_row(ts: &str) -> Value {
    json!({
        "environment_id": "6f1c2a3b-0000-4000-8000-00000000e001",
        "ts": ts,
        "delivery_id": "6f1c2a3b-0000-4000-8000-00000000d001",
        "endpoint_id": "6f1c2a3b-0000-4000-8000-00000000a001",
        "event_id": "6f1c2a3b-0000-4000-8000-00000000f001",
        "attempt": 1,
        "status": null,
        "error": "timeout after 30000 ms",
        "latency_ms": 30000,
        "outcome": "rescheduled"
    })
}

/// The delivery's next attempt, delivered: a status, no error.
fn delivered_row(ts: &str) -> Value {
    let mut row = timed_out_row(ts);
    for (key, value) in [
        ("attempt", json!(2)),
        ("status", json!(200)),
        ("error", Value::Null),
        ("latency_ms", json!(87)),
        ("outcome", json!("delivered")),
    ] {
        row[key] = value;
    }
    row
}

fn insert(row: &Value) -> Step {
    Step::new(INSERT).with_data(row.to_string())
}

#[test]
fn iso_formatting_agrees_with_the_engine() {
    // 1796040000123 is what the engine's toUnixTimestamp64Milli returned for this instant.
    assert_eq!(iso_utc(1_796_040_000_123), "2026-11-30T12:00:00.123Z");
    assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
    assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
}

#[test]
fn the_hand_written_ddl_creates_the_table_as_declared() {
    if clickhouse::skip_requested() {
        return;
    }
    let mut steps = create();
    steps.push(
        Step::new("SHOW CREATE TABLE relay_analytics.webhook_attempts")
            .with_format("TabSeparatedRaw"),
    );
    steps.push(
        Step::new(
            "SELECT name, type, is_in_partition_key, is_in_sorting_key FROM system.columns \
             WHERE database = 'relay_analytics' AND table = 'webhook_attempts' ORDER BY position",
        )
        .with_format("TabSeparated"),
    );
    steps.push(
        Step::new(
            "SELECT engine, partition_key, sorting_key, primary_key FROM system.tables \
             WHERE database = 'relay_analytics' AND name = 'webhook_attempts'",
        )
        .with_format("TabSeparated"),
    );
    let results = clickhouse::run_checked(&steps);

    // The engine's stored form: `INTERVAL 90 DAY` is normalised to toIntervalDay(90)
    // and the default index_granularity is spelled out. A drift check compares with this.
    assert_eq!(
        results[2].expect_ok(),
        "CREATE TABLE relay_analytics.webhook_attempts\n\
         (\n\
         \x20   `environment_id` UUID,\n\
         \x20   `ts` DateTime64(3, 'UTC'),\n\
         \x20   `delivery_id` UUID,\n\
         \x20   `endpoint_id` UUID,\n\
         \x20   `event_id` UUID,\n\
         \x20   `attempt` UInt8,\n\
         \x20   `status` Nullable(UInt16),\n\
         \x20   `error` Nullable(String),\n\
         \x20   `latency_ms` UInt32,\n\
         \x20   `outcome` LowCardinality(String),\n\
         \x20   CONSTRAINT ts_is_real CHECK ts > toDateTime64('2020-01-01 00:00:00', 3, 'UTC')\n\
         )\n\
         ENGINE = ReplacingMergeTree\n\
         PARTITION BY toYYYYMM(ts)\n\
         ORDER BY (environment_id, ts, delivery_id, attempt)\n\
         TTL toDateTime(ts) + toIntervalDay(90)\n\
         SETTINGS index_granularity = 8192\n"
    );
    // TabSeparated escapes the quotes inside a type: DateTime64(3, \'UTC\').
    assert_eq!(
        results[3].expect_ok(),
        "environment_id\tUUID\t0\t1\n\
         ts\tDateTime64(3, \\'UTC\\')\t1\t1\n\
         delivery_id\tUUID\t0\t1\n\
         endpoint_id\tUUID\t0\t0\n\
         event_id\tUUID\t0\t0\n\
         attempt\tUInt8\t0\t1\n\
         status\tNullable(UInt16)\t0\t0\n\
         error\tNullable(String)\t0\t0\n\
         latency_ms\tUInt32\t0\t0\n\
         outcome\tLowCardinality(String)\t0\t0\n"
    );
    assert_eq!(
        results[4].expect_ok(),
        "ReplacingMergeTree\ttoYYYYMM(ts)\tenvironment_id, ts, delivery_id, attempt\t\
         environment_id, ts, delivery_id, attempt\n"
    );

    // Re-running the DDL is a no-op, as IF NOT EXISTS promises.
    let again = clickhouse::run_checked(&[create(), create()].concat());
    assert_eq!(again.len(), 4);
}

#[test]
fn an_inserted_row_is_stored_and_read_back_equal() {
    if clickhouse::skip_requested() {
        return;
    }
    let ts = iso_utc(an_hour_ago_millis());
    let (timed_out, delivered) = (timed_out_row(&ts), delivered_row(&ts));
    let mut steps = create();
    steps.push(insert(&timed_out));
    steps.push(insert(&delivered));
    // date_time_output_format='iso' gives back the ISO-8601 form that went in.
    steps.push(
        Step::new(
            "SELECT * FROM relay_analytics.webhook_attempts FINAL ORDER BY attempt \
             SETTINGS date_time_output_format='iso'",
        )
        .with_format("JSONEachRow"),
    );
    // The default output form, for the record: no T, no Z; NULL as \N.
    steps.push(Step::new(
        "SELECT ts, status, error FROM relay_analytics.webhook_attempts FINAL ORDER BY attempt",
    ));
    let results = clickhouse::run_checked(&steps);

    assert_eq!(
        json_lines(results[4].expect_ok()),
        vec![timed_out, delivered]
    );
    let plain = ts.trim_end_matches('Z').replace('T', " ");
    assert_eq!(
        results[5].expect_ok(),
        format!("{plain}\t\\N\ttimeout after 30000 ms\n{plain}\t200\t\\N\n")
    );
}

#[test]
fn the_same_row_twice_counts_two_but_one_under_final() {
    if clickhouse::skip_requested() {
        return;
    }
    let row = timed_out_row(&iso_utc(an_hour_ago_millis()));
    let mut steps = create();
    steps.push(insert(&row));
    steps.push(insert(&row));
    steps.push(Step::new(COUNT));
    steps.push(Step::new(COUNT_FINAL));
    let results = clickhouse::run_checked(&steps);

    assert_eq!(
        results[4].expect_ok(),
        "2\n",
        "the duplicate is physically present until a merge"
    );
    assert_eq!(
        results[5].expect_ok(),
        "1\n",
        "FINAL collapses it on the sorting key"
    );
}

#[test]
fn a_row_still_carrying_attempted_at_is_refused_with_code_117() {
    if clickhouse::skip_requested() {
        return;
    }
    let row = renamed(
        timed_out_row(&iso_utc(an_hour_ago_millis())),
        "ts",
        "attempted_at",
    );
    let mut steps = create();
    steps.push(insert(&row).expecting_error());
    steps.push(Step::new(COUNT));
    let results = clickhouse::run_checked(&steps);

    let error = results[2].expect_err();
    assert_eq!(code_of(&results[2]), Some(117));
    assert_eq!(error.name.as_deref(), Some("INCORRECT_DATA"));
    assert!(
        error
            .message
            .starts_with("Code: 117. DB::Exception: Unknown field found while parsing JSONEachRow format: attempted_at:"),
        "{}",
        error.message
    );
    assert_eq!(results[3].expect_ok(), "0\n", "nothing was written");
}

#[test]
fn a_row_without_ts_is_refused_by_ts_is_real_with_code_469() {
    if clickhouse::skip_requested() {
        return;
    }
    let mut row = timed_out_row(&iso_utc(an_hour_ago_millis()));
    row.as_object_mut().expect("row is an object").remove("ts");
    let mut steps = create();
    steps.push(insert(&row).expecting_error());
    steps.push(Step::new(COUNT));
    let results = clickhouse::run_checked(&steps);

    let error = results[2].expect_err();
    assert_eq!(code_of(&results[2]), Some(469));
    assert_eq!(error.name.as_deref(), Some("VIOLATED_CONSTRAINT"));
    // The message also carries the table's UUID, which differs per run.
    assert!(
        error
            .message
            .starts_with("Code: 469. DB::Exception: Constraint `ts_is_real` for table relay_analytics.webhook_attempts ("),
        "{}",
        error.message
    );
    assert!(
        error.message.ends_with(
            ") is violated at row 1. Expression: (ts > toDateTime64('2020-01-01 00:00:00', 3, 'UTC')). \
             Column values: ts = '0'. (VIOLATED_CONSTRAINT)"
        ),
        "{}",
        error.message
    );
    assert_eq!(results[3].expect_ok(), "0\n", "nothing was written");
}

#[test]
fn with_unknown_fields_skipped_the_constraint_still_refuses_the_renamed_row() {
    // The production failure: the server default skips unknown keys, `ts` takes
    // the epoch. Without the CHECK the row would vanish under the TTL; with it, 469.
    if clickhouse::skip_requested() {
        return;
    }
    let row = renamed(
        timed_out_row(&iso_utc(an_hour_ago_millis())),
        "ts",
        "attempted_at",
    );
    let mut steps = create();
    steps.push(
        Step::new(
            "INSERT INTO relay_analytics.webhook_attempts \
             SETTINGS input_format_skip_unknown_fields=1, date_time_input_format='best_effort' \
             FORMAT JSONEachRow",
        )
        .with_data(row.to_string())
        .expecting_error(),
    );
    steps.push(Step::new(COUNT));
    let results = clickhouse::run_checked(&steps);

    assert_eq!(code_of(&results[2]), Some(469), "{:?}", results[2]);
    assert_eq!(results[3].expect_ok(), "0\n");
}

#[test]
fn a_failing_step_stops_the_run_unless_expected() {
    if clickhouse::skip_requested() {
        return;
    }
    let results = clickhouse::run(&[
        Step::new("SELECT 1"),
        Step::new("SELECT * FROM relay_analytics.nope"),
        Step::new("SELECT 2"),
    ]);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results[0],
        StepResult::Ok {
            output: "1\n".to_owned()
        }
    );
    assert_eq!(code_of(&results[1]), Some(81), "{:?}", results[1]); // UNKNOWN_DATABASE
}

// ---------------------------------------------------------------------------
// The harness itself: a missing engine fails the test, naming the set-up step

/// What the tests above do first, run only in a child process by the tests
/// below (this binary, filtered to this test, with the environment they give it).
#[test]
#[ignore = "run in a child process by the missing-engine tests below"]
fn child_that_asks_the_engine_for_one_row() {
    if clickhouse::skip_requested() {
        return;
    }
    clickhouse::run_checked(&[Step::new("SELECT 1")]);
}

/// Runs [`child_that_asks_the_engine_for_one_row`] in this test binary with
/// `env` set (and the skip and CI variables unset unless `env` sets them);
/// returns whether it passed and what it wrote.
fn run_child(env: &[(&str, &str)]) -> (bool, String) {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "child_that_asks_the_engine_for_one_row",
            "--ignored",
            "--nocapture",
        ])
        .env_remove(clickhouse::SKIP_ENV)
        .env_remove("CI");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("1 passed") || text.contains("1 failed"),
        "the child did not run its one test:\n{text}"
    );
    (out.status.success(), text)
}

const NO_PYTHON: &str = "/nonexistent/alkstore/python";

#[test]
fn an_engine_that_cannot_run_fails_the_test_naming_the_set_up_step() {
    let (passed, text) = run_child(&[(clickhouse::PYTHON_ENV, NO_PYTHON)]);
    assert!(!passed, "a missing engine must fail, not skip:\n{text}");
    assert!(
        text.contains(&format!(
            "{}={NO_PYTHON} cannot run chdb",
            clickhouse::PYTHON_ENV
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "Set-up: python3 -m venv {venv} && {venv}/bin/pip install {}",
            clickhouse::CHDB_REQUIREMENT,
            venv = harness::paths::cargo_target_dir()
                .join("chdb-venv")
                .display()
        )),
        "{text}"
    );
}

#[test]
fn the_skip_opt_out_skips_loudly_and_is_refused_under_ci() {
    let skip = (clickhouse::SKIP_ENV, "1");
    let no_engine = (clickhouse::PYTHON_ENV, NO_PYTHON);

    let (passed, text) = run_child(&[skip, no_engine]);
    assert!(passed, "{text}");
    assert!(text.contains("SKIPPING a ClickHouse engine test"), "{text}");

    let (passed, text) = run_child(&[skip, no_engine, ("CI", "true")]);
    assert!(!passed, "CI must never skip:\n{text}");
    assert!(
        text.contains(&format!(
            "{}=1 is for local runs only and is refused when CI is set",
            clickhouse::SKIP_ENV
        )),
        "{text}"
    );
}
