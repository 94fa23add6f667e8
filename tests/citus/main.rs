//! The engine family on a real Citus cluster (a coordinator and two workers
//! started by `harness::citus`): smoke tests of the cluster itself and of a
//! model table distributed on it, then the family under
//! `Layout::CitusSchemaSharding`: created distributed by `apply`, checked,
//! a wrongly distributed family caught, every hot path one task, the
//! maintenance statements at work, commit-order reads and fences that hold,
//! the nodes the layout refuses, `check` over TLS with the default
//! `sslmode`, and the schema moved to the other worker.

mod cluster;
mod family;
mod moves;
mod paths;

use harness::citus::cluster;
use harness::{describe_error, rows};
use schema_gen::render::quote_literal;
use schema_gen::statements::{Statement, consumed_events, jobs, locks, streams};
use schema_gen::{Options, bootstrap_with};
use schema_model::{ConsumedEvent, ConsumerOffset, Job, Layout, SchemaName, StreamEvent};
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

fn citus_options() -> Options {
    Options {
        layout: Layout::CitusSchemaSharding,
        ..Options::default()
    }
}

/// A fresh engine schema created by the library's bootstrap under the Citus
/// layout, on the coordinator.
async fn citus_schema(prefix: &str) -> (Client, SchemaName) {
    let mut client = cluster().connect_coordinator().await;
    let schema = harness::unique_schema_name(prefix);
    bootstrap_with(&mut client, &schema, &citus_options())
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema} under the citus layout: {e}"));
    (client, schema)
}

/// The port of the worker that holds the shards of `schema`, and its index.
async fn shard_worker(client: &Client, schema: &SchemaName) -> usize {
    let found = rows(
        client,
        &format!(
            "SELECT DISTINCT n.nodeport FROM pg_dist_shard s \
             JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) \
             WHERE s.logicalrelid::text LIKE {}",
            quote_literal(&format!("{schema}.%"))
        ),
    )
    .await;
    assert_eq!(found.len(), 1, "{schema}'s shards are on one node");
    let port: i32 = found[0].get(0);
    cluster()
        .workers
        .iter()
        .position(|w| i32::from(*w) == port)
        .unwrap_or_else(|| panic!("{schema}'s shards are on port {port}, not on a worker"))
}

fn job(queue: &str) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = b"p".to_vec();
    job.priority = 0;
    job.run_at = NOW - 10;
    job.expires_at = None;
    job.enqueued_at = NOW - 20;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 3;
    job.opts.backoff_base_s = 1;
    job.opts.dead_letter_retention_s = 60;
    job
}

fn event(stream: &str, key: &str) -> StreamEvent {
    let mut event = StreamEvent::default();
    event.stream = stream.into();
    event.key = Some(key.into());
    event.payload = key.as_bytes().to_vec();
    event.created_at = NOW;
    event
}

async fn count(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), describe_error(&e)))
}

/// Every hot-path statement for the Citus layout, with values that find
/// rows.
fn hot_paths(schema: &SchemaName, claimed: &Job) -> Vec<Statement> {
    let worker = claimed.worker_id.as_deref().unwrap_or("w");
    vec![
        jobs::enqueue(schema, &job("mail"), NOW),
        jobs::promote(schema, "mail", NOW, 10),
        jobs::claim(schema, "mail", "w", NOW, 10),
        jobs::ack(schema, claimed.id, worker, claimed.attempts),
        jobs::ack_many(schema, worker, &[(claimed.id, claimed.attempts)]),
        jobs::retry(
            schema,
            claimed.id,
            worker,
            claimed.attempts,
            NOW + 5,
            Some("e"),
            NOW,
        ),
        jobs::kill(schema, claimed.id, worker, claimed.attempts, Some("e"), NOW),
        streams::append(schema, &event("s", "k")),
        streams::read(schema, "s", 0, 10),
        streams::read_in_commit_order_below(schema, "s", 0, 10, 1_000_000),
        streams::checkpoint(schema, &ConsumerOffset::new("s", "c", 1)),
        streams::read_checkpoint(schema, "s", "c"),
        consumed_events::claim(schema, &ConsumedEvent::new("c", "e1", NOW)),
        locks::clear_lapsed(schema, "ticker", NOW),
        locks::acquire_free(schema, "ticker", "node-a", NOW + 30),
        locks::renew(schema, "ticker", "node-a", 1, NOW + 60, NOW),
        locks::release(schema, "ticker", "node-a", 1),
    ]
}
