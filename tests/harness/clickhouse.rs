//! A real ClickHouse engine for the tests: chdb, ClickHouse 26.5 running
//! in-process inside Python (`chdb-core-lite` on PyPI).
//!
//! chdb has no HTTP or native port, so there is no server to connect to.
//! Each call to [`run`] spawns `tests/clickhouse/chdb_runner.py` with a
//! Python that has chdb installed, sends it the [`Step`]s as JSON on stdin and
//! reads one [`StepResult`] per executed step from stdout. All steps of one
//! call share one fresh engine session (its own temporary data directory,
//! removed afterwards), so tests are isolated from each other and can run in
//! parallel.
//!
//! The Python is found once per process (see [`python`]): the interpreter
//! named by [`PYTHON_ENV`] if set, else the venv `chdb-venv` in the cargo
//! target directory ([`crate::paths::cargo_target_dir`]: `CARGO_TARGET_DIR`
//! when set, else the workspace's `target/`), which is created on first use (about half a minute: it pip-installs
//! [`CHDB_REQUIREMENT`]). If it cannot be provisioned the test panics with the
//! set-up step to run by hand; it never skips silently. Only
//! [`SKIP_ENV`]`=1` skips, loudly and never in CI (see [`skip_requested`]).
//!
//! Engine defaults in chdb differ from a ClickHouse server's (e.g.
//! `date_time_input_format` is `best_effort`, `async_insert` is 1,
//! `output_format_json_quote_64bit_integers` is 0): tests spell out every
//! setting their assertion depends on, as production inserts must.
//!
//! Also here, shared by the ClickHouse tests: instants ([`iso_utc`],
//! [`an_hour_ago_millis`]), output and row helpers ([`json_lines`],
//! [`renamed`]) and the publisher's records ([`timed_out_event`],
//! [`delivered_event`], [`shaped`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use schema_model::{AttemptEvent, AttemptRow, shape};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The one spelling of the pinned chdb version, for the constants below.
macro_rules! pinned_chdb_version {
    () => {
        "26.5.0"
    };
}

/// The pip requirement that provisions the engine: chdb's lite build of ClickHouse 26.5.
pub const CHDB_REQUIREMENT: &str = concat!("chdb-core-lite==", pinned_chdb_version!());

/// The `chdb.__version__` that [`CHDB_REQUIREMENT`] installs; a managed venv with another one is rebuilt.
pub const CHDB_VERSION: &str = pinned_chdb_version!();

/// Environment variable naming a Python interpreter that can `import chdb`; when set, no venv is created.
pub const PYTHON_ENV: &str = "ALKSTORE_CHDB_PYTHON";

/// Environment variable that, set to `1`, makes [`skip_requested`] true; refused when `CI` is set.
pub const SKIP_ENV: &str = "ALKSTORE_SKIP_CLICKHOUSE_TESTS";

/// How long one [`run`] may take before the runner is killed and the test panics.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The one-line manual set-up, quoted by every provisioning panic.
fn setup_hint() -> String {
    let venv = venv_dir();
    format!(
        "python3 -m venv {venv} && {venv}/bin/pip install {CHDB_REQUIREMENT}, or set \
         {PYTHON_ENV} to a python that can `import chdb`",
        venv = venv.display()
    )
}

/// The managed venv: `chdb-venv` in the cargo target directory.
fn venv_dir() -> PathBuf {
    crate::paths::cargo_target_dir().join("chdb-venv")
}

/// One SQL statement for the engine, with optional inline data.
///
/// Serialized exactly as the runner's request protocol expects (see the
/// module docstring of `tests/clickhouse/chdb_runner.py`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The statement, sent as written. For an insert with data this ends in
    /// `FORMAT <fmt>`, with any `SETTINGS` clause before `FORMAT`.
    pub sql: String,
    /// Data appended to `sql` after a newline (chdb has no separate data
    /// channel), e.g. JSONEachRow lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Output format when `sql` has no `FORMAT` clause; the runner defaults to `TabSeparated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// When true a failure of this step is recorded and the run goes on;
    /// when false (the default) the run stops at it.
    pub expect_error: bool,
}

impl Step {
    /// A step running `sql`, output as `TabSeparated`, expected to succeed.
    pub fn new(sql: impl Into<String>) -> Self {
        Step {
            sql: sql.into(),
            data: None,
            format: None,
            expect_error: false,
        }
    }

    /// The same step with `data` sent after the statement (e.g. JSONEachRow lines).
    pub fn with_data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// The same step with its output in `format` (e.g. `JSONEachRow`) unless the SQL names one.
    pub fn with_format(mut self, format: impl Into<String>) -> Self {
        self.format = Some(format.into());
        self
    }

