//! The product beside its peers and the floor, and the claim-path
//! candidates, in one run: the systems a claim or a loop step is sent to.
//!
//! - **the product**: `schema_gen::statements` through `product.rs`;
//! - **the floor** (a labelled reference, not a design): one table, one
//!   claim index, claim and finish in one `DELETE ... WHERE id = (SELECT id
//!   ... ORDER BY ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`; no
//!   visibility timeout, no retry, so nothing a real queue could ship, but
//!   the physical floor of "take a job" on this server;
//! - **pg-boss 12** and **graphile-worker 0.17**: their own schema and SQL
//!   (`peers.rs`), bound through the same driver;
//! - **candidates** for the product's claim path, on the product's own schema
//!   (bootstrapped by the product): hand-written, labelled alternatives the
//!   product does not ship, measured to find where the claim path's time
//!   goes (see [`Cand`]).
//!
//! Seeding is hand-written bulk SQL for every system, from the same job
//! kinds (`designs::Mix`) with the same priorities and due times.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use schema_model::SchemaName;
use serde_json::Value;
use tokio_postgres::{Client, Row};
use uuid::Uuid;

use crate::designs::{self, Design, FUTURE_AHEAD, Mix, NORMAL};
use crate::explain::{Explainer, Work};
use crate::latency::{Recorder, ms};
use crate::peers::{BossSql, Call, GraphileSql, Peers};
use crate::pool::{self, Commit, Conn, Limit, Param, Stmt, Worker, db_error};
use crate::product;
use crate::report::{Report, Table};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

// ---------------------------------------------------------------------------
// The candidates

/// Alternatives to the product's claim path, measured on the product's
/// schema. None is shipped: a schema or statement change ships as a new
/// upgrade version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cand {
    /// The product's claim statement alone, without promote: what promote's
    /// statement costs in the pipeline.
    ClaimOnly,
    /// Promote folded into the claim: one statement, the promotion a
    /// data-modifying CTE (its jobs claimable from the next claim on), so a
    /// claim is one statement and one commit.
    OneStatement,
    /// The product's pipeline with the claim returning only what a worker
    /// needs (`id, payload, attempts`), not the whole row.
    NarrowReturning,
    /// The product's pipeline with the claim naming its job by a scalar
    /// subquery (`id = (SELECT ... LIMIT 1)`) instead of `id =
    /// ANY(ARRAY(SELECT ...))`.
    Scalar,
    /// The product's statements on a `jobs` without `jobs_claim_expiry_idx`:
    /// what the claim's insert into that index costs (the reaper would need
    /// another way to find lapsed claims).
    NoExpiryIndex,
    /// [`Cand::OneStatement`] + [`Cand::NarrowReturning`] + [`Cand::Scalar`].
    Lean,
    /// The product's statements on sessions with `plan_cache_mode =
    /// force_generic_plan`: what building a custom plan on every execution
    /// costs, when the plan cache keeps choosing one.
    GenericPlan,
    /// The claim in the peers' shape: `WITH next AS (SELECT id ... FOR UPDATE
    /// SKIP LOCKED) UPDATE ... FROM next WHERE jobs.id = next.id`, promote
    /// pipelined before it as the product's.
    CteJoin,
    /// `SELECT 1`: one round trip and nothing else, the client/server floor.
    RoundTrip,
}

pub const CANDS: [Cand; 9] = [
    Cand::GenericPlan,
    Cand::CteJoin,
    Cand::ClaimOnly,
    Cand::OneStatement,
    Cand::NarrowReturning,
    Cand::Scalar,
    Cand::NoExpiryIndex,
    Cand::Lean,
    Cand::RoundTrip,
];

impl Cand {
    pub fn label(self) -> &'static str {
        match self {
            Cand::ClaimOnly => "cand: claim alone (no promote)",
            Cand::OneStatement => "cand: promote in the claim (one statement)",
            Cand::NarrowReturning => "cand: RETURNING id, payload, attempts",
            Cand::Scalar => "cand: id = (SELECT ... LIMIT 1), no ARRAY",
            Cand::NoExpiryIndex => "cand: no jobs_claim_expiry_idx",
            Cand::Lean => "cand: one statement + narrow + scalar",
            Cand::GenericPlan => "cand: plan_cache_mode = force_generic_plan",
            Cand::CteJoin => "cand: claim as WITH next ... UPDATE ... FROM next",
            Cand::RoundTrip => "ref: SELECT 1 (one round trip)",
        }
    }

    /// What a session of this candidate runs first.
    pub fn session_setup(self) -> &'static str {
        match self {
            Cand::GenericPlan => "SET plan_cache_mode = force_generic_plan",
            _ => "",
        }
    }
}

/// What a session of `system` runs first.
fn session_setup(system: &System) -> &'static str {
    match system {
        System::Cand(c, _) => c.session_setup(),
        _ => "",
    }
}

/// A connection for `system` with `commit`, set up as the system needs.
async fn open_for(system: &System, commit: Commit) -> Conn {
    let conn = Conn::open_sync(commit).await;
    let setup = session_setup(system);
    if !setup.is_empty() {
        conn.client
            .batch_execute(setup)
            .await
            .unwrap_or_else(|e| panic!("{}", db_error(setup, &e)));
    }
    conn
}

const FULL_ROW: &str = "id, queue, payload, priority, run_at, expires_at, enqueued_at, \
     visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, attempts, \
     worker_id, claimed_at, claim_expires_at, last_error";
const NARROW_ROW: &str = "id, payload, attempts";

