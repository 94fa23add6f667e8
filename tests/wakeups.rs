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
use schema_gen::statements::{Job, Session, jobs, wake};
use schema_gen::wake::{
    Connect, Connecting, ListenError, Listener, ListenerOptions, ListenerState, Notifier,
    PoolEvidence, Wake, connector, messages,
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
    let mut job = Job::new(queue, b"wake".to_vec());
    job.run_at = run_at;
    job.enqueued_at = run_at;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 3;
    job.opts.backoff_base_s = 10;
    job.opts.dead_letter_retention_s = 600;
    job
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

/// 1,000 enqueues, each followed by a wake-up, as fast as one session
/// sends them: at most one notification per interval (plus the leading
/// one) reaches a listener, and the last comes after the last enqueue
/// committed (the trailing notification: without it, a job enqueued just
/// after a worker's empty claim would wait for its next poll).
#[tokio::test]
async fn a_burst_of_1000_enqueues_costs_at_most_one_notification_per_interval() {
    if harness::skip_db_tests() {
        return;
    }
    const INTERVAL: Duration = Duration::from_millis(50);
    const BURST: usize = 1_000;
    let (_admin, schema) = schema("wake_burst").await;
    let channel = WakeChannel::new(&schema, "burst");
    let (_counter, seen) = count_notifications(&channel).await;
    let notifier = Notifier::start(direct(), schema.clone(), INTERVAL)
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    let producer = Session::new(harness::connect().await, schema.clone());
    let now = unix_now();
    let first = Instant::now();
    let mut last_wake = first;
    for _ in 0..BURST {
        enqueue(&producer, &job("burst", now), now).await;
        last_wake = Instant::now();
        notifier.wake("burst");
    }
    // Until nothing is owed and every notification sent has arrived.
    let deadline = Instant::now() + HANG;
    let received = loop {
        let stats = notifier.stats();
        let received = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if stats.owed == 0 && received.len() as u64 == stats.sent {
            break received;
        }
        assert!(
            Instant::now() < deadline,
            "notifications still owed: {stats:?}, {} received",
            received.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stats = notifier.stats();
    let span = received[received.len() - 1].duration_since(first);
    let bound = span.as_millis().div_ceil(INTERVAL.as_millis()) as usize + 1;
    assert!(
        received.len() <= bound,
        "{} notifications for {BURST} enqueues over {span:?}: at most {bound} (one per {INTERVAL:?} \
         and the leading one)",
        received.len()
    );
    assert!(received.len() >= 2, "the leading and the trailing one");
    assert_eq!(stats.failed, 0, "{stats:?}");
    let leading = BURST as u64 - stats.folded;
    assert!(stats.sent > leading, "no trailing notification: {stats:?}");
    assert!(
        *received.last().unwrap_or(&first) > last_wake,
        "the last notification came after the last wake-up (the trailing one)"
    );
}

/// The listener's connection is terminated while a job waits whose
/// notification was lost (none was sent): the listener connects again and
/// wakes the worker once, with `Reconnected`; the claim finds the job; no
/// second wake-up follows; the channel is listened on again.
#[tokio::test]
async fn a_lost_listener_connection_recovers_and_triggers_one_claim() {
    if harness::skip_db_tests() {
        return;
    }
    let (admin, schema) = schema("wake_lost").await;
    let listener = start(&schema, &["q"], ListenerOptions::default()).await;
    let worker = Session::new(harness::connect().await, schema.clone());
    let mut wakeup = listener
        .wakeup("q")
        .unwrap_or_else(|| panic!("no wake-ups for q"));
    let now = unix_now();
    wakeup.seen();
    assert!(claim(&worker, "q", now).await.is_empty());
    let id = enqueue(&worker, &job("q", now), now).await;
    let pid = listener
        .backend_pid()
        .unwrap_or_else(|| panic!("no backend pid while listening"));
    let terminated: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    assert!(terminated);

    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Reconnected
    );
    let claimed = claim(&worker, "q", now).await;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    assert_eq!(listener.reconnections(), 1);
    assert_eq!(listener.state(), ListenerState::Listening);
    let new_pid = listener.backend_pid();
    assert!(new_pid.is_some() && new_pid != Some(pid), "{new_pid:?}");
    // One wake-up only: nothing is left to wake the worker again.
    wakeup.seen();
    assert_eq!(
        wakeup
            .wait_until(Some(Instant::now() + Duration::from_millis(300)))
            .await,
        Wake::Deadline
    );
    // Listening again.
    exec(&admin, &format!("SELECT {}", notify_sql(&schema, "q"))).await;
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Notified
    );
}

/// The product's notify statement with its channel as a literal, for psql-like one-offs.
fn notify_sql(schema: &SchemaName, queue: &str) -> String {
    format!(
        "pg_catalog.pg_notify({}, '')",
        schema_gen::render::quote_literal(WakeChannel::new(schema, queue).as_str())
    )
}

/// A TCP relay to the test server whose existing connections can be frozen:
/// they stay open and forward nothing more, as a connection behind a dead
/// cable or a firewall's idle timeout does. Connections made after a freeze
/// forward normally.
struct Relay {
    port: u16,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Relay {
    async fn start() -> Self {
        let upstream = config(&harness::database_url());
        let port = upstream.get_ports().first().copied().unwrap_or(5432);
        let host = upstream.get_hosts().first().cloned();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let relay_port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("relay: {e}"))
            .port();
        let frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let flags = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let flag = Arc::new(AtomicBool::new(false));
                flags
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Arc::clone(&flag));
                let host = host.clone();
                tokio::spawn(async move {
                    let (cr, cw) = client.into_split();
                    match host {
                        Some(Host::Unix(dir)) => {
                            let path = dir.join(format!(".s.PGSQL.{port}"));
                            if let Ok(server) = tokio::net::UnixStream::connect(path).await {
                                let (sr, sw) = server.into_split();
                                pump_both(cr, cw, sr, sw, flag).await;
                            }
                        }
                        Some(Host::Tcp(h)) => {
                            if let Ok(server) =
                                tokio::net::TcpStream::connect((h.as_str(), port)).await
                            {
                                let (sr, sw) = server.into_split();
                                pump_both(cr, cw, sr, sw, flag).await;
                            }
                        }
                        None => {}
                    }
                });
            }
        });
        Self {
            port: relay_port,
            frozen,
        }
    }

    fn freeze_all(&self) {
        for flag in self.frozen.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }

    fn connect(&self) -> impl Connect {
        let upstream = config(&harness::database_url());
        let mut relayed = Config::new();
        relayed.host("127.0.0.1").port(self.port);
        if let Some(user) = upstream.get_user() {
            relayed.user(user);
        }
        if let Some(db) = upstream.get_dbname() {
            relayed.dbname(db);
        }
        if let Some(password) = upstream.get_password() {
            relayed.password(password);
        }
        connector(relayed, NoTls)
    }
}

