//! [`UpgradeOptions`]: every bound of an upgrade, and the one place each
//! kind of wait ([`Wait`]) is turned into a `lock_timeout`, a
//! `statement_timeout` and a number of attempts ([`UpgradeOptions::bounds`]),
//! for the executor and the dry run alike.

use std::time::Duration;

use schema_model::Layout;

use crate::options::{Bounds, STATEMENT_ALLOWANCE};
use crate::versions::Wait;

/// The bounds an upgrade runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeOptions {
    /// The longest one wait for a lock that blocks the engine (`ACCESS
    /// EXCLUSIVE`, for a catalog change) may last before the step gives up
    /// and tries again: while it waits, the engine's statements on the
    /// table queue behind it. Also the bound of the catalog reads.
    pub lock_timeout: Duration,
    /// How many times such a step tries before the upgrade fails (naming the
    /// session it waited behind), with a growing pause between tries.
    pub lock_attempts: u32,
    /// The longest a step that blocks no engine statement may wait (an index
    /// built `CONCURRENTLY` waits for the transactions older than it; a
    /// validation for autovacuum), and the longest a step waits, before it
    /// queues, for another session's lock stronger than the engine's.
    pub wait_timeout: Duration,
    /// The longest one statement may run (an index build, a validation).
    pub statement_timeout: Duration,
    /// Keys per backfill batch (one transaction each).
    pub batch_size: u32,
    /// Where the family lives ([`Layout::SingleServer`] by default): the
    /// catalog reads ask the Citus question under
    /// [`Layout::CitusSchemaSharding`] (on a coordinator only; a schema
    /// distributed otherwise is drift), and a schema the upgrade creates is
    /// created under it.
    pub layout: Layout,
    /// Run the contract even while sessions of older releases are connected
    /// (`--allow-older-engines`): they fail once it has run. By default the
    /// contract refuses, naming them ([`ErrorKind::OlderEngines`](crate::error::ErrorKind::OlderEngines)).
    pub allow_older_engines: bool,
}

impl Default for UpgradeOptions {
    /// 1 s per lock attempt, 20 attempts, 10 minutes for the waits that
    /// block nobody, 1 hour per statement, batches of 10,000 keys, a single
    /// server, and a contract that refuses while older engines are connected.
    fn default() -> Self {
        Self {
            lock_timeout: Duration::from_secs(1),
            lock_attempts: 20,
            wait_timeout: Duration::from_secs(600),
            statement_timeout: Duration::from_secs(3600),
            batch_size: 10_000,
            layout: Layout::SingleServer,
            allow_older_engines: false,
        }
    }
}

/// What one kind of wait runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepBounds {
    /// Its `lock_timeout` and `statement_timeout`.
    pub bounds: Bounds,
    /// How many times it tries when its lock wait times out (each
    /// transaction, or each backfill batch).
    pub attempts: u32,
}

impl UpgradeOptions {
    /// The bounds of a wait of kind `wait`: the one place an upgrade's
    /// bounds are decided.
    ///
    /// - [`Wait::Brief`]: the lock bound, and a statement bound of the lock
    ///   bound plus [`STATEMENT_ALLOWANCE`] (a step that blocks the engine
    ///   holds its lock for a catalog change only: it has no business
    ///   running long once it has it), tried [`lock_attempts`](Self::lock_attempts)
    ///   times;
    /// - [`Wait::Long`]: the long bound, and a statement bound of the longer
    ///   of it and [`statement_timeout`](Self::statement_timeout) plus the
    ///   allowance, tried once;
    /// - [`Wait::Batches`]: per batch the lock bound, and the statement
    ///   bound (at least the lock bound), each batch tried
    ///   [`lock_attempts`](Self::lock_attempts) times.
    ///
    /// ```
    /// use std::time::Duration;
    /// use schema_gen::upgrade::UpgradeOptions;
    /// use schema_gen::versions::Wait;
    ///
    /// let options = UpgradeOptions::default();
    /// let brief = options.bounds(Wait::Brief);
    /// assert_eq!(brief.bounds.set_local(), "SET LOCAL lock_timeout = '1s'; SET LOCAL statement_timeout = '11s'");
    /// assert_eq!(brief.attempts, 20);
    /// assert_eq!(options.bounds(Wait::Long).bounds.statement, Some(Duration::from_secs(3610)));
    /// assert_eq!(options.bounds(Wait::Long).attempts, 1);
    /// ```
    pub fn bounds(&self, wait: Wait) -> StepBounds {
        let attempts = self.lock_attempts.max(1);
        let (lock, statement, attempts) = match wait {
            Wait::Brief => (
                self.lock_timeout,
                self.lock_timeout + STATEMENT_ALLOWANCE,
                attempts,
            ),
            Wait::Long => (
                self.wait_timeout,
                self.statement_timeout.max(self.wait_timeout) + STATEMENT_ALLOWANCE,
                1,
            ),
            Wait::Batches => (
                self.lock_timeout,
                self.statement_timeout.max(self.lock_timeout),
                attempts,
            ),
        };
        StepBounds {
            bounds: Bounds::new(lock, statement),
            attempts,
        }
    }
}

impl UpgradeOptions {
    /// The `SET LOCAL` statements that open each transaction of an upgrade
    /// (executor and dry run alike): `bounds`, and first, under the Citus
    /// layout, `citus.propagate_set_commands = 'local'`, so that Citus sends
    /// them on to the worker's part of the transaction: without it a step's
    /// lock wait on the shard (behind a worker's autovacuum, say) would be
    /// bounded by nothing but the coordinator's `statement_timeout`, while
    /// the coordinator holds the table's lock and the engine queues behind.
    ///
    /// ```
    /// use std::time::Duration;
    /// use schema_gen::options::Bounds;
    /// use schema_gen::schema_model::Layout;
    /// use schema_gen::upgrade::UpgradeOptions;
    ///
    /// let bounds = Bounds::new(Duration::from_secs(1), Duration::from_secs(11));
    /// let citus = UpgradeOptions { layout: Layout::CitusSchemaSharding, ..UpgradeOptions::default() };
    /// assert_eq!(
    ///     citus.set_local(&bounds),
    ///     "SET LOCAL citus.propagate_set_commands = 'local'; \
    ///      SET LOCAL lock_timeout = '1s'; SET LOCAL statement_timeout = '11s'"
    /// );
    /// assert_eq!(UpgradeOptions::default().set_local(&bounds), bounds.set_local());
    /// ```
    pub fn set_local(&self, bounds: &Bounds) -> String {
        match self.layout {
            Layout::SingleServer => bounds.set_local(),
            Layout::CitusSchemaSharding => format!(
                "SET LOCAL citus.propagate_set_commands = 'local'; {}",
                bounds.set_local()
            ),
        }
    }
}

/// The pause before attempt `attempt + 1`: 100 ms, doubling, at most 2 s.
pub(super) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(2))
}

/// How often a step waiting for another session's lock looks again.
pub(super) const POLL: Duration = Duration::from_millis(100);
