//! Does a connection keep a server session of its own between
//! transactions? Behind a pooler in transaction or statement pooling
//! (pgbouncer, and others of its kind) it does not: each transaction may run
//! on another server connection, so nothing that outlives a transaction
//! (a named prepared statement, a session `SET`, a session advisory lock,
//! `LISTEN`) can be relied on. [`probe`] finds out, for the sessions'
//! [`StatementMode`] and for any other part that needs a session of its own
//! (the wake-up listener, an upgrade's session lock).
//!
//! # How
//!
//! It opens two connections the way the engine does (one
//! `tokio_postgres::Config`, one TLS maker). The first `LISTEN`s on a
//! channel of its own, then waits idle; the second notifies that channel.
//! The notification reaches the idle first connection only if its server
//! connection stayed its own after the `LISTEN` ended: proof of a session
//! ([`Pooling::SessionKept`]). Behind a transaction pooler the listening
//! server connection went back to the pool: if the second connection is
//! handed that one, the notification comes back to the second connection
//! (proof of pooling, at once); otherwise it reaches no client, and after
//! the timeout the probe reports no proof of a session either way
//! ([`Evidence::NothingArrived`]), which the safe choice treats as pooled.
//!
//! Why not a cheaper sign: `pg_backend_pid()` read in two transactions
//! agrees whenever the pooler hands back the same server connection, which
//! an idle pool does; a named statement that survives proves nothing for
//! the same reason; and pgbouncer answers `SHOW` only on its admin console.
//! Only something the server pushes to an idle client tells whether that
//! client still has its server connection.
//!
//! Behind a transaction pooler the `LISTEN` stays on the pooled server
//! connection (pgbouncer resets server connections only in session
//! pooling); the probe sends `UNLISTEN` on both connections afterwards,
//! which reaches it when the pooler hands that server connection back, and
//! a forgotten listen on a channel nobody notifies costs nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Socket};

use crate::statements::StatementMode;

/// What [`probe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The connection keeps its server session between transactions: a
    /// direct connection, a plain TCP proxy, or pooling by session.
    SessionKept,
    /// No proof that it does, and [`Evidence`] of pooling: treat each
    /// transaction as running on any server connection.
    Pooled(Evidence),
}

/// Why [`probe`] reports [`Pooling::Pooled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evidence {
    /// The second connection received the notification meant for the
    /// first: it was handed the first one's server connection.
    OtherConnection,
    /// The notification reached neither connection within the timeout: the
    /// listening server connection is not the idle first connection's.
    NothingArrived(Duration),
}

impl Pooling {
    /// The statement mode that is correct here: [`StatementMode::Prepared`]
    /// where the session is kept, [`StatementMode::Unnamed`] otherwise.
    pub fn statement_mode(self) -> StatementMode {
        match self {
            Self::SessionKept => StatementMode::Prepared,
            Self::Pooled(_) => StatementMode::Unnamed,
        }
    }
}

/// How long [`probe`] waits, when nothing arrives, before it reports
/// [`Evidence::NothingArrived`]. On a direct connection the notification
/// arrives within a round trip.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether connections opened with `config` and `tls` keep their server
/// session between transactions (see the [module docs](self)): two
/// connections, a few round trips, at most `timeout` when nothing arrives.
///
/// ```no_run
/// # async fn demo(config: schema_gen::tokio_postgres::Config) -> Result<(), schema_gen::tokio_postgres::Error> {
/// use schema_gen::SchemaName;
/// use schema_gen::pooler::{DEFAULT_TIMEOUT, probe};
/// use schema_gen::statements::Sessions;
/// use schema_gen::tokio_postgres::NoTls;
///
/// let pooling = probe(&config, NoTls, DEFAULT_TIMEOUT).await?;
/// let sessions = Sessions::new(SchemaName::default()).with_mode(pooling.statement_mode());
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// A connection, `LISTEN` or `NOTIFY` failed.
pub async fn probe<T>(
    config: &Config,
    tls: T,
    timeout: Duration,
) -> Result<Pooling, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    // Lowercase letters, digits and `_`: no quoting needed, under 63 bytes.
    let channel = format!("alkstore_pooler_probe_{}_{nonce}", std::process::id());
    let (listening, mut to_listening) = open(config, tls.clone()).await?;
    listening
        .batch_execute(&format!("LISTEN {channel}"))
        .await?;
    let (notifying, mut to_notifying) = open(config, tls).await?;
    notifying
        .batch_execute(&format!("NOTIFY {channel}"))
        .await?;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut watching_other = true;
    let found = loop {
        tokio::select! {
            seen = to_listening.recv() => match seen {
                Some(seen) if seen == channel => break Pooling::SessionKept,
                Some(_) => {}
                // Its connection closed: it cannot be listening any more.
                None => break Pooling::Pooled(Evidence::NothingArrived(timeout)),
            },
            seen = to_notifying.recv(), if watching_other => match seen {
                Some(seen) if seen == channel => break Pooling::Pooled(Evidence::OtherConnection),
                Some(_) => {}
                None => watching_other = false,
            },
            () = &mut deadline => break Pooling::Pooled(Evidence::NothingArrived(timeout)),
        }
    };
    // Best effort: behind a pooler this reaches the listening server
    // connection only if the pooler hands it to one of the two.
    let unlisten = format!("UNLISTEN {channel}");
    let _ = notifying.batch_execute(&unlisten).await;
    let _ = listening.batch_execute(&unlisten).await;
    Ok(found)
}

/// A connection, and the channels of the notifications it receives (its
/// driver runs on a task of its own, which ends with the connection).
async fn open<T>(
    config: &Config,
    tls: T,
) -> Result<(Client, mpsc::UnboundedReceiver<String>), tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket> + Send + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let (client, mut connection) = config.connect(tls).await?;
    let (seen, notifications) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(notification) = message {
                // Nobody watching any more is fine: the connection is still
                // driven for its client.
                let _ = seen.send(notification.channel().to_owned());
            }
        }
    });
    Ok((client, notifications))
}
