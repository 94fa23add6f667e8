//! Upgrades in place: a database at an older schema version moves to this
//! release's model online, expand then contract, while the previous
//! release's engines keep working.
//!
//! # Versions
//!
//! Every shipped schema is a version ([`schema_model::history`]). The
//! database records the versions it has reached in `schema_versions`
//! (created by version 3; the releases before it recorded nothing, and a
//! database they created is recognised by its exact shape). Every engine
//! reads the rows at open, in the same single round trip as the catalog
//! ([`crate::catalog`]), and works when its version lies between the newest
//! contracted and the newest expanded version ([`crate::versions::verdict()`]).
//!
//! # Expand, then contract
//!
//! [`upgrade`] runs the expand steps of every version after the database's,
//! planned from the difference between consecutive versions' shapes
//! ([`crate::versions::plan`]): new tables, columns (a new `NOT NULL` column with the
//! constant its version declares until the contract, so older inserts keep
//! working: no table rewrite), storage parameters, comments, backfills in
//! bounded batches, `CHECK`s added `NOT VALID` then validated, indexes built
//! `CONCURRENTLY` (an index whose definition changes is built under another
//! name and swapped in; the old one stays, renamed, for the older engines).
//! Afterwards the engines of the new version and of the versions since the
//! last contract all work: `check` exits 0 and says the contract is
//! pending. [`contract`] then removes what only the older engines needed
//! (transitional defaults, the replaced indexes, dropped columns and
//! tables) and adds what their writes would have broken (`CHECK`s their
//! statements violate), once the operator knows those engines are gone.
//!
//! # Online, resumable, refused when unsafe
//!
//! - **Locks.** Each step declares the strongest lock it takes
//!   ([`TableLock`]). A step that needs `ACCESS EXCLUSIVE` (a catalog
//!   change: no scan, no rewrite) waits for it at most
//!   [`UpgradeOptions::lock_timeout`] per attempt, then backs off and tries
//!   again, up to [`UpgradeOptions::lock_attempts`] times: while it waits,
//!   every later statement on the table queues behind it, so the wait must
//!   stay short. Steps that block no engine statement (`SHARE UPDATE
//!   EXCLUSIVE`: index builds, validation) wait up to
//!   [`UpgradeOptions::wait_timeout`].
//! - **Resumable.** Every step checks the catalog first and skips what is
//!   done; an index build interrupted midway leaves an invalid index, which
//!   the next run drops `CONCURRENTLY` and builds again; a backfill rerun
//!   finds only the rows still to do. An upgrade killed at any point
//!   completes when run again.
//! - **One at a time.** An upgrade holds a session-level advisory lock on
//!   the schema; a second one is refused at once, naming the first.
//! - **Refused when unsafe.** A database that is no known version (or step
//!   of an upgrade) is drift: the upgrade lists the differences and changes
//!   nothing. A database at a newer version than this release is refused.
//! - **Verified.** When the steps are done the catalog is read again and
//!   must be exactly the shape the new position implies.
//!
//! Run an upgrade on a direct connection or through session pooling: the
//! `CONCURRENTLY` steps run outside a transaction under session settings,
//! which transaction pooling would not keep.
//!
//! # One loop, two back ends
//!
//! What to run is decided below this module, without I/O: where the
//! database stands ([`crate::versions::verdict()`]) and the legs that move
//! it, in order ([`Itinerary`]). `walk` goes through the legs once per run
//! with one of two back ends: the executor runs them ([`upgrade`],
//! [`contract`]); the printer writes them as a psql script ([`dry_run`]).
//! Both take every bound from [`UpgradeOptions::bounds`], so what the dry
//! run prints is what the executor runs.

mod bounds;
mod dry_run;
mod engines;
mod executor;
mod progress;
mod session;
mod walk;

use serde::Serialize;
use tokio_postgres::Client;

use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;

use crate::bootstrap::bootstrap_with;
use crate::check::{self, Inspection};
use crate::difference::Difference;
use crate::error::{Error, ErrorKind};
use crate::options::Options;
use crate::render::AdvisoryLock;
use crate::versions::{History, Itinerary, Standing};

/// The vocabulary of the steps an upgrade reports ([`Progress`]) and prints
/// ([`DryRun`]), from the versions floor.
pub use crate::versions::{Action, Phase, Span, Step, TableLock};
pub use bounds::{StepBounds, UpgradeOptions};
pub use dry_run::DryRun;
pub use engines::APPLICATION_PREFIX;
pub use progress::Progress;
pub use session::{PROBE_TIMEOUT, require_session};

