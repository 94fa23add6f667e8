//! The one error type of bootstrap, verification and the database commands:
//! an [`Error`] wrapping an [`ErrorKind`], so callers can match on what went
//! wrong while the type stays small and can grow without breaking them.
//!
//! Every message says what is wrong and what to do about it, on one line, so
//! the CLI can print it as is and an engine can log it.

use std::fmt;
use std::time::Duration;

use schema_model::SchemaName;
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;

use crate::difference::Difference;
use crate::options::duration_words;

/// Why bootstrap, verification or a database command failed.
///
/// ```
/// use schema_gen::error::{Error, ErrorKind};
///
/// let err = Error::from(ErrorKind::Other {
///     message: "the database URL is not valid".to_owned(),
/// });
/// assert!(matches!(err.kind(), ErrorKind::Other { .. }));
/// assert!(err.differences().is_empty());
/// ```
#[derive(Debug)]
pub struct Error {
    // Boxed: the kinds carry strings and a source, and `Result<_, Error>` is
    // returned on every path.
    kind: Box<ErrorKind>,
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
    /// The role lacks a privilege that the step needs.
    #[error(
        "role {role} lacks {privilege} (PostgreSQL said: {detail}): grant it, or have a DBA \
         apply the schema once with `schema-gen sql --schema {schema} | psql -v ON_ERROR_STOP=1`; \
         nothing was changed"
    )]
    Privilege {
        /// The role that ran the step (`current_user`).
        role: String,
        /// The missing privilege, e.g. `CREATE on database app`.
        privilege: String,
        /// The engine schema being bootstrapped.
        schema: SchemaName,
        /// The server's message.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Engine-owned objects exist with another shape than the model's:
    /// bootstrap refused and changed nothing.
    #[error("{}", drift_message(schema, differences))]
    Drift {
        /// The engine schema.
        schema: SchemaName,
        /// Every difference between the live catalog and the model.
        differences: Vec<Difference>,
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
    /// Anything else (an unparsable database URL, a reply that could not be
    /// decoded, a bug in schema-gen).
    #[error("{message}")]
    Other {
        /// The whole one-line message.
        message: String,
    },
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

    /// The differences of a [`ErrorKind::Drift`] or
    /// [`ErrorKind::CreatedDiffers`], empty for every other kind.
    pub fn differences(&self) -> &[Difference] {
        match &*self.kind {
            ErrorKind::Drift { differences, .. }
            | ErrorKind::CreatedDiffers { differences, .. } => differences,
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
}

/// What a lock wait was for, so that the sessions holding it can be found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockTarget {
    /// A relation of the schema: the catalog read takes `ACCESS SHARE` on
    /// each table, which only `ACCESS EXCLUSIVE` (held or queued) blocks.
    SchemaRelations {
        /// The engine schema.
        schema: SchemaName,
    },
    /// A table (or index) of the schema that an upgrade step locks: any
    /// lock another session holds on it, or has queued for, conflicts.
    Relation {
        /// The engine schema.
        schema: SchemaName,
        /// The table or index.
        name: String,
    },
    /// The bootstrap's advisory lock
    /// ([`render::advisory_lock_key`](crate::render::advisory_lock_key)).
    Advisory {
        /// The engine schema.
        schema: SchemaName,
        /// The lock's key.
        key: i64,
    },
}

/// A session that held, or was queued ahead for, a lock a step gave up
/// waiting for, from `pg_locks` and `pg_stat_activity`. What
/// `pg_stat_activity` hides from a role (another role's state and query,
/// without `pg_read_all_stats`) is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Its backend pid (`pg_terminate_backend(pid)` ends it).
    pub pid: i32,
    /// The lock mode, as `pg_locks` names it (`AccessExclusiveLock`).
    pub mode: String,
    /// Whether it holds the lock (false: it is queued for it, ahead of us).
    pub granted: bool,
    /// The relation, qualified, for a relation lock.
    pub relation: Option<String>,
    /// Its role.
    pub role: Option<String>,
    /// Its `application_name`.
    pub application: Option<String>,
    /// `active`, `idle in transaction`, ...
    pub state: Option<String>,
    /// When its transaction started (UTC).
    pub since: Option<String>,
    /// The start of its current or last query.
    pub query: Option<String>,
    /// For a queued session: the sessions it waits behind.
    pub blocked_by: Option<Vec<i32>>,
}

impl LockHolder {
    /// `ACCESS EXCLUSIVE` for `AccessExclusiveLock`.
    fn mode_words(&self) -> String {
        let name = self.mode.strip_suffix("Lock").unwrap_or(&self.mode);
        let mut out = String::new();
        for c in name.chars() {
            if c.is_uppercase() && !out.is_empty() {
                out.push(' ');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }
}

impl fmt::Display for LockHolder {
    /// `session 42 (role admin, application psql, idle in transaction since
    /// ..., query `LOCK ...`) holds ACCESS EXCLUSIVE on alk.jobs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut about = Vec::new();
        if let Some(role) = &self.role {
            about.push(format!("role {role}"));
        }
        if let Some(application) = &self.application {
            about.push(format!("application {application:?}"));
        }
        match (&self.state, &self.since) {
            (Some(state), Some(since)) => about.push(format!("{state}, transaction since {since}")),
            (Some(state), None) => about.push(state.clone()),
            _ => about.push(
                "its activity is hidden from this role (pg_read_all_stats shows it)".to_owned(),
            ),
        }
        if let Some(query) = &self.query {
            about.push(format!("query `{}`", one_line(query)));
        }
        write!(f, "session {} ({})", self.pid, about.join(", "))?;
        let on = self
            .relation
            .as_ref()
            .map(|relation| format!(" on {relation}"))
            .unwrap_or_default();
        if self.granted {
            write!(f, " holds {}{on}", self.mode_words())
        } else {
            let behind: Vec<String> = self
                .blocked_by
                .iter()
                .flatten()
                .map(|pid| pid.to_string())
                .collect();
            write!(f, " is queued for {}{on}", self.mode_words())?;
            if behind.is_empty() {
                Ok(())
            } else {
                write!(f, " behind session {}", behind.join(", "))
            }
        }
    }
}

fn lock_timeout_message(kind: &ErrorKind) -> String {
    let ErrorKind::LockTimeout {
        doing,
        waiting_for,
        target,
        holders,
        timeout,
        in_transaction,
        ..
    } = kind
    else {
        return String::new();
    };
    let mut relations: Vec<&str> = holders
        .iter()
        .filter_map(|h| h.relation.as_deref())
        .collect();
    relations.dedup();
    let what = match target {
        Some(LockTarget::SchemaRelations { .. }) if !relations.is_empty() => {
            format!("ACCESS SHARE on {}", relations.join(" and "))
        }
        _ => waiting_for.clone(),
    };
    let mut text = format!(
        "gave up after {} (lock_timeout) {doing}: waiting for {what}",
        duration_words(*timeout)
    );
    if !holders.is_empty() {
        let list: Vec<String> = holders.iter().map(ToString::to_string).collect();
        text.push_str(&format!("; {}", list.join("; ")));
    } else if target.is_some() {
        text.push_str(
            "; no other session held or awaited it any more when schema-gen looked, so it was \
             released just after",
        );
    }
    text.push_str("; ");
    if *in_transaction {
        text.push_str("the bootstrap transaction was rolled back, ");
    }
    text.push_str("nothing was changed: ");
    let pids: Vec<String> = holders
        .iter()
        .filter(|h| h.granted)
        .map(|h| h.pid.to_string())
        .collect();
    if pids.is_empty() {
        text.push_str("retry once the lock is released");
    } else {
        text.push_str(&format!(
            "retry once that session ends, or end it with SELECT pg_terminate_backend({})",
            pids.join("), pg_terminate_backend(")
        ));
    }
    text
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.kind, f)
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
        }
    }
}

