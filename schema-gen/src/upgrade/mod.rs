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
//! contracted and the newest expanded version ([`position::Recorded::serves`]).
//!
//! # Expand, then contract
//!
//! [`upgrade`] runs the expand steps of every version after the database's,
//! planned from the difference between consecutive versions' shapes
//! ([`plan`]): new tables, columns (a new `NOT NULL` column with the
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
//!   ([`plan::TableLock`]). A step that needs `ACCESS EXCLUSIVE` (a catalog
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

pub mod plan;
pub mod position;
pub mod record;
pub mod script;
pub mod sql;
pub mod status;

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use schema_model::SchemaName;
use schema_model::history::{MODEL_VERSION, SchemaVersion};

use crate::catalog::{self, LiveCatalog};
use crate::error::{Context, Error, ErrorKind, LockTarget, Step as ErrorStep, classify};
use crate::options::duration_words;
use crate::{Options, bootstrap_with};

pub use plan::{Action, Phase, PlanError, Step, TableLock, VersionPlan};
pub use position::{History, Located, Position, Recorded, StepsDone, locate};
use sql::StepSql;
pub use status::{Status, VersionState, status};

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
    /// validation for autovacuum).
    pub wait_timeout: Duration,
    /// The longest one statement may run (an index build, a validation).
    pub statement_timeout: Duration,
    /// Keys per backfill batch (one transaction each).
    pub batch_size: u32,
}

impl Default for UpgradeOptions {
    /// 1 s per lock attempt, 20 attempts, 10 minutes for the waits that
    /// block nobody, 1 hour per statement, batches of 10,000 keys.
    fn default() -> Self {
        Self {
            lock_timeout: Duration::from_secs(1),
            lock_attempts: 20,
            wait_timeout: Duration::from_secs(600),
            statement_timeout: Duration::from_secs(3600),
            batch_size: 10_000,
        }
    }
}

impl UpgradeOptions {
    fn catalog_options(&self) -> Options {
        Options {
            lock_timeout: self.lock_timeout,
            ..Options::default()
        }
    }
}

/// What an upgrade reports while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Progress {
    /// A step starts (`index` counts from 1 within its version and phase).
    StepStarted {
        /// The step.
        step: Step,
        /// Its place.
        index: usize,
        /// The steps of its version and phase.
        of: usize,
    },
    /// A step was already done (the catalog shows its effect): skipped.
    StepSkipped {
        /// The step.
        step: Step,
    },
    /// A step is done.
    StepDone {
        /// The step.
        step: Step,
        /// How long it took, in milliseconds.
        elapsed_ms: u64,
    },
    /// A step gave up waiting for its lock after the lock bound and will try
    /// again.
    LockRetry {
        /// The step.
        step: Step,
        /// The attempt that gave up (from 1).
        attempt: u32,
    },
    /// A step waits (without queueing anyone) for another session to
    /// release a lock stronger than the engine's on its table.
    WaitingFor {
        /// The step.
        step: Step,
        /// The session it waits for.
        pid: i32,
        /// The lock that session holds or awaits, as `pg_locks` names it.
        mode: String,
        /// What that session is (`autovacuum worker`, `client backend`).
        backend: String,
    },
    /// A backfill changed rows, and the table was vacuumed after it.
    Vacuumed {
        /// The step.
        step: Step,
    },
    /// A backfill batch is done.
    Batch {
        /// The step.
        step: Step,
        /// Rows it changed.
        rows: u64,
        /// Keys walked so far.
        keys_done: i64,
        /// Keys to walk in all.
        keys_total: i64,
    },
    /// A version's phase is done and recorded.
    Recorded {
        /// The version.
        version: u32,
        /// The phase.
        phase: Phase,
    },
}

