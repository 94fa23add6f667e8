//! The registry: every statement of each layout, as data. What a
//! [`Session`](super::Session) prepares ([`Session::prepare_all`]), what
//! `schema-gen statements` lists, and what the tests walk (the hot-path
//! proofs, the Citus routing, the agreement of each call's values with its
//! statement) all read it.
//!
//! [`Session::prepare_all`]: super::Session::prepare_all

use std::sync::LazyLock;

#[cfg(test)]
use sea_query_postgres::PostgresValues;

use schema_model::{
    ConsumedEvent, ConsumerOffset, Job, Layout, Schedule, SchemaName, StreamEvent, WakeChannel,
};

use super::{Call, Statement, consumed_events, dead_jobs, jobs, locks, schedules, streams, wake};

/// One statement of the registry, on the layouts it runs on.
///
/// Its [`statement`](Entry::statement) is built with sample inputs: the
/// text and the placeholders depend on the schema name only, so that is
/// what an engine prepares (the sample values are not for running).
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    layouts: &'static [Layout],
    sample: fn() -> Box<dyn AnyCall>,
}

impl Entry {
    /// The statement's name ([`Call::NAME`]).
    pub fn name(&self) -> &'static str {
        (self.sample)().name()
    }

    /// The layouts whose engines run it.
    pub fn layouts(&self) -> &'static [Layout] {
        self.layouts
    }

    /// Whether engines under `layout` run it.
    pub fn runs_on(&self, layout: Layout) -> bool {
        self.layouts.contains(&layout)
    }

    /// The statement for `schema`, with the sample inputs.
    pub fn statement(&self, schema: &SchemaName) -> Statement {
        (self.sample)().statement(schema)
    }

    /// The sample call, for the tests of the glue.
    #[cfg(test)]
    pub(super) fn sample(&self) -> Box<dyn AnyCall> {
        (self.sample)()
    }
}

/// A [`Call`] of any statement, as the registry holds it.
pub(super) trait AnyCall {
    fn name(&self) -> &'static str;
    fn statement(&self, schema: &SchemaName) -> Statement;
    #[cfg(test)]
    fn values(&self) -> PostgresValues;
}

impl<C: Call> AnyCall for C {
    fn name(&self) -> &'static str {
        C::NAME
    }

    fn statement(&self, schema: &SchemaName) -> Statement {
        Call::statement(self, schema)
    }

    #[cfg(test)]
    fn values(&self) -> PostgresValues {
        Call::values(self)
    }
}

/// Inputs for the samples, every value of a statement different from the
/// others (the tests rely on that to tell each placeholder's value apart).
struct Samples {
    job: Job,
    batch: [Job; 2],
    event: StreamEvent,
    offset: ConsumerOffset,
    schedule: Schedule,
    consumed: ConsumedEvent,
    channel: WakeChannel,
}

fn sample_job(n: i64) -> Job {
    let mut job = Job::default();
    job.id = n;
    job.queue = format!("queue-{n}");
    job.payload = vec![n as u8, 0xff];
    job.priority = n as i32 + 1;
    job.run_at = n + 2;
    job.expires_at = Some(n + 3);
    job.enqueued_at = n + 4;
    job.opts.visibility_timeout_s = n + 5;
    job.opts.max_attempts = n as i32 + 6;
    job.opts.backoff_base_s = n + 7;
    job.opts.dead_letter_retention_s = n + 8;
    job.attempts = n as i32 + 9;
    job.worker_id = Some(format!("worker-{n}"));
    job.claimed_at = Some(n + 10);
    job.claim_expires_at = Some(n + 11);
    job.last_error = Some(format!("error-{n}"));
    job
}

static SAMPLES: LazyLock<Samples> = LazyLock::new(|| {
    let mut schedule = Schedule::new("name", "@every 1m", 60, "queue", vec![1, 2]);
    schedule.opts.priority = 3;
    schedule.opts.max_attempts = 4;
    schedule.opts.visibility_timeout_s = 5;
    schedule.opts.backoff_base_s = 6;
    schedule.opts.dead_letter_retention_s = 7;
    schedule.opts.expires_s = Some(8);
    schedule.next_fire_at = 9;
    schedule.last_fired_at = Some(10);
    let mut event = StreamEvent::new("stream", vec![3]);
    event.id = 1;
    event.key = Some("key".into());
    event.created_at = 4;
    Samples {
        job: sample_job(0),
        batch: [sample_job(100), sample_job(200)],
        event,
        offset: ConsumerOffset::new("stream", "consumer", 5),
        schedule,
        consumed: ConsumedEvent::new("consumer", "event", 6),
        channel: WakeChannel::new(&SchemaName::default(), "queue"),
    }
});

/// Every layout.
const EVERY: &[Layout] = &Layout::ALL;
/// A single server only: Citus runs another form (see [`CITUS`]).
const SINGLE: &[Layout] = &[Layout::SingleServer];
/// Citus only, in place of a single server's statement (whose docs say
/// why).
const CITUS: &[Layout] = &[Layout::CitusSchemaSharding];

