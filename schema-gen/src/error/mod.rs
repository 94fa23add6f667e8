//! The one error type of bootstrap, verification, upgrades and the
//! database commands: an [`Error`] wrapping an [`ErrorKind`], so callers can
//! match on what went wrong while the type stays small and can grow without
//! breaking them, and carrying what an upgrade had done before it failed
//! ([`Done`]).
//!
//! Every message says what is wrong and what to do about it, on one line, so
//! the CLI can print it as is and an engine can log it. Every kind has its
//! name ([`ErrorKind::name`]): the JSON `kind` of the CLI.

mod classify;
mod engines;
mod lock;

use std::fmt;
use std::time::Duration;

use schema_model::SchemaName;
use serde::Serialize;

use crate::difference::Difference;
use crate::options::duration_words;
use engines::older_engines_message;
use lock::lock_timeout_message;

pub(crate) use classify::{Context, Step, classify, detail, one_line};
pub use engines::EngineSession;
pub use lock::{LockHolder, LockTarget, Tries};

/// Why bootstrap, verification, an upgrade or a database command failed.
///
/// ```
/// use schema_gen::error::{Error, ErrorKind};
///
/// let err = Error::from(ErrorKind::Configuration {
///     message: "the database URL is not valid".to_owned(),
/// });
/// assert!(matches!(err.kind(), ErrorKind::Configuration { .. }));
/// assert_eq!(err.kind().name(), "configuration");
/// assert!(err.differences().is_empty());
/// assert!(err.done().is_none());
/// ```
#[derive(Debug)]
pub struct Error {
    // Boxed: the kinds carry strings and a source, and `Result<_, Error>` is
    // returned on every path.
    kind: Box<ErrorKind>,
    done: Option<Done>,
}

/// What an upgrade (or a contract) had done when it failed: the work that
/// stays done, and that a rerun skips. Like a migration tool's report, it
/// comes with the error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Done {
    /// Steps that ran to the end.
    pub steps_run: usize,
    /// Steps found already done and skipped.
    pub steps_skipped: usize,
    /// Backfill batches committed (each its own transaction).
    pub batches: u64,
    /// Rows those batches changed.
    pub rows: u64,
    /// Version phases recorded done (`expanded_at`, `contracted_at`).
    pub recorded: usize,
}

impl Done {
    /// Whether anything was changed.
    pub fn changed_anything(&self) -> bool {
        self.steps_run > 0 || self.batches > 0 || self.recorded > 0
    }
}

