//! The listener's guards: a lost and a silent connection are replaced and
//! wake their workers once; the pooler probe refuses a connection whose
//! notifications never come back, and pgbouncer in transaction and
//! statement mode, but not a connection lost while it probes.

use super::relay::Relay;
use super::*;

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
                evidence: Evidence::NothingArrived(t)
            } if t == timeout
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("never reached that connection within 300ms"),
        "{error}"
    );
}

/// A listening connection lost during the pooler probe heard nothing
/// because it was lost, not because of a pooler: the listener says so
/// (`Lost`), never that a pooler is in between. The connector's second
/// call (the probe's notifying connection) terminates the first connection
/// before the probe notifies.
#[tokio::test]
async fn a_connection_lost_during_the_probe_is_not_called_pooled() {
    if harness::skip_db_tests() {
        return;
    }
    let (admin, schema) = schema("wake_probe_lost").await;
    let admin = Arc::new(admin);
    let name = harness::unique_name("wake_probe_lost");
    let calls = Arc::new(AtomicUsize::new(0));
    let terminating = move || {
        let (admin, name) = (Arc::clone(&admin), name.clone());
        let call = calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let mut config = config(&harness::database_url());
            if call == 0 {
                config.application_name(&name);
            } else {
                // With a timeout it returns once the backend has exited.
                admin
                    .execute(
                        "SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity \
                         WHERE application_name = $1",
                        &[&name],
                    )
                    .await?;
            }
            let (client, connection) = config.connect(NoTls).await?;
            Ok((client, messages(connection)))
        }) as Connecting<'static>
    };
    let error = Listener::start(terminating, &schema, ["q"], ListenerOptions::default())
        .await
        .err()
        .unwrap_or_else(|| panic!("the listener started though its connection was terminated"));
    assert!(
        matches!(error, ListenError::Lost { .. }) && !error.is_pooled(),
        "{error}"
    );
    assert!(
        error.to_string().contains("was lost while it checked"),
        "{error}"
    );
}

/// Through pgbouncer in transaction and in statement mode the listener
/// refuses, in words that name the pooler and say the engine must poll;
/// the notifier works through both, its task and `run_and_wake` on an
/// unnamed session.
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

        // The enqueue path through the pooler: an unnamed session (one call
        // at a time there: the notify goes after the enqueue's answer, on
        // whatever server connection the pooler hands out), past the
        // interval so that its notify is the leading one.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (client, connection) = config(&pgbouncer::url(mode))
            .connect(NoTls)
            .await
            .unwrap_or_else(|e| panic!("through pgbouncer: {e}"));
        tokio::spawn(connection);
        let mut producer = Sessions::new(schema.clone())
            .with_mode(StatementMode::Unnamed)
            .session(client);
        let sent = notifier.stats().sent;
        wakeup.seen();
        let now = unix_now();
        let id = notifier
            .run_and_wake(
                &mut producer,
                &jobs::Enqueue {
                    job: &job("q", now),
                    now,
                },
                "q",
            )
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: run_and_wake: {e}"));
        assert_eq!(
            notifier.stats().sent,
            sent + 1,
            "{mode:?}: sent with the enqueue"
        );
        assert_eq!(
            wakeup.wait_until(Some(Instant::now() + HANG)).await,
            Wake::Notified,
            "{mode:?}"
        );
        let worker = Session::new(harness::connect().await, schema.clone());
        let claimed = claim(&worker, "q", now).await;
        assert!(claimed.iter().any(|j| j.id == id), "{mode:?}: {claimed:?}");
        assert_eq!(notifier.stats().failed, 0, "{mode:?}");
    }
}
