//! A bb8 pool whose connections are sessions: each keeps the statements
//! prepared on its physical connection for as long as it lives.

use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Socket};

use crate::statements::{Session, Sessions};

/// A `bb8::ManageConnection` whose connections are [`Session`]s: it
/// connects and checks connections with bb8-postgres's
/// `PostgresConnectionManager`, and makes each new connection a session
/// from its [`Sessions`] (schema, layout, mode). A session's prepared
/// statements live with its connection, so each is prepared once per
/// physical connection, on first use (or by
/// [`prepare_all`](Session::prepare_all)), whatever the number of
/// checkouts.
#[derive(Debug)]
pub struct SessionManager<Tls: MakeTlsConnect<Socket>> {
    connections: PostgresConnectionManager<Tls>,
    sessions: Sessions,
}

impl<Tls: MakeTlsConnect<Socket>> SessionManager<Tls> {
    /// Sessions from `sessions` on the connections `connections` opens.
    pub fn new(connections: PostgresConnectionManager<Tls>, sessions: Sessions) -> Self {
        Self {
            connections,
            sessions,
        }
    }

    /// What the sessions share.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }
}

impl<Tls> bb8::ManageConnection for SessionManager<Tls>
where
    Tls: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
    <Tls as MakeTlsConnect<Socket>>::Stream: Send + Sync,
    <Tls as MakeTlsConnect<Socket>>::TlsConnect: Send,
    <<Tls as MakeTlsConnect<Socket>>::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    type Connection = Session<Client>;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<Session<Client>, tokio_postgres::Error> {
        let client = self.connections.connect().await?;
        Ok(self.sessions.session(client))
    }

    async fn is_valid(&self, session: &mut Session<Client>) -> Result<(), tokio_postgres::Error> {
        self.connections.is_valid(session.client_mut()).await
    }

    fn has_broken(&self, session: &mut Session<Client>) -> bool {
        self.connections.has_broken(session.client_mut())
    }
}