    /// The same step marked as expected to fail: the run continues past it.
    pub fn expecting_error(mut self) -> Self {
        self.expect_error = true;
        self
    }
}

/// An error raised by the engine (or, with no code, by the runner around it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError {
    /// The ClickHouse error code, from the message's leading `Code: N.`.
    pub code: Option<i64>,
    /// The ClickHouse error name, from the message's trailing `(NAME)`, e.g. `INCORRECT_DATA`.
    pub name: Option<String>,
    /// The full message as the engine wrote it.
    pub message: String,
}

/// What one executed step did.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawStepResult")]
pub enum StepResult {
    /// The step succeeded; `output` is the engine's text output (empty for DDL and inserts).
    Ok {
        /// The text the engine produced in the step's output format.
        output: String,
    },
    /// The step failed.
    Err(EngineError),
}

impl StepResult {
    /// The output if the step succeeded.
    pub fn output(&self) -> Option<&str> {
        match self {
            StepResult::Ok { output } => Some(output),
            StepResult::Err(_) => None,
        }
    }

    /// The error if the step failed.
    pub fn error(&self) -> Option<&EngineError> {
        match self {
            StepResult::Ok { .. } => None,
            StepResult::Err(e) => Some(e),
        }
    }

    /// The output, or a panic quoting the engine's message.
    pub fn expect_ok(&self) -> &str {
        match self {
            StepResult::Ok { output } => output,
            StepResult::Err(e) => panic!(
                "expected the step to succeed, the engine said: {}",
                e.message
            ),
        }
    }

    /// The error, or a panic quoting the output the step produced instead.
    pub fn expect_err(&self) -> &EngineError {
        match self {
            StepResult::Ok { output } => {
                panic!("expected the step to fail, it succeeded with output {output:?}")
            }
            StepResult::Err(e) => e,
        }
    }
}

/// The ClickHouse error code of a failed step; `None` if it succeeded or carried no code.
pub fn code_of(result: &StepResult) -> Option<i64> {
    result.error().and_then(|e| e.code)
}

/// The runner's whole answer to one [`run_full`] call.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Response {
    /// The engine's `version()`, e.g. `26.5.1.1`.
    pub engine_version: String,
    /// One result per executed step, in order; shorter than the steps when a
    /// step not marked `expect_error` failed (that failure is the last entry).
    pub results: Vec<StepResult>,
}

/// The wire shape of a result, before it is checked into a [`StepResult`].
#[derive(Deserialize)]
struct RawStepResult {
    ok: bool,
    output: Option<String>,
    code: Option<i64>,
    name: Option<String>,
    message: Option<String>,
}

impl TryFrom<RawStepResult> for StepResult {
    type Error = String;

    fn try_from(raw: RawStepResult) -> Result<Self, String> {
        if raw.ok {
            let output = raw.output.ok_or("an ok result without \"output\"")?;
            Ok(StepResult::Ok { output })
        } else {
            let message = raw.message.ok_or("a failed result without \"message\"")?;
            Ok(StepResult::Err(EngineError {
                code: raw.code,
                name: raw.name,
                message,
            }))
        }
    }
}

#[derive(Serialize)]
struct Request<'a> {
    steps: &'a [Step],
}

/// True when the developer opted out with [`SKIP_ENV`]`=1`; says so loudly on stderr.
///
/// Tests call it first and return early when it is true. Nothing else skips:
/// an engine that cannot be provisioned is a panic, not a skip.
///
/// # Panics
///
/// If [`SKIP_ENV`]`=1` while `CI` is set: CI must never skip, so the opt-out
/// cannot hide a missing engine there (as the PostgreSQL harness's
/// [`skip_db_tests`](crate::pg::skip_db_tests)).
pub fn skip_requested() -> bool {
    let skip = std::env::var(SKIP_ENV).is_ok_and(|v| v == "1");
    if skip && std::env::var_os("CI").is_some() {
        panic!("{SKIP_ENV}=1 is for local runs only and is refused when CI is set");
    }
    if skip {
        eprintln!(
            "\n*** {SKIP_ENV}=1: SKIPPING a ClickHouse engine test. Nothing about ClickHouse \
             was checked. CI never sets this. ***\n"
        );
    }
    skip
}

/// Runs `steps` in order in one fresh engine session and returns one result
/// per executed step.
///
/// The run stops at the first failing step not marked
/// [`expect_error`](Step::expect_error), so the vector can be shorter than
/// `steps`; [`run_checked`] turns that into a panic. Panics if the engine
/// cannot be provisioned or the runner itself fails.
pub fn run(steps: &[Step]) -> Vec<StepResult> {
    run_full(steps).results
}