/// What went wrong; see [`Error::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The server could not be reached, or the connection was lost mid-way.
    #[error("{message}")]
    Connection {
        /// The whole one-line message (where, what happened, what to do).
        message: String,
        /// The driver's error, when there is one.
        #[source]
        source: Option<tokio_postgres::Error>,
    },
    /// The role lacks a privilege that the step needs. Nothing was changed.
    #[error(
        "role {role} lacks {privilege} (PostgreSQL said: {detail}): {remedy}; nothing was changed"
    )]
    Privilege {
        /// The role that ran the step (`current_user`).
        role: String,
        /// The missing privilege, e.g. `CREATE on database app`.
        privilege: String,
        /// The engine schema being bootstrapped or upgraded.
        schema: SchemaName,
        /// What to do, for what was being done: for a bootstrap, grant it
        /// or have a DBA apply the printed script once; for an upgrade
        /// (which alters the tables, so needs their owner), run it as the
        /// owner, or have the owner run the steps `upgrade --dry-run` prints.
        remedy: String,
        /// The server's message.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Engine-owned objects exist with another shape than the model's:
    /// bootstrap (or an upgrade) refused and changed nothing.
    #[error("{}", drift_message(schema, differences, *nearest))]
    Drift {
        /// The engine schema.
        schema: SchemaName,
        /// Every difference that is drift (or an object missing from a
        /// family that has drifted) between the live catalog and the shape
        /// its version implies; comments and foreign objects are not listed.
        differences: Vec<Difference>,
        /// When the schema records no version and has the shape of none:
        /// the known version it is nearest to, which `differences` are from.
        nearest: Option<u32>,
    },
    /// The bootstrap statements ran, but what they made differs from the
    /// model: something in this database alters objects as they are created
    /// (an event trigger, say), or schema-gen renders SQL that disagrees with
    /// its own model. The transaction was rolled back: nothing was changed.
    #[error("{}", created_differs_message(schema, differences))]
    CreatedDiffers {
        /// The engine schema.
        schema: SchemaName,
        /// How the objects just created differ from the model.
        differences: Vec<Difference>,
    },
    /// A lock wait hit `lock_timeout`.
    #[error("{}", lock_timeout_message(self))]
    LockTimeout {
        /// What the step was doing: `reading the catalog of schema alk`.
        doing: String,
        /// What it waited for, in words, when no session holding it was found.
        waiting_for: String,
        /// What the wait was for, as a lock PostgreSQL can be asked about.
        target: Option<LockTarget>,
        /// The sessions that held (or were queued ahead for) the lock when
        /// the wait was given up, as far as the role may see them.
        holders: Vec<LockHolder>,
        /// The `lock_timeout` in force.
        timeout: Duration,
        /// Whether the step ran in the bootstrap transaction (now rolled back).
        in_transaction: bool,
        /// For a wait tried several times (an upgrade step, a backfill
        /// batch): how many attempts, over how long; `timeout` is each one's.
        tries: Option<Tries>,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection goes through pgbouncer in statement pooling mode, which
    /// allows no transaction: creating the schema needs one. Not a lost
    /// connection: every retry fails the same way.
    #[error(
        "{doing} failed: {detail}: the connection goes through pgbouncer in statement pooling \
         mode, which allows no transaction, and bootstrap creates the schema in one, so every \
         retry fails the same way; nothing was changed: point the database URL at PostgreSQL \
         itself, or at a pgbouncer pool in session or transaction mode, to create the schema \
         (reading it, as check and a steady-state open do, works through statement pooling)"
    )]
    StatementPooling {
        /// The step, e.g. `starting the bootstrap transaction`.
        doing: String,
        /// pgbouncer's message.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A statement failed for another reason.
    #[error("{doing} failed: {detail}")]
    Query {
        /// The step, e.g. `reading the catalog of schema alkstore`.
        doing: String,
        /// The server's or driver's message.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database is at an older schema version than this release's
    /// model: an engine of this release cannot open it until `schema-gen
    /// upgrade` moves it (online: the older engines keep working). Nothing
    /// was changed.
    #[error(
        "schema {schema} is at schema version {found}{}, and this release works with version \
         {model}: nothing was changed; upgrade it online with `schema-gen upgrade --schema \
         {schema}` (engines of version {found} keep working until `schema-gen upgrade --contract`)",
        if *recognised { " (recognised by its shape: its release did not record versions)" } else { "" }
    )]
    OlderVersion {
        /// The engine schema.
        schema: SchemaName,
        /// The newest version the database serves.
        found: u32,
        /// Whether `found` was recognised by the shape (releases before
        /// version 3 record none).
        recognised: bool,
        /// This release's version.
        model: u32,
    },
    /// The database is at a newer schema version than this release knows,
    /// and no longer serves this release's version: an older engine never
    /// writes into a schema it does not know. Nothing was changed.
    #[error(
        "schema {schema} is at schema version {found} (contracted to {contracted}), newer than \
         this release's version {model}, which it no longer serves: nothing was changed; run \
         this engine's newer release (one whose `schema-gen --version` says version {found})"
    )]
    NewerVersion {
        /// The engine schema.
        schema: SchemaName,
        /// The newest version the database is expanded to.
        found: u32,
        /// The newest version whose contract is done.
        contracted: u32,
        /// This release's version.
        model: u32,
    },
    /// An upgrade to this release's version started and has not finished
    /// (it is running, or was interrupted): engines of this release wait for
    /// it. Nothing was changed.
    #[error(
        "schema {schema} is being upgraded to version {version} ({done} of {of} expand steps \
         done): nothing was changed; wait for the upgrade, or if it was interrupted run \
         `schema-gen upgrade --schema {schema}` again, which resumes it"
    )]
    UpgradeInProgress {
        /// The engine schema.
        schema: SchemaName,
        /// The version being expanded to.
        version: u32,
        /// Expand steps the catalog shows done.
        done: usize,
        /// All its expand steps.
        of: usize,
    },
    /// The next version's expand changes what a pending contract still
    /// has to change, so that contract must run first.
    #[error(
        "schema {schema}: version {next}'s expand changes objects that version {pending}'s \
         contract still has to change, so that contract must run first: once no engine older \
         than version {pending} runs, run `schema-gen upgrade --contract --schema {schema}`, \
         then `schema-gen upgrade --schema {schema}` again; nothing else was changed"
    )]
    ContractFirst {
        /// The engine schema.
        schema: SchemaName,
        /// The version whose contract is pending.
        pending: u32,
        /// The version whose expand waits for it.
        next: u32,
    },
    /// The contract was asked for while the database is not expanded to
    /// this release's version.
    #[error(
        "schema {schema} cannot be contracted to version {model}: {reason}; nothing was changed"
    )]
    NotExpanded {
        /// The engine schema.
        schema: SchemaName,
        /// This release's version.
        model: u32,
        /// Where the database stands instead, and what to run.
        reason: String,
    },
    /// Another session is upgrading the schema.
    #[error(
        "another session is upgrading schema {schema} (it holds the upgrade lock, advisory lock \
         {key}{}): nothing was changed; wait for it to finish, then run this again",
        if holders.is_empty() { String::new() } else {
            format!("; {}", holders.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
        }
    )]
    UpgradeLocked {
        /// The engine schema.
        schema: SchemaName,
        /// The upgrade lock's key.
        key: i64,
        /// The sessions holding it, as far as the role may see them.
        holders: Vec<LockHolder>,
    },
    /// The role may not read the schema's `schema_versions` table, so the
    /// version the database is at is unknown. Nothing was changed.
    #[error(
        "role {role} may not read {schema}.schema_versions, so the schema's version is unknown: \
         nothing was changed; GRANT SELECT ON {schema}.schema_versions TO {role}"
    )]
    VersionsUnreadable {
        /// The engine schema.
        schema: SchemaName,
        /// The role that read the catalog.
        role: String,
    },
    /// The server cannot take the requested [`Layout`](schema_model::Layout)
    /// (under `--layout citus`: no `citus` extension, or a worker instead
    /// of the coordinator). Checked before anything is read or changed.
    #[error("schema {schema} under layout {layout}: {reason}")]
    Layout {
        /// The engine schema.
        schema: SchemaName,
        /// The layout asked for.
        layout: schema_model::Layout,
        /// What the server is, and what to do; says nothing was changed.
        reason: String,
    },
    /// The connection cannot be configured (the connection string, a `PG*`
    /// variable, the service file, a TLS file): nothing was sent.
    #[error("{message}")]
    Configuration {
        /// The whole one-line message.
        message: String,
    },
    /// The server's reply could not be decoded: a defect of schema-gen, a
    /// PostgreSQL version whose catalog it does not know, or a proxy that
    /// drops rows.
    #[error(
        "decoding {what}: {detail} (a bug in schema-gen, a PostgreSQL version whose catalog it does not know, or a proxy that drops rows); nothing was changed"
    )]
    UndecodableReply {
        /// What was read: `the catalog of schema alk`.
        what: String,
        /// What was wrong with it.
        detail: String,
    },
    /// The schema's `schema_versions` rows are no upgrade this release can
    /// follow (no contracted version, a version contracted before it
    /// expanded, an expand skipped, a version older than any this release
    /// knows). Nothing was changed.
    #[error(
        "schema {schema}: its schema_versions rows are no upgrade this release can follow (a \
         version contracted before it expanded, an expand skipped, or a version this release \
         does not know); nothing was changed: compare them with `SELECT * FROM \
         {schema}.schema_versions`"
    )]
    InconsistentVersions {
        /// The engine schema.
        schema: SchemaName,
    },
    /// Another session changed the schema between bootstrap's first read and
    /// its lock, and left it incomplete. Rolled back: nothing was changed.
    #[error(
        "schema {schema} changed while it was being bootstrapped, and is still incomplete: \
         nothing was changed; run the bootstrap again"
    )]
    ConcurrentChange {
        /// The engine schema.
        schema: SchemaName,
    },
    /// An upgrade step waited, without queueing anyone, for another session
    /// to release a lock stronger than the engine's on its table, for its
    /// whole long bound. Nothing of the step was done.
    #[error(
        "gave up after {} {doing}: {holder}, and held it all that time; nothing of this step \
         was done: run the upgrade again once it is gone, or end it with SELECT \
         pg_cancel_backend({})",
        duration_words(*waited),
        holder.pid
    )]
    Blocked {
        /// What the step was doing.
        doing: String,
        /// The session it waited for.
        holder: LockHolder,
        /// How long it waited.
        waited: Duration,
    },
    /// The contract would remove what engines of older versions rely on,
    /// and sessions of such engines are connected (told by their
    /// `application_name`, or by their last statement being one only an
    /// older release runs). Refused unless allowed
    /// ([`UpgradeOptions::allow_older_engines`](crate::upgrade::UpgradeOptions::allow_older_engines)).
    /// Nothing was changed.
    #[error("{}", older_engines_message(self))]
    OlderEngines {
        /// The engine schema.
        schema: SchemaName,
        /// The engines older than this version break.
        version: u32,
        /// The sessions found.
        sessions: Vec<EngineSession>,
        /// What fails for them after the contract, in words (`inserts into
        /// jobs (null value in column "ready")`).
        breaks: Vec<String>,
        /// Sessions of other roles whose release could not be told.
        unseen: usize,
    },
    /// The connection an upgrade was given does not keep a server session
    /// of its own between transactions: it goes through a pooler in
    /// transaction or statement pooling mode
    /// ([`pooler`](crate::pooler)). Refused before anything was read or
    /// locked.
    #[error(
        "an upgrade of schema {schema} needs a server session of its own for its whole run (its \
         lock, the settings of its CONCURRENTLY steps), and the connection to {server} does not \
         keep one between transactions: it goes through a connection pooler in transaction or \
         statement pooling mode (pgbouncer with pool_mode = transaction or statement, for one): \
         {evidence}; nothing was read, locked or changed: point the database URL at PostgreSQL \
         itself (or at a pool in session mode) and run it again"
    )]
    Pooled {
        /// The engine schema.
        schema: SchemaName,
        /// Where the connection went (`127.0.0.1:6432/app as app`).
        server: String,
        /// What the probe saw, in words ([`Evidence`](crate::pooler::Evidence)).
        evidence: String,
    },
    /// The server session of an upgrade's connection changed between its
    /// steps (a pooler the probe did not catch), or its upgrade lock is no
    /// longer held: the upgrade stopped before its next step.
    #[error("{}", session_changed_message(schema, *took, *now, *held))]
    SessionChanged {
        /// The engine schema.
        schema: SchemaName,
        /// The backend pid that took the upgrade lock.
        took: i32,
        /// The backend pid the connection runs on now.
        now: i32,
        /// Whether that backend holds the upgrade lock.
        held: bool,
    },
    /// The upgrade steps ran, but the catalog is not the shape they should
    /// make: something in the database changes objects as they are altered
    /// (an event trigger?), or another session changed them meanwhile. What
    /// ran stays done ([`Error::done`]).
    #[error("{}", upgrade_differs_message(schema, differences))]
    UpgradeDiffers {
        /// The engine schema.
        schema: SchemaName,
        /// How the catalog differs from the shape the steps should make
        /// (empty when the recorded versions do not say where it stands).
        differences: Vec<Difference>,
    },
    /// A defect of this release: a shipped version that cannot be described
    /// or planned, or a plan the history lacks. Its tests rule this out;
    /// nothing was changed.
    #[error("{message} (a defect of this release: please report it); nothing was changed")]
    Defect {
        /// What is wrong.
        message: String,
    },
}

