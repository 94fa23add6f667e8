//! Enqueue throughput: eight clients, the wake-up variants taking turns.

use super::*;

struct EnqueueWorker {
    /// The product's variants run the library's calls on a session; the
    /// notify in the transaction and graphile-worker's `add_job` are
    /// pipelined SQL on a connection.
    session: Option<Session>,
    conn: Option<Conn>,
    variant: Enqueue,
    schema: SchemaName,
    channel: WakeChannel,
    notifier: Option<Arc<Notifier>>,
    graphile: Option<Arc<GraphileSql>>,
    latency: Recorder,
    /// Notifications this client sent itself, besides its notifier's.
    sent: u64,
    client: usize,
    n: u64,
}

impl EnqueueWorker {
    fn session(&self) -> Result<&Session, String> {
        self.session.as_ref().ok_or_else(|| "no session".to_owned())
    }
}

impl Worker for EnqueueWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let now = unix_now();
        let payload = format!("{{\"client\":{},\"n\":{}}}", self.client, self.n);
        self.n += 1;
        let job = job(now, payload.clone().into_bytes());
        let enqueue = jobs::Enqueue { job: &job, now };
        let failed = |e: schema_gen::statements::StatementError| e.to_string();
        match self.variant {
            Enqueue::Off => {
                self.session()?.run(&enqueue).await.map_err(failed)?;
            }
            Enqueue::Lead | Enqueue::LeadPerClient => {
                let notifier = self.notifier.as_ref().ok_or("no notifier")?;
                let session = self.session.as_mut().ok_or("no session")?;
                notifier
                    .run_and_wake(session, &enqueue, QUEUE)
                    .await
                    .map_err(failed)?;
            }
            Enqueue::Notifier => {
                self.session()?.run(&enqueue).await.map_err(failed)?;
                self.notifier.as_ref().ok_or("no notifier")?.wake(QUEUE);
            }
            Enqueue::AfterEach => {
                let session = self.session()?;
                let notify = wake::Notify {
                    channel: &self.channel,
                };
                let (enqueued, notified) =
                    futures_util::future::join(session.run(&enqueue), session.run(&notify)).await;
                enqueued.map_err(failed)?;
                notified.map_err(failed)?;
                self.sent += 1;
            }
            Enqueue::LeadInTransaction(_) | Enqueue::LeadInTransactionPerClient(_) => {
                let notifier = self.notifier.as_ref().ok_or("no notifier")?;
                let session = self.session.as_mut().ok_or("no session")?;
                notifier
                    .run_and_wake(session, &enqueue, QUEUE)
                    .await
                    .map_err(failed)?;
            }
            Enqueue::LeadInTransactionConn => {
                let lead = self.notifier.as_ref().ok_or("no notifier")?.lead(QUEUE);
                let statements = match lead {
                    Some(channel) => vec![
                        Stmt::new("BEGIN", Vec::new()),
                        Stmt::from(jobs::enqueue(&self.schema, &job, now)),
                        Stmt::new(
                            "SELECT pg_catalog.pg_notify($1, '')",
                            vec![Param::Text(channel.as_str().to_owned())],
                        ),
                        Stmt::new("COMMIT", Vec::new()),
                    ],
                    None => vec![Stmt::from(jobs::enqueue(&self.schema, &job, now))],
                };
                if statements.len() > 1 {
                    self.sent += 1;
                }
                let conn = self.conn.as_mut().ok_or("no connection")?;
                conn.pipeline(&statements)
                    .await
                    .map_err(|e| db_error("enqueue, leading notify inside", &e))?;
            }
            Enqueue::InTransaction => {
                let statements = [
                    Stmt::new("BEGIN", Vec::new()),
                    Stmt::from(jobs::enqueue(&self.schema, &job, now)),
                    Stmt::new(
                        "SELECT pg_catalog.pg_notify($1, '')",
                        vec![Param::Text(self.channel.as_str().to_owned())],
                    ),
                    Stmt::new("COMMIT", Vec::new()),
                ];
                let conn = self.conn.as_mut().ok_or("no connection")?;
                conn.pipeline(&statements)
                    .await
                    .map_err(|e| db_error("enqueue with notify inside", &e))?;
                self.sent += 1;
            }
            Enqueue::Graphile => {
                let sql = self.graphile.as_ref().ok_or("graphile-worker's SQL")?;
                let add = replay(&sql.add1, &[(1, Param::JsonText(payload))]);
                let conn = self.conn.as_mut().ok_or("no connection")?;
                conn.query(&add)
                    .await
                    .map_err(|e| db_error("graphile-worker add_job", &e))?;
                self.sent += 1;
            }
        }
        self.latency.record(started.elapsed());
        Ok(1)
    }
}

