//! Does a connection keep a server session of its own between
//! transactions? Behind a pooler in transaction or statement pooling
//! (pgbouncer, and others of its kind) it does not: each transaction may run
//! on another server connection, so nothing that outlives a transaction
//! (a named prepared statement, a session `SET`, a session advisory lock,
//! `LISTEN`) can be relied on. [`probe`] finds out, for any part that needs
//! a session of its own: the sessions' statement mode
//! ([`Pooling::statement_mode`]), an upgrade (its lock and its
//! `CONCURRENTLY` steps' settings: `schema-gen upgrade` refuses a pooled
//! connection before it reads or locks anything), the wake-up listener.
//! One place answers the question. It imports nothing of this crate (the
//! ground floor), so every floor above may ask it.
//!
//! # How
//!
//! It opens two connections the same way (one `tokio_postgres::Config` and
//! TLS maker for [`probe`]; any opener for [`probe_with`], e.g. the
//! libpq-compatible `ConnectOptions::connect_watched` of the `connect`
//! feature). The first `LISTEN`s on a channel of its own, then waits idle;
//! the second notifies that channel. The notification reaches the idle
//! first connection only if its server connection stayed its own after the
//! `LISTEN` ended: proof of a session ([`Pooling::SessionKept`]). Behind a
//! transaction pooler the listening server connection went back to the
//! pool: if the second connection is handed that one, the notification
//! comes back to the second connection (proof of pooling, at once);
//! otherwise it reaches no client, and after the timeout the probe reports
//! no proof of a session either way ([`Evidence::NothingArrived`]), which
//! the safe choice treats as pooled.
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

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Socket};

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

impl fmt::Display for Evidence {
    /// What was seen, in words for an operator.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherConnection => f.write_str(
                "a second connection through it was handed the first one's server session (the \
                 notification sent to the first, idle, connection arrived at the second)",
            ),
            Self::NothingArrived(timeout) => write!(
                f,
                "a notification sent to an idle connection through it never reached that \
                 connection within {}ms (its server session went back to the pool when its \
                 LISTEN ended)",
                timeout.as_millis()
            ),
        }
    }
}

/// How long [`probe`] waits, when nothing arrives, before it reports
/// [`Evidence::NothingArrived`]. On a direct connection the notification
/// arrives within a round trip.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection whose notifications can be watched: its client, and the
/// channel names of the notifications it receives, from the task that
/// drives it ([`watch`]).
#[derive(Debug)]
pub struct Watched {
    /// The connection's client.
    pub client: Client,
    /// The channel of each notification the connection receives, in order.
    pub notifications: mpsc::UnboundedReceiver<String>,
}

/// Spawns the task that drives `connection` on the current tokio runtime
/// (it ends with the connection), forwarding the channel of each
/// notification it receives.
pub fn watch<S, T>(client: Client, mut connection: Connection<S, T>) -> Watched
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: TlsStream + Unpin + Send + 'static,
{
    watch_messages(
        client,
        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)),
    )
}

/// [`watch`] for a connection already turned into the stream of its
/// messages (polling the stream drives the connection), as the wake-up
/// listener's connector hands them out.
pub fn watch_messages<M>(client: Client, mut messages: M) -> Watched
where
    M: Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Unpin + Send + 'static,
{
    let (seen, notifications) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(notification) = message {
                // Nobody watching any more is fine: the connection is still
                // driven for its client.
                let _ = seen.send(notification.channel().to_owned());
            }
        }
    });
    Watched {
        client,
        notifications,
    }
}

/// Whether connections opened with `config` and `tls` keep their server
/// session between transactions (see the [module docs](self)): two
/// connections, a few round trips, at most `timeout` when nothing arrives.
///
/// ```no_run
/// # async fn demo(config: schema_gen::tokio_postgres::Config) -> Result<(), schema_gen::tokio_postgres::Error> {
/// use schema_gen::SchemaName;
/// use schema_gen::pooler::{DEFAULT_TIMEOUT, Pooling, probe};
/// use schema_gen::statements::Sessions;
/// use schema_gen::tokio_postgres::NoTls;
///
/// let pooling = probe(&config, NoTls, DEFAULT_TIMEOUT).await?;
/// if let Pooling::Pooled(evidence) = pooling {
///     eprintln!("no session of its own: {evidence}");
/// }
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
    probe_with(
        || {
            let tls = tls.clone();
            async move {
                let (client, connection) = config.connect(tls).await?;
                Ok(watch(client, connection))
            }
        },
        timeout,
    )
    .await
}

/// [`probe`] with connections from `open`, called twice: it must open them
/// the same way (the same server, the same pooler, the same pool).
///
/// # Errors
///
/// What `open` returned, or a driver error of `LISTEN` or `NOTIFY`.
pub async fn probe_with<F, Fut, E>(mut open: F, timeout: Duration) -> Result<Pooling, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Watched, E>>,
    E: From<tokio_postgres::Error>,
{
    let mut listening = open().await?;
    probe_on(
        &listening.client,
        &mut listening.notifications,
        open,
        timeout,
    )
    .await
}

/// [`probe`] of one connection already open (`client`, whose driver
/// forwards its notifications' channels to `notifications`: [`watch`]),
/// with a second one from `open`, opened the same way.
///
/// # Errors
///
/// What `open` returned, or a driver error of `LISTEN` or `NOTIFY`.
pub async fn probe_on<F, Fut, E>(
    client: &Client,
    notifications: &mut mpsc::UnboundedReceiver<String>,
    mut open: F,
    timeout: Duration,
) -> Result<Pooling, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Watched, E>>,
    E: From<tokio_postgres::Error>,
{
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    // Lowercase letters, digits and `_`: no quoting needed, under 63 bytes.
    let channel = format!("alkstore_pooler_probe_{}_{nonce}", std::process::id());
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    let mut notifying = open().await?;
    notifying
        .client
        .batch_execute(&format!("NOTIFY {channel}"))
        .await?;
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut watching_other = true;
    let found = loop {
        tokio::select! {
            seen = notifications.recv() => match seen {
                Some(seen) if seen == channel => break Pooling::SessionKept,
                Some(_) => {}
                // Its connection closed: it cannot be listening any more.
                None => break Pooling::Pooled(Evidence::NothingArrived(timeout)),
            },
            seen = notifying.notifications.recv(), if watching_other => match seen {
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
    let _ = notifying.client.batch_execute(&unlisten).await;
    let _ = client.batch_execute(&unlisten).await;
    Ok(found)
}
