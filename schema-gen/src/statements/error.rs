//! The error of running a hot-path statement: a [`StatementError`] naming
//! the statement, around a [`StatementErrorKind`] saying what went wrong (the
//! server's refusal with its own words, a lost connection, a row that did not
//! decode), the way [`crate::Error`] wraps [`crate::ErrorKind`].

use std::fmt;

use tokio_postgres::error::{DbError, SqlState};

use super::RowError;

/// A statement that failed: which one ([`statement`](Self::statement)) and
/// why ([`kind`](Self::kind)). It displays both on one line, with the
/// server's message, SQLSTATE, detail and hint when the server refused it:
///
/// ```text
/// statement claim failed: ERROR: column "ready" does not exist (SQLSTATE 42703)
/// ```
#[derive(Debug)]
pub struct StatementError {
    statement: &'static str,
    // Boxed: the kinds carry strings and a source, and every run returns a
    // `Result<_, StatementError>`.
    kind: Box<StatementErrorKind>,
}

/// What went wrong; see [`StatementError::kind`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatementErrorKind {
    /// The server refused the statement, or failed while running it.
    #[error("{}", server_message(severity, code, message, detail.as_deref(), hint.as_deref()))]
    Server {
        /// `ERROR`, `FATAL`, ... (as the server sent it, untranslated).
        severity: String,
        /// The SQLSTATE (`42703`: undefined column; `40001`: serialization
        /// failure; ...).
        code: SqlState,
        /// The server's primary message.
        message: String,
        /// The server's detail, when it sent one.
        detail: Option<String>,
        /// The server's hint, when it sent one.
        hint: Option<String>,
        /// The driver's error (its source is the server's whole
        /// [`DbError`]: position, constraint, table, column, ...).
        #[source]
        source: tokio_postgres::Error,
    },
    /// The driver failed without a word from the server: the connection was
    /// closed or broke, a value could not be encoded, a reply could not be
    /// read.
    #[error("{}", driver_message(source))]
    Driver {
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A row the statement returned did not decode into its shape.
    #[error(transparent)]
    Row(#[from] RowError),
    /// The statement returned another number of rows than it promises (one
    /// for [`One`](super::One), at most one for
    /// [`Optional`](super::Optional)).
    #[error("returned {got} rows where it returns {expected}")]
    RowCount {
        /// What the statement promises: `exactly one row`, `at most one row`.
        expected: &'static str,
        /// How many it returned.
        got: usize,
    },
}

impl StatementError {
    /// The error of the statement named `statement`.
    pub fn new(statement: &'static str, kind: StatementErrorKind) -> Self {
        Self {
            statement,
            kind: Box::new(kind),
        }
    }

    /// The error of the statement named `statement` from the driver's error:
    /// [`StatementErrorKind::Server`] when the server sent one, else
    /// [`StatementErrorKind::Driver`].
    pub fn from_driver(statement: &'static str, source: tokio_postgres::Error) -> Self {
        let kind = match source.as_db_error() {
            Some(db) => StatementErrorKind::Server {
                severity: db.severity().to_owned(),
                code: db.code().clone(),
                message: db.message().to_owned(),
                detail: db.detail().map(str::to_owned),
                hint: db.hint().map(str::to_owned),
                source,
            },
            None => StatementErrorKind::Driver { source },
        };
        Self::new(statement, kind)
    }

    /// The statement's name, as `schema-gen statements` lists it (`claim`,
    /// `stream_append`, ...; `begin`, `commit` or `rollback` for a
    /// [`Session`](super::Session)'s transaction).
    pub fn statement(&self) -> &'static str {
        self.statement
    }

    /// What went wrong.
    pub fn kind(&self) -> &StatementErrorKind {
        &self.kind
    }

    /// Takes the kind out.
    pub fn into_kind(self) -> StatementErrorKind {
        *self.kind
    }

    /// The server's SQLSTATE, when the server refused the statement (e.g.
    /// to retry on [`SqlState::T_R_SERIALIZATION_FAILURE`]).
    pub fn code(&self) -> Option<&SqlState> {
        match &*self.kind {
            StatementErrorKind::Server { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The server's whole error report (position, constraint, table,
    /// column, ...), when it sent one.
    pub fn db_error(&self) -> Option<&DbError> {
        match &*self.kind {
            StatementErrorKind::Server { source, .. } => source.as_db_error(),
            _ => None,
        }
    }
}

impl fmt::Display for StatementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "statement {} failed: {}", self.statement, self.kind)
    }
}

impl std::error::Error for StatementError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.kind)
    }
}

/// `ERROR: <message> (SQLSTATE <code>); DETAIL: <detail>; HINT: <hint>`,
/// psql's words on one line.
fn server_message(
    severity: &str,
    code: &SqlState,
    message: &str,
    detail: Option<&str>,
    hint: Option<&str>,
) -> String {
    let mut out = format!("{severity}: {message} (SQLSTATE {})", code.code());
    if let Some(detail) = detail {
        out.push_str(&format!("; DETAIL: {detail}"));
    }
    if let Some(hint) = hint {
        out.push_str(&format!("; HINT: {hint}"));
    }
    out
}

/// The driver's message and its causes: tokio-postgres displays only its
/// own kind (`error serializing parameter 2`), the cause says why.
pub(super) fn driver_message(error: &tokio_postgres::Error) -> String {
    let mut out = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        out.push_str(&format!(": {next}"));
        cause = next.source();
    }
    out
}
