//! An upgrade needs a server session of its own for its whole run: its
//! lock is a session lock, and its `CONCURRENTLY` steps run under session
//! settings. [`require_session`] refuses, before anything is read or
//! locked, a connection that goes through a pooler in transaction or
//! statement pooling mode ([`crate::pooler`] answers that question); the
//! executor also checks, before each leg, that the lock is still held by
//! the session that took it (a pooler the probe missed), and stops if not.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use schema_model::SchemaName;

use crate::error::{Context, Error, ErrorKind, Step, classify};
use crate::pooler::{self, Pooling, Watched};

/// How long the probe waits for its notification before it calls the
/// connection pooled. On a direct connection it arrives within a round
/// trip; the bound only matters behind a pooler whose second connection
/// was handed another server connection, and is long enough that a loaded
/// server never has a direct connection refused.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the probe could not answer.
enum ProbeFailure {
    /// The second connection could not be opened.
    Open(Error),
    /// `LISTEN` or `NOTIFY` failed.
    Query(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for ProbeFailure {
    fn from(err: tokio_postgres::Error) -> Self {
        Self::Query(err)
    }
}

/// Refuses to upgrade `schema` over `client` unless its connection keeps a
/// server session of its own ([`ErrorKind::Pooled`], naming `server`, the
/// connection in words): it listens on `client` (whose driver forwards its
/// notifications to `notifications`, [`pooler::watch`]) and notifies from a
/// second connection that `open` makes the same way, waiting at most
/// [`PROBE_TIMEOUT`] ([`pooler::probe_on`]). Nothing is read or locked.
///
/// # Errors
///
/// [`ErrorKind::Pooled`]; the opener's error; a failed `LISTEN` or `NOTIFY`
/// as a query error (or, through pgbouncer's statement pooling, whatever it
/// refuses).
pub async fn require_session<F, Fut>(
    client: &Client,
    notifications: &mut mpsc::UnboundedReceiver<String>,
    open: F,
    schema: &SchemaName,
    server: &str,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Watched, Error>>,
{
    let mut open = open;
    let opener = move || {
        let opened = open();
        async move { opened.await.map_err(ProbeFailure::Open) }
    };
    match pooler::probe_on(client, notifications, opener, PROBE_TIMEOUT).await {
        Ok(Pooling::SessionKept) => Ok(()),
        Ok(Pooling::Pooled(evidence)) => Err(ErrorKind::Pooled {
            schema: schema.clone(),
            server: server.to_owned(),
            evidence: evidence.to_string(),
        }
        .into()),
        Err(ProbeFailure::Open(err)) => Err(err),
        Err(ProbeFailure::Query(err)) => {
            let step = Step {
                doing: format!(
                    "probing whether the connection keeps a session of its own (LISTEN, \
                     NOTIFY) before upgrading schema {schema}"
                ),
                ..Step::default()
            };
            Err(classify(err, &step, &Context::unnamed(schema)))
        }
    }
}