pub(super) async fn throughput(
    admin: &mut tokio_postgres::Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Vec<ThroughputRow> {
    let mut variants = vec![
        Enqueue::Off,
        Enqueue::Lead,
        Enqueue::LeadPerClient,
        Enqueue::LeadInTransactionConn,
        Enqueue::LeadInTransaction(10),
        Enqueue::LeadInTransactionPerClient(10),
        Enqueue::LeadInTransaction(20),
        Enqueue::LeadInTransactionPerClient(20),
        Enqueue::LeadInTransaction(100),
        Enqueue::LeadInTransactionPerClient(100),
        Enqueue::Notifier,
        Enqueue::AfterEach,
        Enqueue::InTransaction,
    ];
    if peers.is_some() {
        variants.push(Enqueue::Graphile);
    }
    if focused() {
        variants.retain(|v| {
            matches!(
                v,
                Enqueue::Off
                    | Enqueue::Lead
                    | Enqueue::LeadPerClient
                    | Enqueue::LeadInTransaction(10 | 20)
                    | Enqueue::LeadInTransactionPerClient(10 | 20)
            )
        });
    }
    progress(&format!(
        "wake-ups: enqueue throughput, {CLIENTS} clients, {} variants, {:.0} s each in {ROUNDS} rounds",
        variants.len(),
        scale.loop_time.as_secs_f64()
    ));
    let slice = scale.loop_time / ROUNDS;
    let mut runners = Vec::new();
    for &variant in &variants {
        let (schema_name, graphile) = if variant == Enqueue::Graphile {
            let system = Kind::Graphile.create(admin, peers).await;
            let System::Graphile(sql, schema) = system else {
                unreachable!("Kind::Graphile creates graphile-worker")
            };
            (schema, Some(sql))
        } else {
            let schema = Design::Product.create(admin, "wake_enqueue").await;
            (schema.as_str().to_owned(), None)
        };
        let schema = SchemaName::new(&schema_name)
            .unwrap_or_else(|_| harness::unique_schema_name("wake_unused"));
        // The pipelined-behind rows never put a notify inside (the design
        // shipped before); the candidate's at most once per its interval.
        let inside = match variant {
            Enqueue::LeadInTransaction(every) | Enqueue::LeadInTransactionPerClient(every) => {
                Duration::from_millis(every)
            }
            _ => Duration::MAX,
        };
        let notifier = || async {
            Arc::new(
                Notifier::start_with(direct(), schema.clone(), INTERVAL, inside)
                    .await
                    .unwrap_or_else(|e| panic!("notifier: {e}")),
            )
        };
        let shared = match variant {
            Enqueue::Notifier
            | Enqueue::Lead
            | Enqueue::LeadInTransactionConn
            | Enqueue::LeadInTransaction(_) => Some(notifier().await),
            _ => None,
        };
        let mut workers = Vec::new();
        for client in 0..CLIENTS {
            let notifier = match variant {
                Enqueue::LeadPerClient | Enqueue::LeadInTransactionPerClient(_) => {
                    Some(notifier().await)
                }
                _ => shared.clone(),
            };

            let on_conn = matches!(
                variant,
                Enqueue::InTransaction | Enqueue::Graphile | Enqueue::LeadInTransactionConn
            );
            let (session, conn) = if on_conn {
                (None, Some(Conn::open().await))
            } else {
                let session = Session::new(harness::connect().await, schema.clone());
                session
                    .prepare_all()
                    .await
                    .unwrap_or_else(|e| panic!("prepare: {e}"));
                (Some(session), None)
            };
            workers.push(EnqueueWorker {
                session,
                conn,
                variant,
                channel: WakeChannel::new(&schema, QUEUE),
                schema: schema.clone(),
                notifier,
                graphile: graphile.clone(),
                latency: Recorder::new(),
                sent: 0,
                client,
                n: 0,
            });
        }
        runners.push((variant, schema_name, workers, 0u64, 0f64, Vec::new()));
    }
    exec(admin, "CHECKPOINT").await;
    // Each variant's slice runs right beside a slice without wake-ups (before
    // it in even rounds, after it in odd ones), and is compared with that
    // one: a shared machine's load moves over seconds, so a comparison
    // within a round, several slices apart, measured the load as much as
    // the notify. The pairs take turns, each round starting with another.
    let count = runners.len();
    let mut paired: Vec<Vec<f64>> = vec![Vec::new(); count];
    for round in 0..ROUNDS as usize {
        for turn in 0..count - 1 {
            let index = 1 + (round + turn) % (count - 1);
            let order = if round % 2 == 0 {
                [0, index]
            } else {
                [index, 0]
            };
            let mut rates = [0.0; 2];
            for (slot, &which) in order.iter().enumerate() {
                let (_, _, workers, jobs, seconds, all) = &mut runners[which];
                let run = pool::run(std::mem::take(workers), Limit::time(slice)).await;
                *jobs += run.jobs;
                *seconds += run.elapsed.as_secs_f64();
                all.push(run.jobs_per_second());
                rates[slot] = run.jobs_per_second();
                *workers = run.workers;
            }
            let (off, this) = if round % 2 == 0 {
                (rates[0], rates[1])
            } else {
                (rates[1], rates[0])
            };
            if off > 0.0 {
                paired[index].push(this / off);
            }
        }
    }
    let mut out = Vec::new();
    for ((variant, schema, workers, jobs, seconds, _), mut paired) in
        runners.into_iter().zip(paired)
    {
        let latency = Recorder::merged(&workers, |w| &w.latency);
        // Each notifier once, however many clients share it.
        let mut notifiers: Vec<&Arc<Notifier>> =
            workers.iter().filter_map(|w| w.notifier.as_ref()).collect();
        notifiers.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let sent: u64 = workers.iter().map(|w| w.sent).sum::<u64>()
            + notifiers.iter().map(|n| n.stats().sent).sum::<u64>();
        if variant == Enqueue::Off {
            paired = vec![1.0];
        }
        paired.sort_by(f64::total_cmp);
        out.push(ThroughputRow {
            variant,
            jobs_per_s: jobs as f64 / seconds,
            paired,
            latency,
            notifications_per_s: sent as f64 / seconds,
        });
        drop(workers);
        designs::drop_schema(admin, &format!("\"{schema}\"")).await;
    }
    out
}
