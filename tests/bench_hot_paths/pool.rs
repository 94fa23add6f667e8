//! The client pool: N connections, each driven by its own task, all started
//! together and stopped by a shared deadline or a per-client step count; and
//! `Param`, the value type the benchmark binds to statements whose parameter
//! types the server inferred (pg-boss's SQL, the alternatives' SQL).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::task::JoinSet;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, Row, Statement};
use uuid::Uuid;

/// One bound value. The server infers each parameter's type when the
/// statement is prepared (as it does for node-postgres, which sends every
/// value untyped); `to_sql` then encodes the value for that type. Written by
/// hand because tokio-postgres binds a Rust type to exactly the SQL types it
/// names, while pg-boss's SQL leaves e.g. `$8` to be inferred as float8 and
/// `$2` as bigint or int depending on where it is used.
#[derive(Debug, Clone)]
pub enum Param {
    Null,
    Text(String),
    Int(i64),
    /// JSON already serialized, as node-postgres sends it: bound to a text
    /// parameter (`$1::text::json`) or a json/jsonb one (`$1::json`).
    JsonText(String),
    Uuids(Vec<Uuid>),
    /// An integer array (`int[]`, `bigint[]`, `smallint[]`).
    Ints(Vec<i64>),
    /// A `bytea[]`.
    Bytes(Vec<Vec<u8>>),
}

