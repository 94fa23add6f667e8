//! What the upgrade tests share: a fixture of rows in every state, a
//! recorder of progress events (with when each came), a database session
//! that a synchronous progress callback can drive (it runs on a thread and
//! runtime of its own, so blocking on it never starves the upgrade), and
//! outer bounds for anything that must give up on its own: a test that
//! guards a bound fails within seconds when the bound regresses, instead
//! of waiting out the product's own (much longer) default.

use std::future::Future;
use std::io::Write as _;
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use schema_gen::check::Status;
use schema_gen::upgrade::{self, Progress, UpgradeOptions, UpgradeOutcome};
use schema_model::SchemaName;
use schema_model::history;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::pg::{describe_error, exec, rows};

/// The outer bound of one upgrade or contract run in a test: far above what
/// one takes (a second or two), far below the product's own wait bound.
pub const RUN_LIMIT: Duration = Duration::from_secs(90);

/// The product's bounds, but for the wait of a step that blocks no engine
/// statement: 10 s instead of 10 minutes, so that a step which should not
/// wait and does (a regression that builds an index without
/// `CONCURRENTLY` behind a writer, say) fails the test in seconds.
pub fn bounded() -> UpgradeOptions {
    UpgradeOptions {
        wait_timeout: Duration::from_secs(10),
        ..UpgradeOptions::default()
    }
}

/// Runs an upgrade of `schema` on a connection of its own, quietly, within
/// [`RUN_LIMIT`].
///
/// # Errors
///
/// The upgrade's.
pub async fn run_upgrade(
    schema: &SchemaName,
    options: &UpgradeOptions,
) -> Result<UpgradeOutcome, schema_gen::Error> {
    let mut client = crate::connect().await;
    let mut quiet = |_: &Progress| {};
    within(
        RUN_LIMIT,
        "an upgrade",
        upgrade::upgrade(&mut client, schema, options, &mut quiet),
    )
    .await
}

/// Runs the contract of `schema` under [`bounded`] on a connection of its
/// own, quietly, within [`RUN_LIMIT`].
///
/// # Errors
///
/// The contract's.
pub async fn run_contract(schema: &SchemaName) -> Result<UpgradeOutcome, schema_gen::Error> {
    let mut client = crate::connect().await;
    let mut quiet = |_: &Progress| {};
    within(
        RUN_LIMIT,
        "a contract",
        upgrade::contract(&mut client, schema, &bounded(), &mut quiet),
    )
    .await
}

/// What `check` reports about `schema`.
///
/// # Panics
///
/// When the status cannot be read.
pub async fn status(client: &Client, schema: &SchemaName) -> Status {
    schema_gen::check::status(client, schema, &schema_gen::Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `ready` of each job as the upgrade must leave it: after the expand, every
/// unclaimed job is ready exactly when due (the expand's backfill leaves
/// claimed jobs alone, so that no batch holds a row a worker acks); after
/// the contract, every claimed job is ready too.
///
/// # Panics
///
/// When a job's `ready` is out of step.
pub async fn ready_is_derived_from_run_at(client: &Client, schema: &SchemaName, contracted: bool) {
    let now = now();
    let rule = if contracted {
        format!("ready <> (claimed_at IS NOT NULL OR run_at <= {now})")
    } else {
        format!("claimed_at IS NULL AND ready <> (run_at <= {now})")
    };
    let wrong = rows(
        client,
        &format!("SELECT id FROM \"{}\".jobs WHERE {rule}", schema.as_str()),
    )
    .await;
    assert!(
        wrong.is_empty(),
        "{} jobs have ready out of step with run_at and the claim ({rule})",
        wrong.len()
    );
}

/// The unix second the test runs at: the upgrade's backfill reads the
/// clock, so due and future jobs are due and future by it.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Runs `work`, failing the test when it has not finished within `limit`:
/// the outer bound of a test whose subject is a bound of the product's.
///
/// # Panics
///
/// When `limit` passes first.
pub async fn within<F: Future>(limit: Duration, what: &str, work: F) -> F::Output {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        panic!("{what} did not finish within {limit:?}: a bound that should end it did not")
    })
}

/// Pipes `script` into psql (as [`crate::psql_script`] does) and returns its
/// output, killing psql and failing the test when it runs past `limit`.
///
/// # Panics
///
/// When psql cannot be run, or runs past `limit`.
pub fn psql_within(url: &str, script: &str, limit: Duration) -> Output {
    let mut child = crate::psql_with_url(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting psql: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .unwrap_or_else(|e| panic!("writing to psql: {e}"));
    }
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("psql ran the script for more than {limit:?}: a bound in it did not hold");
            }
            Err(e) => panic!("waiting for psql: {e}"),
        }
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("reading psql's output: {e}"))
}

/// Every progress event of a run, with the instant it came, for assertions.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<(Instant, Progress)>>>);

impl Recorder {
    /// A progress callback that records into this recorder.
    pub fn callback(&self) -> impl FnMut(&Progress) + Send + use<> {
        let events = self.0.clone();
        move |event: &Progress| {
            if let Ok(mut events) = events.lock() {
                events.push((Instant::now(), event.clone()));
            }
        }
    }

