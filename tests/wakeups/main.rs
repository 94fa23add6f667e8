//! Wake-ups on a real server (`schema_gen::wake`): a waiting worker is woken
//! by an enqueue in another session and claims the job; a burst of 1,000
//! enqueues costs at most the coalesced number of notifications, and the
//! last one still comes; a lost listener connection (terminated, or silent)
//! is opened again and wakes its workers once; a scheduled job wakes its
//! idle worker when it comes due; a lost notifier connection is opened
//! again; through pgbouncer in transaction and statement mode the listener
//! refuses, saying the engine must poll there, and the notifier works.
//!
//! No wait here passes or fails on a wall-clock bound a loaded machine could
//! miss: a wait that must end is bounded only by [`HANG`], which ends a hung
//! run; a wait that must not end is one whose cause is gone (a frozen relay,
//! a notification to another database).

use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use harness::engine::engine_schema;
use harness::exec;
use harness::pgbouncer::{self, PoolMode};
use schema_gen::pooler::Evidence;
use schema_gen::statements::{Job, Session, Sessions, StatementMode, jobs, wake};
use schema_gen::wake::{
    Connect, Connecting, ListenError, Listener, ListenerOptions, ListenerState, Notifier, Wake,
    connector, messages,
};
use schema_model::{SchemaName, WakeChannel};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_postgres::config::Host;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

/// Ends a hung run; never the bound a test checks.
const HANG: Duration = Duration::from_secs(120);

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn config(url: &str) -> Config {
    Config::from_str(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn direct() -> impl Connect {
    connector(config(&harness::database_url()), NoTls)
}

fn job(queue: &str, run_at: i64) -> Job {
    harness::engine::job(queue, run_at, run_at)
}

async fn schema(prefix: &str) -> (Client, SchemaName) {
    let client = harness::connect().await;
    let schema = engine_schema(&client, prefix).await;
    (client, schema)
}

/// The claim path, as a worker runs it.
async fn claim(session: &Session, queue: &str, now: i64) -> Vec<Job> {
    let (_, claimed) = session
        .run_pipelined(
            &jobs::Promote {
                queue,
                now,
                limit: 100,
            },
            &jobs::Claim {
                queue,
                worker_id: "w",
                now,
                limit: 10,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("claim: {e}"));
    claimed
}

async fn enqueue(session: &Session, job: &Job, now: i64) -> i64 {
    session
        .run(&jobs::Enqueue { job, now })
        .await
        .unwrap_or_else(|e| panic!("enqueue: {e}"))
}

async fn start(schema: &SchemaName, queues: &[&str], options: ListenerOptions) -> Listener {
    Listener::start(direct(), schema, queues, options)
        .await
        .unwrap_or_else(|e| panic!("listener: {e}"))
}

mod listener;
mod notifier;
mod relay;

/// A worker waits on its queue; another session enqueues and wakes it; the
/// worker claims the job. Also for a queue whose name has capitals and a
/// dot (its channel is the hashed form): the notifier and the listener
/// derive the same one.
#[tokio::test]
async fn a_waiting_worker_is_woken_by_an_enqueue_in_another_session_and_claims_the_job() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_basic").await;
    let listener = start(&schema, &["mail", "Mail.EU"], ListenerOptions::default()).await;
    assert_eq!(listener.state(), ListenerState::Listening);
    assert!(WakeChannel::new(&schema, "Mail.EU").is_hashed());
    let notifier = Notifier::start(direct(), schema.clone(), Duration::from_millis(10))
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    let producer = Session::new(harness::connect().await, schema.clone());

    for queue in ["mail", "Mail.EU"] {
        let worker = Session::new(harness::connect().await, schema.clone());
        let mut wakeup = listener
            .wakeup(queue)
            .unwrap_or_else(|| panic!("no wake-ups for {queue}"));
        let now = unix_now();
        wakeup.seen();
        assert!(claim(&worker, queue, now).await.is_empty());
        let next_due = worker
            .run(&wake::NextDue { queue })
            .await
            .unwrap_or_else(|e| panic!("next_due: {e}"));
        assert_eq!(next_due, None, "nothing is scheduled");
        let waiting = tokio::spawn(async move {
            let woke = wakeup.wait_until(Some(Instant::now() + HANG)).await;
            (woke, claim(&worker, queue, now).await)
        });
        let id = enqueue(&producer, &job(queue, now), now).await;
        notifier.wake(queue);
        let (woke, claimed) = waiting.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(woke, Wake::Notified, "{queue}");
        assert_eq!(
            claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
            [id],
            "{queue}"
        );
    }
    assert!(listener.notifications() >= 2);
    assert_eq!(notifier.stats().failed, 0);
    assert!(listener.wakeup("other").is_none());

    // Dropping the listener tells waiting workers to poll.
    let mut wakeup = listener
        .wakeup("mail")
        .unwrap_or_else(|| panic!("no wake-ups for mail"));
    wakeup.seen();
    drop(listener);
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Closed
    );
}

/// A notification counter on a connection of its own (LISTEN by hand, not
/// through the listener): the time each notification of `channel` came.
async fn count_notifications(channel: &WakeChannel) -> (Client, Arc<Mutex<Vec<Instant>>>) {
    let (client, connection) = tokio_postgres::connect(&harness::database_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut messages = messages(connection);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let name = channel.as_str().to_owned();
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message
                && n.channel() == name
            {
                kept.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
            }
        }
    });
    exec(&client, &wake::listen(channel)).await;
    (client, seen)
}

