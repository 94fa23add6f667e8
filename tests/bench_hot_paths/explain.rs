//! Buffers per call, from `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the
//! very statement with its bound values (and its `WAL` counts): the shared buffers the executor
//! touched (hit + read; planning excluded, as a prepared statement's would
//! be), the indexes it used, the sort nodes it had and the rows it read and
//! threw away.

use std::collections::HashMap;

use serde_json::Value;
use tokio_postgres::SimpleQueryMessage;

use crate::pool::{Conn, Stmt, db_error};

/// What one execution of a statement (or of a claim path: the sum over its
/// statements) touched.
#[derive(Debug, Clone, Default)]
pub struct Work {
    /// Shared buffers hit or read by the executor.
    pub buffers: u64,
    /// The buffers of each statement of the path, in order.
    pub steps: Vec<u64>,
    /// Rows removed by a filter or an index recheck, over every node.
    pub rows_removed: u64,
    /// Index names the plans used.
    pub indexes: Vec<String>,
    /// Sort nodes of any kind (`Sort`, `Incremental Sort`).
    pub sorts: Vec<String>,
    /// Rows the statements returned.
    pub rows: u64,
    /// WAL records the executor wrote (EXPLAIN's `WAL` option: heap and
    /// index changes, not the commit record), summed.
    pub wal_records: u64,
    /// Full-page images among them (a page's first change after a
    /// checkpoint), summed.
    pub wal_fpi: u64,
    /// WAL bytes the executor wrote (full-page images included), summed.
    pub wal_bytes: u64,
    /// The server's execution time (EXPLAIN ANALYZE's `Execution Time`,
    /// which includes the commit-free part of the statement: triggers and
    /// the executor, not parse, plan, round trip or commit), in ms, summed.
    pub exec_ms: f64,
    /// The execution time of each statement of the path, in order.
    pub exec_steps: Vec<f64>,
    /// EXPLAIN's `Planning Time` summed (for `EXECUTE` of a prepared
    /// statement: the plan cache lookup, and the planning when the cache
    /// builds a custom plan for these values).
    pub plan_ms: f64,
    /// Per statement of the path, the plans the server's plan cache built
    /// over the warm-up and measured runs (`pg_prepared_statements`:
    /// generic, custom); empty for a path explained afresh every time.
    pub plan_cache: Vec<(i64, i64)>,
}

impl Work {
    fn add(&mut self, other: Work) {
        self.buffers += other.buffers;
        self.steps.push(other.buffers);
        self.rows_removed += other.rows_removed;
        self.rows += other.rows;
        self.wal_records += other.wal_records;
        self.wal_fpi += other.wal_fpi;
        self.wal_bytes += other.wal_bytes;
        self.exec_ms += other.exec_ms;
        self.plan_ms += other.plan_ms;
        self.exec_steps.push(other.exec_ms);
        for i in other.indexes {
            if !self.indexes.contains(&i) {
                self.indexes.push(i);
            }
        }
        self.sorts.extend(other.sorts);
    }
}

/// Runs claim paths under `EXPLAIN (ANALYZE, BUFFERS)` on one connection.
/// Each statement is prepared once on the server (`PREPARE`) and run with
/// `EXPLAIN EXECUTE`, so the plan measured is the one the server's plan cache
/// picks for a prepared statement (custom for the first five runs, then
/// generic if that is no dearer), as for the timed clients.
pub struct Explainer {
    conn: Conn,
    names: HashMap<String, String>,
    /// Each statement prepared, explained and deallocated every time: the
    /// planning an unnamed statement pays on every execution.
    fresh: bool,
}

impl Explainer {
    pub async fn open() -> Self {
        Self {
            conn: Conn::open().await,
            names: HashMap::new(),
            fresh: false,
        }
    }

    /// An explainer that plans every statement afresh on every run, as an
    /// unnamed statement is.
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// An explainer whose session first runs `setup` (e.g. a `SET`).
    pub async fn open_with(setup: &str) -> Self {
        let explainer = Self::open().await;
        if !setup.is_empty() {
            explainer
                .conn
                .client
                .batch_execute(setup)
                .await
                .unwrap_or_else(|e| panic!("{}", db_error(setup, &e)));
        }
        explainer
    }