impl Progress {
    /// One line for an operator.
    pub fn line(&self) -> String {
        match self {
            Self::StepStarted { step, index, of } => format!(
                "version {} {} step {index}/{of}: {}",
                step.version,
                phase_word(step.phase),
                step.describe()
            ),
            Self::StepSkipped { step } => format!("  already done: {}", step.describe()),
            Self::StepDone { elapsed_ms, .. } => format!("  done in {elapsed_ms} ms"),
            Self::WaitingFor {
                pid, mode, backend, ..
            } => format!(
                "  waiting for session {pid} ({backend}) to release its {mode} on the table \
                 (not queueing: the engine is not held up)"
            ),
            Self::Vacuumed { step } => format!("  vacuumed {} after the backfill", step.table),
            Self::LockRetry { attempt, .. } => {
                format!("  gave up waiting for the lock (attempt {attempt}); trying again shortly")
            }
            Self::Batch {
                rows,
                keys_done,
                keys_total,
                ..
            } => format!("  {rows} rows; {keys_done} of {keys_total} keys"),
            Self::Recorded { version, phase } => {
                format!("version {version}: {} recorded", phase_word(*phase))
            }
        }
    }
}

fn phase_word(phase: Phase) -> &'static str {
    match phase {
        Phase::Expand => "expand",
        Phase::Contract => "contract",
    }
}

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
}

