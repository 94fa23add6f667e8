//! The one error type of bootstrap, verification and the database commands:
//! an [`Error`] wrapping an [`ErrorKind`], so callers can match on what went
//! wrong while the type stays small and can grow without breaking them.
//!
//! Every message says what is wrong and what to do about it, on one line, so
//! the CLI can print it as is and an engine can log it.

use std::fmt;

use schema_model::SchemaName;
use tokio_postgres::error::SqlState;

use crate::difference::Difference;

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
    /// A lock wait hit `lock_timeout`.
    #[error(
        "gave up after {timeout} (lock_timeout) waiting for {waiting_for}; the bootstrap \
         transaction was rolled back, nothing was changed: retry once it is released"
    )]
    LockTimeout {
        /// What the step was waiting for, in words.
        waiting_for: String,
        /// The `lock_timeout` in force, e.g. `5s`.
        timeout: String,
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

    /// The differences of a [`ErrorKind::Drift`], empty for every other kind.
    pub fn differences(&self) -> &[Difference] {
        match &*self.kind {
            ErrorKind::Drift { differences, .. } => differences,
            _ => &[],
        }
    }
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
         nothing (no migrations in v1: fix the objects by hand, or use a new schema name)",
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
    /// What a lock wait in this step waits for.
    pub waiting_for: Option<String>,
    /// The `lock_timeout` in force during the step.
    pub timeout: Option<String>,
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
    let kind = if is_connection_loss(&err) {
        ErrorKind::Connection {
            message: format!(
                "lost the connection to PostgreSQL while {}: {}; nothing was committed \
                 (bootstrap runs in one transaction), so it is safe to retry",
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
            waiting_for: step
                .waiting_for
                .clone()
                .unwrap_or_else(|| format!("a lock while {}", step.doing)),
            timeout: step
                .timeout
                .clone()
                .unwrap_or_else(|| "the session's lock_timeout".to_owned()),
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