/// A candidate claim statement on the product's `jobs`. `$1` worker, `$2`
/// now, `$3` queue, `$4` limit (the product's order), and with `promote`
/// `$5` the promotion's limit.
fn cand_claim(schema: &str, promote: bool, scalar: bool, returning: &str) -> String {
    let next = format!(
        "SELECT id FROM {schema}.jobs WHERE queue = $3 AND claimed_at IS NULL AND ready \
         AND run_at <= $2 ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED"
    );
    let which = if scalar {
        format!("id = ({next})")
    } else {
        format!("id = ANY(ARRAY({next}))")
    };
    let with = if promote {
        format!(
            "WITH promoted AS (UPDATE {schema}.jobs SET ready = TRUE WHERE id = ANY(ARRAY(\
             SELECT id FROM {schema}.jobs WHERE queue = $3 AND NOT ready AND run_at <= $2 \
             ORDER BY run_at LIMIT $5 FOR UPDATE SKIP LOCKED)) RETURNING 1) "
        )
    } else {
        String::new()
    };
    format!(
        "{with}UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE {which} RETURNING {returning}"
    )
}

fn cand_params(queue: &str, now: i64, worker: &str, limit: i64, promote: bool) -> Vec<Param> {
    let mut params = vec![
        Param::Text(worker.to_owned()),
        Param::Int(now),
        Param::Text(queue.to_owned()),
        Param::Int(limit),
    ];
    if promote {
        params.push(Param::Int(limit * 10));
    }
    params
}

// ---------------------------------------------------------------------------
// The systems

#[derive(Debug, Clone)]
pub enum System {
    Product(SchemaName),
    Floor(String),
    PgBoss(Arc<BossSql>),
    Graphile(Arc<GraphileSql>, String),
    Cand(Cand, SchemaName),
}

pub const QUEUE: &str = "bench";
const GW_TASK: &str = "bench";

/// What a system is called in the report.
pub fn label_of(system: &System) -> String {
    match system {
        System::Product(_) => "alkstore (product)".to_owned(),
        System::Floor(_) => "floor (labelled reference)".to_owned(),
        System::PgBoss(sql) => format!("pg-boss {}", sql.version),
        System::Graphile(sql, _) => format!("graphile-worker {}", sql.version),
        System::Cand(c, _) => c.label().to_owned(),
    }
}

/// What the systems of a run are, before they are created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Product,
    Floor,
    PgBoss,
    Graphile,
    Cand(Cand),
}

fn floor_ddl(schema: &str) -> String {
    format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.floor_jobs (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             queue text NOT NULL,
             priority integer NOT NULL,
             run_at bigint NOT NULL,
             payload bytea NOT NULL);
         CREATE INDEX floor_claim_idx ON {schema}.floor_jobs (queue, priority DESC, run_at, id);"
    )
}

/// The job kinds of `mix` over `i` in 1..rows, as `designs::seed_sql` lays
/// them out: `s` with columns `i` and `k`, and each kind's priority (higher
/// first) and due time (unix seconds).
fn kinds(rows: u64, mix: &Mix) -> String {
    let future = mix.future_pct;
    let claimed = mix.future_pct + mix.claimed_pct;
    format!(
        "(SELECT i, CASE WHEN b < {future} THEN 'future' WHEN b < {claimed} THEN 'claimed' \
                    ELSE 'due' END AS k \
          FROM (SELECT i, (i * 37) % 100 AS b FROM generate_series(1, {rows}) AS i) g) s"
    )
}

fn priority_expr(mix: &Mix) -> String {
    let (dp, fp) = (mix.due_priorities, mix.future_priorities);
    format!("(CASE WHEN k = 'future' THEN {dp} + i % {fp} ELSE i % {dp} END)")
}

fn run_at_expr(now: i64) -> String {
    format!(
        "(CASE WHEN k = 'due' THEN {now} - 1 - i % 3600 WHEN k = 'claimed' THEN {now} - 60 \
         WHEN i % 2 = 0 THEN {now} + 3600 + i % 3600 ELSE {now} + 86400 + i % 86400 END)"
    )
}

/// A payload of the same size as the product's seeded one (64 bytes), as
/// JSON for the peers.
const JSON_PAYLOAD: &str = "json_build_object('p', repeat('ab', 32))";

impl Kind {
    pub async fn create(self, admin: &mut Client, peers: Option<&Peers>) -> System {
        match self {
            Kind::Product => System::Product(Design::Product.create(admin, "vs_product").await),
            Kind::Cand(Cand::NoExpiryIndex) => {
                let schema = Design::Product.create(admin, "vs_cand").await;
                exec(admin, &format!("DROP INDEX {schema}.jobs_claim_expiry_idx")).await;
                System::Cand(Cand::NoExpiryIndex, schema)
            }
            Kind::Cand(c) => System::Cand(c, Design::Product.create(admin, "vs_cand").await),
            Kind::Floor => {
                let schema = harness::unique_schema("vs_floor");
                exec(admin, &floor_ddl(&schema)).await;
                System::Floor(schema)
            }
            Kind::PgBoss => {
                let peers = peers.expect("pg-boss is installed when it is measured");
                let schema = harness::unique_schema("vs_pgboss");
                let sql = peers
                    .pgboss(&schema, QUEUE)
                    .await
                    .unwrap_or_else(|e| panic!("pg-boss: {e}"));
                System::PgBoss(Arc::new(sql))
            }
            Kind::Graphile => {
                let peers = peers.expect("graphile-worker is installed when it is measured");
                let schema = harness::unique_schema("vs_graphile");
                let sql = peers
                    .graphile(&schema, GW_TASK)
                    .await
                    .unwrap_or_else(|e| panic!("graphile-worker: {e}"));
                System::Graphile(Arc::new(sql), schema)
            }
        }
    }
}

