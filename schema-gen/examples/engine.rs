//! An engine's first hour with alkstore's schema: bootstrap, prepare the
//! statements once on the connection, enqueue three jobs, claim them in one
//! round trip (promote, then claim), ack one and retry another.
//!
//! ```sh
//! cargo run -p schema-gen --example engine -- 'postgres://app@localhost/app'
//! ```
//!
//! It needs `schema-gen` (which re-exports `tokio_postgres` and
//! `schema_model`) and the async runtime, nothing else; no column is named
//! by a string.

use std::error::Error;
use std::time::{SystemTime, UNIX_EPOCH};

use schema_gen::SchemaName;
use schema_gen::statements::{Job, QueueOpts, Session, jobs};
use schema_gen::tokio_postgres::{self, Client, NoTls};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .ok_or("usage: engine <database url> (or set DATABASE_URL)")?;
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            eprintln!("connection lost: {err}");
        }
    });
    let now = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs())?;
    let report = run(client, SchemaName::default(), now).await?;
    println!(
        "enqueued {:?}; promoted {}, claimed {:?}; acked {}, retried {}",
        report.enqueued,
        report.promoted,
        report.claimed.iter().map(|job| job.id).collect::<Vec<_>>(),
        report.acked,
        report.retried,
    );
    Ok(())
}

/// What the program did.
#[derive(Debug)]
pub struct Report {
    /// The ids of the three jobs, as enqueue returned them.
    pub enqueued: Vec<i64>,
    /// How many jobs the claim path's promote made ready (the one that was
    /// scheduled for later).
    pub promoted: u64,
    /// The jobs the claim took, each with its claim token.
    pub claimed: Vec<Job>,
    /// Rows the ack deleted (1: the claim held).
    pub acked: u64,
    /// Rows the retry released (1: the claim held).
    pub retried: u64,
}

/// The engine's steps on one connection, for the engine schema `schema`,
/// at the unix second `now`.
pub async fn run(
    mut client: Client,
    schema: SchemaName,
    now: i64,
) -> Result<Report, Box<dyn Error>> {
    // At open: create the schema, or prove in one catalog read it is current.
    schema_gen::bootstrap(&mut client, &schema).await?;

    // One session per connection: every statement is prepared once, here in
    // one round trip; from now on only values are sent.
    let session = Session::new(client, schema);
    session.prepare_all().await?;

    // Enqueue three jobs: two due now, one scheduled five seconds later.
    // The value shapes are not exhaustive (a later release may add a
    // field): start from a constructor or the default, then set fields.
    let mut opts = QueueOpts::default();
    opts.visibility_timeout_s = 30;
    opts.max_attempts = 3;
    opts.backoff_base_s = 10;
    opts.dead_letter_retention_s = 86_400;
    let mut enqueued = Vec::new();
    for (payload, run_at) in [
        (&b"welcome"[..], now),
        (b"invoice", now),
        (b"reminder", now + 5),
    ] {
        let mut job = Job::new("mail", payload);
        job.run_at = run_at;
        job.enqueued_at = now;
        job.opts = opts.clone();
        let id: i64 = session.run(&jobs::Enqueue { job: &job, now }).await?;
        enqueued.push(id);
    }

    // Five seconds later, the claim path in one round trip: promote makes
    // the scheduled job ready, claim takes up to ten ready jobs. No
    // transaction: promote has committed when claim runs.
    let later = now + 5;
    let (promoted, claimed): (u64, Vec<Job>) = session
        .run_pipelined(
            &jobs::Promote {
                queue: "mail",
                now: later,
                limit: 100,
            },
            &jobs::Claim {
                queue: "mail",
                worker_id: "worker-1",
                now: later,
                limit: 10,
            },
        )
        .await?;

    // The first job is done; the second failed and backs off. Both name
    // their claim by its token (id, worker_id, attempts).
    let mut acked = 0;
    let mut retried = 0;
    if let [done, failed, ..] = claimed.as_slice() {
        acked = session
            .run(&jobs::Ack {
                id: done.id,
                worker_id: "worker-1",
                attempts: done.attempts,
            })
            .await?;
        retried = session
            .run(&jobs::Retry {
                id: failed.id,
                worker_id: "worker-1",
                attempts: failed.attempts,
                run_at: later + failed.opts.backoff_base_s,
                last_error: Some("smtp: connection timed out"),
                now: later,
            })
            .await?;
    }
    Ok(Report {
        enqueued,
        promoted,
        claimed,
        acked,
        retried,
    })
}