async fn pump_both<CR, CW, SR, SW>(cr: CR, cw: CW, sr: SR, sw: SW, frozen: Arc<AtomicBool>)
where
    CR: tokio::io::AsyncRead + Unpin,
    CW: tokio::io::AsyncWrite + Unpin,
    SR: tokio::io::AsyncRead + Unpin,
    SW: tokio::io::AsyncWrite + Unpin,
{
    tokio::join!(pump(cr, sw, &frozen), pump(sr, cw, &frozen));
}

/// Copies `from` to `to` until either ends; once frozen, holds what it
/// reads forever.
async fn pump<R, W>(mut from: R, mut to: W, frozen: &AtomicBool)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// A listener whose connection goes silent (frozen relay: open, but nothing
/// passes) finds out by its health check, connects again and wakes its
/// workers once.
#[tokio::test]
async fn a_silent_listener_connection_is_found_by_the_health_check_and_replaced() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_silent").await;
    let relay = Relay::start().await;
    let listener = Listener::start(
        relay.connect(),
        &schema,
        ["q"],
        ListenerOptions::default().health_check(Duration::from_millis(500)),
    )
    .await
    .unwrap_or_else(|e| panic!("listener: {e}"));
    let mut wakeup = listener
        .wakeup("q")
        .unwrap_or_else(|| panic!("no wake-ups for q"));
    wakeup.seen();
    let pid = listener.backend_pid();
    relay.freeze_all();
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Reconnected
    );
    assert_eq!(listener.reconnections(), 1);
    assert_ne!(listener.backend_pid(), pid);
}