/// What an upgrade or a contract did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpgradeOutcome {
    /// The engine schema.
    pub schema: String,
    /// Where the database stood before.
    pub before: Span,
    /// Where it stands now.
    pub after: Span,
    /// Steps run.
    pub steps_run: usize,
    /// Steps found already done (a resumed upgrade).
    pub steps_skipped: usize,
    /// Whether the schema was created from scratch (there was none).
    pub created: bool,
    /// Objects the model does not own, found and left untouched
    /// ([`Difference::is_foreign`]).
    #[serde(skip)]
    pub foreign: Vec<Difference>,
}

impl UpgradeOutcome {
    /// Whether a contract is still to run.
    pub fn contract_pending(&self) -> bool {
        self.after.contracted < self.after.expanded
    }

    /// One line for an operator.
    pub fn message(&self) -> String {
        let schema = &self.schema;
        let at = if self.contract_pending() {
            format!(
                "schema {schema} is at version {} with its contract pending: engines of versions \
                 {} to {} work on it; once none older than version {} runs, run `schema-gen \
                 upgrade --contract --schema {schema}`",
                self.after.expanded,
                self.after.contracted,
                self.after.expanded,
                self.after.expanded
            )
        } else {
            format!("schema {schema} is at version {}", self.after.expanded)
        };
        let foreign = if self.foreign.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = self.foreign.iter().map(ToString::to_string).collect();
            format!(
                "; {} object{} not in the model left untouched (foreign: {})",
                self.foreign.len(),
                if self.foreign.len() == 1 { "" } else { "s" },
                list.join("; ")
            )
        };
        if self.created {
            return format!(
                "created schema {schema} at version {}{foreign}",
                self.after.expanded
            );
        }
        if self.steps_run == 0 && self.before == self.after {
            return format!("{at}: nothing to do{foreign}");
        }
        format!(
            "{at} ({} step{} run{}){foreign}",
            self.steps_run,
            if self.steps_run == 1 { "" } else { "s" },
            if self.steps_skipped > 0 {
                format!(", {} found already done", self.steps_skipped)
            } else {
                String::new()
            }
        )
    }
}

/// The upgrade lock's key for `schema` ([`AdvisoryLock::Upgrade`]).
pub fn upgrade_lock_key(schema: &SchemaName) -> i64 {
    AdvisoryLock::Upgrade.key(schema)
}