/// The versions whose engines a database serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// The newest version whose contract is done.
    pub contracted: u32,
    /// The newest version whose expand is done.
    pub expanded: u32,
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
        if self.created {
            return format!("created schema {schema} at version {}", self.after.expanded);
        }
        if self.steps_run == 0 && self.before == self.after {
            return format!("{at}: nothing to do");
        }
        format!(
            "{at} ({} step{} run{})",
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

fn other(message: String) -> Error {
    ErrorKind::Other { message }.into()
}

fn history() -> Result<History, Error> {
    History::load().map_err(|e| other(format!("{e} (a defect of this release)")))
}

/// Moves `schema` to this release's version: runs the expand steps of every
/// version after the database's (a schema that does not exist is created
/// by [`bootstrap`](crate::bootstrap())), reporting each step to `progress`.
/// The contract is separate ([`contract`]).
///
/// # Errors
///
/// - [`ErrorKind::Drift`]: the database is no known version or upgrade
///   step; nothing was changed.
/// - [`ErrorKind::NewerVersion`]: the database is at a newer version.
/// - [`ErrorKind::ContractFirst`]: a pending contract must run first.
/// - [`ErrorKind::UpgradeLocked`]: another upgrade is running.
/// - [`ErrorKind::LockTimeout`]: a step could not get its lock within its
///   attempts (naming the session it waited behind); what was done so far
///   stays done, and a rerun resumes.
/// - [`ErrorKind::CreatedDiffers`]: the steps ran but the catalog is not
///   the shape they should make.
/// - [`ErrorKind::Privilege`], [`ErrorKind::Connection`],
///   [`ErrorKind::Query`], [`ErrorKind::VersionsUnreadable`].
pub async fn upgrade(
    client: &mut Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<UpgradeOutcome, Error> {
    let history = history()?;
    let live = catalog::read(client, schema, &options.catalog_options()).await?;
    let located = locate(&live, schema, &history);
    if matches!(located.position, Position::NoSchema | Position::Creatable) {
        bootstrap_with(client, schema, &options.catalog_options()).await?;
        let span = Span {
            contracted: MODEL_VERSION,
            expanded: MODEL_VERSION,
        };
        return Ok(UpgradeOutcome {
            schema: schema.to_string(),
            before: span,
            after: span,
            steps_run: 0,
            steps_skipped: 0,
            created: true,
        });
    }
    let guard = UpgradeLock::take(client, schema).await?;
    let result = expand_all(client, schema, options, &history, progress).await;
    guard.release(client).await;
    result
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
    let history = history()?;
    let guard = UpgradeLock::take(client, schema).await?;
    let result = contract_all(client, schema, options, &history, progress).await;
    guard.release(client).await;
    result
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
) -> Result<script::DryRun, Error> {
    let history = history()?;
    let live = catalog::read(client, schema, &options.catalog_options()).await?;
    let located = locate(&live, schema, &history);
    if matches!(located.position, Position::NoSchema | Position::Creatable) {
        return Ok(script::DryRun {
            before: span(&located),
            steps: Vec::new(),
            script: format!(
                "-- schema {schema} does not exist yet: the upgrade creates it at version \
                 {MODEL_VERSION}, which is `schema-gen sql --schema {schema}`.\n{}",
                crate::render::script(schema)
            ),
        });
    }
    let (live, located) = checked(live, located, schema)?;
    Ok(script::render(
        schema, &history, &live, &located, contract, options,
    ))
}

/// Where the database stands, for a plan: the position after checking that
/// the catalog matches it.
async fn located(
    client: &Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    history: &History,
) -> Result<(LiveCatalog, Located), Error> {
    let live = catalog::read(client, schema, &options.catalog_options()).await?;
    let located = locate(&live, schema, history);
    checked(live, located, schema)
}

/// The position, or the error that refuses to move the database from it.
fn checked(
    live: LiveCatalog,
    located: Located,
    schema: &SchemaName,
) -> Result<(LiveCatalog, Located), Error> {
    match &located.position {
        Position::Unreadable => Err(ErrorKind::VersionsUnreadable {
            schema: schema.clone(),
            role: live.role.clone(),
        }
        .into()),
        Position::Recorded(recorded) if recorded.expanded > MODEL_VERSION => {
            Err(ErrorKind::NewerVersion {
                schema: schema.clone(),
                found: recorded.expanded,
                contracted: recorded.contracted,
                model: MODEL_VERSION,
            }
            .into())
        }
        _ if !located.matches() || matches!(located.position, Position::Unrecognised) => {
            Err(ErrorKind::Drift {
                schema: schema.clone(),
                differences: located.differences.clone(),
            }
            .into())
        }
        Position::Recorded(recorded) if recorded.inconsistent => Err(other(format!(
            "schema {schema}: its schema_versions rows are no upgrade this release can follow \
             (a version contracted before it expanded, or an expand skipped); nothing was \
             changed: compare them with `SELECT * FROM {schema}.schema_versions`"
        ))),
        _ => Ok((live, located)),
    }
}

fn span(located: &Located) -> Span {
    match &located.position {
        Position::Recognised { version } => Span {
            contracted: *version,
            expanded: *version,
        },
        Position::Recorded(recorded) => Span {
            contracted: recorded.contracted,
            expanded: recorded.expanded,
        },
        _ => Span {
            contracted: 0,
            expanded: 0,
        },
    }
}

async fn expand_all(
    client: &mut Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    history: &History,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<UpgradeOutcome, Error> {
    let (_, located) = located(client, schema, options, history).await?;
    let before = span(&located);
    let mut counts = Counts::default();
    let runner = Runner {
        schema,
        options,
        release: record::release(),
    };
    if let Position::Recognised { version } = located.position {
        // The machinery first: the version table, recording what the shape says.
        let model = history
            .version(MODEL_VERSION)
            .ok_or_else(|| other("this release does not know its own version".to_owned()))?;
        let mut statements = sql::table_statements(model, schema, "schema_versions");
        statements.push(record::reached(
            schema,
            version,
            &format!("{} (recognised by shape)", runner.release),
        ));
        runner
            .transaction(
                client,
                Transaction {
                    statements: &statements,
                    doing: &format!("creating {schema}.schema_versions"),
                    target: None,
                    wait_long: false,
                    step: None,
                },
                progress,
            )
            .await?;
    }
    let first = located
        .progress
        .as_ref()
        .filter(|p| p.phase == Phase::Expand)
        .map_or(before.expanded + 1, |p| p.version);
    for number in first..=MODEL_VERSION {
        let (version, plan) = match (history.version(number), history.plan_to(number)) {
            (Some(version), Some(plan)) => (version, plan),
            _ => {
                return Err(other(format!(
                    "this release has no plan to version {number}"
                )));
            }
        };
        for pending in before.contracted + 1..number {
            if let Some(earlier) = history.plan_to(pending)
                && earlier.contract_must_precede(plan)
            {
                return Err(ErrorKind::ContractFirst {
                    schema: schema.clone(),
                    pending,
                    next: number,
                }
                .into());
            }
        }
        runner
            .simple(client, &record::started(schema, number, &runner.release))
            .await?;
        runner
            .steps(client, &plan.expand, version, &mut counts, progress)
            .await?;
        runner
            .simple(client, &record::expanded(schema, number))
            .await?;
        progress(&Progress::Recorded {
            version: number,
            phase: Phase::Expand,
        });
    }
    finish(client, schema, options, history, before, counts).await
}

async fn contract_all(
    client: &mut Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    history: &History,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<UpgradeOutcome, Error> {
    let (_, located) = located(client, schema, options, history).await?;
    let before = span(&located);
    let expanding = located
        .progress
        .as_ref()
        .is_some_and(|p| p.phase == Phase::Expand);
    if before.expanded != MODEL_VERSION || expanding {
        let reason = if before.expanded > MODEL_VERSION {
            format!(
                "it is at version {}, newer than this release",
                before.expanded
            )
        } else {
            format!(
                "it is expanded to version {} only{}: run `schema-gen upgrade --schema {schema}` \
                 first",
                before.expanded,
                if expanding {
                    ", with an expand under way or interrupted"
                } else {
                    ""
                }
            )
        };
        return Err(ErrorKind::NotExpanded {
            schema: schema.clone(),
            model: MODEL_VERSION,
            reason,
        }
        .into());
    }
    let mut counts = Counts::default();
    let runner = Runner {
        schema,
        options,
        release: record::release(),
    };
    for number in before.contracted + 1..=MODEL_VERSION {
        let (version, plan) = match (history.version(number), history.plan_to(number)) {
            (Some(version), Some(plan)) => (version, plan),
            _ => {
                return Err(other(format!(
                    "this release has no plan to version {number}"
                )));
            }
        };
        runner
            .steps(client, &plan.contract, version, &mut counts, progress)
            .await?;
        runner
            .simple(client, &record::contracted(schema, number))
            .await?;
        progress(&Progress::Recorded {
            version: number,
            phase: Phase::Contract,
        });
    }
    finish(client, schema, options, history, before, counts).await
}

/// Reads the catalog once more: the steps must have made exactly the shape
/// the new position implies.
async fn finish(
    client: &Client,
    schema: &SchemaName,
    options: &UpgradeOptions,
    history: &History,
    before: Span,
    counts: Counts,
) -> Result<UpgradeOutcome, Error> {
    let live = catalog::read(client, schema, &options.catalog_options()).await?;
    let located = locate(&live, schema, history);
    let settled = located
        .progress
        .as_ref()
        .is_none_or(|p| p.phase == Phase::Contract && p.done == 0);
    if !located.matches() || !settled {
        let list: Vec<String> = located
            .differences
            .iter()
            .filter(|d| !d.is_comment())
            .map(ToString::to_string)
            .collect();
        return Err(other(format!(
            "the upgrade steps of schema {schema} ran, but the catalog is not the shape they \
             should make: {}; something in this database changes objects as they are altered \
             (an event trigger?), or another session changed them meanwhile; what ran stays \
             done: check the differences with `schema-gen check --schema {schema}`",
            if list.is_empty() {
                "the recorded versions do not say where it stands".to_owned()
            } else {
                list.join("; ")
            }
        )));
    }
    Ok(UpgradeOutcome {
        schema: schema.to_string(),
        before,
        after: span(&located),
        steps_run: counts.run,
        steps_skipped: counts.skipped,
        created: false,
    })
}

#[derive(Debug, Default)]
struct Counts {
    run: usize,
    skipped: usize,
}

/// The session-level advisory lock that lets one upgrade run at a time.
struct UpgradeLock {
    key: i64,
}

/// The upgrade lock's key for `schema`: FNV-1a over a fixed prefix and the
/// name, like the bootstrap's ([`render::advisory_lock_key`](crate::render::advisory_lock_key)),
/// with another prefix.
pub fn upgrade_lock_key(schema: &SchemaName) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "alkstore-schema upgrade:"
        .bytes()
        .chain(schema.as_str().bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

impl UpgradeLock {
    async fn take(client: &Client, schema: &SchemaName) -> Result<Self, Error> {
        let key = upgrade_lock_key(schema);
        let context = Context {
            role: "the current role".to_owned(),
            schema: schema.clone(),
        };
        let step = ErrorStep {
            doing: format!("taking the upgrade lock of schema {schema}"),
            ..ErrorStep::default()
        };
        let row = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(|e| classify(e, &step, &context))?;
        let taken: bool = row.try_get(0).map_err(|e| classify(e, &step, &context))?;
        if taken {
            return Ok(Self { key });
        }
        let probe = catalog::lock_holders(
            client,
            &LockTarget::Advisory {
                schema: schema.clone(),
                key,
            },
        )
        .await
        .unwrap_or_default();
        Err(ErrorKind::UpgradeLocked {
            schema: schema.clone(),
            key,
            holders: probe,
        }
        .into())
    }

    async fn release(self, client: &Client) {
        // A lost connection releases it too.
        let _ = client
            .query_one("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await;
    }
}

/// Statements to run in one transaction, and how to word and bound it.
struct Transaction<'a> {
    statements: &'a [String],
    doing: &'a str,
    /// The lock a wait is for, to name its holder.
    target: Option<LockTarget>,
    /// Whether the wait blocks no engine statement (then it may be long).
    wait_long: bool,
    /// The step, to report retries.
    step: Option<&'a Step>,
}

struct Runner<'a> {
    schema: &'a SchemaName,
    options: &'a UpgradeOptions,
    release: String,
}

/// The pause before attempt `attempt + 1`: 100 ms, doubling, at most 2 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(2))
}

impl Runner<'_> {
    fn context(&self) -> Context {
        Context {
            role: "the current role".to_owned(),
            schema: self.schema.clone(),
        }
    }

    fn error_step(&self, doing: &str, target: Option<LockTarget>, timeout: Duration) -> ErrorStep {
        ErrorStep {
            doing: doing.to_owned(),
            waiting_for: Some("a lock on the table that another session holds".to_owned()),
            lock: target,
            timeout: Some(timeout),
            in_transaction: true,
            ..ErrorStep::default()
        }
    }

    /// `lock_timeout` and `statement_timeout` words for a step that may
    /// (`wait_long`) or may not block the engine while it waits.
    fn bounds(&self, wait_long: bool) -> (Duration, String, String) {
        let lock = if wait_long {
            self.options.wait_timeout
        } else {
            self.options.lock_timeout
        }
        .max(Duration::from_millis(1));
        // A step that blocks the engine holds its lock for a catalog change
        // only: it has no business running long once it has it.
        let statement = if wait_long {
            self.options.statement_timeout.max(lock)
        } else {
            lock
        } + Duration::from_secs(10);
        (lock, duration_words(lock), duration_words(statement))
    }

    async fn simple(&self, client: &Client, sql: &str) -> Result<(), Error> {
        let step = ErrorStep {
            doing: format!("recording the upgrade of schema {}", self.schema),
            ..ErrorStep::default()
        };
        client
            .batch_execute(sql)
            .await
            .map_err(|e| classify(e, &step, &self.context()))
    }

    /// Runs `statements` in one transaction under the bounds; a lock timeout
    /// rolls back and tries again (reported to `progress` when `step` is
    /// given), up to the attempts.
    async fn transaction(
        &self,
        client: &Client,
        work: Transaction<'_>,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let Transaction {
            statements,
            doing,
            target,
            wait_long,
            step,
        } = work;
        let (lock, lock_words, statement_words) = self.bounds(wait_long);
        let batch = format!(
            "BEGIN; SET LOCAL lock_timeout = '{lock_words}'; SET LOCAL statement_timeout = \
             '{statement_words}';\n{};\nCOMMIT",
            statements.join(";\n")
        );
        let attempts = if wait_long {
            1
        } else {
            self.options.lock_attempts.max(1)
        };
        let mut attempt = 1;
        loop {
            if !wait_long && let Some(LockTarget::Relation { name, .. }) = &target {
                self.until_no_one_else_alters(client, name, doing, step, progress)
                    .await?;
            }
            let Err(err) = client.batch_execute(&batch).await else {
                return Ok(());
            };
            // Ends the failed transaction; a lost connection ends it too.
            let _ = client.batch_execute("ROLLBACK").await;
            if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) && attempt < attempts {
                if let Some(step) = step {
                    progress(&Progress::LockRetry {
                        step: step.clone(),
                        attempt,
                    });
                }
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
                continue;
            }
            let error_step = self.error_step(doing, target, lock);
            return Err(
                catalog::explain(client, classify(err, &error_step, &self.context())).await,
            );
        }
    }

    /// Waits, without asking for a lock (so without queueing anyone), while
    /// another session holds or awaits a lock on `table` stronger than the
    /// engine's statements take (`SHARE UPDATE EXCLUSIVE` and up: an
    /// autovacuum, a `VACUUM`, an index build, DDL). A step that asked for
    /// `ACCESS EXCLUSIVE` behind such a holder would queue every engine
    /// statement behind it for its whole lock bound, every attempt (measured
    /// by the upgrade benchmark: an autovacuum of `jobs` stalled the claims
    /// for 1 s, 3 to 5 times); the engine's own locks last a statement, so
    /// once these are gone an attempt waits briefly. Bounded by
    /// [`UpgradeOptions::wait_timeout`].
    async fn until_no_one_else_alters(
        &self,
        client: &Client,
        table: &str,
        doing: &str,
        step: Option<&Step>,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let probe = format!(
            "SELECT l.pid, l.mode, COALESCE(a.backend_type, '') FROM pg_catalog.pg_locks l
             LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'relation' AND l.pid <> pg_catalog.pg_backend_pid()
               AND l.database = (SELECT oid FROM pg_catalog.pg_database
                                 WHERE datname = pg_catalog.current_database())
               AND l.relation = (SELECT c.oid FROM pg_catalog.pg_class c
                                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                 WHERE n.nspname = {} AND c.relname = {})
               AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')
             ORDER BY l.granted DESC, l.pid",
            crate::render::quote_literal(self.schema.as_str()),
            crate::render::quote_literal(table)
        );
        let started = Instant::now();
        let mut reported = false;
        loop {
            let holders = client.query(probe.as_str(), &[]).await.map_err(|e| {
                classify(
                    e,
                    &ErrorStep {
                        doing: doing.to_owned(),
                        ..ErrorStep::default()
                    },
                    &self.context(),
                )
            })?;
            let Some(holder) = holders.first() else {
                return Ok(());
            };
            let (pid, mode, backend): (i32, String, String) =
                (holder.get(0), holder.get(1), holder.get(2));
            if !reported && let Some(step) = step {
                reported = true;
                progress(&Progress::WaitingFor {
                    step: step.clone(),
                    pid,
                    mode: mode.clone(),
                    backend: backend.clone(),
                });
            }
            if started.elapsed() >= self.options.wait_timeout {
                return Err(other(format!(
                    "gave up after {} {doing}: session {pid} ({backend}) holds {mode} on \
                     {}.{table} and held it all that time; nothing of this step was done: run \
                     the upgrade again once it is gone, or end it with SELECT \
                     pg_cancel_backend({pid})",
                    duration_words(self.options.wait_timeout),
                    self.schema
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs one statement outside any transaction block under session-level
    /// bounds (reset afterwards).
    async fn alone(
        &self,
        client: &Client,
        statement: &str,
        doing: &str,
        target: LockTarget,
    ) -> Result<(), Error> {
        let (lock, lock_words, statement_words) = self.bounds(true);
        let set = format!(
            "SET lock_timeout = '{lock_words}'; SET statement_timeout = '{statement_words}'"
        );
        let mut error_step = self.error_step(doing, Some(target), lock);
        error_step.in_transaction = false;
        let result = match client.batch_execute(&set).await {
            Ok(()) => client.batch_execute(statement).await,
            Err(err) => Err(err),
        };
        let _ = client
            .batch_execute("RESET lock_timeout; RESET statement_timeout")
            .await;
        match result {
            Ok(()) => Ok(()),
            Err(err) => {
                Err(catalog::explain(client, classify(err, &error_step, &self.context())).await)
            }
        }
    }

    async fn steps(
        &self,
        client: &Client,
        steps: &[Step],
        version: &SchemaVersion,
        counts: &mut Counts,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        for (index, step) in steps.iter().enumerate() {
            let live = catalog::read(client, self.schema, &self.options.catalog_options()).await?;
            if done_in(steps, index, &live) {
                counts.skipped += 1;
                progress(&Progress::StepSkipped { step: step.clone() });
                continue;
            }
            progress(&Progress::StepStarted {
                step: step.clone(),
                index: index + 1,
                of: steps.len(),
            });
            let started = Instant::now();
            self.run(client, step, version, &live, progress).await?;
            counts.run += 1;
            progress(&Progress::StepDone {
                step: step.clone(),
                elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        Ok(())
    }

    async fn run(
        &self,
        client: &Client,
        step: &Step,
        version: &SchemaVersion,
        live: &LiveCatalog,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        let doing = format!("upgrading schema {}: {}", self.schema, step.describe());
        let target = LockTarget::Relation {
            schema: self.schema.clone(),
            name: step.table.clone(),
        };
        match sql::step_sql(step, self.schema, version) {
            StepSql::Transaction(statements) => {
                // Only a validation waits long: it blocks no engine statement.
                let wait_long = matches!(step.action, Action::ValidateConstraint { .. });
                self.transaction(
                    client,
                    Transaction {
                        statements: &statements,
                        doing: &doing,
                        target: Some(target),
                        wait_long,
                        step: Some(step),
                    },
                    progress,
                )
                .await
            }
            StepSql::Alone(statement) => {
                if let Action::CreateIndex { index, .. } = &step.action
                    && live
                        .relation(&step.table)
                        .is_some_and(|t| t.indexes.iter().any(|i| &i.name == index && !i.valid))
                {
                    // An interrupted build's invalid leftover.
                    self.alone(
                        client,
                        &sql::drop_index(self.schema, index),
                        &doing,
                        target.clone(),
                    )
                    .await?;
                }
                self.alone(client, &statement, &doing, target).await
            }
            StepSql::Batches(batch) => {
                self.backfill(client, step, &batch, &doing, target, progress)
                    .await
            }
        }
    }

    /// Walks the table's keys in windows of [`UpgradeOptions::batch_size`],
    /// one statement (one transaction) per window.
    async fn backfill(
        &self,
        client: &Client,
        step: &Step,
        batch: &sql::BatchStatement,
        doing: &str,
        target: LockTarget,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), Error> {
        // Each batch waits for its ROW EXCLUSIVE at most the lock bound (only
        // ACCESS EXCLUSIVE, held by someone else, makes it wait) and may run
        // as long as a statement may.
        let lock = self.options.lock_timeout.max(Duration::from_millis(1));
        let (lock_words, statement_words) = (
            duration_words(lock),
            duration_words(self.options.statement_timeout.max(lock)),
        );
        let mut error_step = self.error_step(doing, Some(target), lock);
        error_step.in_transaction = false;
        let fail = |err| classify(err, &error_step, &self.context());
        client
            .batch_execute(&format!(
                "SET lock_timeout = '{lock_words}'; SET statement_timeout = '{statement_words}'"
            ))
            .await
            .map_err(fail)?;
        let result = self
            .batches(client, step, batch, progress)
            .await
            .map_err(fail);
        let _ = client
            .batch_execute("RESET lock_timeout; RESET statement_timeout")
            .await;
        let changed = match result {
            Err(err) => return Err(catalog::explain(client, err).await),
            Ok(changed) => changed,
        };
        if changed > 0 {
            // Every changed row left a dead version (and index entries the
            // claim walks): vacuumed now, as the engine's own maintenance
            // would (`SKIP_LOCKED`: it never waits; measured: left to
            // autovacuum, ~780k dead versions at 1M jobs slowed version 1's
            // claims 1.7-2x until it came, and its run then met the
            // contract's ACCESS EXCLUSIVE step).
            self.alone(
                client,
                &sql::vacuum(self.schema, &step.table),
                doing,
                LockTarget::Relation {
                    schema: self.schema.clone(),
                    name: step.table.clone(),
                },
            )
            .await?;
            progress(&Progress::Vacuumed { step: step.clone() });
        }
        Ok(())
    }

    async fn batches(
        &self,
        client: &Client,
        step: &Step,
        batch: &sql::BatchStatement,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<u64, tokio_postgres::Error> {
        let bounds = client.query_one(&batch.bounds_sql(), &[]).await?;
        let (Some(min), Some(max)) = (
            bounds.try_get::<_, Option<i64>>(0)?,
            bounds.try_get::<_, Option<i64>>(1)?,
        ) else {
            return Ok(0);
        };
        let mut changed = 0;
        // Prepared in the first batch: parsing the UPDATE takes its ROW
        // EXCLUSIVE lock already, so a wait there is bounded and retried as a
        // batch's is.
        let mut prepared: Option<tokio_postgres::Statement> = None;
        let size = i64::from(self.options.batch_size.max(1));
        let mut lo = min;
        let mut attempt = 1;
        while lo <= max {
            let hi = lo.saturating_add(size);
            let now = unix_now();
            let values = batch.values(lo, hi, now);
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
                .iter()
                .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let ran = match &prepared {
                Some(statement) => client.execute(statement, &params).await,
                None => match client.prepare(&batch.sql).await {
                    Ok(statement) => {
                        let ran = client.execute(&statement, &params).await;
                        prepared = Some(statement);
                        ran
                    }
                    Err(err) => Err(err),
                },
            };
            match ran {
                Ok(rows) => {
                    attempt = 1;
                    lo = hi;
                    changed += rows;
                    progress(&Progress::Batch {
                        step: step.clone(),
                        rows,
                        keys_done: (lo.min(max.saturating_add(1)) - min),
                        keys_total: max - min + 1,
                    });
                }
                Err(err)
                    if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
                        && attempt < self.options.lock_attempts.max(1) =>
                {
                    progress(&Progress::LockRetry {
                        step: step.clone(),
                        attempt,
                    });
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
        Ok(changed)
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Whether the catalog shows `steps[at]` done, among the steps of its phase:
/// as [`done`], and an index built under another name to be swapped in is
/// also done once a later step has swapped it in (it bears the old name
/// then, so looking for its own name would build it a second time, and the
/// swap would then fail on the name it left behind).
pub fn done_in(steps: &[Step], at: usize, live: &LiveCatalog) -> bool {
    let Some(step) = steps.get(at) else {
        return false;
    };
    done(step, live)
        || matches!(&step.action, Action::CreateIndex { index, .. }
        if steps.iter().skip(at + 1).any(|later| {
            matches!(&later.action, Action::SwapIndex { replacement, .. } if replacement == index)
                && done(later, live)
        }))
}

/// Whether the catalog shows `step` done, so a rerun skips it. A backfill
/// always runs again: it finds only the rows still to do.
pub fn done(step: &Step, live: &LiveCatalog) -> bool {
    let table = live.relation(&step.table);
    let column = |name: &str| table.and_then(|t| t.columns.iter().find(|c| c.name == name));
    let index = |name: &str| table.and_then(|t| t.indexes.iter().find(|i| i.name == name));
    let constraint = |name: &str| table.and_then(|t| t.constraints.iter().find(|c| c.name == name));
    match &step.action {
        Action::CreateTable => table.is_some(),
        Action::DropTable => table.is_none(),
        Action::AddColumn { column: added, .. } => column(&added.name).is_some(),
        Action::DropNotNull { column: name } => column(name).is_none_or(|c| !c.not_null),
        Action::DropDefault { column: name } => column(name).is_none_or(|c| c.expression.is_none()),
        Action::DropColumn { column: name } => column(name).is_none(),
        Action::SetStorageParameters { parameters, .. } => table.is_some_and(|t| {
            let mut found = t.options.clone();
            found.sort();
            let mut wanted = parameters.clone();
            wanted.sort();
            found == wanted
        }),
        Action::Comment { column: None, doc } => {
            table.is_some_and(|t| t.comment.as_deref() == Some(doc.as_str()))
        }
        Action::Comment {
            column: Some(name),
            doc,
        } => column(name).is_some_and(|c| c.comment.as_deref() == Some(doc.as_str())),
        Action::Backfill { .. } => false,
        Action::CreateIndex { index: name, .. } => index(name).is_some_and(|i| i.valid),
        Action::SwapIndex {
            replacement,
            legacy,
            ..
        } => index(replacement).is_none() && index(legacy).is_some(),
        Action::DropIndex { index: name } => index(name).is_none(),
        Action::AddCheck {
            constraint: name, ..
        } => constraint(name).is_some(),
        Action::ValidateConstraint { constraint: name } => {
            constraint(name).is_some_and(|c| !c.definition.ends_with(" NOT VALID"))
        }
        Action::DropConstraint { constraint: name } => constraint(name).is_none(),
    }
}