/// The probe's wait fires when the probe's notification cannot reach the
/// listening connection: here the connector's second connection reaches
/// another database (a notification stays in its database).
#[tokio::test]
async fn the_probe_refuses_when_its_notification_never_arrives() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_probe").await;
    let elsewhere = harness::create_database(&harness::unique_name("wake_probe_db")).await;
    let urls = [harness::database_url(), elsewhere];
    let calls = Arc::new(AtomicUsize::new(0));
    let alternating = move || {
        let url = urls[calls.fetch_add(1, Ordering::SeqCst) % 2].clone();
        Box::pin(async move {
            let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
            Ok((client, messages(connection)))
        }) as Connecting<'static>
    };
    let timeout = Duration::from_millis(300);
    let error = Listener::start(
        alternating,
        &schema,
        ["q"],
        ListenerOptions::default().probe_timeout(timeout),
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("the listener started though its probe never arrived"));
    assert!(
        matches!(
            error,
            ListenError::Pooled {
                evidence: PoolEvidence::Timeout(t)
            } if t == timeout
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("did not arrive within 300ms"),
        "{error}"
    );
}

/// Through pgbouncer in transaction and in statement mode the listener
/// refuses, in words that name the pooler and say the engine must poll;
/// the notifier works through both.
#[tokio::test]
async fn through_pgbouncer_the_listener_refuses_and_the_notifier_works() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_pooled").await;
    for mode in [PoolMode::Transaction, PoolMode::Statement] {
        let pooled = || connector(config(&pgbouncer::url(mode)), NoTls);
        let error = Listener::start(pooled(), &schema, ["q"], ListenerOptions::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("the listener started through pgbouncer in {mode:?} mode"));
        assert!(error.is_pooled(), "{mode:?}: {error}");
        let words = error.to_string();
        for expected in [
            "does not keep a session of its own",
            "pgbouncer's pool_mode = transaction or statement",
            "its workers must poll for jobs instead of waiting for wake-ups",
            "Nothing was changed",
        ] {
            assert!(words.contains(expected), "{mode:?}: {words}");
        }

        let listener = start(&schema, &["q"], ListenerOptions::default()).await;
        let mut wakeup = listener
            .wakeup("q")
            .unwrap_or_else(|| panic!("no wake-ups for q"));
        wakeup.seen();
        let notifier = Notifier::start(pooled(), schema.clone(), Duration::from_millis(10))
            .await
            .unwrap_or_else(|e| panic!("notifier through pgbouncer: {e}"));
        notifier.wake("q");
        assert_eq!(
            wakeup.wait_until(Some(Instant::now() + HANG)).await,
            Wake::Notified,
            "{mode:?}"
        );
        assert_eq!(notifier.stats().failed, 0, "{mode:?}");
    }
}

/// A notifier whose connection was terminated opens another for its next
/// notification; the wake-up arrives.
#[tokio::test]
async fn a_lost_notifier_connection_is_opened_again() {
    if harness::skip_db_tests() {
        return;
    }
    let (admin, schema) = schema("wake_notifier_lost").await;
    let listener = start(&schema, &["q"], ListenerOptions::default()).await;
    let mut wakeup = listener
        .wakeup("q")
        .unwrap_or_else(|| panic!("no wake-ups for q"));
    let application = harness::unique_name("wake_notifier");
    let mut named = config(&harness::database_url());
    named.application_name(&application);
    let notifier = Notifier::start(
        connector(named, NoTls),
        schema.clone(),
        Duration::from_millis(10),
    )
    .await
    .unwrap_or_else(|e| panic!("notifier: {e}"));
    let terminated = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(terminated.len(), 1, "the notifier's one connection");
    wakeup.seen();
    notifier.wake("q");
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Notified
    );
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