impl ToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Text(s) => s.as_str().to_sql_checked(ty, out),
            Param::Int(v) => match *ty {
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT8 => v.to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                Type::TEXT | Type::UNKNOWN | Type::VARCHAR => {
                    v.to_string().as_str().to_sql(ty, out)
                }
                _ => Err(format!("cannot bind integer {v} to a {ty} parameter").into()),
            },
            Param::JsonText(s) => match *ty {
                Type::JSON => {
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                Type::JSONB => {
                    out.extend_from_slice(&[1]);
                    out.extend_from_slice(s.as_bytes());
                    Ok(IsNull::No)
                }
                _ => s.as_str().to_sql_checked(ty, out),
            },
            Param::Uuids(ids) => ids.to_sql_checked(ty, out),
            Param::Ints(v) => match *ty {
                Type::INT2_ARRAY => v
                    .iter()
                    .map(|i| i16::try_from(*i))
                    .collect::<Result<Vec<_>, _>>()?
                    .to_sql(ty, out),
                Type::INT4_ARRAY => v
                    .iter()
                    .map(|i| i32::try_from(*i))
                    .collect::<Result<Vec<_>, _>>()?
                    .to_sql(ty, out),
                _ => v.to_sql_checked(ty, out),
            },
            Param::Bytes(v) => v.to_sql_checked(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl Param {
    /// The value as an SQL literal, for `EXECUTE name(...)` of a statement
    /// prepared with `PREPARE` (the server coerces it to the inferred type).
    pub fn literal(&self) -> String {
        use schema_gen::render::quote_literal;
        match self {
            Param::Null => "NULL".to_owned(),
            Param::Text(s) => quote_literal(s),
            Param::Int(v) => v.to_string(),
            Param::JsonText(s) => quote_literal(s),
            Param::Bytes(v) => {
                let list: Vec<String> = v
                    .iter()
                    .map(|b| {
                        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                        format!("'\\x{hex}'::bytea")
                    })
                    .collect();
                format!("ARRAY[{}]::bytea[]", list.join(", "))
            }
            Param::Ints(v) => {
                let list: Vec<String> = v.iter().map(i64::to_string).collect();
                format!("'{{{}}}'", list.join(","))
            }
            Param::Uuids(ids) => {
                let list: Vec<String> = ids.iter().map(|u| format!("'{u}'")).collect();
                format!("ARRAY[{}]::uuid[]", list.join(", "))
            }
        }
    }
}

/// A statement to run: SQL with `$n` placeholders and its values.
#[derive(Debug, Clone)]
pub enum Stmt {
    /// A product statement, bound by the product's binder, as it is.
    Product(schema_gen::statements::Statement),
    /// SQL the benchmark sends for the peers, the floor, the candidates and
    /// the rejected designs; with `types` empty the server infers its
    /// parameters' types.
    Raw {
        sql: String,
        params: Vec<Param>,
        types: Vec<Type>,
    },
    /// A statement without parameters or rows that EXPLAIN cannot take
    /// (`BEGIN`, `SET LOCAL ...`, `COMMIT`): sent as it is.
    Utility(&'static str),
}

impl Stmt {
    pub fn new(sql: impl Into<String>, params: Vec<Param>) -> Self {
        Stmt::Raw {
            sql: sql.into(),
            params,
            types: Vec::new(),
        }
    }

    /// SQL with its parameters' types given, as an engine's statement is
    /// prepared (and as an unnamed statement must be sent).
    pub fn typed(sql: impl Into<String>, params: Vec<(Param, Type)>) -> Self {
        let (params, types) = params.into_iter().unzip();
        Stmt::Raw {
            sql: sql.into(),
            params,
            types,
        }
    }

    pub fn sql(&self) -> &str {
        match self {
            Stmt::Product(statement) => statement.sql(),
            Stmt::Raw { sql, .. } => sql,
            Stmt::Utility(sql) => sql,
        }
    }

    /// Parameter types to prepare with; empty: the server infers them.
    pub fn types(&self) -> Vec<Type> {
        match self {
            Stmt::Product(statement) => statement.param_types(),
            Stmt::Raw { types, .. } => types.clone(),
            Stmt::Utility(_) => Vec::new(),
        }
    }

    pub fn args(&self) -> Vec<&(dyn ToSql + Sync)> {
        match self {
            Stmt::Product(statement) => statement.args(),
            Stmt::Raw { params, .. } => params.iter().map(|p| p as &(dyn ToSql + Sync)).collect(),
            Stmt::Utility(_) => Vec::new(),
        }
    }

    /// The values as SQL literals, for `EXPLAIN EXECUTE` (a product
    /// statement's are mirrored from its binder's values only here, so the
    /// timed runs pay nothing for it).
    pub fn literals(&self) -> Vec<String> {
        match self {
            Stmt::Product(statement) => harness::explain::literals(statement),
            Stmt::Raw { params, .. } => params.iter().map(Param::literal).collect(),
            Stmt::Utility(_) => Vec::new(),
        }
    }

    /// Runs this statement once as an unnamed statement (Parse, Bind,
    /// Execute in one round trip, parsed and planned afresh every time), as
    /// a session behind pgbouncer's transaction pooling must.
    async fn query_unnamed(&self, client: &Client) -> Result<Vec<Row>, tokio_postgres::Error> {
        let types = self.types();
        let args = self.args();
        assert!(
            types.len() == args.len(),
            "an unnamed statement needs its parameters' types: {}",
            self.sql()
        );
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = args.into_iter().zip(types).collect();
        client.query_typed(self.sql(), &typed).await
    }
}

/// The statements of one claim, pipelined, and which of them returns the
/// claimed jobs.
#[derive(Debug, Clone)]
pub struct ClaimPath {
    pub stmts: Vec<Stmt>,
    /// The index in `stmts` of the statement whose rows are the claimed jobs.
    pub claim: usize,
}

impl ClaimPath {
    /// A path whose last statement claims.
    pub fn last(stmts: Vec<Stmt>) -> Self {
        let claim = stmts.len().saturating_sub(1);
        Self { stmts, claim }
    }

    /// The claimed rows among the path's results.
    pub fn claimed<'a>(&self, rows: &'a [Vec<Row>]) -> &'a [Row] {
        rows.get(self.claim).map_or(&[][..], Vec::as_slice)
    }

    /// Statements that do work (`BEGIN`, `SET LOCAL`, `COMMIT` not counted).
    pub fn statements(&self) -> usize {
        self.stmts
            .iter()
            .filter(|s| !matches!(s, Stmt::Utility(_)))
            .count()
    }
}

impl From<schema_gen::statements::Statement> for Stmt {
    fn from(statement: schema_gen::statements::Statement) -> Self {
        Stmt::Product(statement)
    }
}

/// A connection with its prepared statements, keyed by SQL text: every
/// statement is parsed once per connection, as an engine with a statement
/// cache does; or, [`unnamed`](Conn::unnamed), a connection that prepares
/// nothing and sends every statement unnamed, as behind pgbouncer's
/// transaction pooling.
pub struct Conn {
    pub client: Client,
    prepared: HashMap<String, Statement>,
    unnamed: bool,
}

impl Conn {
    pub async fn open() -> Self {
        Self {
            client: harness::connect().await,
            prepared: HashMap::new(),
            unnamed: false,
        }
    }

    /// From now on every statement is sent unnamed (parsed and planned on
    /// every execution; nothing is prepared).
    pub fn unnamed(mut self) -> Self {
        self.unnamed = true;
        self
    }

    /// A connection with `synchronous_commit` set for the session.
    pub async fn open_sync(sync: Commit) -> Self {
        let conn = Self::open().await;
        let sql = format!("SET synchronous_commit TO {}", sync.setting());
        conn.client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{}", db_error(&sql, &e)));
        conn
    }

    async fn prepared(&mut self, stmt: &Stmt) -> Result<Statement, tokio_postgres::Error> {
        if let Some(p) = self.prepared.get(stmt.sql()) {
            return Ok(p.clone());
        }
        let p = self.client.prepare_typed(stmt.sql(), &stmt.types()).await?;
        self.prepared.insert(stmt.sql().to_owned(), p.clone());
        Ok(p)
    }

    pub async fn query(&mut self, stmt: &Stmt) -> Result<Vec<Row>, tokio_postgres::Error> {
        if self.unnamed {
            return stmt.query_unnamed(&self.client).await;
        }
        let prepared = self.prepared(stmt).await?;
        self.client.query(&prepared, &stmt.args()).await
    }

    /// Prepares every statement not yet prepared on this connection (none
    /// on an unnamed connection).
    pub async fn prepare_all(&mut self, stmts: &[Stmt]) -> Result<(), tokio_postgres::Error> {
        if self.unnamed {
            return Ok(());
        }
        for stmt in stmts {
            self.prepared(stmt).await?;
        }
        Ok(())
    }

    /// Sends `stmts` pipelined (all in flight at once, executed in order:
    /// one round trip), each in its own implicit transaction unless the list
    /// holds `BEGIN` ... `COMMIT`. Returns each statement's rows.
    pub async fn pipeline(
        &mut self,
        stmts: &[Stmt],
    ) -> Result<Vec<Vec<Row>>, tokio_postgres::Error> {
        if self.unnamed {
            let client = &self.client;
            return futures_util::future::try_join_all(
                stmts.iter().map(|stmt| stmt.query_unnamed(client)),
            )
            .await;
        }
        let mut prepared = Vec::with_capacity(stmts.len());
        for stmt in stmts {
            prepared.push(self.prepared(stmt).await?);
        }
        let args: Vec<Vec<&(dyn ToSql + Sync)>> = stmts.iter().map(Stmt::args).collect();
        let client = &self.client;
        futures_util::future::try_join_all(
            prepared
                .iter()
                .zip(&args)
                .map(|(p, a)| client.query(p, a.as_slice())),
        )
        .await
    }
}

/// `synchronous_commit` for a client's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Off,
    On,
}