    /// The events so far.
    pub fn events(&self) -> Vec<Progress> {
        self.timed().into_iter().map(|(_, e)| e).collect()
    }

    /// The events so far, each with when it came.
    pub fn timed(&self) -> Vec<(Instant, Progress)> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// A progress callback that, once `step` steps are done, says so on
/// `reached` and holds the upgrade there until `resume` answers (at most
/// 60 s): the test does something to the database between two steps.
pub fn pause_after_step<T>(
    step: usize,
    reached: tokio::sync::mpsc::UnboundedSender<()>,
    resume: mpsc::Receiver<T>,
) -> impl FnMut(&Progress) {
    let mut steps = 0;
    move |event: &Progress| {
        if let Progress::StepDone { .. } = event {
            steps += 1;
            if steps == step {
                let _ = reached.send(());
                let _ = resume.recv_timeout(Duration::from_secs(60));
            }
        }
    }
}

type Reply = mpsc::Sender<Result<Vec<Vec<Option<String>>>, String>>;

/// A database session on a thread (and tokio runtime) of its own, driven
/// by blocking calls: a synchronous progress callback can lock a table,
/// change the schema or end the upgrade's session between two steps, and
/// the upgrade goes on only once that is done.
pub struct SideSession {
    commands: Option<mpsc::Sender<(String, Reply)>>,
    pid: i32,
    thread: Option<JoinHandle<()>>,
}

impl SideSession {
    /// Connects a new session (as the harness's superuser).
    ///
    /// # Panics
    ///
    /// When the thread, its runtime or the connection cannot be had.
    pub fn start() -> Self {
        let (commands, received) = mpsc::channel::<(String, Reply)>();
        let (ready, started) = mpsc::channel::<i32>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("a side session's runtime: {e}"));
            runtime.block_on(async move {
                let client = crate::connect().await;
                let pid: i32 = client
                    .query_one("SELECT pg_backend_pid()", &[])
                    .await
                    .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
                    .get(0);
                let _ = ready.send(pid);
                while let Ok((sql, reply)) = received.recv() {
                    let _ = reply.send(simple(&client, &sql).await);
                }
            });
        });
        let pid = started
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("a side session did not connect: {e}"));
        Self {
            commands: Some(commands),
            pid,
            thread: Some(thread),
        }
    }

    /// The session's backend pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Runs `sql` (one or more statements, simple protocol) and returns the
    /// rows they returned, as text.
    ///
    /// # Errors
    ///
    /// The server's words, when it refuses.
    pub fn try_exec(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let (reply, answer) = mpsc::channel();
        self.commands
            .as_ref()
            .ok_or("the side session is closed")?
            .send((sql.to_owned(), reply))
            .map_err(|e| format!("the side session is gone: {e}"))?;
        answer
            .recv_timeout(Duration::from_secs(120))
            .map_err(|e| format!("the side session did not answer: {e}"))?
    }

    /// [`Self::try_exec`], failing the test when the server refuses.
    ///
    /// # Panics
    ///
    /// When the server refuses `sql`.
    pub fn exec(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        self.try_exec(sql)
            .unwrap_or_else(|e| panic!("side session: {sql}: {e}"))
    }
}