/// Like [`run`], but panics unless every step ran and each one failed exactly
/// when it was marked [`expect_error`](Step::expect_error); the panic names the
/// offending step and quotes the engine.
pub fn run_checked(steps: &[Step]) -> Vec<StepResult> {
    let results = run(steps);
    for (i, (step, result)) in steps.iter().zip(&results).enumerate() {
        match (step.expect_error, result) {
            (false, StepResult::Err(e)) => {
                panic!("step {i} failed: {}\n  sql: {}", e.message, step.sql)
            }
            (true, StepResult::Ok { output }) => {
                panic!(
                    "step {i} was expected to fail but succeeded ({output:?})\n  sql: {}",
                    step.sql
                )
            }
            _ => {}
        }
    }
    assert_eq!(
        results.len(),
        steps.len(),
        "the runner returned fewer results than steps"
    );
    results
}

/// Like [`run`], with the engine version as well.
pub fn run_full(steps: &[Step]) -> Response {
    let python = python();
    let runner = runner_path();
    let request = serde_json::to_vec(&Request { steps }).expect("steps serialize to JSON");
    let output = run_with_timeout(Command::new(python).arg(&runner), &request, RUN_TIMEOUT)
        .unwrap_or_else(|e| panic!("running {}: {e}", runner.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        panic!(
            "{} exited with {}; stderr:\n{stderr}",
            runner.display(),
            output.status
        );
    }
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "unreadable response from {} ({e}); stdout:\n{}\nstderr:\n{stderr}",
            runner.display(),
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The Python interpreter that runs the engine, located or provisioned once per process.
///
/// [`PYTHON_ENV`] if set (it must `import chdb`); else
/// `<cargo target dir>/chdb-venv/bin/python`, creating that venv if it is
/// missing or holds another chdb version. Concurrent tests in one process wait
/// for one provisioning; concurrent processes each build in a private
/// directory and atomically rename it into place, the first rename winning.
/// Panics with the manual set-up step and the captured stderr when this fails.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(locate_python) {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

/// `tests/clickhouse/chdb_runner.py` of this crate.
pub fn runner_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clickhouse")
        .join("chdb_runner.py")
}

// ---------------------------------------------------------------------------
// Instants, rows and records shared by the ClickHouse tests

/// `unix_millis` as `YYYY-MM-DDThh:mm:ss.mmmZ`, the form the publisher sends.
///
/// An independent oracle: jiff's printer, a different implementation from
/// the `time` crate that schema-model's `shape` writes instants with.
pub fn iso_utc(unix_millis: i64) -> String {
    let instant = jiff::Timestamp::from_millisecond(unix_millis)
        .unwrap_or_else(|e| panic!("{unix_millis} ms is not an instant jiff holds: {e}"));
    jiff::fmt::temporal::DateTimePrinter::new()
        .precision(Some(3))
        .timestamp_to_string(&instant)
}

/// An hour ago, in unix milliseconds: a whole second plus 123 ms, so the
/// millisecond part is exercised. Rows must be recent: the table's 90-day
/// TTL drops older ones, so a fixed date would make the tests rot.
pub fn an_hour_ago_millis() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    let secs = i64::try_from(now.as_secs()).expect("seconds fit i64");
    (secs - 3600) * 1000 + 123
}

