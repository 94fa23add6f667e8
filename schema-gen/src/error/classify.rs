//! Wording a driver error for a DBA: what the failing step was doing, who
//! ran it, and which [`ErrorKind`] the server's answer means.

use std::time::Duration;

use schema_model::SchemaName;
use tokio_postgres::error::SqlState;

use super::{Error, ErrorKind, LockTarget};

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
    /// `current_user`, once the catalog has named it; a privilege error
    /// raised before then is completed by asking the server
    /// ([`crate::catalog::explain`]).
    pub role: Option<String>,
    pub schema: SchemaName,
    /// For the steps of an upgrade: the command that runs them
    /// (`schema-gen upgrade --contract`), whose remedy a privilege error
    /// gives; `None` for bootstrap and the catalog reads.
    pub upgrade: Option<String>,
}

impl Context {
    /// Steps of `schema` run by a role the catalog has not named yet.
    pub(crate) fn unnamed(schema: &SchemaName) -> Self {
        Self {
            role: None,
            schema: schema.clone(),
            upgrade: None,
        }
    }

    /// Steps of `schema` run by `role`.
    pub(crate) fn of(role: &str, schema: &SchemaName) -> Self {
        Self {
            role: Some(role.to_owned()),
            schema: schema.clone(),
            upgrade: None,
        }
    }

    /// The steps of an upgrade run by `command` (`schema-gen upgrade`, with
    /// `--contract` for a contract).
    pub(crate) fn upgrading(mut self, command: String) -> Self {
        self.upgrade = Some(command);
        self
    }

    /// What a role that lacks a privilege should do.
    fn privilege_remedy(&self) -> String {
        let schema = &self.schema;
        match &self.upgrade {
            // `schema-gen sql | psql` would fail on an older version (it
            // creates this release's shape, whose new columns the old
            // tables lack): the upgrade's own steps are the remedy.
            Some(command) => format!(
                "an upgrade alters the schema's tables, which only their owner may do: run \
                 `{command} --schema {schema}` as the role that owns them, or have that role \
                 run with psql the steps `{command} --dry-run --schema {schema}` prints"
            ),
            None => format!(
                "grant it, or have a DBA apply the schema once with `schema-gen sql --schema \
                 {schema} | psql -v ON_ERROR_STOP=1`"
            ),
        }
    }
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
        } else if context.upgrade.is_some() {
            // The step's commit may have reached the server or not.
            "whether this step completed, the rerun finds in the catalog before it runs it"
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
            role: context.role.clone().unwrap_or_default(),
            privilege: step
                .privilege
                .clone()
                .unwrap_or_else(|| format!("a privilege needed for {}", step.doing)),
            schema: context.schema.clone(),
            remedy: context.privilege_remedy(),
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
            timeout: step.timeout.unwrap_or(crate::options::DEFAULT_LOCK_TIMEOUT),
            in_transaction: step.in_transaction,
            tries: None,
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