impl Commit {
    pub fn setting(self) -> &'static str {
        match self {
            Commit::Off => "off",
            Commit::On => "on",
        }
    }
}

/// When a run stops.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// Steps per client at most.
    pub steps: u64,
    /// Wall time at most.
    pub time: Duration,
}

impl Limit {
    pub fn time(time: Duration) -> Self {
        Self {
            steps: u64::MAX,
            time,
        }
    }
}

/// One client's work: one step is one claim, or one enqueue -> claim -> ack
/// iteration. It records its own latencies.
pub trait Worker: Send + 'static {
    /// Runs one step; returns the number of jobs it completed (0 when it found
    /// nothing to claim).
    fn step(&mut self) -> impl Future<Output = Result<u64, String>> + Send;

    /// Whether this worker has nothing more to do (a drained backlog): its
    /// client stops before the run's limit.
    fn finished(&self) -> bool {
        false
    }
}

/// What a run did.
pub struct Run<W> {
    pub workers: Vec<W>,
    pub jobs: u64,
    pub steps: u64,
    /// Steps that completed no job.
    pub empty_steps: u64,
    pub elapsed: Duration,
}

impl<W> Run<W> {
    pub fn jobs_per_second(&self) -> f64 {
        self.jobs as f64 / self.elapsed.as_secs_f64()
    }
}

/// Drives every worker on its own task until `limit`, all starting together.
///
/// # Panics
///
/// If a step fails: a benchmark whose statements fail measures nothing.
pub async fn run<W: Worker>(workers: Vec<W>, limit: Limit) -> Run<W> {
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(workers.len()));
    let mut set = JoinSet::new();
    let began = Instant::now();
    for (index, mut worker) in workers.into_iter().enumerate() {
        let start = start.clone();
        set.spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit.time;
            let (mut jobs, mut steps, mut empty) = (0, 0, 0);
            while steps < limit.steps && Instant::now() < deadline && !worker.finished() {
                let done = worker
                    .step()
                    .await
                    .unwrap_or_else(|e| panic!("benchmark client {index}: {e}"));
                jobs += done;
                steps += 1;
                if done == 0 {
                    empty += 1;
                }
            }
            (index, worker, jobs, steps, empty)
        });
    }
    let mut finished = Vec::new();
    while let Some(joined) = set.join_next().await {
        finished.push(joined.unwrap_or_else(|e| panic!("benchmark client task: {e}")));
    }
    let elapsed = began.elapsed();
    finished.sort_by_key(|f| f.0);
    let mut out = Run {
        workers: Vec::new(),
        jobs: 0,
        steps: 0,
        empty_steps: 0,
        elapsed,
    };
    for (_, worker, jobs, steps, empty) in finished {
        out.workers.push(worker);
        out.jobs += jobs;
        out.steps += steps;
        out.empty_steps += empty;
    }
    out
}

/// The server's own words for a failed statement.
pub fn db_error(context: &str, e: &tokio_postgres::Error) -> String {
    format!("{context}: {}", harness::describe_error(e))
}