/// Moves `schema` to this release's version: runs the expand steps of every
/// version after the database's (a schema that does not exist is created
/// by [`bootstrap`](crate::bootstrap::bootstrap())), reporting each step to `progress`.
/// The contract is separate ([`contract`]).
///
/// # Errors
///
/// Every error comes with what was done before it ([`Error::done`]), which
/// stays done; a rerun resumes.
///
/// - [`ErrorKind::Drift`]: the database is no known version or upgrade
///   step; nothing was changed.
/// - [`ErrorKind::NewerVersion`]: the database is at a newer version.
/// - [`ErrorKind::InconsistentVersions`], [`ErrorKind::VersionsUnreadable`]:
///   where it stands cannot be told; nothing was changed.
/// - [`ErrorKind::ContractFirst`]: a pending contract must run first.
/// - [`ErrorKind::UpgradeLocked`]: another upgrade is running.
/// - [`ErrorKind::LockTimeout`]: a step could not get its lock within its
///   attempts (naming the session it waited behind).
/// - [`ErrorKind::Blocked`]: a step waited its whole long bound for another
///   session holding a lock stronger than the engine's on its table.
/// - [`ErrorKind::UpgradeDiffers`]: the steps ran but the catalog is not
///   the shape they should make.
/// - [`ErrorKind::Privilege`], [`ErrorKind::Connection`],
///   [`ErrorKind::Query`], [`ErrorKind::UndecodableReply`],
///   [`ErrorKind::Defect`]; and as [`bootstrap`](crate::bootstrap::bootstrap()) for a
///   schema it creates.
pub async fn upgrade(
    client: &mut Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<UpgradeOutcome, Error> {
    Upgrader::new(check::shipped_history()?, options)
        .expand(client, schema, progress)
        .await
}

/// Runs the contract steps of every expanded version not yet contracted, up
/// to this release's version: what only the older engines needed goes.
/// Run it once no engine older than this release's version works on the
/// database (the README says how to tell).
///
/// # Errors
///
/// As [`upgrade`], and [`ErrorKind::NotExpanded`] when the database is not
/// expanded to this release's version (run [`upgrade`] first).
pub async fn contract(
    client: &mut Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<UpgradeOutcome, Error> {
    Upgrader::new(check::shipped_history()?, options)
        .contract(client, schema, progress)
        .await
}

/// The steps [`upgrade`] (or with `contract`, [`contract`]) would run now,
/// and the psql script that runs them, from one catalog read: nothing is
/// changed.
///
/// # Errors
///
/// As the catalog read, and as [`upgrade`] for a database it would refuse
/// (drift, a newer version, unreadable versions).
pub async fn dry_run(
    client: &Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    contract: bool,
) -> Result<DryRun, Error> {
    Upgrader::new(check::shipped_history()?, options)
        .dry_run(client, schema, contract)
        .await
}

/// Upgrades along a [`History`]: [`upgrade`], [`contract`] and [`dry_run`]
/// walk this release's ([`History::shipped`]); another history is how a test
/// tries a version before it ships.
#[derive(Debug, Clone, Copy)]
pub struct Upgrader<'a> {
    history: &'a History,
    options: &'a UpgradeOptions,
}

impl<'a> Upgrader<'a> {
    /// Upgrades along `history` under `options`.
    pub fn new(history: &'a History, options: &'a UpgradeOptions) -> Self {
        Self { history, options }
    }

    fn catalog_options(&self) -> Options {
        Options {
            lock_timeout: self.options.lock_timeout,
            layout: self.options.layout,
        }
    }

    /// The command line that runs this upgrade (`schema-gen upgrade
    /// --layout citus --contract`), for the remedies errors give.
    fn command(&self, contract: bool) -> String {
        let mut command = "schema-gen upgrade".to_owned();
        if self.options.layout.is_citus() {
            command.push_str(&format!(" --layout {}", self.options.layout.name()));
        }
        if contract {
            command.push_str(" --contract");
        }
        command
    }

    async fn inspect(&self, client: &Client, schema: &SchemaName) -> Result<Inspection, Error> {
        check::inspect(client, schema, &self.catalog_options(), self.history).await
    }

    /// [`upgrade`] along this history.
    ///
    /// # Errors
    ///
    /// As [`upgrade`]; and [`ErrorKind::Defect`] for a schema that does not
    /// exist when the history is not this release's (only a bootstrap of
    /// this release creates one).
    pub async fn expand(
        &self,
        client: &mut Client,
        schema: &SchemaName,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<UpgradeOutcome, Error> {
        let inspection = self.inspect(client, schema).await?;
        if matches!(
            inspection.verdict.standing,
            Standing::Absent | Standing::Unversioned
        ) {
            return self.create(client, schema).await;
        }
        let lock = executor::UpgradeLock::take(client, schema).await?;
        let result = self.walk((client, &lock), schema, false, progress).await;
        lock.release(client).await;
        result
    }

    /// [`contract`] along this history.
    ///
    /// # Errors
    ///
    /// As [`contract`].
    pub async fn contract(
        &self,
        client: &mut Client,
        schema: &SchemaName,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<UpgradeOutcome, Error> {
        let lock = executor::UpgradeLock::take(client, schema).await?;
        let result = self.walk((client, &lock), schema, true, progress).await;
        lock.release(client).await;
        result
    }

    /// [`dry_run`] along this history.
    ///
    /// # Errors
    ///
    /// As [`dry_run`].
    pub async fn dry_run(
        &self,
        client: &Client,
        schema: &SchemaName,
        contract: bool,
    ) -> Result<DryRun, Error> {
        let inspection = self.inspect(client, schema).await?;
        if matches!(
            inspection.verdict.standing,
            Standing::Absent | Standing::Unversioned
        ) {
            return Ok(dry_run::creates(
                schema,
                &inspection.verdict,
                self.options.layout,
            ));
        }
        let itinerary = self.itinerary(schema, &inspection, contract)?;
        Ok(dry_run::print(schema, &inspection.live, &itinerary, self.options).await)
    }

    /// A schema that does not exist, or lacks tables: created by bootstrap.
    async fn create(
        &self,
        client: &mut Client,
        schema: &SchemaName,
    ) -> Result<UpgradeOutcome, Error> {
        if self.history.target().number() != MODEL_VERSION {
            return Err(ErrorKind::Defect {
                message: format!(
                    "schema {schema} does not exist, and only this release's bootstrap creates \
                     one (at version {MODEL_VERSION}), not a schema at version {}",
                    self.history.target().number()
                ),
            }
            .into());
        }
        let outcome = bootstrap_with(client, schema, &self.catalog_options()).await?;
        let span = Span {
            contracted: MODEL_VERSION,
            expanded: MODEL_VERSION,
        };
        Ok(UpgradeOutcome {
            schema: schema.to_string(),
            before: span,
            after: span,
            steps_run: 0,
            steps_skipped: 0,
            created: true,
            foreign: outcome.foreign().to_vec(),
        })
    }

    /// The legs from where the database stands, or the error that refuses
    /// to move it from there.
    fn itinerary(
        &self,
        schema: &SchemaName,
        inspection: &Inspection,
        contract: bool,
    ) -> Result<Itinerary, Error> {
        let verdict = &inspection.verdict;
        let refusal: Option<ErrorKind> = match &verdict.standing {
            Standing::Unreadable => Some(ErrorKind::VersionsUnreadable {
                schema: schema.clone(),
                role: inspection.live.role.clone(),
            }),
            Standing::Newer { .. } => {
                let span = verdict.span_or_zero();
                Some(ErrorKind::NewerVersion {
                    schema: schema.clone(),
                    found: span.expanded,
                    contracted: span.contracted,
                    model: verdict.target,
                })
            }
            Standing::Inconsistent => Some(ErrorKind::InconsistentVersions {
                schema: schema.clone(),
            }),
            Standing::Unrecognised { nearest } => Some(ErrorKind::Drift {
                schema: schema.clone(),
                differences: in_the_way(&verdict.differences),
                nearest: Some(*nearest),
            }),
            _ if !verdict.matches() || !inspection.placement.is_empty() => {
                let mut differences = in_the_way(&verdict.differences);
                differences.extend(inspection.placement.iter().cloned());
                Some(ErrorKind::Drift {
                    schema: schema.clone(),
                    differences,
                    nearest: None,
                })
            }
            _ => None,
        };
        if let Some(kind) = refusal {
            return Err(kind.into());
        }
        if contract {
            Itinerary::contract(verdict, self.history, schema)
        } else {
            Itinerary::expand(verdict, self.history, schema, &executor::release())
        }
    }

    /// Under the upgrade lock: judges the database again, walks its
    /// itinerary with the executor, and checks what the steps made.
    async fn walk(
        &self,
        (client, lock): (&Client, &executor::UpgradeLock),
        schema: &SchemaName,
        contract: bool,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<UpgradeOutcome, Error> {
        let inspection = self.inspect(client, schema).await?;
        let itinerary = self.itinerary(schema, &inspection, contract)?;
        if let Some((version, breaks)) = engines::breaks(&itinerary) {
            let (sessions, unseen) = engines::older_than(client, schema, version).await?;
            if !sessions.is_empty() && !self.options.allow_older_engines {
                return Err(ErrorKind::OlderEngines {
                    schema: schema.clone(),
                    version,
                    sessions,
                    breaks,
                    unseen,
                }
                .into());
            }
            engines::report(progress, sessions, unseen);
        }
        let mut executor = executor::Executor::new(
            (client, lock),
            schema,
            self.options,
            self.catalog_options(),
            (&inspection.live.role, self.command(contract)),
            progress,
        );
        let walked = walk::walk(&itinerary, &mut executor).await;
        let done = executor.done();
        walked.map_err(|err| err.with_done(done))?;
        let after = self
            .inspect(client, schema)
            .await
            .map_err(|e| e.with_done(done))?;
        let verdict = after.verdict;
        let settled = verdict
            .progress
            .as_ref()
            .is_none_or(|p| p.phase == crate::versions::Phase::Contract && p.done == 0);
        if !verdict.matches() || !settled {
            let differences = in_the_way(&verdict.differences);
            return Err(Error::from(ErrorKind::UpgradeDiffers {
                schema: schema.clone(),
                differences,
            })
            .with_done(done));
        }
        Ok(UpgradeOutcome {
            schema: schema.to_string(),
            before: itinerary.before,
            after: verdict.span_or_zero(),
            steps_run: done.steps_run,
            steps_skipped: done.steps_skipped,
            created: false,
            foreign: verdict.foreign().cloned().collect(),
        })
    }
}

/// The differences that stand in an upgrade's way: drift and missing
/// objects; comments and foreign objects are planned around.
fn in_the_way(differences: &[Difference]) -> Vec<Difference> {
    differences
        .iter()
        .filter(|d| d.is_drift() || d.is_missing_object())
        .cloned()
        .collect()
}
