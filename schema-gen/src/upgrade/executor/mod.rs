//! The executor: the back end that runs an itinerary's legs on the
//! database, one step at a time, each under the bounds of its kind of wait
//! ([`UpgradeOptions::bounds`]), skipping what the catalog shows done, and
//! reporting each event ([`Progress`]).

mod backfill;
mod lock;

use std::time::Instant;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use schema_model::SchemaName;

use super::bounds::{POLL, backoff};
use super::progress::Progress;
use super::walk::Backend;
use super::{StepBounds, UpgradeOptions};
use crate::catalog;
use crate::error::{
    Context, Done, Error, ErrorKind, LockTarget, Step as ErrorStep, Tries, classify,
};
use crate::options::Bounds;
use crate::options::Options;
use crate::versions::done::leg_done;
use crate::versions::sql::drop_index;
use crate::versions::{Phase, Record, Step, StepLeg, Wait, Work};

pub(super) use lock::UpgradeLock;

/// The release that writes a version row: `schema-gen 0.3.0`.
pub(super) fn release() -> String {
    crate::render::record::release()
}

/// Runs legs on one connection, checking before each that the connection's
/// session still holds the upgrade lock.
pub(super) struct Executor<'a> {
    client: &'a Client,
    /// The upgrade lock, checked before each leg.
    lock: &'a UpgradeLock,
    schema: &'a SchemaName,
    options: &'a UpgradeOptions,
    /// The bounds of the catalog reads between steps.
    catalog: Options,
    context: Context,
    done: Done,
    progress: &'a mut (dyn FnMut(&Progress) + Send),
}

impl<'a> Executor<'a> {
    /// An executor for `schema` on `client`, run by `role` through
    /// `command` (`schema-gen upgrade --contract`: the remedy errors give).
    pub(super) fn new(
        (client, lock): (&'a Client, &'a UpgradeLock),
        schema: &'a SchemaName,
        options: &'a UpgradeOptions,
        catalog: Options,
        (role, command): (&str, String),
        progress: &'a mut (dyn FnMut(&Progress) + Send),
    ) -> Self {
        Self {
            client,
            lock,
            schema,
            options,
            catalog,
            context: Context::of(role, schema).upgrading(command),
            done: Done::default(),
            progress,
        }
    }

    /// What it has done so far.
    pub(super) fn done(&self) -> Done {
        self.done
    }

    fn target(&self, table: &str) -> LockTarget {
        LockTarget::Relation {
            schema: self.schema.clone(),
            name: table.to_owned(),
        }
    }

    fn error_step(&self, doing: &str, target: Option<LockTarget>, bounds: &Bounds) -> ErrorStep {
        ErrorStep {
            doing: doing.to_owned(),
            waiting_for: Some("a lock on the table that another session holds".to_owned()),
            lock: target,
            timeout: bounds.lock,
            in_transaction: false,
            ..ErrorStep::default()
        }
    }

    async fn fail(&mut self, err: tokio_postgres::Error, step: &ErrorStep) -> Error {
        catalog::explain(self.client, classify(err, step, &self.context)).await
    }

    /// Runs `statements` in one transaction under `bounds`; a lock timeout
    /// rolls back and tries again (reported when `step` is given), up to its
    /// attempts. A brief wait on a table first waits out, without queueing,
    /// the sessions that alter it ([`Executor::until_no_one_else_alters`]).
    async fn transaction(
        &mut self,
        statements: &[String],
        doing: &str,
        wait: Wait,
        step: Option<&Step>,
    ) -> Result<(), Error> {
        let StepBounds { bounds, attempts } = self.options.bounds(wait);
        let mut attempt = 1;
        let started = Instant::now();
        loop {
            if let (Wait::Brief, Some(step)) = (wait, step) {
                self.until_no_one_else_alters(step, doing).await?;
            }
            let opening = self.options.set_local(&bounds);
            let Err(err) = send_transaction(self.client, &opening, statements).await else {
                return Ok(());
            };
            // Ends the failed transaction; a lost connection ends it too.
            let _ = self.client.batch_execute("ROLLBACK").await;
            let timed_out = err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE);
            if timed_out && attempt < attempts {
                if let Some(step) = step {
                    self.report_retry(step, attempt, attempts, &bounds).await;
                }
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
            let target = step.map(|s| self.target(&s.table));
            let error_step = self.error_step(doing, target, &bounds);
            let failed = self.fail(err, &error_step).await;
            return Err(if timed_out {
                failed.with_tries(Tries {
                    attempts: attempt,
                    over: started.elapsed(),
                })
            } else {
                failed
            });
        }
    }