impl System {
    /// The schema to drop after the run.
    pub fn schema(&self) -> String {
        match self {
            System::Product(s) | System::Cand(_, s) => s.as_str().to_owned(),
            System::Floor(s) | System::Graphile(_, s) => s.clone(),
            System::PgBoss(sql) => sql
                .table
                .split('.')
                .next()
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned(),
        }
    }

    /// The table the claims read, for VACUUM.
    fn table(&self) -> String {
        match self {
            System::Product(s) | System::Cand(_, s) => format!("{s}.jobs"),
            System::Floor(s) => format!("{s}.floor_jobs"),
            System::PgBoss(sql) => sql.table.clone(),
            System::Graphile(_, s) => format!("\"{s}\"._private_jobs"),
        }
    }

    /// Bulk-loads `rows` jobs of `mix`, then VACUUM ANALYZE.
    pub async fn seed(&self, admin: &Client, rows: u64, mix: &Mix, now: i64) {
        let s = kinds(rows, mix);
        let prio = priority_expr(mix);
        let run_at = run_at_expr(now);
        match self {
            System::Product(schema) | System::Cand(_, schema) => {
                designs::seed(admin, Design::Product, schema, QUEUE, rows, mix, now).await;
                return;
            }
            System::Floor(schema) => {
                exec(
                    admin,
                    &format!(
                        "INSERT INTO {schema}.floor_jobs (queue, priority, run_at, payload) \
                         SELECT '{QUEUE}', {prio}, {run_at}, decode(repeat('ab', 64), 'hex') \
                         FROM {s}"
                    ),
                )
                .await;
            }
            System::PgBoss(sql) => {
                // Into the queue's table, as send() fills it: `created` jobs,
                // retries in backoff `retry` with a retry count.
                exec(
                    admin,
                    &format!(
                        "INSERT INTO {table} (name, data, priority, start_after, created_on, \
                         state, retry_count) \
                         SELECT '{queue}', {JSON_PAYLOAD}::jsonb, {prio}, to_timestamp({run_at}), \
                         to_timestamp(LEAST({run_at}, {now}) - 60), \
                         (CASE WHEN k = 'future' AND i % 2 = 0 THEN 'retry' ELSE 'created' END)::{schema}.job_state, \
                         CASE WHEN k = 'future' AND i % 2 = 0 THEN 1 + i % 7 ELSE 0 END \
                         FROM {s}",
                        table = sql.table,
                        queue = sql.queue,
                        schema = self.schema(),
                    ),
                )
                .await;
            }
            System::Graphile(sql, schema) => {
                // graphile-worker takes the lowest priority first: negated.
                exec(
                    admin,
                    &format!(
                        "INSERT INTO \"{schema}\"._private_jobs (task_id, payload, priority, \
                         run_at, attempts, last_error) \
                         SELECT {task}, {JSON_PAYLOAD}, -{prio}, to_timestamp({run_at}), \
                         CASE WHEN k = 'future' AND i % 2 = 0 THEN 1 + i % 7 ELSE 0 END, \
                         CASE WHEN k = 'future' AND i % 2 = 0 \
                         THEN 'POST https://hooks.example.test/endpoint: connection refused' END \
                         FROM {s}",
                        task = sql.task_ids[0],
                    ),
                )
                .await;
            }
        }
        exec(admin, &format!("VACUUM (ANALYZE) {}", self.table())).await;
    }

    /// The statements of one claim of up to `limit` jobs, pipelined.
    pub fn claim(&self, now: i64, worker: &str, limit: i64) -> Vec<Stmt> {
        match self {
            System::Product(schema) => product::claim_path(schema, QUEUE, now, worker, limit),
            System::Cand(c, schema) => {
                let s = schema.as_str();
                let one = |promote: bool, scalar: bool, returning: &str| {
                    let scalar = scalar && limit == 1;
                    Stmt::new(
                        cand_claim(s, promote, scalar, returning),
                        cand_params(QUEUE, now, worker, limit, promote),
                    )
                };
                let mut path = product::claim_path(schema, QUEUE, now, worker, limit);
                match c {
                    Cand::NoExpiryIndex | Cand::GenericPlan => path,
                    Cand::CteJoin => {
                        path.truncate(path.len() - 1);
                        path.push(Stmt::new(
                            format!(
                                "WITH next AS (SELECT id FROM {s}.jobs WHERE queue = $3 \
                                 AND claimed_at IS NULL AND ready AND run_at <= $2 \
                                 ORDER BY priority DESC, run_at, id LIMIT $4 \
                                 FOR UPDATE SKIP LOCKED) \
                                 UPDATE {s}.jobs SET worker_id = $1, claimed_at = $2, \
                                 claim_expires_at = $2 + visibility_timeout_s, \
                                 attempts = attempts + 1 FROM next WHERE jobs.id = next.id \
                                 RETURNING jobs.id, queue, payload, priority, run_at, \
                                 expires_at, enqueued_at, visibility_timeout_s, max_attempts, \
                                 backoff_base_s, dead_letter_retention_s, attempts, worker_id, \
                                 claimed_at, claim_expires_at, last_error"
                            ),
                            cand_params(QUEUE, now, worker, limit, false),
                        ));
                        path
                    }
                    Cand::ClaimOnly => path.split_off(path.len() - 1),
                    Cand::OneStatement => vec![one(true, false, FULL_ROW)],
                    Cand::NarrowReturning | Cand::Scalar => {
                        path.truncate(path.len() - 1);
                        path.push(if *c == Cand::Scalar {
                            one(false, true, FULL_ROW)
                        } else {
                            one(false, false, NARROW_ROW)
                        });
                        path
                    }
                    Cand::Lean => vec![one(true, true, NARROW_ROW)],
                    Cand::RoundTrip => vec![Stmt::new("SELECT 1 AS id", Vec::new())],
                }
            }
            System::Floor(schema) => {
                let next = format!(
                    "SELECT id FROM {schema}.floor_jobs WHERE queue = $1 AND run_at <= $2 \
                     ORDER BY priority DESC, run_at, id"
                );
                let sql = if limit == 1 {
                    format!(
                        "DELETE FROM {schema}.floor_jobs WHERE id = ({next} \
                         FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, payload"
                    )
                } else {
                    format!(
                        "DELETE FROM {schema}.floor_jobs WHERE id = ANY(ARRAY({next} \
                         FOR UPDATE SKIP LOCKED LIMIT $3)) RETURNING id, payload"
                    )
                };
                let mut params = vec![Param::Text(QUEUE.to_owned()), Param::Int(now)];
                if limit != 1 {
                    params.push(Param::Int(limit));
                }
                vec![Stmt::new(sql, params)]
            }
            System::PgBoss(sql) => {
                let call = if limit == 1 {
                    &sql.fetch1
                } else {
                    &sql.fetch10
                };
                vec![replay(call, &[])]
            }
            System::Graphile(sql, _) => {
                let call = if limit == 1 { &sql.get1 } else { &sql.get10 };
                vec![replay(call, &[])]
            }
        }
    }

