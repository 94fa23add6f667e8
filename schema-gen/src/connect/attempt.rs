//! The connect itself: each target in turn (or shuffled), each attempt
//! bounded by `connect_timeout`, over TLS as `sslmode` says, and one error
//! naming every host tried.

use std::time::Duration;

use tokio_postgres::Connection;
use tokio_postgres::tls::TlsStream;

use super::targets::{Host, Target, shuffle};
use super::{ConnectOptions, SslMode};
use crate::error::{Error, ErrorKind};
use crate::pooler::{Watched, watch};

impl ConnectOptions {
    /// Connects to the first host that accepts (in random order with
    /// `load_balance_hosts=random`) and spawns the connection's task on the
    /// current tokio runtime. A failure says, for every host tried, what
    /// went wrong and what to do, never the password.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, Error> {
        self.connect_driven(Driver::Plain)
            .await
            .map(|watched| watched.client)
    }

    /// [`ConnectOptions::connect`], with the channel of each notification
    /// the connection receives forwarded to [`Watched::notifications`]
    /// (what [`crate::pooler::probe_with`] watches).
    pub async fn connect_watched(&self) -> Result<Watched, Error> {
        self.connect_driven(Driver::Watched).await
    }

    async fn connect_driven(&self, driver: Driver) -> Result<Watched, Error> {
        let mut order: Vec<usize> = (0..self.targets.len()).collect();
        if self.random_order {
            shuffle(&mut order);
        }
        let mut failures = Vec::new();
        let mut last = None;
        for i in order {
            let target = &self.targets[i];
            match self.connect_one(target, driver).await {
                Ok(client) => return Ok(client),
                Err(AttemptError::Driver(err)) => {
                    failures.push(format!(
                        "{}: {}",
                        self.describe_target(target),
                        self.explain(target, &err)
                    ));
                    last = Some(err);
                }
                Err(AttemptError::TimedOut(timeout)) => failures.push(format!(
                    "{}: no answer within {} s (connect_timeout): check that this is a \
                     PostgreSQL server, the host, the port and the firewall",
                    self.describe_target(target),
                    timeout.as_secs()
                )),
            }
        }
        let message = if failures.len() == 1 {
            format!("cannot connect to PostgreSQL at {}", failures.join(""))
        } else {
            format!(
                "cannot connect to PostgreSQL at any of {} hosts: {}",
                failures.len(),
                failures.join("; ")
            )
        };
        Err(ErrorKind::Connection {
            message,
            source: last,
        }
        .into())
    }

    fn describe_target(&self, target: &Target) -> String {
        format!(
            "{target}/{} as {} (sslmode={})",
            self.dbname,
            self.user,
            self.tls.mode.as_str()
        )
    }

    async fn connect_one(&self, target: &Target, driver: Driver) -> Result<Watched, AttemptError> {
        use tokio_postgres::config::SslMode as DriverMode;
        match self.tls.mode {
            // libpq never asks for TLS over a Unix-domain socket.
            _ if target.host.socket_dir().is_some() => {
                self.connect_with(target, DriverMode::Disable, driver).await
            }
            SslMode::Disable => self.connect_with(target, DriverMode::Disable, driver).await,
            // libpq's allow: clear text first, TLS if the server refuses it.
            SslMode::Allow => match self.connect_with(target, DriverMode::Disable, driver).await {
                Ok(client) => Ok(client),
                Err(_) => self.connect_with(target, DriverMode::Require, driver).await,
            },
            SslMode::Prefer => self.connect_with(target, DriverMode::Prefer, driver).await,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                self.connect_with(target, DriverMode::Require, driver).await
            }
        }
    }

    async fn connect_with(
        &self,
        target: &Target,
        mode: tokio_postgres::config::SslMode,
        driver: Driver,
    ) -> Result<Watched, AttemptError> {
        match self.connect_timeout {
            Some(timeout) => tokio::time::timeout(timeout, self.attempt(target, mode, driver))
                .await
                .map_err(|_| AttemptError::TimedOut(timeout))?
                .map_err(AttemptError::Driver),
            None => self
                .attempt(target, mode, driver)
                .await
                .map_err(AttemptError::Driver),
        }
    }

    async fn attempt(
        &self,
        target: &Target,
        mode: tokio_postgres::config::SslMode,
        driver: Driver,
    ) -> Result<Watched, tokio_postgres::Error> {
        use tokio_postgres::config::SslMode as DriverMode;
        let mut config = self.base.clone();
        match &target.host {
            Host::Name(name) => {
                config.host(name);
            }
            Host::Addr {
                name: Some(name),
                addr,
            } => {
                config.host(name).hostaddr(*addr);
            }
            // The address doubles as the name the certificate must carry.
            Host::Addr { name: None, addr } => {
                config.host(addr.to_string());
            }
            Host::Socket(dir) | Host::DefaultSocket(dir) => {
                config.host_path(dir);
            }
        }
        config.port(target.port);
        if let Some((password, _)) = &target.password {
            config.password(password);
        }
        config.ssl_mode(mode);
        Ok(match (&self.tls.config, mode) {
            (Some(tls), DriverMode::Prefer | DriverMode::Require) => {
                let connector = tokio_postgres_rustls::MakeRustlsConnect::new((**tls).clone());
                let (client, connection) = config.connect(connector).await?;
                driver.drive(client, connection)
            }
            _ => {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                driver.drive(client, connection)
            }
        })
    }
}