    /// Reports that `attempt` of `of` at `step`'s lock gave up, naming the
    /// sessions holding or awaiting a lock on its table now.
    async fn report_retry(&mut self, step: &Step, attempt: u32, of: u32, bounds: &Bounds) {
        let holders = catalog::lock_holders(self.client, &self.target(&step.table))
            .await
            .unwrap_or_default();
        (self.progress)(&Progress::LockRetry {
            step: step.clone(),
            attempt,
            of,
            waited_ms: bounds
                .lock
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            holders,
        });
    }

    /// Runs one statement outside any transaction block under session-level
    /// bounds of a long wait (reset afterwards).
    async fn alone(&mut self, statement: &str, doing: &str, table: &str) -> Result<(), Error> {
        let StepBounds { bounds, .. } = self.options.bounds(Wait::Long);
        let result = match self.client.batch_execute(&bounds.set_session()).await {
            Ok(()) => self.client.batch_execute(statement).await,
            Err(err) => Err(err),
        };
        let _ = self.client.batch_execute(Bounds::RESET).await;
        match result {
            Ok(()) => Ok(()),
            Err(err) => {
                let error_step = self.error_step(doing, Some(self.target(table)), &bounds);
                Err(self.fail(err, &error_step).await)
            }
        }
    }

    /// Waits, without asking for a lock (so without queueing anyone), while
    /// another session holds or awaits a lock on the step's table stronger
    /// than the engine's statements take (`SHARE UPDATE EXCLUSIVE` and up:
    /// an autovacuum, a `VACUUM`, an index build, DDL;
    /// [`LockTarget::Alterers`]). A step that asked for `ACCESS EXCLUSIVE`
    /// behind such a holder would queue every engine statement behind it
    /// for its whole lock bound, every attempt (measured by the upgrade
    /// benchmark: an autovacuum of `jobs` stalled the claims for 1 s, 3 to 5
    /// times); the engine's own locks last a statement, so once these are
    /// gone an attempt waits briefly. Bounded by
    /// [`UpgradeOptions::wait_timeout`].
    async fn until_no_one_else_alters(&mut self, step: &Step, doing: &str) -> Result<(), Error> {
        let target = LockTarget::Alterers {
            schema: self.schema.clone(),
            name: step.table.clone(),
        };
        let started = Instant::now();
        let mut reported = false;
        loop {
            let holders = catalog::holders(self.client, &target)
                .await
                .map_err(|err| {
                    let step = ErrorStep {
                        doing: doing.to_owned(),
                        ..ErrorStep::default()
                    };
                    classify(err, &step, &self.context)
                })?;
            let Some(holder) = holders.into_iter().next() else {
                return Ok(());
            };
            if !reported {
                reported = true;
                (self.progress)(&Progress::WaitingFor {
                    step: step.clone(),
                    pid: holder.pid,
                    mode: holder.mode.clone(),
                    backend: holder.backend.clone().unwrap_or_default(),
                });
            }
            let waited = started.elapsed();
            if waited >= self.options.wait_timeout {
                return Err(ErrorKind::Blocked {
                    doing: doing.to_owned(),
                    holder,
                    waited: self.options.wait_timeout,
                }
                .into());
            }
            tokio::time::sleep(POLL.min(self.options.wait_timeout.saturating_sub(waited))).await;
        }
    }

