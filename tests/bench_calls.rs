//! Benchmark: what a hot-path call costs the engine's CPU before anything
//! is sent, with no server: [`Call::values`] (what `Session::run` binds on
//! every call, from the statement's one definition, its text not rendered)
//! and [`Call::statement`] (the whole statement, text rendered: what a
//! session prepares once per connection, and a one-off run builds).
//!
//! ```text
//! cargo bench -p alkstore-schema-tests --bench calls
//! ```
//!
//! Beside them, for three calls, the floor: the same values listed by hand
//! (as each call's `values()` was written before it came from the
//! statement's one definition), to show what the one definition costs.
//!
//! Without `--bench` (as under `cargo test --benches`) it runs one short
//! round, as a smoke test.

use std::hint::black_box;
use std::time::{Duration, Instant};

use schema_gen::statements::{Call, Job, jobs, locks, streams};
use schema_model::SchemaName;
use sea_query::Value;

/// The values of a call listed by hand, in placeholder order.
type ByHand<'a, C> = &'a dyn Fn(&C) -> Vec<Value>;

/// The median time of one `f()`, over `rounds` rounds of `per_round` calls.
fn median_ns(rounds: usize, per_round: usize, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..per_round {
                f();
            }
            start.elapsed()
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2].as_nanos() as f64 / per_round as f64
}

fn row<C: Call>(
    label: &str,
    call: &C,
    by_hand: Option<ByHand<'_, C>>,
    schema: &SchemaName,
    (rounds, per_round): (usize, usize),
) {
    let values = median_ns(rounds, per_round, || {
        black_box(black_box(call).values());
    });
    let statement = median_ns(rounds, per_round / 10 + 1, || {
        black_box(black_box(call).statement(schema));
    });
    let by_hand = by_hand.map_or_else(
        || "".to_owned(),
        |list| {
            let listed = list(call);
            assert_eq!(
                listed,
                call.values().0.into_iter().map(|v| v.0).collect::<Vec<_>>(),
                "{label}: the hand list is not the call's values"
            );
            let ns = median_ns(rounds, per_round, || {
                black_box(list(black_box(call)));
            });
            format!("{:.2}", ns / 1000.0)
        },
    );
    println!(
        "| {label} | {} | {:.2} | {by_hand} | {:.1} |",
        call.values().0.len(),
        values / 1000.0,
        statement / 1000.0
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let size = if full { (31, 20_000) } else { (1, 10) };
    let batch_size = (size.0, size.1 / 10);
    let schema = SchemaName::default();
    let mut job = Job::new("mail", b"{\"to\":\"a@example.com\"}".to_vec());
    job.run_at = 1_700_000_000;
    job.enqueued_at = 1_700_000_000;
    let batch = vec![job.clone(); 100];
    let claims: Vec<(i64, i32)> = (0..100).map(|id| (id, 1)).collect();
    let now = 1_700_000_000;
    let load =
        || harness::bench::load_averages().map_or_else(|| "unknown".to_owned(), |l| l.join(" "));
    println!("load average before: {}", load());
    println!("| call | values | values() µs | by hand µs | statement() µs |");
    println!("|---|---|---|---|---|");
    let (queue, worker_id) = ("mail", "worker-1");
    let promote = jobs::Promote {
        queue,
        now,
        limit: 100,
    };
    row(
        "promote",
        &promote,
        Some(&|c: &jobs::Promote| vec![c.queue.into(), c.now.into(), u64::from(c.limit).into()]),
        &schema,
        size,
    );
    let claim = jobs::Claim {
        queue,
        worker_id,
        now,
        limit: 10,
    };
    row(
        "claim",
        &claim,
        Some(&|c: &jobs::Claim| {
            vec![
                c.worker_id.into(),
                c.now.into(),
                c.queue.into(),
                u64::from(c.limit).into(),
            ]
        }),
        &schema,
        size,
    );
    let ack = jobs::Ack {
        id: 1,
        worker_id,
        attempts: 1,
    };
    row("ack", &ack, None, &schema, size);
    let enqueue = jobs::Enqueue { job: &job, now };
    row(
        "enqueue",
        &enqueue,
        Some(&|c: &jobs::Enqueue| {
            let job = c.job;
            vec![
                job.queue.clone().into(),
                job.payload.clone().into(),
                job.priority.into(),
                job.run_at.into(),
                job.expires_at.into(),
                job.enqueued_at.into(),
                job.opts.visibility_timeout_s.into(),
                job.opts.max_attempts.into(),
                job.opts.backoff_base_s.into(),
                job.opts.dead_letter_retention_s.into(),
                c.now.into(),
            ]
        }),
        &schema,
        size,
    );
    let enqueue_many = jobs::EnqueueMany { jobs: &batch, now };
    row(
        "enqueue_many (100 jobs)",
        &enqueue_many,
        None,
        &schema,
        batch_size,
    );
    let ack_many = jobs::AckMany {
        worker_id,
        claims: &claims,
    };
    row(
        "ack_many (100 claims)",
        &ack_many,
        None,
        &schema,
        batch_size,
    );
    let read = streams::ReadInCommitOrder {
        stream: "orders",
        offset: 41,
        limit: 100,
    };
    row("stream_read_in_commit_order", &read, None, &schema, size);
    let acquire = locks::Acquire {
        name: "ticker",
        owner: "node-a",
        expires_at: now + 30,
        now,
    };
    row("lock_acquire", &acquire, None, &schema, size);
    println!("load average after: {}", load());
}
