//! The typed runner: a [`Session`] on one connection runs [`Call`]s,
//! decoding what they return, with each statement prepared once on its
//! physical connection ([`StatementMode::Prepared`]) or sent as an unnamed
//! statement with every call ([`StatementMode::Unnamed`], for transaction
//! pooling); [`Sessions`] is what the sessions of one engine share.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures_util::{TryStreamExt, pin_mut};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, GenericClient, Row, RowStream, Transaction};

use schema_model::{Layout, SchemaName};

use super::connection::Prepared;
use super::jobs::PromotePacer;
use super::{Call, Connection, Output, Returns, Statement, StatementError, registry};

/// How a session sends its statements to the server.
///
/// Choose by where the connection goes: [`Prepared`](Self::Prepared) needs
/// a server session that stays the connection's own between transactions
/// (a direct connection, a pool of direct connections such as deadpool or
/// bb8, pgbouncer in session pooling); [`Unnamed`](Self::Unnamed) works
/// behind a pooler in transaction or statement pooling, where the next
/// transaction may run on another server connection (tested with
/// pgbouncer 1.18; 1.21's `max_prepared_statements` is not tested here:
/// use the unnamed mode behind any transaction pooler).
/// [`crate::pooler::probe`] tells the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// Each statement is prepared once per physical connection as a named
    /// statement (`Parse` of its text, once), then every call sends only
    /// its values (`Bind`, `Execute`). The server plans it with its plan
    /// cache: the claim path's statements keep one generic plan after five
    /// calls per connection ([`jobs`](super::jobs), "The claim path is planned once").
    /// Behind a pooler in transaction pooling this breaks: the
    /// connection's next transaction may run on a server connection where
    /// the name does not exist (`prepared statement "s5" does not exist`),
    /// or where another process prepared another statement under the same
    /// name.
    #[default]
    Prepared,
    /// Every call sends its text as the unnamed statement, with each
    /// parameter's type, and its values in the same message sequence
    /// (`Parse`, `Bind`, `Describe`, `Execute`, `Sync`: one round trip, as
    /// tokio-postgres's `query_typed`). Nothing outlives the call, so it is
    /// correct on any connection, a pooler's included; outside a
    /// transaction a session sends one call at a time, and the claim path
    /// runs in a transaction (see [`Session`], "Behind a pooler"). The
    /// price is that the server parses and plans every call, the claim
    /// path's included (BENCHMARKS.md, "Sessions on pools and poolers", and
    /// "Hot paths").
    Unnamed,
}

impl crate::pooler::Pooling {
    /// The statement mode that is correct here: [`StatementMode::Prepared`]
    /// where the session is kept, [`StatementMode::Unnamed`] otherwise.
    /// (Written here, beside the modes: the probe is on the floor below.)
    pub fn statement_mode(self) -> StatementMode {
        match self {
            Self::SessionKept => StatementMode::Prepared,
            Self::Pooled(_) => StatementMode::Unnamed,
        }
    }
}

/// A statement's text and parameter types, rendered once per engine schema
/// ([`Sessions`] keeps them): what a session prepares, or sends with every
/// call in [`StatementMode::Unnamed`].
#[derive(Debug)]
pub struct Text {
    pub(crate) name: &'static str,
    pub(crate) sql: String,
    pub(crate) types: Vec<Type>,
}

