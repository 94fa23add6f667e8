//! `Session::claim` where engines run it: as the engine's least-privilege
//! runtime role (exactly the grants `schema-gen grants` prints; not a
//! superuser, owning nothing), through pgbouncer in transaction pooling, in
//! the unnamed mode (a paced promote and its claim sent in one transaction),
//! several sessions of one `Sessions` on their own pooled connections. The
//! pacing rules of `tests/claim_pacing.rs` hold there, shown by the rows:
//! the second's first claim promotes a due job and claims it in the same
//! call; a later claim in that second, from any session of the `Sessions`,
//! does not promote; and sessions claiming at once claim each job once.
//! A wire proxy between the sessions and pgbouncer sees what was sent: no
//! named statement, and a promote only where the pacer allows one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use harness::engine::{engine_schema, job};
use harness::pgbouncer;
use harness::wire::CountingProxy;
use harness::{exec, rows};
use schema_gen::grants;
use schema_gen::statements::{Job, Session, Sessions, StatementMode, jobs};
use schema_model::{Layout, SchemaName};
use tokio_postgres::{Client, SimpleQueryMessage};

const NOW: i64 = 1_700_000_000;
const QUEUE: &str = "pooled_paced";
/// Sessions of the one `Sessions`, each on its own pgbouncer client.
const SESSIONS: usize = 4;
/// A worker that keeps finding nothing stops after this many claims (only
/// a failing run gets there: a worker needs about 25).
const MAX_ROUNDS: usize = 1_000;

/// The runtime role's sessions behind pgbouncer, the proxy in front of
/// pgbouncer that sees what they send, and a superuser's direct connection
/// that reads the rows.
struct Pooled {
    admin: Client,
    schema: SchemaName,
    proxy: CountingProxy,
    sessions: Vec<Arc<Session>>,
}

/// A fresh engine schema, the product's runtime grants on it for the
/// harness's pooled runtime role (checked to be no superuser and to own
/// nothing), and `SESSIONS` sessions of one unnamed-mode `Sessions`, each
/// on its own connection through the proxy and pgbouncer, logged in as
/// that role.
async fn pooled(prefix: &str) -> Pooled {
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, prefix).await;
    let role = pgbouncer::runtime_role();
    let url = pgbouncer::runtime_url();
    exec(
        &admin,
        &grants::script(&schema, Layout::SingleServer, role, None),
    )
    .await;
    assert_least_privilege(&admin, role, &schema).await;
    let proxy = CountingProxy::start(&url).await;
    let shared = Sessions::new(schema.clone()).with_mode(StatementMode::Unnamed);
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let client = harness::connect_url(&proxy.url(&url)).await;
        // pgbouncer logged in to the server as the role, not as a superuser
        // acting for it.
        assert_eq!(
            simple_row(&client, "SELECT current_user, session_user").await,
            [role, role]
        );
        sessions.push(Arc::new(shared.session(client)));
    }
    proxy.reset();
    Pooled {
        admin,
        schema,
        proxy,
        sessions,
    }
}

/// `role` is no superuser and has no other role attribute that bypasses
/// privileges, is a member of no role, owns nothing anywhere (no owner
/// dependency in `pg_shdepend`, which records the owner of every object
/// of every database that a role other than the bootstrap superuser
/// owns), and may not create in the database or in `schema`.
async fn assert_least_privilege(admin: &Client, role: &str, schema: &SchemaName) {
    let row = admin
        .query_one(
            "SELECT r.rolsuper, r.rolcreatedb, r.rolcreaterole, r.rolbypassrls, r.rolreplication,
                    (SELECT count(*) FROM pg_catalog.pg_auth_members m WHERE m.member = r.oid),
                    (SELECT count(*) FROM pg_catalog.pg_shdepend d
                      WHERE d.refclassid = 'pg_catalog.pg_authid'::regclass
                        AND d.refobjid = r.oid AND d.deptype = 'o'),
                    has_database_privilege(r.oid, current_database(), 'CREATE'),
                    has_schema_privilege(r.oid, $2, 'CREATE')
               FROM pg_catalog.pg_roles r WHERE r.rolname = $1",
            &[&role, &schema.as_str()],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)));
    let attributes: [bool; 5] = std::array::from_fn(|i| row.get(i));
    assert_eq!(
        attributes, [false; 5],
        "{role}: rolsuper, rolcreatedb, rolcreaterole, rolbypassrls, rolreplication"
    );
    let (member_of, owns): (i64, i64) = (row.get(5), row.get(6));
    assert_eq!(
        (member_of, owns),
        (0, 0),
        "{role}: roles it is in, objects it owns"
    );
    let creates: (bool, bool) = (row.get(7), row.get(8));
    assert_eq!(
        creates,
        (false, false),
        "{role}: CREATE on the database, on {schema}"
    );
}