    /// The statement enqueueing `payloads` (one statement, whatever their
    /// number), due now.
    fn enqueue(&self, payloads: &[Value], now: i64) -> Stmt {
        match self {
            System::Product(schema) | System::Cand(_, schema) => {
                let bytes: Vec<Vec<u8>> = payloads
                    .iter()
                    .map(|p| p.to_string().into_bytes())
                    .collect();
                product::enqueue(schema, QUEUE, &bytes, now, now)
            }
            System::Floor(schema) => {
                let bytes: Vec<Vec<u8>> = payloads
                    .iter()
                    .map(|p| p.to_string().into_bytes())
                    .collect();
                Stmt::new(
                    format!(
                        "INSERT INTO {schema}.floor_jobs (queue, priority, run_at, payload) \
                         SELECT $1, 0, $2, p FROM unnest($3::bytea[]) AS p"
                    ),
                    vec![
                        Param::Text(QUEUE.to_owned()),
                        Param::Int(now),
                        Param::Bytes(bytes),
                    ],
                )
            }
            System::PgBoss(sql) => {
                let call = if payloads.len() == 1 {
                    &sql.send
                } else {
                    &sql.insert
                };
                replay(
                    call,
                    &[(0, Param::JsonText(jobs_json(call, "data", payloads)))],
                )
            }
            System::Graphile(sql, _) => {
                if payloads.len() == 1 {
                    replay(&sql.add1, &[(1, Param::JsonText(payloads[0].to_string()))])
                } else {
                    replay(
                        &sql.add10,
                        &[(
                            0,
                            Param::JsonText(jobs_json(&sql.add10, "payload", payloads)),
                        )],
                    )
                }
            }
        }
    }

    /// The statement finishing the claimed jobs, or none.
    fn ack(&self, claimed: &Claimed, worker: &str) -> Option<Stmt> {
        match (self, claimed) {
            (_, Claimed::None) => None,
            (System::Product(schema) | System::Cand(_, schema), Claimed::Product(jobs)) => {
                Some(product::ack(schema, jobs, worker))
            }
            (System::PgBoss(sql), Claimed::Uuids(ids)) => Some(replay(
                &sql.complete,
                &[
                    (0, Param::Text(sql.queue.clone())),
                    (1, Param::Uuids(ids.clone())),
                ],
            )),
            (System::Graphile(sql, _), Claimed::Ids(ids)) => Some(match ids.as_slice() {
                [id] => replay(&sql.complete1, &[(0, Param::Int(*id))]),
                _ => replay(&sql.complete10, &[(0, Param::Ints(ids.clone()))]),
            }),
            // The floor's claim finished the job.
            (System::Floor(_), _) => None,
            _ => panic!("claimed jobs of another system"),
        }
    }

    /// The jobs a claim returned.
    fn claimed(&self, rows: &[Row]) -> Result<Claimed, String> {
        if rows.is_empty() {
            return Ok(Claimed::None);
        }
        Ok(match self {
            System::Product(_) | System::Cand(..) => Claimed::Product(product::claimed(rows)?),
            System::PgBoss(_) => Claimed::Uuids(
                rows.iter()
                    .map(|r| r.try_get("id"))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("pg-boss fetch returned no uuid id: {e}"))?,
            ),
            System::Graphile(..) | System::Floor(_) => Claimed::Ids(
                rows.iter()
                    .map(|r| r.try_get("id"))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("claim returned no bigint id: {e}"))?,
            ),
        })
    }

    /// Whether the system runs the product's maintenance step in the loop.
    fn is_product(&self) -> bool {
        matches!(self, System::Product(_))
    }
}

enum Claimed {
    None,
    Product(Vec<product::Claimed>),
    Uuids(Vec<Uuid>),
    Ids(Vec<i64>),
}

impl Claimed {
    fn len(&self) -> usize {
        match self {
            Claimed::None => 0,
            Claimed::Product(v) => v.len(),
            Claimed::Uuids(v) => v.len(),
            Claimed::Ids(v) => v.len(),
        }
    }
}

