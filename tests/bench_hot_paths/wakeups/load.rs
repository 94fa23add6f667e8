//! The load: eight clients running the loop on a product schema of their own.

use super::*;

/// The load runs on a runtime of its own, so that its eight clients never
/// queue ahead of the producer's or a worker's task in the measuring
/// runtime (which would stamp a commit late, and a pickup short): they
/// share the machine's cores, as engine processes do.
pub(super) struct Background {
    schema: SchemaName,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    maintainer: Maintainer,
    runtime: tokio::runtime::Runtime,
}

impl Background {
    pub(super) async fn start(admin: &mut tokio_postgres::Client) -> Self {
        let schema = Design::Product.create(admin, "wake_load").await;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("the load's runtime: {e}"));
        let maintainer = {
            let _entered = runtime.enter();
            Maintainer::start(
                &schema,
                Policy::EveryClaims(crate::churn::VACUUM_EVERY_CLAIMS),
            )
        };
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for client in 0..CLIENTS {
            let schema = schema.clone();
            let stopped = stopped.clone();
            let counter = maintainer.claims();
            tasks.spawn_on(
                async move {
                    let mut conn = Conn::open().await;
                    let worker = format!("load-{client}");
                    let mut n = 0u64;
                    while !*stopped.borrow() {
                        let now = unix_now();
                        let payload = format!("{{\"client\":{client},\"n\":{n}}}").into_bytes();
                        let enqueue =
                            crate::product::enqueue(&schema, "load", &[payload], now, now);
                        conn.query(&enqueue)
                            .await
                            .unwrap_or_else(|e| panic!("{}", db_error("load enqueue", &e)));
                        let path =
                            crate::product::claim_path(&schema, "load", now, &worker, 1, true);
                        let rows = conn
                            .pipeline(&path)
                            .await
                            .unwrap_or_else(|e| panic!("{}", db_error("load claim", &e)));
                        let claimed =
                            crate::product::claimed(rows.last().map_or(&[][..], Vec::as_slice))
                                .unwrap_or_else(|e| panic!("{e}"));
                        counter.fetch_add(claimed.len() as u64, Ordering::Relaxed);
                        if !claimed.is_empty() {
                            conn.query(&crate::product::ack(&schema, &claimed, &worker))
                                .await
                                .unwrap_or_else(|e| panic!("{}", db_error("load ack", &e)));
                        }
                        n += 1;
                    }
                },
                runtime.handle(),
            );
        }
        Self {
            schema,
            stop,
            tasks,
            maintainer,
            runtime,
        }
    }

    pub(super) async fn stop(mut self, admin: &tokio_postgres::Client) {
        let _ = self.stop.send(true);
        while let Some(joined) = self.tasks.join_next().await {
            joined.unwrap_or_else(|e| panic!("load client: {e}"));
        }
        self.maintainer.stop().await;
        self.runtime.shutdown_background();
        designs::drop_schema(admin, &format!("\"{}\"", self.schema)).await;
    }
}
