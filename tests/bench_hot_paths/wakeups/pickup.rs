//! The pickup: a producer, engines waiting, each job's commit and first claim.

use super::*;

/// What the producer and the workers record: each job's enqueue commit and
/// the first claim that returned it.
#[derive(Default)]
struct Times {
    enqueued: Mutex<HashMap<i64, Instant>>,
    picked: Mutex<Vec<(i64, Instant)>>,
    /// The round trip of each claim that returned a job.
    claims: Mutex<Recorder>,
}

impl Times {
    fn enqueued(&self, id: i64, at: Instant) {
        self.enqueued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, at);
    }

    /// Job `id` came back from the claim sent at `claim_sent`.
    fn picked(&self, id: i64, claim_sent: Instant) {
        let at = Instant::now();
        self.picked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, at));
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(at - claim_sent);
    }

    fn picked_count(&self) -> usize {
        self.picked.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn latency(&self) -> Recorder {
        let enqueued = self.enqueued.lock().unwrap_or_else(|e| e.into_inner());
        let mut recorder = Recorder::new();
        for (id, at) in self.picked.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let committed = enqueued
                .get(id)
                .unwrap_or_else(|| panic!("job {id} was picked up but never enqueued"));
            recorder.record(at.saturating_duration_since(*committed));
        }
        recorder
    }
}

/// A small deterministic generator for the gaps between enqueues.
struct Gaps(u64);

impl Gaps {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(20 + self.0 % 61)
    }
}