impl ErrorKind {
    /// The kind's name in snake case: the CLI's JSON `kind`, which the
    /// README lists.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Connection { .. } => "connection",
            Self::Privilege { .. } => "privilege",
            Self::Drift { .. } => "drift",
            Self::CreatedDiffers { .. } => "created_differs",
            Self::LockTimeout { .. } => "lock_timeout",
            Self::StatementPooling { .. } => "statement_pooling",
            Self::Query { .. } => "query",
            Self::OlderVersion { .. } => "older_version",
            Self::NewerVersion { .. } => "newer_version",
            Self::UpgradeInProgress { .. } => "upgrade_in_progress",
            Self::ContractFirst { .. } => "contract_first",
            Self::NotExpanded { .. } => "not_expanded",
            Self::UpgradeLocked { .. } => "upgrade_locked",
            Self::VersionsUnreadable { .. } => "versions_unreadable",
            Self::Layout { .. } => "layout",
            Self::Configuration { .. } => "configuration",
            Self::UndecodableReply { .. } => "undecodable_reply",
            Self::InconsistentVersions { .. } => "inconsistent_versions",
            Self::ConcurrentChange { .. } => "concurrent_change",
            Self::Blocked { .. } => "blocked",
            Self::OlderEngines { .. } => "older_engines",
            Self::Pooled { .. } => "pooled",
            Self::SessionChanged { .. } => "session_changed",
            Self::UpgradeDiffers { .. } => "upgrade_differs",
            Self::Defect { .. } => "defect",
        }
    }

    /// The driver's error behind the kind, when there is one (its SQLSTATE
    /// is the server's error code).
    pub fn driver_error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Self::Connection { source, .. } => source.as_ref(),
            Self::Privilege { source, .. }
            | Self::LockTimeout { source, .. }
            | Self::StatementPooling { source, .. }
            | Self::Query { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// Takes the kind out, e.g. to move the differences of a drift.
    pub fn into_kind(self) -> ErrorKind {
        *self.kind
    }

    /// What an upgrade or a contract had done before it failed (`None` for
    /// bootstrap and verification, which change nothing when they fail).
    pub fn done(&self) -> Option<&Done> {
        self.done.as_ref()
    }

    /// The same error, with what was done before it.
    pub(crate) fn with_done(mut self, done: Done) -> Self {
        self.done = Some(done);
        self
    }

    /// The differences of a [`ErrorKind::Drift`], [`ErrorKind::CreatedDiffers`]
    /// or [`ErrorKind::UpgradeDiffers`], empty for every other kind.
    pub fn differences(&self) -> &[Difference] {
        match &*self.kind {
            ErrorKind::Drift { differences, .. }
            | ErrorKind::CreatedDiffers { differences, .. }
            | ErrorKind::UpgradeDiffers { differences, .. } => differences,
            _ => &[],
        }
    }

    /// The lock a [`ErrorKind::LockTimeout`] waited for, when PostgreSQL can
    /// be asked who holds it.
    pub(crate) fn lock_target(&self) -> Option<&LockTarget> {
        match &*self.kind {
            ErrorKind::LockTimeout { target, .. } => target.as_ref(),
            _ => None,
        }
    }

    /// The same error with the sessions found holding its lock.
    pub(crate) fn with_lock_holders(mut self, found: Vec<LockHolder>) -> Self {
        if let ErrorKind::LockTimeout { holders, .. } = &mut *self.kind {
            *holders = found;
        }
        self
    }

    /// The same error, when it is a [`ErrorKind::LockTimeout`], with the
    /// attempts made before it was given up.
    pub(crate) fn with_tries(mut self, made: Tries) -> Self {
        if let ErrorKind::LockTimeout { tries, .. } = &mut *self.kind {
            *tries = Some(made);
        }
        self
    }

    /// Whether this is a [`ErrorKind::Privilege`] whose role is not known
    /// yet (the failure came before the catalog named it).
    pub(crate) fn lacks_role(&self) -> bool {
        matches!(&*self.kind, ErrorKind::Privilege { role, .. } if role.is_empty())
    }

    /// The same error, naming `found` as the role of a privilege failure.
    pub(crate) fn with_role(mut self, found: String) -> Self {
        if let ErrorKind::Privilege { role, .. } = &mut *self.kind {
            *role = found;
        }
        self
    }
}