/// The hot-path statements, in family order; a layout's registry is the
/// entries that run on it, in this order.
static REGISTRY: &[Entry] = &[
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Enqueue {
                job: &SAMPLES.job,
                now: 50,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::EnqueueMany {
                jobs: &SAMPLES.batch,
                now: 50,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Promote {
                queue: "queue",
                now: 50,
                limit: 7,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Claim {
                queue: "queue",
                worker_id: "worker",
                now: 50,
                limit: 7,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Ack {
                id: 1,
                worker_id: "worker",
                attempts: 2,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::AckMany {
                worker_id: "worker",
                claims: &[(1, 2), (3, 4)],
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Retry {
                id: 1,
                worker_id: "worker",
                attempts: 2,
                run_at: 3,
                last_error: Some("error"),
                now: 4,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(jobs::Kill {
                id: 1,
                worker_id: "worker",
                attempts: 2,
                last_error: Some("error"),
                now: 4,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(jobs::Reap { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(jobs::ReapExhausted { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(jobs::Expire { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(wake::Notify {
                channel: &SAMPLES.channel,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(wake::NextDue { queue: "queue" }),
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(dead_jobs::Sweep { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(streams::Append {
                event: &SAMPLES.event,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(streams::Read {
                stream: "stream",
                offset: 1,
                limit: 2,
            })
        },
    },
    Entry {
        layouts: SINGLE,
        sample: || {
            Box::new(streams::ReadInCommitOrder {
                stream: "stream",
                offset: 1,
                limit: 2,
            })
        },
    },
    Entry {
        layouts: CITUS,
        sample: || Box::new(streams::CommitHorizon),
    },
    Entry {
        layouts: CITUS,
        sample: || {
            Box::new(streams::ReadInCommitOrderBelow {
                stream: "stream",
                offset: 1,
                limit: 2,
                horizon: 3,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(streams::Checkpoint {
                offset: &SAMPLES.offset,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(streams::ReadCheckpoint {
                stream: "stream",
                consumer: "consumer",
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(schedules::Register {
                schedule: &SAMPLES.schedule,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(schedules::Due { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(schedules::Advance {
                name: "name",
                last_fired_at: 1,
                next_fire_at: 2,
            })
        },
    },
    Entry {
        layouts: SINGLE,
        sample: || {
            Box::new(locks::Acquire {
                name: "name",
                owner: "owner",
                expires_at: 1,
                now: 2,
            })
        },
    },
    Entry {
        layouts: CITUS,
        sample: || {
            Box::new(locks::ClearLapsed {
                name: "name",
                now: 1,
            })
        },
    },
    Entry {
        layouts: CITUS,
        sample: || {
            Box::new(locks::AcquireFree {
                name: "name",
                owner: "owner",
                expires_at: 1,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(locks::Renew {
                name: "name",
                owner: "owner",
                fence: 1,
                expires_at: 2,
                now: 3,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(locks::Release {
                name: "name",
                owner: "owner",
                fence: 1,
            })
        },
    },
    Entry {
        layouts: EVERY,
        sample: || Box::new(locks::Sweep { now: 1, limit: 2 }),
    },
    Entry {
        layouts: EVERY,
        sample: || {
            Box::new(consumed_events::Claim {
                event: &SAMPLES.consumed,
            })
        },
    },
];

/// The maintenance statements: run on a connection of their own, outside a
/// transaction, never prepared ahead nor listed with the hot path.
static MAINTENANCE: &[Entry] = &[Entry {
    layouts: EVERY,
    sample: || Box::new(jobs::Vacuum),
}];

/// The hot-path statements engines run under `layout`, in family order:
/// what [`Session::prepare_all`](super::Session::prepare_all) prepares and
/// `schema-gen statements --layout` lists.
///
/// ```
/// use schema_gen::statements::registry;
/// use schema_model::Layout;
///
/// let citus: Vec<&str> = registry(Layout::CitusSchemaSharding).map(|e| e.name()).collect();
/// assert!(citus.contains(&"lock_acquire_free") && !citus.contains(&"lock_acquire"));
/// ```
pub fn registry(layout: Layout) -> impl Iterator<Item = &'static Entry> {
    REGISTRY.iter().filter(move |entry| entry.runs_on(layout))
}

/// The maintenance statements ([`jobs::vacuum`]), apart from the hot path.
pub fn maintenance() -> &'static [Entry] {
    MAINTENANCE
}

/// Every statement a single server's engine runs, in family order, built
/// with sample inputs: what `schema-gen statements` prints (the values are
/// not shown).
///
/// ```
/// use schema_gen::statements::{all, CLAIM_PATH};
/// use schema_model::SchemaName;
///
/// let statements = all(&SchemaName::default());
/// let names: Vec<&str> = statements.iter().map(|s| s.name()).collect();
/// assert!(CLAIM_PATH.iter().all(|step| names.contains(step)));
/// ```
pub fn all(schema: &SchemaName) -> Vec<Statement> {
    all_for(schema, Layout::SingleServer)
}

/// Every statement an engine runs under `layout` ([`registry()`]), in family
/// order: [`all`] on a single server; under
/// [`Layout::CitusSchemaSharding`], [`all`] with `lock_acquire` replaced by
/// [`locks::clear_lapsed`] and [`locks::acquire_free`], and
/// `stream_read_in_commit_order` by [`streams::commit_horizon`] and
/// [`streams::read_in_commit_order_below`] (their docs say why). What
/// `schema-gen statements --layout` prints.
///
/// ```
/// use schema_gen::statements::{all, all_for};
/// use schema_model::{Layout, SchemaName};
///
/// let schema = SchemaName::default();
/// assert_eq!(all_for(&schema, Layout::SingleServer), all(&schema));
/// let citus: Vec<&str> = all_for(&schema, Layout::CitusSchemaSharding)
///     .iter()
///     .map(|s| s.name())
///     .collect();
/// assert!(citus.contains(&"lock_acquire_free") && !citus.contains(&"lock_acquire"));
/// assert!(citus.contains(&"commit_horizon") && !citus.contains(&"stream_read_in_commit_order"));
/// ```
pub fn all_for(schema: &SchemaName, layout: Layout) -> Vec<Statement> {
    registry(layout)
        .map(|entry| entry.statement(schema))
        .collect()
}

#[cfg(test)]
mod tests;