/// The text values of the one row `sql` returns on `client`.
async fn simple_row(client: &Client, sql: &str) -> Vec<String> {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", harness::describe_error(&e)));
    let found: Vec<Vec<String>> = messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or_default().to_owned())
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    match <[Vec<String>; 1]>::try_from(found) {
        Ok([row]) => row,
        Err(found) => panic!("{sql}: {found:?}"),
    }
}

/// Each job of `QUEUE`, by id: (id, ready, worker_id, attempts).
type JobRow = (i64, bool, Option<String>, i32);

async fn job_rows(admin: &Client, schema: &SchemaName) -> Vec<JobRow> {
    rows(
        admin,
        &format!(
            "SELECT id, ready, worker_id, attempts FROM \"{schema}\".jobs \
             WHERE queue = '{QUEUE}' ORDER BY id"
        ),
    )
    .await
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

impl Pooled {
    /// Enqueues `n` jobs of `QUEUE` due at `run_at` with the clock at `NOW`
    /// (so not ready), as the runtime role through the pooler.
    async fn schedule(&self, run_at: i64, n: usize) -> Vec<i64> {
        let batch: Vec<Job> = (0..n).map(|_| job(QUEUE, run_at, NOW)).collect();
        self.sessions[0]
            .run(&jobs::EnqueueMany {
                jobs: &batch,
                now: NOW,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Session `i`'s claim of one job at `now`, as worker `worker-{i}`.
    async fn claim_one(&self, i: usize, now: i64) -> Vec<i64> {
        let worker_id = format!("worker-{i}");
        let claimed = self.sessions[i]
            .claim(&jobs::Claim {
                queue: QUEUE,
                worker_id: &worker_id,
                now,
                limit: 1,
            })
            .await
            .unwrap_or_else(|e| panic!("session {i} at {now}: {e}"));
        claimed.iter().map(|j| j.id).collect()
    }

    /// How many promotes were sent since the last reset (their text does
    /// not depend on the call's values); every statement sent is unnamed.
    fn promotes_sent(&self) -> usize {
        let parses = self.proxy.parses();
        let named: Vec<_> = parses.iter().filter(|p| !p.name.is_empty()).collect();
        assert!(named.is_empty(), "named statements sent: {named:?}");
        let promote = jobs::promote(&self.schema, QUEUE, NOW, 1);
        parses.iter().filter(|p| p.text == promote.sql()).count()
    }
}

/// (1) The first claim of a second, from one session, promotes the job due
/// in it and claims it in the same call: one promote on the wire, the row
/// ready and claimed by that worker. (2) A job written not ready for that
/// second afterwards (an enqueuer whose clock is behind) stays not ready
/// through a claim in that second from every other session of the same
/// `Sessions` (the pacer is theirs, shared): no promote on the wire, the
/// claims come back empty. The next second's first claim promotes it and
/// claims it, so nothing but the pacing kept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_as_the_runtime_role_a_queue_is_promoted_once_a_second() {
    if harness::skip_db_tests() {
        return;
    }
    let p = pooled("claim_pooled_pace").await;
    let due = NOW + 5;

    let [first] = p.schedule(due, 1).await[..] else {
        panic!("one job enqueued");
    };
    assert_eq!(
        job_rows(&p.admin, &p.schema).await,
        [(first, false, None, 0)]
    );
    p.proxy.reset();
    assert_eq!(p.claim_one(0, due).await, [first], "promoted and claimed");
    assert_eq!(p.promotes_sent(), 1, "the second's first claim promotes");
    assert_eq!(
        job_rows(&p.admin, &p.schema).await,
        [(first, true, Some("worker-0".to_owned()), 1)]
    );

    let [late] = p.schedule(due, 1).await[..] else {
        panic!("one job enqueued");
    };
    p.proxy.reset();
    for i in 1..SESSIONS {
        assert_eq!(
            p.claim_one(i, due).await,
            [0_i64; 0],
            "session {i} in {due}"
        );
    }
    assert_eq!(p.promotes_sent(), 0, "a later claim in the second");
    assert_eq!(
        job_rows(&p.admin, &p.schema).await,
        [
            (first, true, Some("worker-0".to_owned()), 1),
            (late, false, None, 0)
        ]
    );

    p.proxy.reset();
    assert_eq!(p.claim_one(2, due + 1).await, [late], "the next second");
    assert_eq!(p.promotes_sent(), 1);
    assert_eq!(
        job_rows(&p.admin, &p.schema).await[1],
        (late, true, Some("worker-2".to_owned()), 1)
    );
}

/// (3) Every session claims at once, 4 jobs a claim, all in the same
/// second, from 400 jobs due in it and not ready: the paced promotes (40
/// jobs each; a full one is followed by another, so the sessions' first
/// promotes, at most 160 jobs, are not the last) and the claims in their
/// transactions hand each job to exactly one worker. Shown by what the
/// claims returned (no id twice, every id once) and by the rows (each job
/// ready, claimed once, `attempts` 1, by the worker that got it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_as_the_runtime_role_sessions_claim_each_job_once() {
    if harness::skip_db_tests() {
        return;
    }
    const JOBS: usize = 400;
    let p = pooled("claim_pooled_once").await;
    let later = NOW + 30;
    let ids = p.schedule(later, JOBS).await;
    let before = job_rows(&p.admin, &p.schema).await;
    assert!(before.iter().all(|r| !r.1 && r.2.is_none()), "{before:?}");

    let claimed_so_far = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(SESSIONS));
    let workers: Vec<_> = p
        .sessions
        .iter()
        .enumerate()
        .map(|(i, session)| {
            let (session, claimed_so_far, start) = (
                Arc::clone(session),
                Arc::clone(&claimed_so_far),
                Arc::clone(&start),
            );
            tokio::spawn(async move {
                let worker_id = format!("worker-{i}");
                let mut mine = Vec::new();
                start.wait().await;
                for _ in 0..MAX_ROUNDS {
                    let claimed = session
                        .claim(&jobs::Claim {
                            queue: QUEUE,
                            worker_id: &worker_id,
                            now: later,
                            limit: 4,
                        })
                        .await
                        .unwrap_or_else(|e| panic!("{worker_id}: {e}"));
                    mine.extend(claimed.iter().map(|j| j.id));
                    if claimed_so_far.fetch_add(claimed.len(), Ordering::SeqCst) + claimed.len()
                        >= JOBS
                    {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                (worker_id, mine)
            })
        })
        .collect();
    let mut got: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for worker in workers {
        let (worker_id, mine) = tokio::time::timeout(Duration::from_secs(120), worker)
            .await
            .expect("a worker did not finish within 120 s")
            .unwrap_or_else(|e| panic!("{e}"));
        for id in mine {
            got.entry(id).or_default().push(worker_id.clone());
        }
    }

    let twice: Vec<_> = got.iter().filter(|(_, by)| by.len() > 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    let all: BTreeSet<i64> = ids.iter().copied().collect();
    let returned: BTreeSet<i64> = got.keys().copied().collect();
    assert_eq!(
        all.difference(&returned).collect::<Vec<_>>(),
        Vec::<&i64>::new(),
        "never claimed"
    );
    assert_eq!(returned, all);
    let expected: Vec<JobRow> = got
        .iter()
        .map(|(id, by)| (*id, true, Some(by[0].clone()), 1))
        .collect();
    assert_eq!(job_rows(&p.admin, &p.schema).await, expected);
    let workers: BTreeSet<&String> = got.values().flatten().collect();
    assert!(
        workers.len() >= 2,
        "the sessions claimed at once, yet only {workers:?} got jobs"
    );
    assert!(p.promotes_sent() >= JOBS / 40, "{}", p.promotes_sent());
}