impl fmt::Display for Error {
    /// The kind's message; for an upgrade's failure, also what it had
    /// already done and that a rerun resumes ([`Done::words`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.done {
            Some(done) if done.changed_anything() => write!(
                f,
                "{}; {}",
                self.kind
                    .to_string()
                    .replace(NOTHING_CHANGED, "this step changed nothing"),
                done.words()
            ),
            _ => fmt::Display::fmt(&self.kind, f),
        }
    }
}

/// What a kind's message says when the call changed nothing; an upgrade's
/// failure after steps that stay done says it of the failed step only.
const NOTHING_CHANGED: &str = "nothing was changed";

impl Done {
    /// What stays done, and that a rerun resumes: `already done, and kept:
    /// 3 steps run (1 found done), 4 backfill batches (3998 rows), 1 version
    /// phase recorded; run the same command again: it skips what is done
    /// and resumes here`.
    ///
    /// ```
    /// use schema_gen::error::Done;
    ///
    /// let done = Done { steps_run: 2, batches: 3, rows: 2500, ..Done::default() };
    /// assert_eq!(
    ///     done.words(),
    ///     "already done, and kept: 2 steps run, 3 backfill batches committed (2500 rows); \
    ///      run the same command again: it skips what is done and resumes at the step that failed"
    /// );
    /// ```
    pub fn words(&self) -> String {
        let plural =
            |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut parts = vec![plural(self.steps_run as u64, "step run", "steps run")];
        if self.steps_skipped > 0 {
            parts[0].push_str(&format!(" ({} found done)", self.steps_skipped));
        }
        if self.batches > 0 {
            parts.push(format!(
                "{} committed ({})",
                plural(self.batches, "backfill batch", "backfill batches"),
                plural(self.rows, "row", "rows")
            ));
        }
        if self.recorded > 0 {
            parts.push(plural(
                self.recorded as u64,
                "version phase recorded",
                "version phases recorded",
            ));
        }
        format!(
            "already done, and kept: {}; run the same command again: it skips what is done and \
             resumes at the step that failed",
            parts.join(", ")
        )
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.kind)
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Self {
            kind: Box::new(kind),
            done: None,
        }
    }
}

