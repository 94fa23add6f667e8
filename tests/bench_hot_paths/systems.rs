//! The systems a claim, a loop step or a burn-down is sent to, each with its
//! own schema, seeding, claim path, enqueue and finish:
//!
//! - **the product**: `schema_gen::statements` through `product.rs`;
//! - **the floor** (a labelled reference, not a design): one table, one
//!   claim index, claim and finish in one `DELETE ... WHERE id = (SELECT id
//!   ... ORDER BY ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING`; no
//!   visibility timeout, no retry, so nothing a real queue could ship, but
//!   the physical floor of "take a job" on this server;
//! - **pg-boss 12** and **graphile-worker 0.17**: their own schema and SQL
//!   (`peers.rs`), bound through the same driver, in their batched modes
//!   (pg-boss's `fetch` with `batchSize` and `complete` of many ids,
//!   graphile-worker's batched get and completion) at batch 10 and 100;
//! - **candidates** for the product's claim path (`candidates.rs`), on the
//!   product's own schema (bootstrapped by the product).
//!
//! Seeding is hand-written bulk SQL for every system, from the same job
//! kinds (`designs::Mix`) with the same priorities and due times.

use std::sync::Arc;

use schema_model::SchemaName;
use serde_json::Value;
use tokio_postgres::{Client, Row};
use uuid::Uuid;

use crate::candidates::Cand;
use crate::designs::{self, Design, Mix};
use crate::peers::{BossSql, Call, GraphileSql, Peers};
use crate::pool::{ClaimPath, Commit, Conn, Param, Stmt, db_error};
use crate::{exec, product};

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

impl Kind {
    /// What the run's progress lines call it.
    pub fn name(self) -> String {
        match self {
            Kind::Product => "alkstore (product)".to_owned(),
            Kind::Floor => "floor".to_owned(),
            Kind::PgBoss => "pg-boss".to_owned(),
            Kind::Graphile => "graphile-worker".to_owned(),
            Kind::Cand(c) => c.label().to_owned(),
        }
    }
}