impl Drop for SideSession {
    fn drop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn simple(client: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let messages = client
        .simple_query(sql)
        .await
        .map_err(|e| describe_error(&e))?;
    let mut rows = Vec::new();
    for message in messages {
        if let SimpleQueryMessage::Row(row) = message {
            rows.push(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// The backend pid of `client`'s session.
///
/// # Panics
///
/// When the query fails.
pub async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
        .get(0)
}

/// Fills `schema` (at `version`) with rows in every state: due, scheduled,
/// claimed, retrying and expiring jobs (plus a bulk of 2,500 due ones, so a
/// backfill walks several windows), a dead job, stream events, a consumer
/// offset, an enabled and a disabled schedule, a lock and a dedup entry.
/// Rows go in whole through `jsonb_populate_record`, so one fixture fits
/// every version (`ready` is given where the version has it).
pub async fn fill(client: &Client, schema: &SchemaName, version: u32) {
    let has_ready = history::version(version)
        .and_then(|v| v.description().ok())
        .is_some_and(|tables| {
            tables
                .iter()
                .any(|t| t.name == "jobs" && t.columns.iter().any(|c| c.name == "ready"))
        });
    let s = schema.as_str();
    let now = now();
    let job = |queue: &str, run_at: i64, ready: bool, extra: &str| {
        let ready = if has_ready {
            format!(r#", "ready": {ready}"#)
        } else {
            String::new()
        };
        format!(
            r#"{{"queue": "{queue}", "payload": "\\x00ff", "priority": 1, "run_at": {run_at},
                "enqueued_at": {}, "visibility_timeout_s": 30, "max_attempts": 3,
                "backoff_base_s": 1, "dead_letter_retention_s": 600, "attempts": 0{ready}{extra}}}"#,
            now - 1000
        )
    };
    let claimed = format!(
        r#", "attempts": 1, "worker_id": "w1", "claimed_at": {}, "claim_expires_at": {}"#,
        now - 5,
        now + 25
    );
    let expiring = format!(r#", "expires_at": {}"#, now + 100);
    let jobs = [
        job("mail", now - 60, true, ""),
        job("mail", now + 3600, false, ""),
        job("mail", now - 100, true, &claimed),
        // Due in 10 minutes: not due before any test's last look at `ready`,
        // however slow the machine (at 30 s, a resume test that ran 49 s on
        // loaded cores found it due and its `ready`, rightly, false).
        job(
            "mail",
            now + 600,
            false,
            r#", "attempts": 1, "last_error": "boom""#,
        ),
        job("mail", now - 10, true, &expiring),
    ];
    let mut columns = vec![
        "queue",
        "payload",
        "priority",
        "run_at",
        "expires_at",
        "enqueued_at",
        "visibility_timeout_s",
        "max_attempts",
        "backoff_base_s",
        "dead_letter_retention_s",
        "attempts",
        "worker_id",
        "claimed_at",
        "claim_expires_at",
        "last_error",
    ];
    if has_ready {
        columns.push("ready");
    }
    let insert = |table: &str, columns: &[&str], json: &str| {
        let list = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "INSERT INTO \"{s}\".\"{table}\" ({list}) SELECT {list} FROM \
             jsonb_populate_record(NULL::\"{s}\".\"{table}\", '{}'::jsonb);",
            json.replace('\'', "''")
        )
    };
    let mut sql = String::new();
    for job in &jobs {
        sql.push_str(&insert("jobs", &columns, job));
    }
    let ready = if has_ready { ", true" } else { "" };
    let ready_column = if has_ready { ", \"ready\"" } else { "" };
    sql.push_str(&format!(
        "INSERT INTO \"{s}\".\"jobs\" (\"queue\", \"payload\", \"priority\", \"run_at\",
             \"enqueued_at\", \"visibility_timeout_s\", \"max_attempts\", \"backoff_base_s\",
             \"dead_letter_retention_s\", \"attempts\"{ready_column})
         SELECT 'bulk', int4send(g), g % 7, {} - g, {}, 30, 3, 1, 600, 0{ready}
         FROM generate_series(1, 2500) g;",
        now,
        now - 5000
    ));
    sql.push_str(&insert(
        "dead_jobs",
        &[
            "id",
            "queue",
            "payload",
            "priority",
            "run_at",
            "enqueued_at",
            "visibility_timeout_s",
            "max_attempts",
            "backoff_base_s",
            "dead_letter_retention_s",
            "attempts",
            "worker_id",
            "claimed_at",
            "last_error",
            "died_at",
        ],
        r#"{"id": 99999, "queue": "mail", "payload": "\\x01", "priority": 0, "run_at": 1,
            "enqueued_at": 1, "visibility_timeout_s": 30, "max_attempts": 3,
            "backoff_base_s": 1, "dead_letter_retention_s": 600, "attempts": 3,
            "worker_id": "w9", "claimed_at": 5, "last_error": "gave up", "died_at": 1799999000}"#,
    ));
    for (stream, key) in [("orders", "a"), ("orders", "b"), ("audit", "c")] {
        sql.push_str(&insert(
            "stream_events",
            &["stream", "key", "payload", "created_at"],
            &format!(
                r#"{{"stream": "{stream}", "key": "{key}", "payload": "\\x02", "created_at": 1}}"#
            ),
        ));
    }
    sql.push_str(&insert(
        "stream_offsets",
        &["stream", "consumer", "offset"],
        r#"{"stream": "orders", "consumer": "billing", "offset": 1}"#,
    ));
    for (name, enabled) in [("hourly", true), ("paused", false)] {
        sql.push_str(&insert(
            "schedules",
            &[
                "name",
                "spec",
                "every_s",
                "queue",
                "payload",
                "priority",
                "max_attempts",
                "visibility_timeout_s",
                "backoff_base_s",
                "dead_letter_retention_s",
                "expires_s",
                "next_fire_at",
                "last_fired_at",
                "enabled",
            ],
            &format!(
                r#"{{"name": "{name}", "spec": "@every 1h", "every_s": 3600, "queue": "mail",
                    "payload": "\\x03", "priority": 0, "max_attempts": 3,
                    "visibility_timeout_s": 30, "backoff_base_s": 1,
                    "dead_letter_retention_s": 600, "expires_s": null,
                    "next_fire_at": 1800003600, "last_fired_at": null, "enabled": {enabled}}}"#
            ),
        ));
    }
    sql.push_str(&insert(
        "locks",
        &["name", "owner", "expires_at"],
        r#"{"name": "leader", "owner": "w1", "expires_at": 1800000060}"#,
    ));
    sql.push_str(&insert(
        "consumed_events",
        &["consumer", "event_id", "consumed_at"],
        r#"{"consumer": "billing", "event_id": "e-1", "consumed_at": 1}"#,
    ));
    // The dead job's id was drawn by jobs' sequence: the sequence is past
    // it (check calls it drift otherwise: job ids would repeat).
    sql.push_str(&format!(
        "SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('\"{s}\".jobs', 'id'), \
         99999);"
    ));
    exec(client, &sql).await;
}