fn created_differs_message(schema: &SchemaName, differences: &[Difference]) -> String {
    let list: Vec<String> = differences.iter().map(ToString::to_string).collect();
    format!(
        "the bootstrap statements for schema {schema} ran, but what they created differs from \
         the model: {}; something in this database changes objects as they are created (an \
         event trigger, for one: see SELECT evtname FROM pg_event_trigger), or schema-gen's SQL \
         and model disagree (a bug); the transaction was rolled back, nothing was changed",
        list.join("; ")
    )
}

fn drift_message(schema: &SchemaName, differences: &[Difference], nearest: Option<u32>) -> String {
    let list: Vec<String> = differences.iter().map(ToString::to_string).collect();
    let from = match nearest {
        Some(version) => format!(
            "is no version this release knows; it is nearest to version {version}, from which it \
             differs"
        ),
        None => "differs from the model".to_owned(),
    };
    format!(
        "schema {schema} {from} in {} way{}: {}; refused and changed nothing (the \
         schema is no version this release knows, nor a step of an upgrade between two: fix the \
         objects by hand, or use a new schema name)",
        differences.len(),
        if differences.len() == 1 { "" } else { "s" },
        list.join("; ")
    )
}

fn session_changed_message(schema: &SchemaName, took: i32, now: i32, held: bool) -> String {
    if took == now && !held {
        return format!(
            "the upgrade lock of schema {schema} is no longer held by this connection's session \
             {now} (something released it): stopped before the next step, so that no other \
             upgrade runs beside it; run the upgrade again"
        );
    }
    format!(
        "the server session under the upgrade of schema {schema} changed: session {took} took the \
         upgrade lock, and the connection now runs on session {now}, so a connection pooler in \
         transaction or statement pooling mode sits between schema-gen and PostgreSQL; stopped \
         before the next step; the upgrade lock stays with session {took} as long as the pooler \
         keeps that server connection open: from a direct connection, end it with SELECT \
         pg_terminate_backend({took}), then run the upgrade there"
    )
}