    async fn run(
        &mut self,
        step: &Step,
        work: &Work,
        live: &catalog::LiveCatalog,
    ) -> Result<(), Error> {
        let doing = format!("upgrading schema {}: {}", self.schema, step.describe());
        match work {
            Work::Transaction(statements) => {
                let wait = step.execution().wait;
                self.transaction(statements, &doing, wait, Some(step)).await
            }
            Work::Alone {
                statement,
                rebuilds,
            } => {
                if let Some(index) = rebuilds
                    && live
                        .relation(&step.table)
                        .is_some_and(|t| t.indexes.iter().any(|i| &i.name == index && !i.valid))
                {
                    // An interrupted build's invalid leftover.
                    self.alone(&drop_index(self.schema, index), &doing, &step.table)
                        .await?;
                }
                self.alone(statement, &doing, &step.table).await
            }
            Work::Batches { batch, vacuum } => {
                let changed = self.backfill(step, batch, &doing).await?;
                if changed > 0 {
                    // Every changed row left a dead version (and index entries
                    // the claim walks): vacuumed now, as the engine's own
                    // maintenance would (`SKIP_LOCKED`: it never waits;
                    // measured: left to autovacuum, ~780k dead versions at 1M
                    // jobs slowed version 1's claims 1.7-2x until it came, and
                    // its run then met the contract's ACCESS EXCLUSIVE step).
                    self.alone(vacuum, &doing, &step.table).await?;
                    (self.progress)(&Progress::Vacuumed { step: step.clone() });
                }
                Ok(())
            }
        }
    }
}

/// Runs `statements` in one transaction: the opening (`BEGIN` and the
/// `SET LOCAL` bounds, `set_local`, which lock nothing) first, on its own, so nothing runs unless the transaction and its bounds are in force;
/// then each statement as a query of its own, and the `COMMIT`, pipelined:
/// all are sent before the first reply is read, so the server has the
/// `COMMIT` in hand before a statement takes its lock (no round trip while
/// it holds one). One utility statement per query is what Citus takes (a
/// query of several is refused: `cannot execute multiple utility events`).
/// A statement that fails aborts the transaction: the ones after it are
/// refused, the `COMMIT` rolls back, and the first failure is returned.
async fn send_transaction(
    client: &Client,
    set_local: &str,
    statements: &[String],
) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(&format!("BEGIN; {set_local}")).await?;
    let queries = statements
        .iter()
        .map(String::as_str)
        .chain(std::iter::once("COMMIT"));
    let replies = futures_util::future::join_all(queries.map(|q| client.batch_execute(q))).await;
    replies
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

impl Backend for Executor<'_> {
    async fn record(&mut self, record: Record, statements: &[String]) -> Result<(), Error> {
        self.lock.verify(self.client).await?;
        let doing = format!(
            "recording the upgrade of schema {}: {}",
            self.schema,
            record.describe()
        );
        self.transaction(statements, &doing, Wait::Brief, None)
            .await?;
        let finished = match record {
            Record::Expanded { version } => Some((version, Phase::Expand)),
            Record::Contracted { version } => Some((version, Phase::Contract)),
            Record::Recognised { .. } | Record::Started { .. } => None,
        };
        if let Some((version, phase)) = finished {
            self.done.recorded += 1;
            (self.progress)(&Progress::Recorded { version, phase });
        }
        Ok(())
    }

    async fn step(&mut self, leg: &StepLeg) -> Result<(), Error> {
        let StepLeg {
            step,
            index,
            of,
            work,
            ..
        } = leg;
        let (index, of) = (*index, *of);
        self.lock.verify(self.client).await?;
        let live = catalog::read(self.client, self.schema, &self.catalog).await?;
        if leg_done(leg, &live) {
            self.done.steps_skipped += 1;
            (self.progress)(&Progress::StepSkipped { step: step.clone() });
            return Ok(());
        }
        (self.progress)(&Progress::StepStarted {
            step: step.clone(),
            index,
            of,
        });
        let started = Instant::now();
        self.run(step, work, &live).await?;
        self.done.steps_run += 1;
        (self.progress)(&Progress::StepDone {
            step: step.clone(),
            elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        Ok(())
    }
}