/// A connection for `system` with `commit`, set up as the system needs (a
/// candidate's session setting, its unnamed statements).
pub async fn open_for(system: &System, commit: Commit) -> Conn {
    let mut conn = Conn::open_sync(commit).await;
    if let System::Cand(c, _) = system {
        let setup = c.session_setup();
        if !setup.is_empty() {
            conn.client
                .batch_execute(setup)
                .await
                .unwrap_or_else(|e| panic!("{}", db_error(setup, &e)));
        }
        if c.unnamed() {
            conn = conn.unnamed();
        }
    }
    conn
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

/// Drops every CHECK constraint of `schema`'s `jobs`.
async fn drop_checks(admin: &mut Client, schema: &SchemaName) {
    let names = admin
        .query(
            "SELECT conname::text FROM pg_catalog.pg_constraint \
             WHERE conrelid = CAST(CAST($1 AS text) AS regclass) AND contype = 'c'",
            &[&format!("{schema}.jobs")],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", db_error("CHECK constraints of jobs", &e)));
    assert!(
        !names.is_empty(),
        "{schema}.jobs has no CHECK constraint to drop"
    );
    for row in names {
        let name: String = row.get(0);
        exec(
            admin,
            &format!("ALTER TABLE {schema}.jobs DROP CONSTRAINT \"{name}\""),
        )
        .await;
    }
}

/// `schema`'s `jobs` (still empty) with its six single-column CHECK
/// constraints replaced by domains of the same rules.
fn domains_ddl(schema: &SchemaName) -> String {
    format!(
        "CREATE DOMAIN {schema}.not_empty_text AS text CHECK (VALUE <> ''); \
         CREATE DOMAIN {schema}.count_from_zero AS integer CHECK (VALUE >= 0); \
         CREATE DOMAIN {schema}.count_from_one AS integer CHECK (VALUE >= 1); \
         CREATE DOMAIN {schema}.positive_seconds AS bigint CHECK (VALUE > 0); \
         CREATE DOMAIN {schema}.seconds_from_zero AS bigint CHECK (VALUE >= 0); \
         ALTER TABLE {schema}.jobs \
         DROP CONSTRAINT jobs_queue_not_empty, \
         DROP CONSTRAINT jobs_attempts_not_negative, \
         DROP CONSTRAINT jobs_max_attempts_at_least_one, \
         DROP CONSTRAINT jobs_visibility_timeout_positive, \
         DROP CONSTRAINT jobs_backoff_base_not_negative, \
         DROP CONSTRAINT jobs_dead_letter_retention_positive, \
         ALTER COLUMN queue TYPE {schema}.not_empty_text, \
         ALTER COLUMN attempts TYPE {schema}.count_from_zero, \
         ALTER COLUMN max_attempts TYPE {schema}.count_from_one, \
         ALTER COLUMN visibility_timeout_s TYPE {schema}.positive_seconds, \
         ALTER COLUMN backoff_base_s TYPE {schema}.seconds_from_zero, \
         ALTER COLUMN dead_letter_retention_s TYPE {schema}.positive_seconds"
    )
}

/// `schema`'s `jobs` (its CHECK constraints already dropped) with the nine
/// rules as one constraint calling a PL/pgSQL function of the whole row,
/// which raises a check violation naming the rule a row breaks.
fn check_function_ddl(schema: &SchemaName) -> String {
    const RULES: [(&str, &str); 9] = [
        ("jobs_queue_not_empty", "j.queue OPERATOR(pg_catalog.<>) ''"),
        (
            "jobs_attempts_not_negative",
            "j.attempts OPERATOR(pg_catalog.>=) 0",
        ),
        (
            "jobs_max_attempts_at_least_one",
            "j.max_attempts OPERATOR(pg_catalog.>=) 1",
        ),
        (
            "jobs_visibility_timeout_positive",
            "j.visibility_timeout_s OPERATOR(pg_catalog.>) 0",
        ),
        (
            "jobs_backoff_base_not_negative",
            "j.backoff_base_s OPERATOR(pg_catalog.>=) 0",
        ),
        (
            "jobs_dead_letter_retention_positive",
            "j.dead_letter_retention_s OPERATOR(pg_catalog.>) 0",
        ),
        (
            "jobs_claim_columns_together",
            "(j.worker_id IS NULL AND j.claimed_at IS NULL AND j.claim_expires_at IS NULL) \
             OR (j.worker_id IS NOT NULL AND j.claimed_at IS NOT NULL AND j.claim_expires_at IS NOT NULL)",
        ),
        (
            "jobs_claimed_job_is_ready",
            "j.claimed_at IS NULL OR j.ready",
        ),
        (
            "jobs_claim_expires_after_claim",
            "j.claim_expires_at OPERATOR(pg_catalog.>=) j.claimed_at",
        ),
    ];
    let all = RULES
        .iter()
        .map(|(_, rule)| format!("({rule}) IS NOT FALSE"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let each = RULES
        .iter()
        .map(|(name, rule)| {
            format!(
                "IF ({rule}) IS FALSE THEN RAISE EXCEPTION 'new row for relation \"jobs\" \
                 violates check constraint \"{name}\"' USING ERRCODE = 'check_violation', \
                 CONSTRAINT = '{name}'; END IF; "
            )
        })
        .collect::<String>();
    format!(
        "CREATE FUNCTION {schema}.jobs_rules(j {schema}.jobs) RETURNS boolean \
         LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN IF {all} THEN RETURN true; END IF; \
         {each}RETURN true; END $f$; \
         ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_rules CHECK ({schema}.jobs_rules(jobs))"
    )
}

/// The check function refuses what the nine constraints refuse, naming the
/// rule: a candidate that checked nothing would measure fast for nothing.
async fn assert_rules_fire(admin: &Client, schema: &SchemaName) {
    let cases = [
        (
            "'q', -1, NULL::text, NULL::bigint, NULL::bigint",
            "jobs_attempts_not_negative",
        ),
        ("'', 0, NULL, NULL, NULL", "jobs_queue_not_empty"),
        ("'q', 0, 'w', NULL, NULL", "jobs_claim_columns_together"),
        ("'q', 0, 'w', 10, 5", "jobs_claim_expires_after_claim"),
    ];
    for (values, rule) in cases {
        let sql = format!(
            "INSERT INTO {schema}.jobs (queue, attempts, worker_id, claimed_at, claim_expires_at, \
             payload, priority, run_at, ready, enqueued_at, visibility_timeout_s, max_attempts, \
             backoff_base_s, dead_letter_retention_s) \
             SELECT {values}, '\\x00'::bytea, 0, 1, true, 1, 30, 5, 1, 86400"
        );
        let err = admin
            .batch_execute(&sql)
            .await
            .expect_err("the check function refuses a row that breaks a rule");
        let db = err.as_db_error().map(|e| (e.code().code(), e.constraint()));
        assert_eq!(db, Some(("23514", Some(rule))), "{sql}: {err:?}");
    }
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
            Kind::Cand(c) => {
                let schema = Design::Product.create(admin, "vs_cand").await;
                if let Some(index) = c.dropped_index() {
                    exec(admin, &format!("DROP INDEX {schema}.{index}")).await;
                }
                if c.drops_checks() {
                    drop_checks(admin, &schema).await;
                }
                if c.domains() {
                    exec(admin, &domains_ddl(&schema)).await;
                }
                if c == Cand::CheckFunction {
                    exec(admin, &check_function_ddl(&schema)).await;
                    assert_rules_fire(admin, &schema).await;
                }
                System::Cand(c, schema)
            }
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
    pub fn table(&self) -> String {
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

    /// One claim of up to `limit` jobs, pipelined; `promote`: whether a
    /// candidate that promotes on a clock promotes before this claim (the
    /// product and the peers ignore it: they always do what they do).
    pub fn claim(&self, now: i64, worker: &str, limit: i64, promote: bool) -> ClaimPath {
        match self {
            System::Product(schema) => ClaimPath::last(product::claim_path(
                schema, QUEUE, now, worker, limit, promote,
            )),
            System::Cand(c, schema) => c.path(schema, QUEUE, now, worker, limit, promote),
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
                ClaimPath::last(vec![Stmt::new(sql, params)])
            }
            System::PgBoss(sql) => {
                let call = match limit {
                    1 => &sql.fetch1,
                    10 => &sql.fetch10,
                    100 => &sql.fetch100,
                    other => panic!("pg-boss's fetch was recorded for 1, 10 and 100, not {other}"),
                };
                ClaimPath::last(vec![replay(call, &[])])
            }
            System::Graphile(sql, _) => {
                let call = match limit {
                    1 => &sql.get1,
                    10 => &sql.get10,
                    100 => &sql.get100,
                    other => {
                        panic!("graphile-worker's get was recorded for 1, 10 and 100, not {other}")
                    }
                };
                ClaimPath::last(vec![replay(call, &[])])
            }
        }
    }

    /// One claim of up to `limit` jobs that acks `acks` in the same
    /// statement, for a candidate that does ([`Cand::acks_in_claim`]).
    pub fn claim_acking(
        &self,
        now: i64,
        worker: &str,
        limit: i64,
        promote: bool,
        acks: &[product::Claimed],
    ) -> ClaimPath {
        let System::Cand(c, schema) = self else {
            panic!("only a candidate acks in its claim")
        };
        let acks: Vec<(i64, i32)> = acks.iter().map(|a| (a.id, a.attempts)).collect();
        c.path_acking(schema, QUEUE, now, worker, limit, promote, &acks)
    }

    /// Whether this system acks a worker's jobs in its next claim.
    pub fn acks_in_claim(&self) -> bool {
        matches!(self, System::Cand(c, _) if c.acks_in_claim())
    }

    /// The statement enqueueing `payloads` (one statement, whatever their
    /// number), due now.
    pub fn enqueue(&self, payloads: &[Value], now: i64) -> Stmt {
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
    pub fn ack(&self, claimed: &Claimed, worker: &str) -> Option<Stmt> {
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
    pub fn claimed(&self, rows: &[Row]) -> Result<Claimed, String> {
        if rows.is_empty() {
            return Ok(Claimed::None);
        }
        Ok(match self {
            System::Product(_) => Claimed::Product(product::claimed(rows)?),
            // A candidate may return fewer columns: what ack needs, by name.
            System::Cand(c, _) if c.claims() => Claimed::Product(
                rows.iter()
                    .map(|r| {
                        Ok(product::Claimed {
                            id: r.try_get("id")?,
                            attempts: r.try_get("attempts")?,
                        })
                    })
                    .collect::<Result<_, tokio_postgres::Error>>()
                    .map_err(|e| format!("candidate claim row: {e}"))?,
            ),
            System::Cand(..) => Claimed::None,
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

    /// The product's schema, for the systems that run the product's
    /// maintenance step (`jobs::vacuum`) beside their loop: the product and
    /// its candidates.
    pub fn product_schema(&self) -> Option<&SchemaName> {
        match self {
            System::Product(s) | System::Cand(_, s) => Some(s),
            _ => None,
        }
    }

    /// Whether its sessions promote as the product's session does (see
    /// [`crate::candidates::PromoteClock`]); the product's do.
    pub fn paced(&self) -> bool {
        match self {
            System::Product(_) => true,
            System::Cand(c, _) => c.paced(),
            _ => false,
        }
    }
}

/// The jobs a claim returned, as each system's finish names them.
pub enum Claimed {
    None,
    Product(Vec<product::Claimed>),
    Uuids(Vec<Uuid>),
    Ids(Vec<i64>),
}

impl Claimed {
    pub fn len(&self) -> usize {
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
