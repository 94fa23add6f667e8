//! How the listener and the notifier open their connections: each owns one,
//! and opens another after losing it, so they are handed a way to connect
//! ([`Connect`]) rather than a connection.

use std::future::Future;
use std::pin::Pin;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Socket};

/// What the server sends a connection unasked (notifications, notices), in
/// order; it ends when the connection does. Made from a
/// [`Connection`] by [`messages`].
pub type Messages = Pin<Box<dyn Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send>>;

/// A connection being opened: the client and its [`Messages`].
pub type Connecting<'a> =
    Pin<Box<dyn Future<Output = Result<(Client, Messages), tokio_postgres::Error>> + Send + 'a>>;

/// Opens a new connection each time it is called. [`connector`] makes one
/// from a `tokio_postgres::Config` and a TLS maker; any function returning
/// [`Connecting`] is one too:
///
/// ```no_run
/// use schema_gen::tokio_postgres::{Config, NoTls};
/// use schema_gen::wake::{Connect, connector, messages};
///
/// let config: Config = "host=db user=app dbname=app".parse().unwrap();
/// let plain = connector(config.clone(), NoTls);
/// // The same, by hand (e.g. to set an application_name per connection):
/// let by_hand = move || {
///     let config = config.clone();
///     Box::pin(async move {
///         let (client, connection) = config.connect(NoTls).await?;
///         Ok((client, messages(connection)))
///     }) as schema_gen::wake::Connecting<'static>
/// };
/// fn takes(_: impl Connect) {}
/// takes(plain);
/// takes(by_hand);
/// ```
pub trait Connect: Send + Sync + 'static {
    /// Opens one connection.
    fn connect(&self) -> Connecting<'_>;
}

impl<F> Connect for F
where
    F: Fn() -> Connecting<'static> + Send + Sync + 'static,
{
    fn connect(&self) -> Connecting<'_> {
        self()
    }
}

/// The messages of `connection`, which this stream drives: poll it (or
/// spawn a task that does) for the client's queries to make progress.
pub fn messages<S, T>(mut connection: Connection<S, T>) -> Messages
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    Box::pin(futures_util::stream::poll_fn(move |cx| {
        connection.poll_message(cx)
    }))
}

/// A [`Connect`] that opens `config` with `tls` (`NoTls`, or a rustls or
/// OpenSSL maker).
pub fn connector<T>(config: Config, tls: T) -> Connector<T> {
    Connector { config, tls }
}

/// See [`connector`].
#[derive(Debug, Clone)]
pub struct Connector<T> {
    config: Config,
    tls: T,
}

impl<T> Connect for Connector<T>
where
    T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let (client, connection) = self.config.connect(self.tls.clone()).await?;
            Ok((client, messages(connection)))
        })
    }
}
