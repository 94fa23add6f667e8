//! The typed runner: a [`Session`] on one connection prepares each statement
//! once and runs [`Call`]s, decoding what they return.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{TryStreamExt, pin_mut};
use tokio_postgres::{Client, GenericClient, Row, Transaction};

use schema_model::{Layout, SchemaName};

use super::{Call, Output, Returns, StatementError, registry};

/// The statements prepared on one connection, by name.
type Prepared = Arc<Mutex<HashMap<&'static str, tokio_postgres::Statement>>>;

/// One connection's runner of the hot-path statements: it prepares each
/// statement once on its connection (the first time a call of it runs, or
/// all at once with [`prepare_all`](Self::prepare_all)), then runs every
/// [`Call`] by binding only its values, and decodes the result by the
/// model's typed columns ([`Call::Returns`]).
///
/// Hold one session per connection, for as long as the connection lives: a
/// prepared statement belongs to the connection that prepared it. `C` is the
/// connection ([`Client`]) or a transaction on it
/// ([`transaction`](Session::transaction)); both share the statements
/// prepared so far.
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
/// error is returned.
///
/// [`jobs::Promote`]: super::jobs::Promote
/// [`jobs::Claim`]: super::jobs::Claim
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
    schema: SchemaName,
    layout: Layout,
    prepared: Prepared,
}

impl<C: GenericClient + Sync> Session<C> {
    /// A session on `client` for the engine schema `schema` on a single
    /// server. Nothing is prepared yet.
    pub fn new(client: C, schema: SchemaName) -> Self {
        Self::with_layout(client, schema, Layout::SingleServer)
    }

    /// A session on `client` for the engine schema `schema` under `layout`
    /// (on Citus, connect to the coordinator). Nothing is prepared yet.
    pub fn with_layout(client: C, schema: SchemaName, layout: Layout) -> Self {
        Self {
            client,
            schema,
            layout,
            prepared: Prepared::default(),
        }
    }

    /// The connection (or transaction).
    pub fn client(&self) -> &C {
        &self.client
    }

    /// The connection back, and with it the statements prepared on it.
    pub fn into_client(self) -> C {
        self.client
    }

    /// The engine schema the statements name.
    pub fn schema(&self) -> &SchemaName {
        &self.schema
    }

    /// The layout of the engine schema: which statements
    /// [`prepare_all`](Self::prepare_all) prepares.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Runs `call`, preparing its statement first if this connection has not
    /// yet, and returns what the statement returns, decoded.
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
        let prepared = self.prepared(call).await?;
        let (rows, rows_affected) = self
            .execute(&prepared, call)
            .await
            .map_err(|e| StatementError::from_driver(Q::NAME, e))?;
        <Q::Returns as Returns>::decode(rows, rows_affected)
            .map_err(|error| StatementError::new(Q::NAME, error.into()))
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
        let (first, second) = futures_util::future::join(self.run(first), self.run(second)).await;
        Ok((first?, second?))
    }

    /// Prepares every statement of this session's layout
    /// ([`registry`](super::registry())) that this connection has not
    /// prepared yet, in one round trip, so that no later call waits for a
    /// preparation.
    ///
    /// # Errors
    ///
    /// The first statement the server refused to prepare (an engine schema
    /// missing or older than the model: bootstrap it first).
    pub async fn prepare_all(&self) -> Result<(), StatementError> {
        let missing: Vec<_> = {
            let prepared = self.lock();
            registry(self.layout)
                .filter(|entry| !prepared.contains_key(entry.name()))
                .map(|entry| entry.statement(&self.schema))
                .collect()
        };
        let results = futures_util::future::join_all(missing.iter().map(|statement| async move {
            self.client
                .prepare_typed(statement.sql(), &statement.param_types())
                .await
                .map(|prepared| (statement.name(), prepared))
                .map_err(|e| StatementError::from_driver(statement.name(), e))
        }))
        .await;
        let mut prepared = self.lock();
        for result in results {
            let (name, statement) = result?;
            prepared.insert(name, statement);
        }
        Ok(())
    }

    /// The statement of `call` as prepared on this connection.
    async fn prepared<Q: Call>(
        &self,
        call: &Q,
    ) -> Result<tokio_postgres::Statement, StatementError> {
        if let Some(prepared) = self.lock().get(Q::NAME) {
            return Ok(prepared.clone());
        }
        // Not held across the wait: two calls of one statement racing here
        // both prepare it, and one of the two is kept (the other is closed
        // when dropped).
        let statement = call.statement(&self.schema);
        let prepared = self
            .client
            .prepare_typed(statement.sql(), &statement.param_types())
            .await
            .map_err(|e| StatementError::from_driver(Q::NAME, e))?;
        self.lock().insert(Q::NAME, prepared.clone());
        Ok(prepared)
    }

    /// Binds `call`'s values to `prepared` and reads every row and the
    /// number of rows affected.
    async fn execute<Q: Call + Sync>(
        &self,
        prepared: &tokio_postgres::Statement,
        call: &Q,
    ) -> Result<(Vec<Row>, u64), tokio_postgres::Error> {
        let values = call.values();
        let stream = self.client.query_raw(prepared, values.as_params()).await?;
        pin_mut!(stream);
        let mut rows = Vec::new();
        while let Some(row) = stream.try_next().await? {
            rows.push(row);
        }
        Ok((rows, stream.rows_affected().unwrap_or(0)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, tokio_postgres::Statement>> {
        // The map is only ever inserted into: a panic elsewhere cannot leave
        // it half-written.
        self.prepared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Session<Client> {
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
            schema: self.schema.clone(),
            layout: self.layout,
            prepared: Arc::clone(&self.prepared),
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