/// A captured value as a bound one: the server infers the parameter's type
/// at prepare time, as for node-postgres.
fn param_of(value: &Value) -> Param {
    match value {
        Value::Null => Param::Null,
        Value::Bool(b) => Param::Text(b.to_string()),
        Value::Number(n) => Param::Int(n.as_i64().unwrap_or_default()),
        Value::String(s) => Param::JsonText(s.clone()),
        Value::Array(items) => {
            if let Some(ids) = items
                .iter()
                .map(|v| v.as_str().and_then(|s| Uuid::parse_str(s).ok()))
                .collect::<Option<Vec<_>>>()
            {
                Param::Uuids(ids)
            } else {
                Param::Ints(
                    items
                        .iter()
                        .filter_map(|v| v.as_i64().or_else(|| v.as_str()?.parse().ok()))
                        .collect(),
                )
            }
        }
        Value::Object(_) => Param::JsonText(value.to_string()),
    }
}

/// The captured statement with its captured values, `overrides` replacing
/// some (by index).
pub(crate) fn replay(call: &Call, overrides: &[(usize, Param)]) -> Stmt {
    let mut params: Vec<Param> = call.values.iter().map(param_of).collect();
    for (index, param) in overrides {
        params[*index] = param.clone();
    }
    Stmt::new(call.text.clone(), params)
}

/// The captured JSON array of jobs (`$1`), one job per payload: the first
/// captured job with its `field` replaced.
fn jobs_json(call: &Call, field: &str, payloads: &[Value]) -> String {
    let template = call
        .values
        .first()
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Vec<Value>>(s).ok())
        .and_then(|jobs| jobs.into_iter().next())
        .unwrap_or_else(|| panic!("the captured insert has no JSON array of jobs as $1"));
    let jobs: Vec<Value> = payloads
        .iter()
        .map(|p| {
            let mut job = template.clone();
            job[field] = p.clone();
            job
        })
        .collect();
    Value::Array(jobs).to_string()
}

// ---------------------------------------------------------------------------
// Claims beside the peers

struct ClaimWorker {
    conn: Conn,
    system: Arc<System>,
    worker: String,
    latency: Recorder,
}

impl Worker for ClaimWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let stmts = self.system.claim(unix_now(), &self.worker, 1);
        self.conn
            .prepare_all(&stmts)
            .await
            .map_err(|e| db_error("prepare claim", &e))?;
        let started = Instant::now();
        let rows = self
            .conn
            .pipeline(&stmts)
            .await
            .map_err(|e| db_error("claim", &e))?;
        self.latency.record(started.elapsed());
        let claimed = rows.last().map_or(0, Vec::len);
        // `SELECT 1` returns a row but claims nothing.
        Ok(
            if matches!(*self.system, System::Cand(Cand::RoundTrip, _)) {
                0
            } else {
                claimed as u64
            },
        )
    }
}

/// One cell of the claim table: a system, a commit setting, a client count.
struct Cell {
    system: usize,
    commit: Commit,
    clients: usize,
    latency: Recorder,
    steps: u64,
    empty: u64,
}

pub struct VsClaim {
    pub label: String,
    pub kind: Kind,
    pub mix: Mix,
    pub size: u64,
    pub work: Work,
    /// (commit, clients) -> latency, steps, steps that found nothing.
    pub cells: Vec<(Commit, usize, Recorder, u64, u64)>,
}

impl VsClaim {
    pub fn p50(&self, commit: Commit, clients: usize) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.0 == commit && c.1 == clients)
            .and_then(|c| c.2.p50_ms())
    }

    pub fn p99(&self, commit: Commit, clients: usize) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.0 == commit && c.1 == clients)
            .and_then(|c| c.2.p99_ms())
    }
}

/// Rounds the claim cells are split into, every cell measured in every
/// round, in turn.
const VS_ROUNDS: u64 = 3;

/// The systems of the claim comparison: the product, the floor, the peers
/// (when installed), then the candidates.
pub fn claim_kinds(with_peers: bool) -> Vec<Kind> {
    let mut kinds = vec![Kind::Product, Kind::Floor];
    if with_peers {
        kinds.extend([Kind::PgBoss, Kind::Graphile]);
    }
    kinds.extend(CANDS.map(Kind::Cand));
    kinds
}

/// The claim comparison at every size of `scale.vs_sizes`, on the normal
/// and the hostile mix.
pub async fn run_claims(admin: &mut Client, scale: &Scale, peers: Option<&Peers>) -> Vec<VsClaim> {
    let mut out = Vec::new();
    for &size in &scale.vs_sizes {
        for mix in [NORMAL, FUTURE_AHEAD] {
            out.extend(claim_group(admin, scale, peers, size, mix).await);
        }
    }
    out
}