/// How a connection's task is spawned.
#[derive(Debug, Clone, Copy)]
enum Driver {
    /// Its notifications are dropped (no receiver is handed out).
    Plain,
    /// Its notifications are forwarded ([`watch`]).
    Watched,
}

impl Driver {
    fn drive<S, T>(self, client: tokio_postgres::Client, connection: Connection<S, T>) -> Watched
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        T: TlsStream + Unpin + Send + 'static,
    {
        match self {
            Self::Plain => {
                tokio::spawn(connection);
                let (_, notifications) = tokio::sync::mpsc::unbounded_channel();
                Watched {
                    client,
                    notifications,
                }
            }
            Self::Watched => watch(client, connection),
        }
    }
}

/// Why one connection attempt failed.
#[derive(Debug)]
pub(super) enum AttemptError {
    /// The driver's or the server's error.
    Driver(tokio_postgres::Error),
    /// The attempt as a whole took longer than `connect_timeout`.
    TimedOut(Duration),
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{ConnectOptions, Environment};

    fn env() -> Environment {
        Environment::new().with_os_user("osuser")
    }

    fn resolve(conninfo: &str, env: &Environment) -> ConnectOptions {
        ConnectOptions::resolve(conninfo, env).unwrap_or_else(|e| panic!("{conninfo}: {e}"))
    }

    #[test]
    fn the_default_bound_covers_the_whole_attempt_unless_connect_timeout_is_set() {
        // The kernel completes the TCP handshake for the listen backlog;
        // nobody ever answers the startup message.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        // The error within `wait`, or None if the attempt was still waiting.
        let outcome = |setting: &str, wait: Duration| -> Option<String> {
            let mut options = resolve(
                &format!("host=127.0.0.1 port={port} user=u sslmode=disable {setting}"),
                &env(),
            );
            options.default_connect_timeout(Duration::from_secs(1));
            runtime
                .block_on(async { tokio::time::timeout(wait, options.connect()).await })
                .ok()
                .map(|connected| connected.map(|_| ()).unwrap_err().to_string())
        };
        let err = outcome("", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still waiting after 10 s: the default bound is lost"));
        assert!(
            err.contains("no answer within 1 s (connect_timeout)"),
            "{err}"
        );
        // connect_timeout wins over the default, as does 0 (wait forever).
        let err = outcome("connect_timeout=2", Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still waiting after 10 s: connect_timeout is lost"));
        assert!(
            err.contains("no answer within 2 s (connect_timeout)"),
            "{err}"
        );
        assert_eq!(outcome("connect_timeout=0", Duration::from_secs(3)), None);
        drop(silent);
    }
}