fn upgrade_differs_message(schema: &SchemaName, differences: &[Difference]) -> String {
    let found = if differences.is_empty() {
        "the recorded versions do not say where it stands".to_owned()
    } else {
        differences
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    format!(
        "the upgrade steps of schema {schema} ran, but the catalog is not the shape they should \
         make: {found}; something in this database changes objects as they are altered (an \
         event trigger?), or another session changed them meanwhile; what ran stays done: check \
         the differences with `schema-gen check --schema {schema}`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_lists_every_difference_on_one_line() {
        let err = Error::from(ErrorKind::Drift {
            schema: SchemaName::new("alk").unwrap(),
            differences: vec![
                Difference::MissingColumn {
                    table: "jobs".into(),
                    column: "queue".into(),
                },
                Difference::ExtraColumn {
                    table: "jobs".into(),
                    column: "foo".into(),
                    found_type: "text".into(),
                    risk: Some("NOT NULL".into()),
                },
            ],
            nearest: None,
        });
        let text = err.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with("schema alk differs from the model in 2 ways: missing column jobs.queue; extra column jobs.foo"),
            "{text}"
        );
        assert!(text.contains("changed nothing"), "{text}");
        assert_eq!(err.differences().len(), 2);
    }

    #[test]
    fn every_message_is_one_line_and_every_kind_has_a_name() {
        let schema = SchemaName::new("alk").unwrap();
        let kinds = [
            ErrorKind::Configuration {
                message: "m".into(),
            },
            ErrorKind::UndecodableReply {
                what: "the catalog of schema alk".into(),
                detail: "no row".into(),
            },
            ErrorKind::InconsistentVersions {
                schema: schema.clone(),
            },
            ErrorKind::ConcurrentChange {
                schema: schema.clone(),
            },
            ErrorKind::UpgradeDiffers {
                schema: schema.clone(),
                differences: vec![],
            },
            ErrorKind::Defect {
                message: "m".into(),
            },
        ];
        for kind in kinds {
            let name = kind.name();
            let text = Error::from(kind).to_string();
            assert!(
                !text.contains('\n') && !text.contains("  "),
                "{name}: {text}"
            );
        }
    }
}