async fn claim_group(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
    size: u64,
    mix: Mix,
) -> Vec<VsClaim> {
    let kinds = claim_kinds(peers.is_some());
    let mut systems: Vec<Arc<System>> = Vec::new();
    let now = unix_now();
    for &kind in &kinds {
        // Candidates that change no DDL claim from the product's table.
        let shared = matches!(kind, Kind::Cand(c) if c != Cand::NoExpiryIndex);
        let system = if shared {
            let Kind::Cand(c) = kind else { unreachable!() };
            let System::Product(schema) = &*systems[0] else {
                unreachable!("the product comes first")
            };
            System::Cand(c, schema.clone())
        } else {
            progress(&format!(
                "versus: {} / {} / {} jobs: creating and seeding",
                kind_name(kind),
                mix.name,
                count(size)
            ));
            let system = kind.create(admin, peers).await;
            system.seed(admin, size, &mix, now).await;
            system
        };
        systems.push(Arc::new(system));
    }
    // The seeding's dirty pages flushed now, not by a checkpoint during the
    // measurement (with fsync on it stalls whoever is being measured).
    exec(admin, "CHECKPOINT").await;
    progress(&format!(
        "versus: {} / {} jobs: warming up and explaining",
        mix.name,
        count(size)
    ));
    let mut works = Vec::new();
    for system in &systems {
        let mut warm = vec![ClaimWorker {
            conn: open_for(system, Commit::Off).await,
            system: system.clone(),
            worker: "bench-warmup".to_owned(),
            latency: Recorder::new(),
        }];
        warm = pool::run(
            warm,
            Limit {
                steps: scale.claim_warmup,
                time: scale.claim_time,
            },
        )
        .await
        .workers;
        drop(warm);
        let mut explainer = Explainer::open_with(session_setup(system)).await;
        let s = system.clone();
        let work = explainer
            .median(
                || s.claim(unix_now(), "bench-explain", 1),
                scale.explain_warmup,
                scale.explain_runs,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        works.push(work);
    }
    let mut cells = Vec::new();
    for (index, kind) in kinds.iter().enumerate() {
        let commits: &[Commit] = if matches!(kind, Kind::Cand(_)) {
            &[Commit::Off]
        } else {
            &[Commit::Off, Commit::On]
        };
        for &commit in commits {
            for clients in [1, 8] {
                cells.push(Cell {
                    system: index,
                    commit,
                    clients,
                    latency: Recorder::new(),
                    steps: 0,
                    empty: 0,
                });
            }
        }
    }
    progress(&format!(
        "versus: {} / {} jobs: measuring {} cells in {VS_ROUNDS} rounds",
        mix.name,
        count(size),
        cells.len()
    ));
    for _ in 0..VS_ROUNDS {
        for cell in &mut cells {
            let mut workers = Vec::new();
            for c in 0..cell.clients {
                workers.push(ClaimWorker {
                    conn: open_for(&systems[cell.system], cell.commit).await,
                    system: systems[cell.system].clone(),
                    worker: format!("bench-worker-{c}"),
                    latency: Recorder::new(),
                });
            }
            let per_client = if cell.clients == 1 {
                scale.claims_one
            } else {
                scale.claims_eight
            };
            let run = pool::run(
                workers,
                Limit {
                    steps: per_client.div_ceil(VS_ROUNDS),
                    time: scale.vs_cell_time,
                },
            )
            .await;
            cell.steps += run.steps;
            cell.empty += run.empty_steps;
            for w in &run.workers {
                cell.latency.merge(&w.latency);
            }
        }
    }
    let mut out = Vec::new();
    for (index, (kind, system)) in kinds.iter().zip(&systems).enumerate() {
        out.push(VsClaim {
            label: label_of(system),
            kind: *kind,
            mix,
            size,
            work: works[index].clone(),
            cells: cells
                .iter()
                .filter(|c| c.system == index)
                .map(|c| (c.commit, c.clients, c.latency.clone(), c.steps, c.empty))
                .collect(),
        });
    }
    let mut dropped: Vec<String> = Vec::new();
    for system in &systems {
        let schema = system.schema();
        if !dropped.contains(&schema) {
            designs::drop_schema(admin, &format!("\"{schema}\"")).await;
            dropped.push(schema);
        }
    }
    out
}

fn kind_name(kind: Kind) -> String {
    match kind {
        Kind::Product => "alkstore (product)".to_owned(),
        Kind::Floor => "floor".to_owned(),
        Kind::PgBoss => "pg-boss".to_owned(),
        Kind::Graphile => "graphile-worker".to_owned(),
        Kind::Cand(c) => c.label().to_owned(),
    }
}

// ---------------------------------------------------------------------------
// The loop

struct LoopWorker {
    conn: Conn,
    system: Arc<System>,
    batch: u64,
    client: usize,
    worker: String,
    n: u64,
    latency: Recorder,
    claims: Arc<AtomicU64>,
}

impl Worker for LoopWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let started = Instant::now();
        let now = unix_now();
        let payloads: Vec<Value> = (0..self.batch)
            .map(|k| serde_json::json!({ "client": self.client, "n": self.n + k }))
            .collect();
        let enqueue = self.system.enqueue(&payloads, now);
        self.conn
            .query(&enqueue)
            .await
            .map_err(|e| db_error("enqueue", &e))?;
        let claim = self.system.claim(now, &self.worker, self.batch as i64);
        let rows = self
            .conn
            .pipeline(&claim)
            .await
            .map_err(|e| db_error("claim", &e))?;
        let claimed = self
            .system
            .claimed(rows.last().map_or(&[][..], Vec::as_slice))?;
        self.claims
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        if let Some(ack) = self.system.ack(&claimed, &self.worker) {
            self.conn
                .query(&ack)
                .await
                .map_err(|e| db_error("ack", &e))?;
        }
        self.latency.record(started.elapsed());
        self.n += self.batch;
        Ok(claimed.len() as u64)
    }
}

pub struct LoopResult {
    pub label: String,
    pub kind: Kind,
    pub commit: Commit,
    pub clients: usize,
    pub batch: u64,
    pub jobs_per_s: f64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    /// Statements per step (enqueue, claim path, ack).
    pub statements: usize,
}

/// Slices each system's loop time is split into: the systems take turns.
const SLICES: u32 = 4;

/// The loop's systems.
pub fn loop_kinds(with_peers: bool) -> Vec<Kind> {
    let mut kinds = vec![Kind::Product, Kind::Floor];
    if with_peers {
        kinds.extend([Kind::PgBoss, Kind::Graphile]);
    }
    kinds
}

