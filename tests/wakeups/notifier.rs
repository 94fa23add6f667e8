//! The notifier's guards: the coalescing bound and the trailing
//! notification, a failed notification owed again, a dropped notifier's
//! flush, a lost connection opened again.

use super::*;

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
    let mut owner = Session::new(harness::connect_url(&db_url).await, schema.clone());
    let mut wakeup = listener
        .wakeup("r")
        .unwrap_or_else(|| panic!("no wake-ups for r"));
    wakeup.seen();
    let now = unix_now();
    notifier
        .run_and_wake(
            &mut owner,
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
    let mut engine = Session::new(
        harness::connect_url(&harness::url_for(&role, None, Some(&db))).await,
        schema.clone(),
    );
    let mut wakeup = listener
        .wakeup("q")
        .unwrap_or_else(|| panic!("no wake-ups for q"));
    wakeup.seen();
    let id = notifier
        .run_and_wake(
            &mut engine,
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
    // The listener may hear the notification before the task has read the
    // server's answer to it and counted it.
    let deadline = Instant::now() + HANG;
    while notifier.stats().owed > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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

/// `run_and_wake` puts a queue's leading notification inside its enqueue's
/// transaction (so the listeners hear of the job at its commit), and so an
/// enqueue that fails sends none; with the inside interval off
/// (`Duration::MAX`) the notify runs behind the enqueue, in a transaction
/// of its own, and is sent even though the enqueue failed. After the
/// refusal is lifted, a later enqueue is notified inside.
#[tokio::test]
async fn the_leading_notification_goes_inside_the_enqueue_transaction() {
    if harness::skip_db_tests() {
        return;
    }
    let (admin, schema) = schema("wake_inside").await;
    exec(
        &admin,
        &format!(
            "ALTER TABLE \"{schema}\".jobs ADD CONSTRAINT refuse_some CHECK (queue <> 'refused')"
        ),
    )
    .await;
    let refused = WakeChannel::new(&schema, "refused");
    let (_counter, seen) = count_notifications(&refused).await;
    let arrived = || seen.lock().unwrap_or_else(|e| e.into_inner()).len();
    let mut producer = Session::new(harness::connect().await, schema.clone());
    let now = unix_now();
    let failing = job("refused", now);
    let enqueue = jobs::Enqueue { job: &failing, now };

    let inside = Notifier::start(direct(), schema.clone(), Duration::from_millis(10))
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    let refusal = inside
        .run_and_wake(&mut producer, &enqueue, "refused")
        .await;
    assert!(refusal.is_err(), "the check refuses the enqueue");
    // Behind, a notify would have arrived by now (see the contrast below).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(arrived(), 0, "the notify rolled back with its enqueue");
    assert_eq!(inside.stats().sent, 0);

    let behind = Notifier::start_with(
        direct(),
        schema.clone(),
        Duration::from_millis(10),
        Duration::MAX,
    )
    .await
    .unwrap_or_else(|e| panic!("notifier: {e}"));
    let refusal = behind
        .run_and_wake(&mut producer, &enqueue, "refused")
        .await;
    assert!(refusal.is_err());
    let deadline = Instant::now() + HANG;
    while arrived() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        arrived(),
        1,
        "behind the enqueue, the notify ran on its own"
    );
    assert_eq!(behind.stats().inside, 0);

    exec(
        &admin,
        &format!("ALTER TABLE \"{schema}\".jobs DROP CONSTRAINT refuse_some"),
    )
    .await;
    tokio::time::sleep(inside_every_and_then_some()).await;
    inside
        .run_and_wake(&mut producer, &enqueue, "refused")
        .await
        .unwrap_or_else(|e| panic!("enqueue: {e}"));
    let deadline = Instant::now() + HANG;
    while arrived() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(arrived(), 2);
    let stats = inside.stats();
    assert_eq!((stats.sent, stats.inside), (1, 1), "{stats:?}");
}

fn inside_every_and_then_some() -> Duration {
    schema_gen::wake::INSIDE_EVERY + Duration::from_millis(20)
}

/// 1,000 enqueues through `run_and_wake`, as fast as one session sends
/// them: at most one notification per interval plus the leading one, at
/// most one of them inside per inside interval plus the first, and the
/// last arrives after the last enqueue (the trailing one).
#[tokio::test]
async fn a_burst_through_run_and_wake_costs_the_stated_notifications() {
    if harness::skip_db_tests() {
        return;
    }
    const INTERVAL: Duration = Duration::from_millis(20);
    const INSIDE: Duration = Duration::from_millis(60);
    const BURST: usize = 1_000;
    let (_admin, schema) = schema("wake_burst_lead").await;
    let channel = WakeChannel::new(&schema, "burst");
    let (_counter, seen) = count_notifications(&channel).await;
    let notifier = Notifier::start_with(direct(), schema.clone(), INTERVAL, INSIDE)
        .await
        .unwrap_or_else(|e| panic!("notifier: {e}"));
    let mut producer = Session::new(harness::connect().await, schema.clone());
    let now = unix_now();
    let burst_job = job("burst", now);
    let first = Instant::now();
    // The burst, and on until its last enqueue was folded (owed a trailing
    // notification) rather than notified at once.
    let mut n = 0;
    loop {
        let folded = notifier.stats().folded;
        notifier
            .run_and_wake(
                &mut producer,
                &jobs::Enqueue {
                    job: &burst_job,
                    now,
                },
                "burst",
            )
            .await
            .unwrap_or_else(|e| panic!("enqueue: {e}"));
        n += 1;
        if n >= BURST && notifier.stats().folded > folded {
            break;
        }
    }
    let last_enqueue = Instant::now();
    let deadline = Instant::now() + HANG;
    let received = loop {
        let stats = notifier.stats();
        let received = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if stats.owed == 0 && received.len() as u64 == stats.sent {
            break received;
        }
        assert!(Instant::now() < deadline, "still owed: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stats = notifier.stats();
    let span = received[received.len() - 1].duration_since(first);
    let bound = |every: Duration| span.as_millis().div_ceil(every.as_millis()) as u64 + 1;
    assert!(
        received.len() as u64 <= bound(INTERVAL),
        "{stats:?} over {span:?}"
    );
    assert!(stats.inside >= 1, "the first went inside: {stats:?}");
    assert!(stats.inside <= bound(INSIDE), "{stats:?} over {span:?}");
    assert_eq!(stats.failed, 0, "{stats:?}");
    assert!(
        *received.last().unwrap_or(&first) > last_enqueue,
        "the trailing notification came after the last enqueue"
    );
}