fn drift_message(schema: &SchemaName, differences: &[Difference]) -> String {
    let list: Vec<String> = differences.iter().map(ToString::to_string).collect();
    format!(
        "schema {schema} differs from the model in {} way{}: {}; bootstrap refused and changed \
         nothing (the schema is no version this release knows, nor a step of an upgrade between \
         two: fix the objects by hand, or use a new schema name)",
        differences.len(),
        if differences.len() == 1 { "" } else { "s" },
        list.join("; ")
    )
}

/// What a failing step was doing, so a driver error can be worded for a DBA.
#[derive(Debug, Clone, Default)]
pub(crate) struct Step {
    /// `reading the catalog of schema x`, `running CREATE TABLE ...`.
    pub doing: String,
    /// The privilege the step needs, if it needs one.
    pub privilege: Option<String>,
    /// What a lock wait in this step waits for, in words.
    pub waiting_for: Option<String>,
    /// What a lock wait in this step waits for, to ask PostgreSQL who holds it.
    pub lock: Option<LockTarget>,
    /// The `lock_timeout` in force during the step.
    pub timeout: Option<Duration>,
    /// Whether the step runs in the bootstrap transaction.
    pub in_transaction: bool,
}

/// Who runs the steps and for which schema, for the wording of errors.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub role: String,
    pub schema: SchemaName,
}

