//! What a [`Session`](super::Session) runs on ([`Connection`]), and where a
//! physical connection keeps the statements prepared on it: a session that
//! owns its `Client` keeps them itself ([`Prepared`], shared with its
//! transactions); a deadpool-postgres client keeps them in the pool's
//! statement cache of that connection, which outlives every checkout.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;
use tokio_postgres::{Client, Error, GenericClient, Statement, Transaction};

use super::session::Text;

/// A connection a [`Session`](super::Session) runs its calls on:
/// tokio-postgres's [`Client`] and [`Transaction`], and with the `deadpool`
/// feature deadpool-postgres's pooled client
/// ([`deadpool_postgres::Object`](https://docs.rs/deadpool-postgres/0.14/deadpool_postgres/type.Object.html))
/// and its transaction.
///
/// Each keeps the statements prepared on its physical connection where they
/// live as long as the connection: an owned `Client` in the session (and its
/// transactions), a deadpool client in its connection's statement cache, so
/// a statement is prepared once per physical connection however often the
/// pool hands it out. Sealed: these are the connections whose statement
/// caches the product knows.
pub trait Connection: sealed::Sealed + Send + Sync {}

impl<T: sealed::Sealed + Send + Sync> Connection for T {}

/// The statements prepared on one physical connection, by name. Each name
/// has one cell: calls racing to prepare it share one preparation (the
/// first runs it, the others wait for it), so a statement is never
/// prepared twice on a connection.
#[derive(Debug, Default, Clone)]
pub struct Prepared(Arc<Mutex<HashMap<&'static str, Once>>>);

/// One statement's preparation: done, under way, or not started.
type Once = Arc<OnceCell<Statement>>;

impl Prepared {
    /// The statement prepared as `name`, preparing it with `prepare` unless
    /// this connection has (or is doing it now).
    async fn get_or_prepare<F, P>(&self, name: &'static str, prepare: F) -> Result<Statement, Error>
    where
        F: FnOnce() -> P,
        P: Future<Output = Result<Statement, Error>>,
    {
        let cell = Arc::clone(
            self.0
                .lock()
                // Only ever inserted into: a panic elsewhere cannot leave it
                // half-written.
                .unwrap_or_else(PoisonError::into_inner)
                .entry(name)
                .or_default(),
        );
        cell.get_or_try_init(prepare).await.cloned()
    }
}

pub(crate) mod sealed {
    use super::*;

    /// How a connection runs statements and where it keeps the prepared
    /// ones.
    pub trait Sealed {
        /// The driver's client (or transaction) the statements run on.
        type Driver: GenericClient + Sync;

        /// Whether the statements run inside a transaction the caller
        /// opened (then a pooler keeps the server connection until it
        /// ends).
        const IN_TRANSACTION: bool;

        /// The driver's client the statements run on.
        fn driver(&self) -> &Self::Driver;

        /// The statement `text` prepared on this physical connection:
        /// `own` is the session's cache, for connections that keep none.
        fn prepare_cached<'a>(
            &'a self,
            own: &'a Prepared,
            text: &'a Text,
        ) -> impl Future<Output = Result<Statement, Error>> + Send + 'a;
    }
}

/// Prepares `text` on `driver` once, in `own`.
async fn prepare_in<D: GenericClient + Sync>(
    own: &Prepared,
    driver: &D,
    text: &Text,
) -> Result<Statement, Error> {
    own.get_or_prepare(text.name, || driver.prepare_typed(&text.sql, &text.types))
        .await
}

impl sealed::Sealed for Client {
    type Driver = Client;
    const IN_TRANSACTION: bool = false;

    fn driver(&self) -> &Client {
        self
    }

    fn prepare_cached<'a>(
        &'a self,
        own: &'a Prepared,
        text: &'a Text,
    ) -> impl Future<Output = Result<Statement, Error>> + Send + 'a {
        prepare_in(own, self, text)
    }
}

impl<'t> sealed::Sealed for Transaction<'t> {
    type Driver = Transaction<'t>;
    const IN_TRANSACTION: bool = true;

    fn driver(&self) -> &Transaction<'t> {
        self
    }

    fn prepare_cached<'a>(
        &'a self,
        own: &'a Prepared,
        text: &'a Text,
    ) -> impl Future<Output = Result<Statement, Error>> + Send + 'a {
        prepare_in(own, self, text)
    }
}

#[cfg(feature = "deadpool")]
impl sealed::Sealed for deadpool_postgres::Object {
    type Driver = Client;
    const IN_TRANSACTION: bool = false;

    fn driver(&self) -> &Client {
        let wrapper: &deadpool_postgres::ClientWrapper = self;
        wrapper
    }

    fn prepare_cached<'a>(
        &'a self,
        _own: &'a Prepared,
        text: &'a Text,
    ) -> impl Future<Output = Result<Statement, Error>> + Send + 'a {
        // The pool's cache of this physical connection: it outlives the
        // checkout, and coalesces concurrent preparations of one text.
        self.prepare_typed_cached(&text.sql, &text.types)
    }
}

#[cfg(feature = "deadpool")]
impl<'t> sealed::Sealed for deadpool_postgres::Transaction<'t> {
    type Driver = Transaction<'t>;
    const IN_TRANSACTION: bool = true;

    fn driver(&self) -> &Transaction<'t> {
        self
    }

    fn prepare_cached<'a>(
        &'a self,
        _own: &'a Prepared,
        text: &'a Text,
    ) -> impl Future<Output = Result<Statement, Error>> + Send + 'a {
        self.prepare_typed_cached(&text.sql, &text.types)
    }
}
