//! Wake-ups: an idle worker starts a job within milliseconds of its
//! enqueue committing, without serialising the enqueues, and learns where
//! it must poll instead.
//!
//! Three parts, each optional (an engine that wants none keeps polling; its
//! enqueue statements are the same either way):
//!
//! - **The channel** of a queue is the model's
//!   [`WakeChannel`](schema_model::WakeChannel): `<schema>:<queue>`, or a
//!   readable prefix and a hash when the queue name is not plain lowercase
//!   or the pair is too long; never over 63 bytes, never truncated.
//! - **The notifier** ([`Notifier`]): [`Notifier::run_and_wake`] sends
//!   the [`wake`](crate::statements::wake::notify) statement in the
//!   enqueue's round trip, at most once per queue per interval: a queue's
//!   leading notification inside the enqueue's transaction at most once
//!   per [`INSIDE_EVERY`], the other leading ones pipelined right behind
//!   the enqueue (the server runs them once the enqueue has committed, in a
//!   transaction of their own); the others folded into
//!   one notification at the end of the interval, which the notifier's own
//!   task sends on its own connection ([`Notifier::wake`] hands a wake-up
//!   to that task alone, for an enqueue made in a transaction).
//! - **The listener** ([`Listener`]) listens on a direct connection of its
//!   own, wakes the workers waiting on each queue ([`Wakeup`]), reconnects
//!   (and then wakes every worker once: notifications sent meanwhile are
//!   lost), and refuses a connection through a transaction- or
//!   statement-pooling pooler ([`ListenError::Pooled`], found by
//!   [`crate::pooler`], the crate's one probe): there the engine must poll.
//!
//! # Where the notify runs, and why
//!
//! Not in every enqueue's transaction: a transaction that called `NOTIFY`
//! takes a database-wide lock at commit and holds it through its commit
//! record's flush, so notifying in every enqueue serialises the commits of
//! all writers. Inside the enqueue's transaction for a queue's leading
//! notification, at most once per [`INSIDE_EVERY`] (10 ms) per queue and
//! process: the listeners hear of a lone job at its commit, before the
//! producer has its answer (the pickup BENCHMARKS.md measured at or below
//! graphile-worker's), and the notifying commits are few enough to cost
//! the enqueues within the measured bound. Behind the enqueue, in the same
//! round trip, for the other leading ones: the server runs it once the
//! enqueue's answer is sent, a statement later (its transaction writes no
//! WAL, so PostgreSQL commits it without a flush, and it costs what a
//! `SELECT 1` costs). [`Notifier::start_with`] sets the inside interval
//! (`Duration::MAX`: never inside). Coalesced per process and queue
//! over an interval, a burst of enqueues costs one notification per queue
//! per interval. BENCHMARKS.md ("Wake-ups") measures it beside the notify
//! inside the enqueue transaction, a notify behind every enqueue, the
//! notifier's task sending every notification (an extra connection's round
//! trip: slower pickup and fewer enqueues per second on a busy server),
//! polling, and graphile-worker.
//!
//! # Scheduled jobs and promote
//!
//! No notification comes when a scheduled job (or a retry backing off)
//! comes due. A worker whose claim came back empty asks
//! [`wake::NextDue`](crate::statements::wake::NextDue) and waits at most
//! until then ([`deadline`]); its claim path's promote then makes the job
//! ready. A promote that made more jobs ready than its claim took calls
//! [`Notifier::wake`], so the other idle workers claim the rest.
//!
//! # A worker's loop
//!
//! ```no_run
//! # async fn demo(
//! #     session: schema_gen::statements::Session,
//! #     listener: &schema_gen::wake::Listener,
//! #     notifier: &schema_gen::wake::Notifier,
//! #     now: impl Fn() -> i64,
//! # ) -> Result<(), schema_gen::statements::StatementError> {
//! use std::time::Duration;
//! use schema_gen::statements::{jobs, wake};
//! use schema_gen::wake::{Wake, deadline};
//!
//! let mut wakeup = listener.wakeup("mail").expect("the listener listens on mail");
//! let mut woke = Wake::Deadline;
//! loop {
//!     wakeup.seen();
//!     let claim = jobs::Claim { queue: "mail", worker_id: "worker-1", now: now(), limit: 10 };
//!     // A notification means jobs were made ready: the claim alone. After a
//!     // deadline, a reconnection or a job, the claim path (promote, claim).
//!     let claimed = if woke == Wake::Notified {
//!         session.run(&claim).await?
//!     } else {
//!         let promote = jobs::Promote { queue: "mail", now: now(), limit: 100 };
//!         let (promoted, claimed) = session.run_pipelined(&promote, &claim).await?;
//!         if promoted > claimed.len() as u64 {
//!             notifier.wake("mail");
//!         }
//!         claimed
//!     };
//!     woke = Wake::Deadline;
//!     if claimed.is_empty() {
//!         let next_due = session.run(&wake::NextDue { queue: "mail" }).await?;
//!         // A wake-up, the next due job, or the fallback poll: then claim again.
//!         woke = wakeup.wait_until(Some(deadline(next_due, Duration::from_secs(30)))).await;
//!         continue;
//!     }
//!     for job in &claimed {
//!         // ... run it, ack it
//!     }
//! }
//! # }
//! ```
//!
//! And the producer: `notifier.run_and_wake(&mut session, &jobs::Enqueue { .. },
//! &job.queue)` for every enqueue, due now or later (an idle worker learns
//! the new `next_due` that way).

mod coalesce;
mod connect;
mod error;
mod listener;
mod notifier;

pub use connect::{Connect, Connecting, Connector, Messages, connector, messages};
pub use error::ListenError;
pub use listener::{Listener, ListenerOptions, ListenerState, Wake, Wakeup, deadline};
pub use notifier::{INSIDE_EVERY, Notifier, NotifierStats};