pub(super) async fn pickup_cell(
    admin: &mut tokio_postgres::Client,
    variant: Pickup,
    load: Load,
    samples: usize,
    peers: Option<&Peers>,
) -> (PickupRow, Option<String>) {
    let times = Arc::new(Times::default());
    let (stop, stopped) = watch::channel(false);
    let claims = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    let (system, version) = if variant == Pickup::Graphile {
        let system = Kind::Graphile.create(admin, peers).await;
        let System::Graphile(sql, _) = &system else {
            unreachable!("Kind::Graphile creates graphile-worker")
        };
        let version = sql.version.clone();
        for _ in 0..ENGINES {
            workers.spawn(graphile_worker(
                Arc::clone(sql),
                stopped.clone(),
                Arc::clone(&times),
                Arc::clone(&claims),
            ));
        }
        (system, Some(version))
    } else {
        let schema = Design::Product.create(admin, "wake_pickup").await;
        for engine in 0..ENGINES {
            let listener = match variant {
                Pickup::Poll(_) => None,
                _ => Some(
                    Listener::start(direct(), &schema, [QUEUE], ListenerOptions::default())
                        .await
                        .unwrap_or_else(|e| panic!("listener: {e}")),
                ),
            };
            let session = Session::new(harness::connect().await, schema.clone());
            if variant == Pickup::LeadGeneric {
                exec(session.client(), "SET plan_cache_mode = force_generic_plan").await;
            }
            session
                .prepare_all()
                .await
                .unwrap_or_else(|e| panic!("prepare: {e}"));
            workers.spawn(product_worker(
                session,
                variant,
                listener,
                stopped.clone(),
                Arc::clone(&times),
                Arc::clone(&claims),
                engine,
            ));
        }
        (System::Product(schema), None)
    };

    produce(&system, variant, samples, &times).await;
    // Every job is picked up within a few polls.
    let deadline = Instant::now() + Duration::from_secs(30);
    while times.picked_count() < samples {
        assert!(
            Instant::now() < deadline,
            "{}: {} of {samples} jobs picked up after 30 s",
            variant.label(),
            times.picked_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(true);
    let mut notifications = 0;
    while let Some(joined) = workers.join_next().await {
        notifications += joined.unwrap_or_else(|e| panic!("pickup worker: {e}"));
    }
    designs::drop_schema(admin, &format!("\"{}\"", system.schema())).await;
    (
        PickupRow {
            variant,
            load,
            latency: times.latency(),
            claim: times
                .claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            claims: claims.load(Ordering::Relaxed),
            notifications,
        },
        version,
    )
}

/// The producer: one job at a time, 20 to 80 ms apart.
async fn produce(system: &System, variant: Pickup, samples: usize, times: &Times) {
    let mut gaps = Gaps(0x9e37_79b9_7f4a_7c15);
    match system {
        System::Product(schema) => {
            let session = Session::new(harness::connect().await, schema.clone());
            session
                .prepare_all()
                .await
                .unwrap_or_else(|e| panic!("prepare: {e}"));
            let notifier = Notifier::start(direct(), schema.clone(), INTERVAL)
                .await
                .unwrap_or_else(|e| panic!("notifier: {e}"));
            // The producer sends what `Notifier::run_and_wake` sends (the lead
            // variants), and stamps the commit when the enqueue's own result
            // arrives, before the notify's.
            for n in 0..samples {
                tokio::time::sleep(gaps.next()).await;
                let now = unix_now();
                let job = job(now, format!("{{\"n\":{n}}}").into_bytes());
                let enqueue = jobs::Enqueue { job: &job, now };
                let lead = match variant {
                    Pickup::Lead | Pickup::LeadGeneric => notifier.lead(QUEUE),
                    _ => None,
                };
                let (id, committed) = match lead {
                    None => {
                        let id = session.run(&enqueue).await;
                        (id, Instant::now())
                    }
                    Some(channel) => {
                        let enqueued = async {
                            let id = session.run(&enqueue).await;
                            (id, Instant::now())
                        };
                        let notify = async {
                            session
                                .run(&wake::Notify { channel: &channel })
                                .await
                                .unwrap_or_else(|e| panic!("notify: {e}"));
                        };
                        futures_util::future::join(enqueued, notify).await.0
                    }
                };
                let id = id.unwrap_or_else(|e| panic!("enqueue: {e}"));
                times.enqueued(id, committed);
                if variant == Pickup::Notifier {
                    notifier.wake(QUEUE);
                }
            }
        }
        System::Graphile(sql, _) => {
            let mut conn = Conn::open().await;
            for n in 0..samples {
                tokio::time::sleep(gaps.next()).await;
                let add = replay(&sql.add1, &[(1, Param::JsonText(format!("{{\"n\":{n}}}")))]);
                let rows = conn
                    .query(&add)
                    .await
                    .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker add_job", &e)));
                let committed = Instant::now();
                let id: i64 = rows
                    .first()
                    .and_then(|row| row.try_get("id").ok())
                    .unwrap_or_else(|| panic!("graphile-worker's add_job returned no id"));
                times.enqueued(id, committed);
            }
        }
        _ => unreachable!("the pickup runs the product or graphile-worker"),
    }
}

/// One engine instance's worker on the product: the claim path, then (when
/// it came back empty) a wait for a wake-up or the fallback poll, or a poll
/// interval's sleep. Returns the notifications its listener received.
async fn product_worker(
    session: Session,
    variant: Pickup,
    listener: Option<Listener>,
    mut stopped: watch::Receiver<bool>,
    times: Arc<Times>,
    claims: Arc<AtomicU64>,
    engine: usize,
) -> u64 {
    let worker = format!("wake-engine-{engine}");
    let mut wakeup = listener.as_ref().and_then(|l| l.wakeup(QUEUE));
    let mut woke = Wake::Deadline;
    while !*stopped.borrow() {
        if let Some(wakeup) = &mut wakeup {
            wakeup.seen();
        }
        let now = unix_now();
        let claim = jobs::Claim {
            queue: QUEUE,
            worker_id: &worker,
            now,
            limit: 1,
        };
        // A notification means jobs were made ready: the claim alone. Any
        // other turn runs the claim path (promote, claim).
        let sent = Instant::now();
        let claimed = if woke == Wake::Notified {
            session.run(&claim).await
        } else {
            let promote = jobs::Promote {
                queue: QUEUE,
                now,
                limit: 10,
            };
            session
                .run_pipelined(&promote, &claim)
                .await
                .map(|(_, c)| c)
        }
        .unwrap_or_else(|e| panic!("claim: {e}"));
        woke = Wake::Deadline;
        claims.fetch_add(1, Ordering::Relaxed);
        if let Some(job) = claimed.first() {
            times.picked(job.id, sent);
            session
                .run(&jobs::Ack {
                    id: job.id,
                    worker_id: &worker,
                    attempts: job.attempts,
                })
                .await
                .unwrap_or_else(|e| panic!("ack: {e}"));
            continue;
        }
        let wait = async {
            match (&mut wakeup, variant) {
                (Some(wakeup), _) => wakeup.wait_until(Some(deadline(None, FALLBACK))).await,
                (None, Pickup::Poll(every)) => {
                    tokio::time::sleep(Duration::from_millis(every)).await;
                    Wake::Deadline
                }
                (None, _) => unreachable!("a wake-up variant without a listener"),
            }
        };
        tokio::select! {
            w = wait => {
                assert_ne!(w, Wake::Closed, "the listener closed while its worker waited");
                woke = w;
            }
            _ = stopped.changed() => {}
        }
    }
    listener.map_or(0, |l| l.notifications())
}

/// A graphile-worker instance: its listening connection (`LISTEN
/// "jobs:insert"`, each notification nudging its worker, as
/// graphile-worker's pool does) and one worker on a connection of its own,
/// running its get and complete. Returns the notifications it received.
async fn graphile_worker(
    sql: Arc<GraphileSql>,
    mut stopped: watch::Receiver<bool>,
    times: Arc<Times>,
    claims: Arc<AtomicU64>,
) -> u64 {
    let (listening, connection) = tokio_postgres::connect(&harness::database_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("graphile-worker listener: {e}"));
    let (tx, mut wakeups) = watch::channel(0u64);
    let mut stream = messages(connection);
    let driver = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            if let AsyncMessage::Notification(n) = message
                && n.channel() == "jobs:insert"
            {
                tx.send_modify(|seen| *seen += 1);
            }
        }
    });
    exec(&listening, r#"LISTEN "jobs:insert""#).await;
    let mut conn = Conn::open().await;
    let get = replay(&sql.get1, &[]);
    while !*stopped.borrow() {
        wakeups.borrow_and_update();
        let sent = Instant::now();
        let rows = conn
            .query(&get)
            .await
            .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker get_job", &e)));
        claims.fetch_add(1, Ordering::Relaxed);
        if let Some(row) = rows.first() {
            let id: i64 = row
                .try_get("id")
                .unwrap_or_else(|e| panic!("graphile-worker's get returned no id: {e}"));
            times.picked(id, sent);
            conn.query(&replay(&sql.complete1, &[(0, Param::Int(id))]))
                .await
                .unwrap_or_else(|e| panic!("{}", db_error("graphile-worker complete", &e)));
            continue;
        }
        tokio::select! {
            _ = wakeups.changed() => {}
            () = tokio::time::sleep(FALLBACK) => {}
            _ = stopped.changed() => {}
        }
    }
    let received = *wakeups.borrow();
    drop(listening);
    driver.abort();
    received
}