pub async fn run_loops(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
) -> Vec<LoopResult> {
    let mut out = Vec::new();
    let slice = scale.loop_time / SLICES;
    let kinds = loop_kinds(peers.is_some());
    for &(clients, batch) in &scale.loop_groups {
        for commit in [Commit::On, Commit::Off] {
            progress(&format!(
                "loop: {clients} client(s), batch {batch}, synchronous_commit {}: every system \
                 {:.0} s, in {SLICES} turns",
                commit.setting(),
                scale.loop_time.as_secs_f64()
            ));
            let mut runners = Vec::new();
            for &kind in &kinds {
                let system = Arc::new(kind.create(admin, peers).await);
                let maintainer =
                    (system.is_product())
                        .then(loop_maintenance)
                        .flatten()
                        .map(|policy| {
                            let System::Product(schema) = &*system else {
                                unreachable!()
                            };
                            crate::maintenance::Maintainer::start(schema, policy)
                        });
                let claims = maintainer.as_ref().map_or_else(
                    || Arc::new(AtomicU64::new(0)),
                    crate::maintenance::Maintainer::claims,
                );
                let mut workers = Vec::new();
                for client in 0..clients {
                    workers.push(LoopWorker {
                        conn: Conn::open_sync(commit).await,
                        system: system.clone(),
                        batch,
                        client,
                        worker: format!("bench-worker-{client}"),
                        n: 0,
                        latency: Recorder::new(),
                        claims: claims.clone(),
                    });
                }
                runners.push((kind, system, workers, maintainer, 0u64, 0f64));
            }
            // What earlier parts left dirty is flushed before, not during.
            exec(admin, "CHECKPOINT").await;
            for _ in 0..SLICES {
                for (_, _, workers, _, jobs, seconds) in &mut runners {
                    let run = pool::run(std::mem::take(workers), Limit::time(slice)).await;
                    *jobs += run.jobs;
                    *seconds += run.elapsed.as_secs_f64();
                    *workers = run.workers;
                }
            }
            for (kind, system, workers, maintainer, jobs, seconds) in runners {
                let latency = Recorder::merged(&workers, |w| &w.latency);
                let statements = 1
                    + system.claim(unix_now(), "x", batch as i64).len()
                    + usize::from(!matches!(*system, System::Floor(_)));
                out.push(LoopResult {
                    label: label_of(&system),
                    kind,
                    commit,
                    clients,
                    batch,
                    jobs_per_s: jobs as f64 / seconds,
                    p50: latency.p50_ms(),
                    p99: latency.p99_ms(),
                    statements,
                });
                drop(workers);
                if let Some(m) = maintainer {
                    m.stop().await;
                }
                designs::drop_schema(admin, &format!("\"{}\"", system.schema())).await;
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The report

fn find<'a>(claims: &'a [VsClaim], kind: Kind, mix: &Mix, size: u64) -> Option<&'a VsClaim> {
    claims
        .iter()
        .find(|c| c.kind == kind && c.mix.name == mix.name && c.size == size)
}

pub fn report_claims(report: &mut Report, claims: &[VsClaim], scale: &Scale) {
    report.heading("Claim beside the floor and the peers");
    report.para(
        "One claim of one job, each client on its own connection, statements prepared; the \
         product's claim path pipelined as the engine sends it (promote, then claim, one round \
         trip). Every system on its own table of the same jobs, seeded alike; all cells of a \
         table group measured in three interleaved rounds. `off`/`on`: the clients' \
         `synchronous_commit`. Buffers: EXPLAIN (ANALYZE, BUFFERS) of the prepared statements, \
         median of five runs; server ms: that run's `Execution Time` summed over the path's \
         statements (the executor only: no parse, round trip or commit); the candidates' \
         planning ms: that run's `Planning Time` (a prepared statement's plan cache lookup, \
         and its planning when the cache builds a custom plan).",
    );
    let mut table = Table::new(&[
        "mix",
        "jobs>",
        "system",
        "buffers / claim>",
        "server ms>",
        "indexes",
        "1 client p50, off>",
        "p99>",
        "8 clients p50, off>",
        "p99>",
        "1 client p50, on>",
        "8 clients p50, on>",
        "alkstore / this, 1 / 8 clients, off>",
    ]);
    for c in claims.iter().filter(|c| !matches!(c.kind, Kind::Cand(_))) {
        let ours = find(claims, Kind::Product, &c.mix, c.size);
        let r1 = ratio(
            ours.and_then(|o| o.p50(Commit::Off, 1)),
            c.p50(Commit::Off, 1),
        );
        let r8 = ratio(
            ours.and_then(|o| o.p50(Commit::Off, 8)),
            c.p50(Commit::Off, 8),
        );
        table.row(vec![
            c.mix.name.to_owned(),
            count(c.size),
            c.label.clone(),
            c.work.buffers.to_string(),
            format!("{:.3}", c.work.exec_ms),
            indexes(&c.work),
            ms(c.p50(Commit::Off, 1)),
            ms(c.p99(Commit::Off, 1)),
            ms(c.p50(Commit::Off, 8)),
            ms(c.p99(Commit::Off, 8)),
            ms(c.p50(Commit::On, 1)),
            ms(c.p50(Commit::On, 8)),
            if c.kind == Kind::Product {
                String::new()
            } else {
                format!("{} / {}", times(r1), times(r8))
            },
        ]);
    }
    report.table(&table);
    for &size in &scale.vs_sizes {
        let ours = find(claims, Kind::Product, &NORMAL, size);
        for (kind, target, at_most) in [
            (Kind::Floor, "floor", 1.5),
            (Kind::PgBoss, "pg-boss", 0.8),
            (Kind::Graphile, "graphile-worker", 0.8),
        ] {
            let Some(them) = find(claims, kind, &NORMAL, size) else {
                continue;
            };
            for clients in [1, 8] {
                let (a, b) = (
                    ours.and_then(|o| o.p50(Commit::Off, clients)),
                    them.p50(Commit::Off, clients),
                );
                let r = ratio(a, b);
                report.verdict(
                    format!(
                        "claim p50 <= {at_most}x {target}'s ({}, {}, {clients} client(s), \
                         synchronous_commit off)",
                        count(size),
                        NORMAL.name
                    ),
                    format!("{} vs {}: {}", ms(a), ms(b), times(r)),
                    r.is_some_and(|r| r <= at_most),
                );
            }
        }
    }

    report.heading("Where the claim path's time goes: candidates on the product's schema");
    report.para(
        "Hand-written alternatives to the product's claim path, on the product's own schema and \
         seeded table (the no-expiry-index candidate on its own copy); none is shipped. \
         `synchronous_commit` off. The last columns compare with the product's claim path in the \
         same round (below 1.00x: the candidate is faster).",
    );
    let mut table = Table::new(&[
        "mix",
        "jobs>",
        "claim path",
        "buffers / claim [per statement]>",
        "server execution ms [per statement]>",
        "planning ms>",
        "1 client p50>",
        "8 clients p50>",
        "p99>",
        "this / product, 1 client>",
        "8 clients>",
        "this / floor, 1 client>",
        "8 clients>",
    ]);
    for c in claims
        .iter()
        .filter(|c| matches!(c.kind, Kind::Cand(_) | Kind::Product))
    {
        let ours = find(claims, Kind::Product, &c.mix, c.size);
        let floor = find(claims, Kind::Floor, &c.mix, c.size);
        let vs = |o: Option<&VsClaim>, clients| {
            times(ratio(
                c.p50(Commit::Off, clients),
                o.and_then(|o| o.p50(Commit::Off, clients)),
            ))
        };
        table.row(vec![
            c.mix.name.to_owned(),
            count(c.size),
            c.label.clone(),
            format!("{} {:?}", c.work.buffers, c.work.steps),
            format!(
                "{:.3} [{}]",
                c.work.exec_ms,
                c.work
                    .exec_steps
                    .iter()
                    .map(|t| format!("{t:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("{:.3}", c.work.plan_ms),
            ms(c.p50(Commit::Off, 1)),
            ms(c.p50(Commit::Off, 8)),
            ms(c.p99(Commit::Off, 8)),
            vs(ours, 1),
            vs(ours, 8),
            vs(floor, 1),
            vs(floor, 8),
        ]);
    }
    report.table(&table);
}

fn indexes(work: &Work) -> String {
    if work.sorts.is_empty() {
        work.indexes.join(", ")
    } else {
        format!(
            "{} **+ {}**",
            work.indexes.join(", "),
            work.sorts.join(", ")
        )
    }
}

pub fn report_loops(report: &mut Report, loops: &[LoopResult]) {
    report.heading("Enqueue -> claim -> ack loop beside the floor and the peers");
    let mut table = Table::new(&[
        "system",
        "synchronous_commit",
        "clients>",
        "batch>",
        "statements / step>",
        "jobs / s>",
        "step p50>",
        "step p99>",
        "alkstore / this>",
    ]);
    let ours = |l: &LoopResult| {
        loops
            .iter()
            .find(|o| {
                o.kind == Kind::Product
                    && o.commit == l.commit
                    && o.clients == l.clients
                    && o.batch == l.batch
            })
            .map(|o| o.jobs_per_s)
    };
    for l in loops {
        table.row(vec![
            l.label.clone(),
            l.commit.setting().to_owned(),
            l.clients.to_string(),
            l.batch.to_string(),
            l.statements.to_string(),
            format!("{:.0}", l.jobs_per_s),
            ms(l.p50),
            ms(l.p99),
            if l.kind == Kind::Product {
                String::new()
            } else {
                times(ratio(ours(l), Some(l.jobs_per_s)))
            },
        ]);
    }
    report.table(&table);
    report.para(
        "One step: enqueue `batch` jobs (one statement), claim up to `batch` (the claim path, \
         pipelined), finish what was claimed (one statement; the floor's claim deletes, so it \
         has none). alkstore: `jobs::enqueue`/`enqueue_many`, the claim path, `jobs::ack`/\
         `ack_many`, with the engine's maintenance step beside it (`jobs::vacuum` after every \
         2,000 claims). pg-boss: `send`/`insert`, `fetch`, `complete`; graphile-worker: \
         `addJob`/`addJobs`, the worker's get and complete; each the statement its package \
         sent, replayed with this step's values. Each system starts on a fresh schema; the \
         systems of one row group take turns in four slices.",
    );
    for l in loops
        .iter()
        .filter(|l| l.kind != Kind::Product && l.clients == 8)
    {
        let (target, at_least) = match l.kind {
            Kind::Floor => ("the floor's", 0.66),
            _ => ("", 2.0),
        };
        let r = ratio(ours(l), Some(l.jobs_per_s));
        report.verdict(
            format!(
                "8-client loop >= {at_least}x {}, batch {}, synchronous_commit {}",
                if target.is_empty() { &l.label } else { target },
                l.batch,
                l.commit.setting()
            ),
            times(r),
            r.is_some_and(|r| r >= at_least),
        );
    }
}

/// The engine's maintenance step in the loop, as the statements module docs
/// tell an engine to run it (`ALKSTORE_BENCH_LOOP_VACUUM=off` leaves it out).
fn loop_maintenance() -> Option<crate::maintenance::Policy> {
    match std::env::var("ALKSTORE_BENCH_LOOP_VACUUM").as_deref() {
        Ok("off") => None,
        Ok("") | Err(_) => Some(crate::maintenance::Policy::EveryClaims(
            crate::churn::VACUUM_EVERY_CLAIMS,
        )),
        Ok(other) => panic!("ALKSTORE_BENCH_LOOP_VACUUM must be off or unset, not {other:?}"),
    }
}