/// The enqueue path: `run_and_wake` sends the notify in the enqueue's round
/// trip and the worker is woken. When that notify fails (here: in a
/// database where `pg_notify` is not granted to the engine's role), the
/// enqueue still succeeds, the failure is counted, and the notification is
/// owed again: the notifier's task sends it (as its own role) and the
/// worker is woken all the same.
#[tokio::test]
async fn a_failed_notification_never_fails_the_enqueue_and_is_sent_again() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("wake_denied_db");
    let role = harness::unique_name("wake_engine");
    let db_url = harness::create_database(&db).await;
    let db_admin = harness::connect_url(&db_url).await;
    let schema = engine_schema(&db_admin, "wake_denied").await;
    exec(
        &db_admin,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA \"{schema}\" TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO {role};
             REVOKE EXECUTE ON FUNCTION pg_catalog.pg_notify(text, text) FROM PUBLIC;"
        ),
    )
    .await;
    let superuser = || connector(config(&db_url), NoTls);
    let listener = Listener::start(superuser(), &schema, ["q", "r"], ListenerOptions::default())
        .await
        .unwrap_or_else(|e| panic!("listener: {e}"));
    let notifier = Notifier::start(superuser(), schema.clone(), Duration::from_millis(10))
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));

    // As the superuser: one round trip, woken.
    let owner = Session::new(harness::connect_url(&db_url).await, schema.clone());
    let mut wakeup = listener
        .wakeup("r")
        .unwrap_or_else(|| panic!("no wake-ups for r"));
    wakeup.seen();
    let now = unix_now();
    notifier
        .run_and_wake(
            &owner,
            &jobs::Enqueue {
                job: &job("r", now),
                now,
            },
            "r",
        )
        .await
        .unwrap_or_else(|e| panic!("enqueue: {e}"));
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Notified
    );
    assert_eq!(notifier.stats().sent, 1);

    // As the engine's role, which may not notify.
    let engine = Session::new(
        harness::connect_url(&harness::url_for(&role, None, Some(&db))).await,
        schema.clone(),
    );
    let mut wakeup = listener
        .wakeup("q")
        .unwrap_or_else(|| panic!("no wake-ups for q"));
    wakeup.seen();
    let id = notifier
        .run_and_wake(
            &engine,
            &jobs::Enqueue {
                job: &job("q", now),
                now,
            },
            "q",
        )
        .await
        .unwrap_or_else(|e| panic!("the enqueue failed with its notification: {e}"));
    assert_eq!(
        wakeup.wait_until(Some(Instant::now() + HANG)).await,
        Wake::Notified
    );
    let stats = notifier.stats();
    assert_eq!(stats.failed, 1, "{stats:?}");
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("permission denied")),
        "{stats:?}"
    );
    assert_eq!(
        stats.sent, 2,
        "the owed notification, sent by the task: {stats:?}"
    );
    let claimed = claim(&owner, "q", now).await;
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
}

/// A notifier dropped right after its last wake-ups still sends what it
/// owes: the notification decided at once, and the trailing one the second
/// wake-up was folded into (sent at once, not at the interval's end).
#[tokio::test]
async fn a_dropped_notifier_sends_what_it_owes() {
    if harness::skip_db_tests() {
        return;
    }
    let (_admin, schema) = schema("wake_dropped").await;
    let channel = WakeChannel::new(&schema, "q");
    let (_counter, seen) = count_notifications(&channel).await;
    // An interval no run waits out: the trailing notification can only come
    // from the drop.
    let notifier = Notifier::start(direct(), schema.clone(), HANG)
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    notifier.wake("q");
    notifier.wake("q");
    assert_eq!(notifier.stats().folded, 1);
    drop(notifier);
    let deadline = Instant::now() + HANG;
    while seen.lock().unwrap_or_else(|e| e.into_inner()).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the owed notifications never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