impl Text {
    fn of(statement: &Statement) -> Self {
        Self {
            name: statement.name(),
            sql: statement.sql().to_owned(),
            types: statement.param_types(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    schema: SchemaName,
    layout: Layout,
    mode: StatementMode,
    texts: RwLock<HashMap<&'static str, Arc<Text>>>,
    /// When [`Session::claim`] promotes, for every session made here.
    pacer: PromotePacer,
}

/// What the sessions of one engine share: the engine schema, its
/// [`Layout`], the [`StatementMode`], and each statement's text, rendered
/// once. Cheap to clone (one reference count); make one at start-up and a
/// [`Session`] from it for each connection, or for each checkout of a pool:
///
/// ```no_run
/// # async fn demo(client: schema_gen::tokio_postgres::Client) -> Result<(), schema_gen::statements::StatementError> {
/// use schema_gen::SchemaName;
/// use schema_gen::statements::{Sessions, StatementMode, jobs};
///
/// // At start-up, once: behind pgbouncer in transaction pooling.
/// let sessions = Sessions::new(SchemaName::default()).with_mode(StatementMode::Unnamed);
/// // Per connection (or per checkout of a pool: see `schema_gen::pool`).
/// let session = sessions.session(client);
/// let acked: u64 = session.run(&jobs::Ack { id: 1, worker_id: "worker-1", attempts: 1 }).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Sessions {
    shared: Arc<Shared>,
}

impl Sessions {
    /// Sessions for the engine schema `schema` on a single server, in
    /// [`StatementMode::Prepared`].
    pub fn new(schema: SchemaName) -> Self {
        Self {
            shared: Arc::new(Shared {
                schema,
                layout: Layout::SingleServer,
                mode: StatementMode::Prepared,
                texts: RwLock::default(),
                pacer: PromotePacer::default(),
            }),
        }
    }

    /// The same, under `layout` (on Citus, connect to the coordinator).
    #[must_use]
    pub fn with_layout(self, layout: Layout) -> Self {
        self.rebuilt(|shared| shared.layout = layout)
    }

    /// The same, sending statements in `mode`.
    #[must_use]
    pub fn with_mode(self, mode: StatementMode) -> Self {
        self.rebuilt(|shared| shared.mode = mode)
    }

    fn rebuilt(self, change: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared {
            schema: self.shared.schema.clone(),
            layout: self.shared.layout,
            mode: self.shared.mode,
            texts: RwLock::default(),
            pacer: PromotePacer::default(),
        };
        change(&mut shared);
        Self {
            shared: Arc::new(shared),
        }
    }

    /// A session on `client`: a connection it owns (a tokio-postgres
    /// `Client`), or a pool's client (deadpool-postgres's `Object`, feature
    /// `deadpool`), which keeps its prepared statements with its physical
    /// connection.
    pub fn session<C: Connection>(&self, client: C) -> Session<C> {
        Session {
            client,
            sessions: self.clone(),
            prepared: Prepared::default(),
            turns: Arc::default(),
        }
    }

    /// The engine schema the statements name.
    pub fn schema(&self) -> &SchemaName {
        &self.shared.schema
    }

    /// The layout of the engine schema.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// How the sessions send their statements.
    pub fn mode(&self) -> StatementMode {
        self.shared.mode
    }

    /// When the claim path of these sessions promotes.
    pub(crate) fn pacer(&self) -> &PromotePacer {
        &self.shared.pacer
    }

    /// The text of the statement `name`, rendering it with `statement` the
    /// first time.
    fn text(&self, name: &'static str, statement: impl FnOnce() -> Statement) -> Arc<Text> {
        if let Some(text) = self.read_texts().get(name) {
            return Arc::clone(text);
        }
        let text = Arc::new(Text::of(&statement()));
        Arc::clone(
            self.shared
                .texts
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(name)
                .or_insert(text),
        )
    }

    fn read_texts(&self) -> std::sync::RwLockReadGuard<'_, HashMap<&'static str, Arc<Text>>> {
        // Only ever inserted into: a panic elsewhere cannot leave it
        // half-written.
        self.shared
            .texts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One connection's runner of the hot-path statements: it runs every
/// [`Call`] by binding its values to its statement, and decodes the result
/// by the model's typed columns ([`Call::Returns`]).
///
/// In [`StatementMode::Prepared`] (the default) each statement is prepared
/// once on the session's physical connection, the first time a call of it
/// runs (or all at once with [`prepare_all`](Self::prepare_all)), and then
/// only values are sent; in [`StatementMode::Unnamed`] every call sends its
/// text as an unnamed statement with its values, in one round trip, for
/// connections through a pooler in transaction pooling. Either way the
/// claim path is one round trip ([`run_pipelined`](Self::run_pipelined)).
///
/// `C` is the [`Connection`]: a tokio-postgres [`Client`] the session owns
/// (hold one session per connection, for as long as the connection lives: a
/// prepared statement belongs to the connection that prepared it), a
/// transaction on it ([`transaction`](Session::transaction); both share the
/// statements prepared so far), or a pool's client (see [`crate::pool`]:
/// deadpool-postgres's `Object` keeps the statements with its physical
/// connection, a bb8 pool of `pool::SessionManager` (feature `bb8`) hands out
/// sessions). [`Sessions`] makes sessions that share the schema, layout,
/// mode and statement texts; [`Session::new`] is one on its own.
///
/// A session knows the [`Layout`] of its engine schema (a single server
/// unless created [`with_layout`](Session::with_layout)): it decides what
/// [`prepare_all`](Self::prepare_all) prepares, the layout's
/// [`registry`](super::registry()).
///
/// # The claim path: one round trip, no transaction
///
/// [`run_pipelined`](Self::run_pipelined) sends [`jobs::Promote`] and
/// [`jobs::Claim`] together and then waits for both: one round trip
/// (tokio-postgres pipelines requests made concurrently on one connection).
/// It needs no transaction: the server runs the two in order, each in its
/// own implicit transaction, so promote has committed before claim takes its
/// snapshot and the claim sees every job promote made ready. Between the two
/// there is nothing to protect: a promoted, unclaimed job is exactly what
/// the claim index holds for every worker, so another worker claiming it
/// first, or this worker dying before its claim, leaves a valid queue. A
/// transaction would only hold promote's row locks until the claim ends (so
/// other workers skip those jobs) and cost a `BEGIN` and a `COMMIT`. If
/// promote fails, the claim still runs (it was already sent) and the first
/// error is returned. In [`StatementMode::Unnamed`] (outside a transaction
/// of the caller's) the two do run in one transaction, `BEGIN`, promote,
/// claim and `COMMIT` sent together, still one round trip: see "Behind a
/// pooler"; a failed promote then rolls the claim back with it.
///
/// [`claim`](Self::claim) is this path as the engine runs it: the promote
/// only on a queue's first claim of each second and after a promote that
/// filled its limit ([`jobs::PromotePacer`](super::jobs::PromotePacer)),
/// the claim alone otherwise.
///
/// [`jobs::Promote`]: super::jobs::Promote
/// [`jobs::Claim`]: super::jobs::Claim
///
/// # Behind a pooler
///
/// Through pgbouncer in transaction pooling, use [`StatementMode::Unnamed`]
/// (or let [`crate::pooler::probe`] choose). What works there: every call,
/// the claim path in one round trip, [`transaction`](Session::transaction)
/// (the pooler keeps one server connection for the whole transaction),
/// [`Sessions`] on pools in front of the pooler. What does not, and the
/// product never relies on it there: a named prepared statement between
/// transactions (the prepared mode), a session `SET`, a session advisory
/// lock, `LISTEN` (the wake-up listener needs a direct connection), and
/// two requests in flight at once on one connection.
///
/// That last one is pgbouncer's, measured here with 1.18: when a client
/// sends a second request before the first one's answer, and the second
/// reaches pgbouncer in more than one piece, pgbouncer can hand the server
/// connection back to its pool at the first answer, between the pieces;
/// the rest of the request then runs on another server connection, and the
/// answers go to the wrong clients (`unexpected message from server`, jobs
/// left claimed). A proxy that forwards message by message made it happen
/// on most connections within 2,000 jobs. So in the unnamed mode, outside a
/// transaction, a session sends one call at a time (calls of other tasks
/// on the same session wait their turn), and
/// [`run_pipelined`](Self::run_pipelined) sends its two calls inside a
/// transaction, which pgbouncer never splits. Do not run other queries
/// concurrently on the session's connection ([`client`](Self::client))
/// either. In statement pooling only single calls work: a transaction is
/// refused by the pooler, and so is the unnamed mode's claim path.
///
/// # Example
///
/// The program `schema-gen/examples/engine.rs` (compiled by CI, run against
/// a real server by `tests/engine_example.rs`): bootstrap, prepare once,
/// enqueue three jobs, the claim path in one round trip, an ack and a retry,
/// with only `schema-gen` as a dependency (and the runtime):
///
#[doc = concat!("```no_run\n", include_str!("../../examples/engine.rs"), "```")]
#[derive(Debug)]
pub struct Session<C = Client> {
    client: C,
    sessions: Sessions,
    /// The statements prepared on this physical connection, when `C` keeps
    /// none itself (an owned client and its transactions).
    prepared: Prepared,
    /// In [`StatementMode::Unnamed`], one call at a time (outside a
    /// transaction).
    turns: Arc<tokio::sync::Mutex<()>>,
}

impl<C: Connection> Session<C> {
    /// A session on `client` for the engine schema `schema` on a single
    /// server, in [`StatementMode::Prepared`]. Nothing is prepared yet.
    pub fn new(client: C, schema: SchemaName) -> Self {
        Sessions::new(schema).session(client)
    }

    /// A session on `client` for the engine schema `schema` under `layout`
    /// (on Citus, connect to the coordinator), in
    /// [`StatementMode::Prepared`]. Nothing is prepared yet.
    pub fn with_layout(client: C, schema: SchemaName, layout: Layout) -> Self {
        Sessions::new(schema).with_layout(layout).session(client)
    }

    /// The connection (or transaction).
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The connection back, and with it the statements prepared on it
    /// (a pool's client keeps them in its own cache; an owned client's are
    /// this session's and are not reused by another).
    pub fn into_client(self) -> C {
        self.client
    }

    /// What this session shares with the others made from its
    /// [`Sessions`]: schema, layout, mode, statement texts.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The engine schema the statements name.
    pub fn schema(&self) -> &SchemaName {
        self.sessions.schema()
    }

    /// The layout of the engine schema: which statements
    /// [`prepare_all`](Self::prepare_all) prepares.
    pub fn layout(&self) -> Layout {
        self.sessions.layout()
    }

    /// How this session sends its statements.
    pub fn mode(&self) -> StatementMode {
        self.sessions.mode()
    }

    /// Runs `call` and returns what the statement returns, decoded. In
    /// [`StatementMode::Prepared`] its statement is prepared first if this
    /// physical connection has not yet.
    ///
    /// ```no_run
    /// # async fn demo(session: &schema_gen::statements::Session) -> Result<(), schema_gen::statements::StatementError> {
    /// use schema_gen::statements::{Job, jobs};
    ///
    /// let id: i64 = session.run(&jobs::Enqueue { job: &Job::default(), now: 1_700_000_000 }).await?;
    /// let acked: u64 = session.run(&jobs::Ack { id, worker_id: "worker-1", attempts: 1 }).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`StatementError`] naming the statement: the server's refusal
    /// (message, SQLSTATE, detail, hint), a lost connection, or a returned
    /// row that does not decode.
    pub async fn run<Q: Call + Sync>(&self, call: &Q) -> Result<Output<Q>, StatementError> {
        let _turn = self.turn().await;
        self.run_now(call).await
    }

    /// [`run`](Self::run), without waiting for the session's turn.
    async fn run_now<Q: Call + Sync>(&self, call: &Q) -> Result<Output<Q>, StatementError> {
        let text = self
            .sessions
            .text(Q::NAME, || call.statement(self.schema()));
        let (rows, rows_affected) = self
            .execute(&text, call)
            .await
            .map_err(|e| StatementError::from_driver(Q::NAME, e))?;
        <Q::Returns as Returns>::decode(rows, rows_affected)
            .map_err(|error| StatementError::new(Q::NAME, error.into()))
    }

    /// In [`StatementMode::Unnamed`] outside a transaction, waits until no
    /// other call of this session is in flight, and holds that turn: see
    /// [the type's docs](Session), "Behind a pooler".
    async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if self.mode() == StatementMode::Unnamed && !C::IN_TRANSACTION {
            Some(self.turns.lock().await)
        } else {
            None
        }
    }

    /// Runs `first` and `second` in one round trip: both are sent before
    /// either result is read, and the server runs them in that order, each
    /// in its own implicit transaction (or in this session's transaction).
    /// The claim path is `run_pipelined(&jobs::Promote { .. }, &jobs::Claim
    /// { .. })`; see [the type's docs](Session) for why it needs no
    /// transaction.
    ///
    /// # Errors
    ///
    /// The first statement's error if it failed (the second still ran),
    /// else the second's.
    pub async fn run_pipelined<A, B>(
        &self,
        first: &A,
        second: &B,
    ) -> Result<(Output<A>, Output<B>), StatementError>
    where
        A: Call + Sync,
        B: Call + Sync,
    {
        let Some(_turn) = self.turn().await else {
            // Prepared beforehand, so each is sent as one Bind and Execute,
            // in order: were only `second` prepared, its Execute would go
            // out while `first` still waits for its Parse, and the server
            // would run the claim before the promote. A statement that
            // fails to prepare does not stop the other.
            let first_ready = self.prepare_one(first).await;
            let second_ready = self.prepare_one(second).await;
            let (first, second) = futures_util::future::join(
                async {
                    first_ready?;
                    self.run_now(first).await
                },
                async {
                    second_ready?;
                    self.run_now(second).await
                },
            )
            .await;
            return Ok((first?, second?));
        };
        // Behind a transaction pooler two requests in flight at once are not
        // safe, so the two run in one transaction, sent together.
        self.pair_in_one_transaction(first, second).await
    }

    /// In [`StatementMode::Prepared`], prepares `first` then `second` where
    /// this physical connection has not yet (no round trip when both are).
    async fn prepare_in_order<A, B>(&self, first: &A, second: &B) -> Result<(), StatementError>
    where
        A: Call + Sync,
        B: Call + Sync,
    {
        self.prepare_one(first).await?;
        self.prepare_one(second).await
    }

    /// In [`StatementMode::Prepared`], prepares `call`'s statement unless
    /// this physical connection has already.
    async fn prepare_one<Q: Call + Sync>(&self, call: &Q) -> Result<(), StatementError> {
        if self.mode() != StatementMode::Prepared {
            return Ok(());
        }
        let text = self
            .sessions
            .text(Q::NAME, || call.statement(self.schema()));
        self.client
            .prepare_cached(&self.prepared, &text)
            .await
            .map(drop)
            .map_err(|e| StatementError::from_driver(Q::NAME, e))
    }

    /// `BEGIN`, `first`, `second`, `COMMIT`, sent together: one transaction
    /// in one round trip. The statements must be prepared already where the
    /// mode prepares them, so the four go out in that order.
    async fn pair_in_one_transaction<A, B>(
        &self,
        first: &A,
        second: &B,
    ) -> Result<(Output<A>, Output<B>), StatementError>
    where
        A: Call + Sync,
        B: Call + Sync,
    {
        let driver = self.client.driver();
        let (begun, first, second, ended) = futures_util::future::join4(
            driver.batch_execute("BEGIN"),
            self.run_now(first),
            self.run_now(second),
            driver.batch_execute("COMMIT"),
        )
        .await;
        begun.map_err(|e| StatementError::from_driver("begin", e))?;
        let (first, second) = (first?, second?);
        ended.map_err(|e| StatementError::from_driver("commit", e))?;
        Ok((first, second))
    }

    /// Prepares every statement of this session's layout
    /// ([`registry`](super::registry())) that this physical connection has
    /// not prepared yet, in one round trip, so that no later call waits for
    /// a preparation; without a round trip when all are. In
    /// [`StatementMode::Unnamed`] nothing is prepared on the server: only
    /// the texts are rendered.
    ///
    /// # Errors
    ///
    /// The first statement the server refused to prepare (an engine schema
    /// missing or older than the model: bootstrap it first).
    pub async fn prepare_all(&self) -> Result<(), StatementError> {
        let texts: Vec<Arc<Text>> = registry(self.layout())
            .map(|entry| {
                self.sessions
                    .text(entry.name(), || entry.statement(self.schema()))
            })
            .collect();
        if self.mode() == StatementMode::Unnamed {
            return Ok(());
        }
        let results = futures_util::future::join_all(texts.iter().map(|text| async move {
            self.client
                .prepare_cached(&self.prepared, text)
                .await
                .map_err(|e| StatementError::from_driver(text.name, e))
        }))
        .await;
        results.into_iter().try_for_each(|result| result.map(drop))
    }

    /// Runs `text` with `call`'s values and reads every row and the number
    /// of rows affected.
    async fn execute<Q: Call + Sync>(
        &self,
        text: &Text,
        call: &Q,
    ) -> Result<(Vec<Row>, u64), tokio_postgres::Error> {
        let values = call.values();
        let params = values.as_params();
        let driver = self.client.driver();
        let stream = match self.mode() {
            StatementMode::Prepared => {
                let prepared = self.client.prepare_cached(&self.prepared, text).await?;
                driver.query_raw(&prepared, params).await?
            }
            StatementMode::Unnamed => {
                driver
                    .query_typed_raw(
                        &text.sql,
                        params.into_iter().zip(text.types.iter().cloned()),
                    )
                    .await?
            }
        };
        collect(stream).await
    }

    /// The connection, to start a transaction on it.
    #[cfg_attr(not(any(feature = "deadpool", feature = "bb8")), expect(dead_code))]
    pub(crate) fn client_mut(&mut self) -> &mut C {
        &mut self.client
    }
}

/// Every row of `stream` and the number of rows affected.
async fn collect(stream: RowStream) -> Result<(Vec<Row>, u64), tokio_postgres::Error> {
    pin_mut!(stream);
    let mut rows = Vec::new();
    while let Some(row) = stream.try_next().await? {
        rows.push(row);
    }
    Ok((rows, stream.rows_affected().unwrap_or(0)))
}

impl Session<Client> {
    /// Runs `first` and `second` in one transaction, in one round trip:
    /// `BEGIN`, both, `COMMIT`, sent together. Takes the session exclusively
    /// (`&mut`), so no other call of this session can fall between them;
    /// both are prepared before anything is sent, so the four go out in
    /// that order.
    ///
    /// # Errors
    ///
    /// `BEGIN`'s error, else the first statement's, else the second's (the
    /// transaction then rolled back: neither took effect), else `COMMIT`'s.
    pub(crate) async fn run_in_one_transaction<A, B>(
        &mut self,
        first: &A,
        second: &B,
    ) -> Result<(Output<A>, Output<B>), StatementError>
    where
        A: Call + Sync,
        B: Call + Sync,
    {
        self.prepare_in_order(first, second).await?;
        self.pair_in_one_transaction(first, second).await
    }

    /// Starts a transaction on this session's connection: a session that
    /// runs its calls inside it, with the statements prepared so far (and
    /// keeps what it prepares). [`commit`](Session::commit) it; dropped, it
    /// rolls back.
    ///
    /// A schedule tick (`due`, the enqueues, `advance`) and a dedup claim
    /// with its effect run in one.
    ///
    /// # Errors
    ///
    /// The server refused `BEGIN` (statement `begin`).
    pub async fn transaction(&mut self) -> Result<Session<Transaction<'_>>, StatementError> {
        let transaction = self
            .client
            .transaction()
            .await
            .map_err(|e| StatementError::from_driver("begin", e))?;
        Ok(Session {
            client: transaction,
            sessions: self.sessions.clone(),
            prepared: self.prepared.clone(),
            turns: Arc::clone(&self.turns),
        })
    }
}

impl Session<Transaction<'_>> {
    /// Commits the transaction.
    ///
    /// # Errors
    ///
    /// The server refused `COMMIT` (statement `commit`): nothing of the
    /// transaction was kept.
    pub async fn commit(self) -> Result<(), StatementError> {
        self.client
            .commit()
            .await
            .map_err(|e| StatementError::from_driver("commit", e))
    }

    /// Rolls the transaction back.
    ///
    /// # Errors
    ///
    /// The connection failed (statement `rollback`).
    pub async fn rollback(self) -> Result<(), StatementError> {
        self.client
            .rollback()
            .await
            .map_err(|e| StatementError::from_driver("rollback", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statements::jobs;

    /// A session's futures can move between threads (`tokio::spawn`).
    #[test]
    fn a_session_runs_on_any_thread() {
        fn send<T: Send>(_: &T) {}
        fn check(session: &Session) {
            let call = jobs::Reap { now: 1, limit: 1 };
            send(&session.run(&call));
            send(&session.run_pipelined(&call, &call));
            send(&session.prepare_all());
        }
        let _ = check;
    }
}
