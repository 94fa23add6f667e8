//! A TCP proxy in front of the test server that counts protocol round trips
//! and records the SQL text each client sends (and each `Parse`: on which
//! connection, under which statement name).
//!
//! A round trip is a wait for the server: a simple `Query` (`Q`) or a
//! `Sync` (`S`, closing an extended-query sequence) sent while every earlier
//! one has had its answer (`ReadyForQuery`). Requests sent while others are
//! still unanswered are pipelined: they share the wait of the first, and
//! count once. Counting them on the wire, rather than counting calls in the
//! code under test, measures what the server actually saw.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

/// What the proxy saw, over every connection made through it.
#[derive(Debug, Default)]
struct Seen {
    round_trips: AtomicUsize,
    requests: AtomicUsize,
    statements: Mutex<Vec<String>>,
    parses: Mutex<Vec<Parse>>,
    connections: AtomicUsize,
    /// Whether notifications (`A`) from the server are dropped instead of
    /// forwarded, as a pooler does for a client that has no server
    /// connection while idle.
    drop_notifications: std::sync::atomic::AtomicBool,
}

/// One `Parse` message a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parse {
    /// Which connection through the proxy sent it: 0 for the first
    /// accepted, 1 for the next, ...
    pub connection: usize,
    /// The statement's name: empty for the unnamed statement.
    pub name: String,
    /// The SQL text.
    pub text: String,
}

/// Where the real server listens.
#[derive(Debug, Clone)]
enum Upstream {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// A counting proxy bound to `127.0.0.1` on a free port, forwarding to the
/// test server. Its accept loop runs on the runtime that started it.
#[derive(Debug)]
pub struct CountingProxy {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl CountingProxy {
    /// Starts a proxy in front of the server of `url` (a URL from the harness).
    ///
    /// # Panics
    ///
    /// If the URL cannot be parsed or no local port can be bound.
    pub async fn start(url: &str) -> Self {
        let config = Config::from_str(url).unwrap_or_else(|e| panic!("proxy: bad URL: {e}"));
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let upstream = match config.get_hosts().first() {
            Some(Host::Tcp(host)) => Upstream::Tcp(host.clone(), port),
            Some(Host::Unix(dir)) => Upstream::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            None => Upstream::Tcp("localhost".to_owned(), port),
        };
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("proxy: bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy: local_addr: {e}"));
        let seen = Arc::new(Seen::default());
        let accept_seen = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // Each message is written in three parts: without this,
                // Nagle's algorithm holds the later parts for the peer's
                // delayed acknowledgement (tens of milliseconds a message).
                let _ = client.set_nodelay(true);
                let seen = Arc::clone(&accept_seen);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    match upstream {
                        Upstream::Tcp(host, port) => {
                            if let Ok(server) = TcpStream::connect((host.as_str(), port)).await {
                                let _ = server.set_nodelay(true);
                                relay(client, server, seen).await;
                            }
                        }
                        Upstream::Unix(path) => {
                            if let Ok(server) = UnixStream::connect(path).await {
                                relay(client, server, seen).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, seen }
    }

    /// Connects through the proxy with the user, password and database of `url`.
    ///
    /// # Panics
    ///
    /// If the URL cannot be parsed or the connection fails.
    pub async fn connect(&self, url: &str) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.url(url), NoTls)
            .await
            .unwrap_or_else(|e| panic!("proxy: connect: {e}"));
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// A key/value URL (for `psql -d` or `tokio_postgres`) that reaches the
    /// server of `url` through the proxy, as the same user and database.
    ///
    /// # Panics
    ///
    /// If the URL cannot be parsed.
    pub fn url(&self, url: &str) -> String {
        let parsed = Config::from_str(url).unwrap_or_else(|e| panic!("proxy: bad URL: {e}"));
        let mut out = format!("host=127.0.0.1 port={}", self.addr.port());
        if let Some(user) = parsed.get_user() {
            out.push_str(&format!(" user={}", crate::tls::kv_quote(user)));
        }
        if let Some(password) = parsed.get_password() {
            out.push_str(&format!(
                " password={}",
                crate::tls::kv_quote(&String::from_utf8_lossy(password))
            ));
        }
        if let Some(dbname) = parsed.get_dbname() {
            out.push_str(&format!(" dbname={}", crate::tls::kv_quote(dbname)));
        }
        out
    }

    /// Round trips seen since the start or the last [`reset`](Self::reset).
    pub fn round_trips(&self) -> usize {
        self.seen.round_trips.load(Ordering::SeqCst)
    }

    /// Requests sent (`Q` and `S` messages), pipelined or not: a pipeline of
    /// two requests is one round trip and two requests.
    pub fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::SeqCst)
    }