/// The server's message with its SQLSTATE, or the driver's message with its causes.
pub(crate) fn detail(err: &tokio_postgres::Error) -> String {
    if let Some(db) = err.as_db_error() {
        return one_line(&format!("{} (SQLSTATE {})", db.message(), db.code().code()));
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // tokio-postgres often repeats its cause in its own message.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    one_line(&text)
}

/// Collapses line breaks so a message stays on one line.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether the connection is gone: closed by the driver, an I/O error, or a
/// server-side termination (`pg_terminate_backend`, shutdown, SQLSTATE class 08).
pub(crate) fn is_connection_loss(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    match err.as_db_error() {
        Some(db) => {
            let code = db.code();
            // Class 08 is "connection exception" as a whole.
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                ]
                .contains(code)
        }
        None => {
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                if cause.is::<std::io::Error>() {
                    return true;
                }
                source = cause.source();
            }
            false
        }
    }
}

/// Maps a driver error of `step` to the kind a DBA can act on: SQLSTATE
/// 42501 to [`ErrorKind::Privilege`], 55P03 to [`ErrorKind::LockTimeout`], a
/// lost connection to [`ErrorKind::Connection`], anything else to
/// [`ErrorKind::Query`].
pub(crate) fn classify(err: tokio_postgres::Error, step: &Step, context: &Context) -> Error {
    let code = err.code().cloned();
    let kind = if is_statement_pooling(&err) {
        ErrorKind::StatementPooling {
            doing: step.doing.clone(),
            detail: detail(&err),
            source: err,
        }
    } else if is_connection_loss(&err) {
        let committed = if step.in_transaction {
            "nothing was committed (bootstrap runs in one transaction)"
        } else {
            "nothing was changed"
        };
        ErrorKind::Connection {
            message: format!(
                "lost the connection to PostgreSQL while {}: {}; {committed}, so it is safe to \
                 retry",
                step.doing,
                detail(&err)
            ),
            source: Some(err),
        }
    } else if code == Some(SqlState::INSUFFICIENT_PRIVILEGE) {
        ErrorKind::Privilege {
            role: context.role.clone(),
            privilege: step
                .privilege
                .clone()
                .unwrap_or_else(|| format!("a privilege needed for {}", step.doing)),
            schema: context.schema.clone(),
            detail: err
                .as_db_error()
                .map(|db| one_line(db.message()))
                .unwrap_or_else(|| detail(&err)),
            source: err,
        }
    } else if code == Some(SqlState::LOCK_NOT_AVAILABLE) {
        ErrorKind::LockTimeout {
            doing: step.doing.clone(),
            waiting_for: step
                .waiting_for
                .clone()
                .unwrap_or_else(|| "a lock".to_owned()),
            target: step.lock.clone(),
            holders: Vec::new(),
            timeout: step.timeout.unwrap_or(crate::render::DEFAULT_LOCK_TIMEOUT),
            in_transaction: step.in_transaction,
            source: err,
        }
    } else {
        ErrorKind::Query {
            doing: step.doing.clone(),
            detail: detail(&err),
            source: err,
        }
    };
    kind.into()
}

/// pgbouncer's refusal of a transaction in statement pooling mode (`FATAL:
/// transaction blocks not allowed in statement pooling mode`, SQLSTATE
/// 08P01): it comes as a connection error, but retrying cannot help.
pub(crate) fn is_statement_pooling(err: &tokio_postgres::Error) -> bool {
    err.as_db_error()
        .is_some_and(|db| db.message().contains("statement pooling mode"))
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
                },
            ],
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
    fn one_line_collapses_breaks() {
        assert_eq!(one_line("a\n  b\tc "), "a b c");
    }
}
