//! A TCP relay whose connections can be frozen: open, forwarding nothing.

use super::*;

/// A TCP relay to the test server whose existing connections can be frozen:
/// they stay open and forward nothing more, as a connection behind a dead
/// cable or a firewall's idle timeout does. Connections made after a freeze
/// forward normally.
pub(super) struct Relay {
    port: u16,
    frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl Relay {
    pub(super) async fn start() -> Self {
        let upstream = config(&harness::database_url());
        let port = upstream.get_ports().first().copied().unwrap_or(5432);
        let host = upstream.get_hosts().first().cloned();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let relay_port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("relay: {e}"))
            .port();
        let frozen: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let flags = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let flag = Arc::new(AtomicBool::new(false));
                flags
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Arc::clone(&flag));
                let host = host.clone();
                tokio::spawn(async move {
                    let (cr, cw) = client.into_split();
                    match host {
                        Some(Host::Unix(dir)) => {
                            let path = dir.join(format!(".s.PGSQL.{port}"));
                            if let Ok(server) = tokio::net::UnixStream::connect(path).await {
                                let (sr, sw) = server.into_split();
                                pump_both(cr, cw, sr, sw, flag).await;
                            }
                        }
                        Some(Host::Tcp(h)) => {
                            if let Ok(server) =
                                tokio::net::TcpStream::connect((h.as_str(), port)).await
                            {
                                let (sr, sw) = server.into_split();
                                pump_both(cr, cw, sr, sw, flag).await;
                            }
                        }
                        None => {}
                    }
                });
            }
        });
        Self {
            port: relay_port,
            frozen,
        }
    }

    pub(super) fn freeze_all(&self) {
        for flag in self.frozen.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            flag.store(true, Ordering::SeqCst);
        }
    }

    pub(super) fn connect(&self) -> impl Connect {
        let upstream = config(&harness::database_url());
        let mut relayed = Config::new();
        relayed.host("127.0.0.1").port(self.port);
        if let Some(user) = upstream.get_user() {
            relayed.user(user);
        }
        if let Some(db) = upstream.get_dbname() {
            relayed.dbname(db);
        }
        if let Some(password) = upstream.get_password() {
            relayed.password(password);
        }
        connector(relayed, NoTls)
    }
}

async fn pump_both<CR, CW, SR, SW>(cr: CR, cw: CW, sr: SR, sw: SW, frozen: Arc<AtomicBool>)
where
    CR: tokio::io::AsyncRead + Unpin,
    CW: tokio::io::AsyncWrite + Unpin,
    SR: tokio::io::AsyncRead + Unpin,
    SW: tokio::io::AsyncWrite + Unpin,
{
    tokio::join!(pump(cr, sw, &frozen), pump(sr, cw, &frozen));
}

/// Copies `from` to `to` until either ends; once frozen, holds what it
/// reads forever.
async fn pump<R, W>(mut from: R, mut to: W, frozen: &AtomicBool)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}
