//! Why a listener could not start: what went wrong and what to do.

use crate::pooler::Evidence;

/// A listener that could not start (or, while reconnecting, could not
/// listen again): [`Listener::start`](super::Listener::start) returns it,
/// [`ListenerState::Reconnecting`](super::ListenerState) carries its words.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// A connection could not be opened.
    #[error("the listener could not connect: {detail}")]
    Connect {
        /// The driver's or server's words.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A command of the listener failed.
    #[error("the listener's {doing} failed: {detail}")]
    Query {
        /// What it was doing: `LISTEN`, `pooler probe`, ...
        doing: &'static str,
        /// The driver's or server's words.
        detail: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection was lost while the listener checked that it keeps a
    /// session of its own.
    #[error(
        "the listener's connection was lost while it checked that it keeps a session of its \
         own: {detail}"
    )]
    Lost {
        /// The driver's or server's words.
        detail: String,
    },
    /// The connection does not keep a session of its own: a pooler in
    /// transaction or statement mode is in between, where LISTEN cannot
    /// deliver notifications. The engine must poll there.
    #[error(
        "the listener's connection does not keep a session of its own: {evidence}. That is \
         what a pooler in transaction or statement pooling mode does (pgbouncer's pool_mode = \
         transaction or statement): it hands the server connection to other clients between \
         transactions, so LISTEN cannot deliver wake-ups through it. Nothing \
         was changed. Give the listener a URL that reaches PostgreSQL directly (or a pool in \
         session mode); where the engine can reach the database only through such a pooler, \
         its workers must poll for jobs instead of waiting for wake-ups (the notifier works \
         through any pooler)"
    )]
    Pooled {
        /// What the probe ([`crate::pooler`]) saw.
        evidence: Evidence,
    },
}

impl ListenError {
    pub(super) fn connect(source: tokio_postgres::Error) -> Self {
        Self::Connect {
            detail: crate::error::detail(&source),
            source,
        }
    }

    pub(super) fn query(doing: &'static str, source: tokio_postgres::Error) -> Self {
        Self::Query {
            doing,
            detail: crate::error::detail(&source),
            source,
        }
    }

    /// Whether the connection goes through a pooler where LISTEN cannot
    /// work (the engine must poll).
    pub fn is_pooled(&self) -> bool {
        matches!(self, Self::Pooled { .. })
    }
}