/// The product's notify statement with its channel as a literal, for psql-like one-offs.
fn notify_sql(schema: &SchemaName, queue: &str) -> String {
    format!(
        "pg_catalog.pg_notify({}, '')",
        schema_gen::render::quote_literal(WakeChannel::new(schema, queue).as_str())
    )
}

/// A job scheduled a second or two ahead: the worker is woken by its
/// enqueue, finds nothing to claim, learns when it comes due (`next_due`)
/// and waits until then, not until its fallback poll; the claim path's
/// promote then hands it the job.
#[tokio::test]
async fn a_scheduled_job_wakes_its_idle_worker_when_it_comes_due() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_scheduled").await;
    let listener = start(&schema, &["later"], ListenerOptions::default()).await;
    let notifier = Notifier::start(direct(), schema.clone(), Duration::from_millis(10))
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    let worker = Session::new(harness::connect().await, schema.clone());
    let mut wakeup = listener
        .wakeup("later")
        .unwrap_or_else(|| panic!("no wake-ups for later"));
    wakeup.seen();
    let run_at = unix_now() + 2;
    let id = enqueue(&worker, &job("later", run_at), unix_now()).await;
    notifier.wake("later");
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Notified
    );
    wakeup.seen();
    assert!(claim(&worker, "later", unix_now()).await.is_empty());
    let next_due = worker
        .run(&wake::NextDue { queue: "later" })
        .await
        .unwrap_or_else(|e| panic!("next_due: {e}"));
    assert_eq!(next_due, Some(run_at));
    let deadline = schema_gen::wake::deadline(next_due, HANG);
    assert!(deadline < Instant::now() + Duration::from_secs(3));
    assert_eq!(wakeup.wait_until(Some(deadline)).await, Wake::Deadline);
    assert!(unix_now() >= run_at, "woken before the job came due");
    let claimed = claim(&worker, "later", unix_now()).await;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
}

/// `schema-gen statements --queue NAME` prints the queue's channel and its
/// `LISTEN`, in both formats; the printed `LISTEN`, run as it is, receives
/// what the library's notifier sends to that queue (a hashed channel here).
#[test]
fn the_statements_listing_prints_a_queues_channel_that_works() {
    if harness::skip_db_tests() {
        return;
    }
    let queue = "Mail.EU";
    let runtime = harness::cli::runtime();
    let (admin, schema) = runtime.block_on(schema("wake_cli"));
    let channel = WakeChannel::new(&schema, queue);
    let args = ["statements", "--schema", schema.as_str(), "--queue", queue];
    let sql = harness::cli::run(&args);
    assert_eq!(sql.code, std::process::ExitCode::SUCCESS, "{}", sql.stderr);
    let listen = sql
        .stdout
        .split_once("-- listen: the wake-up channel of queue \"Mail.EU\"\n")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("no LISTEN for {queue}:\n{}", sql.stdout));
    assert_eq!(listen, format!("{};", wake::listen(&channel)));
    let json = harness::cli::run(&[&args[..], &["--format", "json"]].concat());
    let parsed: serde_json::Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
    assert_eq!(parsed["wake"]["channels"][0]["queue"], queue);
    assert_eq!(parsed["wake"]["channels"][0]["channel"], channel.as_str());
    assert!(channel.is_hashed());

    runtime.block_on(async move {
        let (client, connection) = tokio_postgres::connect(&harness::database_url(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut messages = messages(connection);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let name = channel.as_str().to_owned();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message
                    && n.channel() == name
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
        });
        exec(&client, listen).await;
        let notifier = Notifier::start(direct(), schema.clone(), Duration::from_millis(10))
            .await
            .unwrap_or_else(|e| panic!("notifier: {e}"));
        notifier.wake(queue);
        tokio::time::timeout(HANG, rx)
            .await
            .unwrap_or_else(|_| panic!("the printed LISTEN received nothing"))
            .unwrap_or_else(|e| panic!("{e}"));
        drop(admin);
    });
}