/// Parses `JSONEachRow` output into one value per line.
pub fn json_lines(output: &str) -> Vec<Value> {
    output
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// `row` (a JSON object) with its key `from` renamed to `to`, e.g. a row
/// carrying the publisher's `attempted_at` instead of the column `ts`.
pub fn renamed(mut row: Value, from: &str, to: &str) -> Value {
    let map = row.as_object_mut().expect("a row is a JSON object");
    let value = map
        .remove(from)
        .unwrap_or_else(|| panic!("the row has no {from:?}"));
    map.insert(to.to_owned(), value);
    row
}

/// The publisher's record of an attempt that timed out at `attempted_at`:
/// no status at all (nothing answered), an error text.
pub fn timed_out_event(attempted_at: &str) -> AttemptEvent {
    AttemptEvent {
        delivery_id: "6f1c2a3b-0000-4000-8000-00000000d001".into(),
        endpoint_id: "6f1c2a3b-0000-4000-8000-00000000a001".into(),
        environment_id: "6f1c2a3b-0000-4000-8000-00000000e001".into(),
        event_id: "6f1c2a3b-0000-4000-8000-00000000f001".into(),
        attempt: 1,
        attempted_at: attempted_at.to_owned(),
        status: None,
        error: Some("timeout after 30000 ms".into()),
        latency_ms: 30_000,
        outcome: "rescheduled".into(),
    }
}

/// The publisher's record of the next attempt of the same delivery, which
/// was delivered at `attempted_at`: a status, no error.
pub fn delivered_event(attempted_at: &str) -> AttemptEvent {
    AttemptEvent {
        attempt: 2,
        status: Some(200),
        error: None,
        latency_ms: 87,
        outcome: "delivered".into(),
        ..timed_out_event(attempted_at)
    }
}

/// The record as the consumer receives it (JSON), shaped into a row.
pub fn shaped(event: &AttemptEvent) -> AttemptRow {
    let record = serde_json::to_value(event).unwrap_or_else(|e| panic!("{e}"));
    shape(&record).unwrap_or_else(|e| panic!("{e}"))
}

fn locate_python() -> Result<PathBuf, String> {
    if let Some(explicit) = std::env::var_os(PYTHON_ENV) {
        let explicit = PathBuf::from(explicit);
        return match chdb_version(&explicit) {
            Ok(_) => Ok(explicit),
            Err(e) => Err(format!(
                "{PYTHON_ENV}={} cannot run chdb: {e}\nSet-up: {}",
                explicit.display(),
                setup_hint()
            )),
        };
    }
    let venv = venv_dir();
    if !holds_pinned_chdb(&venv) {
        provision(&venv).map_err(|e| {
            format!(
                "could not provision the ClickHouse engine (chdb) in {}:\n{e}\nSet-up: {}",
                venv.display(),
                setup_hint()
            )
        })?;
    }
    Ok(venv_python(&venv))
}

/// The interpreter of the venv at `venv`.
fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// Whether the venv at `venv` runs chdb [`CHDB_VERSION`].
fn holds_pinned_chdb(venv: &Path) -> bool {
    matches!(chdb_version(&venv_python(venv)), Ok(v) if v == CHDB_VERSION)
}

/// Runs `python -c 'import chdb'` and returns `chdb.__version__`.
fn chdb_version(python: &Path) -> Result<String, String> {
    let out = Command::new(python)
        .args(["-c", "import chdb; print(chdb.__version__)"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", python.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "`{} -c 'import chdb'` failed ({}):\n{}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A name beside `venv` that no other process or thread uses.
fn private_sibling(venv: &Path, tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut name = venv.file_name().expect("venv path has a name").to_owned();
    name.push(format!(".{tag}-{}-{nanos}", std::process::id()));
    venv.with_file_name(name)
}

fn run_setup_command(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Builds the venv in a private directory, then renames it to `venv`.
fn provision(venv: &Path) -> Result<(), String> {
    let started = Instant::now();
    let parent = venv.parent().expect("venv has a parent");
    std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let partial = private_sibling(venv, "partial");
    eprintln!(
        "provisioning the ClickHouse engine: {CHDB_REQUIREMENT} into {} (one-off, ~30 s)",
        venv.display()
    );
    let built = (|| {
        run_setup_command(Command::new("python3").arg("-m").arg("venv").arg(&partial))?;
        run_setup_command(
            Command::new(venv_python(&partial))
                .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
                .arg(CHDB_REQUIREMENT),
        )?;
        match chdb_version(&venv_python(&partial))? {
            v if v == CHDB_VERSION => Ok(()),
            v => Err(format!(
                "installed chdb reports version {v}, expected {CHDB_VERSION}"
            )),
        }
    })();
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(e);
    }

    // A venv runs from a renamed directory as long as it is started as
    // `bin/python` (the script shebangs keep the old path; none is used here).
    for _ in 0..2 {
        if std::fs::rename(&partial, venv).is_ok() {
            eprintln!(
                "provisioned the ClickHouse engine in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if holds_pinned_chdb(venv) {
            // Another process finished first: use its venv.
            let _ = std::fs::remove_dir_all(&partial);
            return Ok(());
        }
        // A broken or outdated venv is in the way: move it aside, then retry.
        let stale = private_sibling(venv, "stale");
        if std::fs::rename(venv, &stale).is_ok() {
            let _ = std::fs::remove_dir_all(&stale);
        }
    }
    let _ = std::fs::remove_dir_all(&partial);
    Err(format!(
        "could not move the new venv into {} (something keeps recreating it)",
        venv.display()
    ))
}

struct Finished {
    status: std::process::ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs `cmd` with `input` on stdin, collecting stdout and stderr; kills it after `timeout`.
fn run_with_timeout(
    cmd: &mut Command,
    input: &[u8],
    timeout: Duration,
) -> Result<Finished, String> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        // A runner that dies early closes its stdin; its stderr tells why.
        let _ = stdin.write_all(&input);
    });
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = err_reader.join().unwrap_or_default();
                return Err(format!(
                    "timed out after {timeout:?}; stderr:\n{}",
                    String::from_utf8_lossy(&stderr)
                ));
            }
            Err(e) => {
                let _ = child.kill();
                return Err(format!("waiting for the runner: {e}"));
            }
        }
    };
    let _ = writer.join();
    Ok(Finished {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}
