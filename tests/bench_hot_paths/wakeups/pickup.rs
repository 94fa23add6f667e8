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

    fn picked_all(&self, ids: &[i64]) -> bool {
        let picked = self.picked.lock().unwrap_or_else(|e| e.into_inner());
        ids.iter().all(|id| picked.iter().any(|(p, _)| p == id))
    }

    /// The pickup of each job of `ids` (all of them: `None` for all jobs).
    fn latency(&self, ids: Option<&[i64]>) -> Recorder {
        let enqueued = self.enqueued.lock().unwrap_or_else(|e| e.into_inner());
        let mut recorder = Recorder::new();
        for (id, at) in self.picked.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if ids.is_some_and(|ids| !ids.contains(id)) {
                continue;
            }
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

/// One pickup cell, set up once and measured in rounds: its system, its
/// waiting engines and its producer.
pub(super) struct Cell {
    variant: Pickup,
    load: Load,
    system: System,
    producer: Producer,
    gaps: Gaps,
    times: Arc<Times>,
    claims: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    workers: JoinSet<u64>,
    /// The ids each round enqueued.
    rounds: Vec<Vec<i64>>,
    enqueued: usize,
}

impl Cell {
    /// Creates the system and starts its waiting engines and its producer.
    pub(super) async fn start(
        admin: &mut tokio_postgres::Client,
        variant: Pickup,
        load: Load,
        peers: Option<&Peers>,
    ) -> Self {
        let times = Arc::new(Times::default());
        let (stop, stopped) = watch::channel(false);
        let claims = Arc::new(AtomicU64::new(0));
        let mut workers = JoinSet::new();
        let system = if variant == Pickup::Graphile {
            let system = Kind::Graphile.create(admin, peers).await;
            let System::Graphile(sql, _) = &system else {
                unreachable!("Kind::Graphile creates graphile-worker")
            };
            for _ in 0..ENGINES {
                workers.spawn(graphile_worker(
                    Arc::clone(sql),
                    stopped.clone(),
                    Arc::clone(&times),
                    Arc::clone(&claims),
                ));
            }
            system
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
            System::Product(schema)
        };
        let inside = match variant {
            Pickup::LeadInTransaction(every) => Duration::from_millis(every),
            _ => Duration::MAX,
        };
        let producer = Producer::start(&system, inside).await;
        Self {
            variant,
            load,
            system,
            producer,
            gaps: Gaps(0x9e37_79b9_7f4a_7c15),
            times,
            claims,
            stop,
            workers,
            rounds: Vec::new(),
            enqueued: 0,
        }
    }

    /// Enqueues `jobs` one at a time, 20 to 80 ms apart, and waits until
    /// every one was picked up.
    pub(super) async fn round(&mut self, jobs: usize) {
        let mut ids = Vec::with_capacity(jobs);
        for _ in 0..jobs {
            tokio::time::sleep(self.gaps.next()).await;
            let (id, committed) = self.producer.enqueue(self.variant, self.enqueued).await;
            self.times.enqueued(id, committed);
            ids.push(id);
            self.enqueued += 1;
        }
        // Every job is picked up within a few polls.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.times.picked_all(&ids) {
            assert!(
                Instant::now() < deadline,
                "{}: jobs of the round still waiting after 30 s",
                self.variant.label(),
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.rounds.push(ids);
    }

    /// Stops the engines, drops the system's schema, and returns the figures.
    pub(super) async fn finish(mut self, admin: &tokio_postgres::Client) -> PickupRow {
        let _ = self.stop.send(true);
        let mut notifications = 0;
        while let Some(joined) = self.workers.join_next().await {
            notifications += joined.unwrap_or_else(|e| panic!("pickup worker: {e}"));
        }
        drop(self.producer);
        designs::drop_schema(admin, &format!("\"{}\"", self.system.schema())).await;
        PickupRow {
            variant: self.variant,
            load: self.load,
            latency: self.times.latency(None),
            rounds: self
                .rounds
                .iter()
                .map(|ids| self.times.latency(Some(ids)).p50_ms())
                .collect(),
            claim: self
                .times
                .claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            claims: self.claims.load(Ordering::Relaxed),
            notifications,
        }
    }

    /// graphile-worker's version, for the report.
    pub(super) fn graphile_version(&self) -> Option<String> {
        match &self.system {
            System::Graphile(sql, _) => Some(sql.version.clone()),
            _ => None,
        }
    }
}

/// The producer's connection.
enum Producer {
    Product {
        session: Session,
        notifier: Notifier,
    },
    Graphile {
        conn: Conn,
        sql: Arc<GraphileSql>,
    },
}

impl Producer {
    async fn start(system: &System, inside: Duration) -> Self {
        match system {
            System::Product(schema) => {
                let session = Session::new(harness::connect().await, schema.clone());
                session
                    .prepare_all()
                    .await
                    .unwrap_or_else(|e| panic!("prepare: {e}"));
                let notifier = Notifier::start_with(direct(), schema.clone(), INTERVAL, inside)
                    .await
                    .unwrap_or_else(|e| panic!("notifier: {e}"));
                Producer::Product { session, notifier }
            }
            System::Graphile(sql, _) => Producer::Graphile {
                conn: Conn::open().await,
                sql: Arc::clone(sql),
            },
            _ => unreachable!("the pickup runs the product or graphile-worker"),
        }
    }

    /// Enqueues job `n` as `variant` does; returns its id and when its
    /// commit was known (the enqueue's own result).
    async fn enqueue(&mut self, variant: Pickup, n: usize) -> (i64, Instant) {
        match self {
            Producer::Product { session, notifier } => {
                let now = unix_now();
                let job = job(now, format!("{{\"n\":{n}}}").into_bytes());
                let enqueue = jobs::Enqueue { job: &job, now };
                let lead = match variant {
                    Pickup::Lead | Pickup::LeadGeneric => notifier.lead(QUEUE),
                    _ => None,
                };
                if let Pickup::LeadInTransaction(_) = variant {
                    // The library's path; its answer is the COMMIT's (the
                    // notify inside) or the notify's (behind: later than the
                    // enqueue's commit; none here, the jobs being 20 ms or
                    // more apart).
                    let id = notifier.run_and_wake(session, &enqueue, QUEUE).await;
                    let id = id.unwrap_or_else(|e| panic!("enqueue: {e}"));
                    return (id, Instant::now());
                }
                // What `Notifier::run_and_wake` sends, the commit stamped when
                // the enqueue's own result arrives, before the notify's.
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
                if variant == Pickup::Notifier {
                    notifier.wake(QUEUE);
                }
                (id, committed)
            }
            Producer::Graphile { conn, sql } => {
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
                (id, committed)
            }
        }
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