    /// Runs `stmts` in order: they execute for real (a claim takes its jobs)
    /// and their work is summed.
    pub async fn path(&mut self, stmts: &[Stmt]) -> Result<Work, String> {
        let mut total = Work::default();
        for stmt in stmts {
            if let Stmt::Utility(sql) = stmt {
                self.conn
                    .client
                    .batch_execute(sql)
                    .await
                    .map_err(|e| db_error(sql, &e))?;
                continue;
            }
            let name = match self.names.get(stmt.sql()) {
                Some(name) => name.clone(),
                None => {
                    let name = format!("bench_explained_{}", self.names.len());
                    self.conn
                        .client
                        .batch_execute(&prepare_sql(&name, stmt))
                        .await
                        .map_err(|e| db_error(&format!("PREPARE {}", stmt.sql()), &e))?;
                    self.names.insert(stmt.sql().to_owned(), name.clone());
                    name
                }
            };
            let args = stmt.literals();
            // `EXECUTE name()` is a syntax error: no parentheses without values.
            let explain = if args.is_empty() {
                format!("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) EXECUTE {name}")
            } else {
                format!(
                    "EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) EXECUTE {name}({})",
                    args.join(", ")
                )
            };
            let rows = self
                .conn
                .client
                .simple_query(&explain)
                .await
                .map_err(|e| db_error(&format!("EXPLAIN {}", stmt.sql()), &e))?;
            let text = rows
                .iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                    _ => None,
                })
                .ok_or("EXPLAIN returned no row")?;
            let plan: Value =
                serde_json::from_str(&text).map_err(|e| format!("EXPLAIN output: {e}"))?;
            let mut work = work_of(&plan[0]["Plan"]);
            work.exec_ms = plan[0]["Execution Time"].as_f64().unwrap_or_default();
            work.plan_ms = plan[0]["Planning Time"].as_f64().unwrap_or_default();
            // The top node's WAL counts include its children's.
            work.wal_records = plan[0]["Plan"]["WAL Records"].as_u64().unwrap_or_default();
            work.wal_fpi = plan[0]["Plan"]["WAL FPI"].as_u64().unwrap_or_default();
            work.wal_bytes = plan[0]["Plan"]["WAL Bytes"].as_u64().unwrap_or_default();
            total.add(work);
            if self.fresh {
                let name = self.names.remove(stmt.sql()).unwrap_or_default();
                self.conn
                    .client
                    .batch_execute(&format!("DEALLOCATE {name}"))
                    .await
                    .map_err(|e| db_error("DEALLOCATE", &e))?;
            }
        }
        Ok(total)
    }

    /// The plans the plan cache built for each statement of `stmts` so far
    /// (generic, custom), from `pg_prepared_statements`.
    async fn plan_cache(&self, stmts: &[Stmt]) -> Result<Vec<(i64, i64)>, String> {
        let mut out = Vec::new();
        for stmt in stmts.iter().filter(|s| !matches!(s, Stmt::Utility(_))) {
            let Some(name) = self.names.get(stmt.sql()) else {
                continue;
            };
            let row = self
                .conn
                .client
                .query_one(
                    "SELECT generic_plans, custom_plans FROM pg_catalog.pg_prepared_statements \
                     WHERE name = $1",
                    &[name],
                )
                .await
                .map_err(|e| db_error("pg_prepared_statements", &e))?;
            out.push((row.get(0), row.get(1)));
        }
        Ok(out)
    }

    /// The median (by buffers) of `runs` executions of the path, after
    /// `warmup` executions that settle the plan cache.
    pub async fn median(
        &mut self,
        mut stmts: impl FnMut() -> Vec<Stmt>,
        warmup: usize,
        runs: usize,
    ) -> Result<Work, String> {
        for _ in 0..warmup {
            self.path(&stmts()).await?;
        }
        let mut all = Vec::new();
        for _ in 0..runs.max(1) {
            all.push(self.path(&stmts()).await?);
        }
        all.sort_by_key(|w| w.buffers);
        let mut work = all.swap_remove(all.len() / 2);
        work.plan_cache = self.plan_cache(&stmts()).await?;
        Ok(work)
    }
}

/// `PREPARE name [(types)] AS sql`.
fn prepare_sql(name: &str, stmt: &Stmt) -> String {
    let types = stmt.types();
    if types.is_empty() {
        format!("PREPARE {name} AS {}", stmt.sql())
    } else {
        let types: Vec<&str> = types.iter().map(|t| t.name()).collect();
        format!("PREPARE {name} ({}) AS {}", types.join(", "), stmt.sql())
    }
}

/// The harness's reading of a plan (the one the hot-path tests assert on),
/// in the benchmark's units.
fn work_of(root: &Value) -> Work {
    let measured = harness::explain::measure(root.clone());
    let mut indexes = Vec::new();
    for index in &measured.indexes {
        if !indexes.contains(index) {
            indexes.push(index.clone());
        }
    }
    Work {
        buffers: u64::try_from(measured.buffers).unwrap_or(0),
        rows_removed: u64::try_from(measured.rows_removed).unwrap_or(0),
        rows: u64::try_from(measured.rows).unwrap_or(0),
        sorts: measured
            .sort_nodes()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        indexes,
        ..Work::default()
    }
}