    /// SQL texts sent (simple queries and Parse messages), in order.
    pub fn statements(&self) -> Vec<String> {
        self.seen
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every `Parse` sent, in order (over all connections).
    pub fn parses(&self) -> Vec<Parse> {
        self.seen
            .parses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// From now on, drops every notification the server sends instead of
    /// forwarding it (what reaches a client behind a transaction pooler).
    pub fn drop_notifications(&self) {
        self.seen.drop_notifications.store(true, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// Forgets what was seen so far (e.g. the connection's own start-up).
    pub fn reset(&self) {
        self.seen.round_trips.store(0, Ordering::SeqCst);
        self.seen.requests.store(0, Ordering::SeqCst);
        self.seen
            .statements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.seen
            .parses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

async fn relay<S>(client: TcpStream, server: S, seen: Arc<Seen>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let id = seen.connections.fetch_add(1, Ordering::SeqCst);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let connection = Arc::new(Connection::default());
    let answers = Arc::clone(&connection);
    let answers_seen = Arc::clone(&seen);
    let down = tokio::spawn(async move {
        let _ = forward_answers(&mut server_read, &mut client_write, &answers, &answers_seen).await;
        let _ = client_write.shutdown().await;
    });
    let _ = forward_counting(&mut client_read, &mut server_write, &seen, &connection, id).await;
    let _ = server_write.shutdown().await;
    let _ = down.await;
}

/// What one connection has in flight.
#[derive(Debug, Default)]
struct Connection {
    /// `Q` and `S` sent that the client waits on, minus their
    /// `ReadyForQuery`.
    unanswered: AtomicIsize,
    /// Per `Q` or `S` sent and not yet answered, in order: whether the
    /// client waits on it (a `Sync` after nothing but `Close` messages is
    /// tokio-postgres dropping a prepared statement: it sends it and goes
    /// on, so it is no round trip, nor does it make the next request one
    /// that is pipelined).
    in_flight: Mutex<std::collections::VecDeque<bool>>,
    /// SSL or GSS requests sent whose one-byte answer is still to come.
    encryption_requests: AtomicUsize,
}

/// Forwards the backend stream message by message, noting each
/// `ReadyForQuery` (the end of the wait of one `Q` or `S`).
async fn forward_answers<R, W>(
    from: &mut R,
    to: &mut W,
    connection: &Connection,
    seen: &Seen,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    loop {
        let tag = from.read_u8().await?;
        // The answer to an SSL or GSS request is one byte, without a length
        // (the request was counted before it was forwarded, so before this
        // byte could come).
        if connection.encryption_requests.load(Ordering::SeqCst) > 0 {
            connection
                .encryption_requests
                .fetch_sub(1, Ordering::SeqCst);
            to.write_all(&[tag]).await?;
            to.flush().await?;
            continue;
        }
        let len = from.read_i32().await?;
        let mut body = vec![0u8; usize::try_from(len - 4).unwrap_or(0)];
        from.read_exact(&mut body).await?;
        if tag == b'Z' {
            let waited = connection
                .in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front()
                .unwrap_or(true);
            if waited {
                connection.unanswered.fetch_sub(1, Ordering::SeqCst);
            }
        }
        if tag == b'A' && seen.drop_notifications.load(Ordering::SeqCst) {
            continue;
        }
        to.write_all(&[tag]).await?;
        to.write_all(&len.to_be_bytes()).await?;
        to.write_all(&body).await?;
        to.flush().await?;
    }
}

/// Forwards the frontend stream message by message, counting round trips.
async fn forward_counting<R, W>(
    from: &mut R,
    to: &mut W,
    seen: &Seen,
    connection: &Connection,
    id: usize,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Start-up messages have no type byte: length, then a code. An SSL or
    // GSS request is followed by another start-up message.
    loop {
        let len = from.read_i32().await?;
        let mut body = vec![0u8; usize::try_from(len - 4).unwrap_or(0)];
        from.read_exact(&mut body).await?;
        let code = body
            .get(..4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        let encryption = matches!(code, 80_877_103 | 80_877_104);
        if encryption {
            connection
                .encryption_requests
                .fetch_add(1, Ordering::SeqCst);
        } else {
            // The start-up ends with the server's first ReadyForQuery, which
            // may come back before this task goes on: count it first.
            connection.unanswered.store(1, Ordering::SeqCst);
        }
        to.write_all(&len.to_be_bytes()).await?;
        to.write_all(&body).await?;
        to.flush().await?;
        if !encryption {
            break;
        }
    }
    // Whether every message since the last Sync was a Close.
    let mut only_closes = true;
    loop {
        let tag = from.read_u8().await?;
        let len = from.read_i32().await?;
        let mut body = vec![0u8; usize::try_from(len - 4).unwrap_or(0)];
        from.read_exact(&mut body).await?;
        let closes = only_closes;
        match tag {
            b'S' | b'Q' => only_closes = true,
            b'C' => {}
            _ => only_closes = false,
        }
        match tag {
            b'Q' => {
                record(seen, &body);
                wait(seen, connection, true);
            }
            b'P' => {
                // Parse: statement name, NUL, query text, NUL, ...
                if let Some(at) = body.iter().position(|&b| b == 0) {
                    record(seen, &body[at + 1..]);
                    let rest = &body[at + 1..];
                    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    seen.parses
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(Parse {
                            connection: id,
                            name: String::from_utf8_lossy(&body[..at]).into_owned(),
                            text: String::from_utf8_lossy(&rest[..end]).into_owned(),
                        });
                }
            }
            b'S' => wait(seen, connection, !closes),
            _ => {}
        }
        to.write_all(&[tag]).await?;
        to.write_all(&len.to_be_bytes()).await?;
        to.write_all(&body).await?;
        to.flush().await?;
    }
}

/// A `Q` or `S` (`waited`: one the client waits on): a round trip when
/// nothing else it waits on is unanswered.
fn wait(seen: &Seen, connection: &Connection, waited: bool) {
    connection
        .in_flight
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_back(waited);
    if !waited {
        return;
    }
    seen.requests.fetch_add(1, Ordering::SeqCst);
    if connection.unanswered.fetch_add(1, Ordering::SeqCst) <= 0 {
        seen.round_trips.fetch_add(1, Ordering::SeqCst);
    }
}

fn record(seen: &Seen, text_and_rest: &[u8]) {
    let end = text_and_rest
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(text_and_rest.len());
    let text = String::from_utf8_lossy(&text_and_rest[..end]).into_owned();
    seen.statements
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(text);
}
