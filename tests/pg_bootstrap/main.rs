//! `bootstrap` and `verify` against a real PostgreSQL server: creation,
//! idempotence, the live catalog, the engine's invariants on real rows,
//! concurrency, locks, privileges, co-tenancy and interrupted bootstraps.
//!
//! Every test works in its own schema (or its own database), so the tests run
//! in parallel against one server.

mod creation;
mod locks;
mod roles;
mod steady_state;

use std::time::{Duration, Instant};

use schema_gen::{Options, bootstrap};
use schema_model::{SchemaName, engine_family};
use tokio_postgres::Client;

/// An event of stream `s` with `payload`, for the append statement.
fn event(payload: &[u8]) -> schema_model::StreamEvent {
    let mut event = schema_model::StreamEvent::default();
    event.stream = "s".into();
    event.payload = payload.to_vec();
    event
}

fn model_tables() -> Vec<String> {
    engine_family().into_iter().map(|t| t.name).collect()
}

async fn bootstrapped(prefix: &str) -> (Client, SchemaName) {
    let mut client = harness::connect().await;
    let schema = harness::unique_schema_name(prefix);
    let outcome = bootstrap(&mut client, &schema)
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema}: {e}"));
    assert!(outcome.created(), "{outcome}");
    (client, schema)
}

/// The tables of the engine family in `schema`, qualified.
fn qualified_tables(schema: &SchemaName) -> Vec<String> {
    model_tables()
        .into_iter()
        .map(|t| format!("{schema}.{t}"))
        .collect()
}

/// The consumer's schemas and rows, for a before/after comparison.
async fn consumer_dump(client: &Client) -> String {
    let mut all = String::new();
    for schema in ["public", "analytics"] {
        all.push_str(&harness::dump::dump_schema(client, schema).await);
    }
    let rows: Vec<String> = client
        .query(
            "SELECT format('%s', j) FROM public.jobs j
             UNION ALL SELECT format('%s', a) FROM analytics.jobs a ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    all.push_str(&rows.join("\n"));
    all
}

/// Polls until `pid` waits on a lock it has not been granted. The deadline
/// only ends a failing run: a loaded machine may take seconds to get there.
async fn wait_until_blocked(observer: &Client, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: bool = observer
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        assert!(Instant::now() < deadline, "backend {pid} never blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn current_role(client: &Client) -> String {
    client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0)
}

async fn backend_pid(client: &Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Awaits `call`, or panics after a minute: a lost bound must fail a test,
/// not hang it. Far above the bounds the tests set (300 ms), so only a lost
/// bound, never a loaded machine, reaches it.
async fn bounded<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .unwrap_or_else(|_| panic!("still waiting after 60 s: the lock wait is not bounded"))
}

/// A short bound, so the tests that make a lock wait give up quickly.
fn short_bound() -> Options {
    Options {
        lock_timeout: Duration::from_millis(300),
        ..Options::default()
    }
}
