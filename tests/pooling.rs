//! Sessions where engines really run: behind pgbouncer 1.18 in transaction
//! pooling, and on deadpool-postgres and bb8 pools (with no adapter).
//!
//! The workload of every test: 2,000 jobs, 8 workers, each running the
//! claim path (`promote` and `claim` pipelined, 4 jobs at a time) and an
//! `ack` per job until the queue is empty; every job must be claimed once
//! and acked once, with no error. On the pools, the wire proxy
//! (`harness::wire`) sees every `Parse`: each statement is parsed at most
//! once per physical connection however many checkouts ran it. Behind
//! pgbouncer, the unnamed mode sends no named statement at all, and the
//! prepared mode is shown to lose jobs there (so the tests of the unnamed
//! mode cannot pass by a pooler that happens to keep sessions).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8_postgres::PostgresConnectionManager;
use harness::bench::queue_opts;
use harness::engine::engine_schema;
use harness::pgbouncer::{self, PoolMode};
use harness::wire::{CountingProxy, Parse};
use schema_gen::pool::SessionManager;
use schema_gen::pooler::{self, Evidence, Pooling};
use schema_gen::statements::{Connection, Job, Session, Sessions, StatementMode, jobs};
use schema_model::SchemaName;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Config, NoTls};

const JOBS: usize = 2_000;
const WORKERS: usize = 8;
const CLAIM_LIMIT: u32 = 4;
/// A worker that keeps failing stops after this many rounds (only a
/// failing run gets there: a worker needs about 70).
const MAX_ROUNDS: usize = 1_000;
const NOW: i64 = 1_700_000_000;
const QUEUE: &str = "pooled";

/// What the workers did, per job.
#[derive(Debug, Default)]
struct Tally {
    claimed: Mutex<HashMap<i64, u32>>,
    acked: Mutex<HashMap<i64, u32>>,
    errors: Mutex<Vec<(String, Option<SqlState>)>>,
    checkouts: AtomicUsize,
}

impl Tally {
    fn error(&self, e: &schema_gen::statements::StatementError) {
        self.errors
            .lock()
            .unwrap()
            .push((e.to_string(), e.code().cloned()));
    }

    fn errors(&self) -> Vec<(String, Option<SqlState>)> {
        self.errors.lock().unwrap().clone()
    }

    /// Panics unless every job of `ids` was claimed once and acked once and
    /// nothing failed.
    fn assert_exactly_once(&self, ids: &[i64], label: &str) {
        let errors = self.errors();
        assert!(
            errors.is_empty(),
            "{label}: {} errors, the first: {:?}",
            errors.len(),
            errors.first()
        );
        for (what, counts) in [("claimed", &self.claimed), ("acked", &self.acked)] {
            let counts = counts.lock().unwrap();
            let wrong: Vec<_> = ids
                .iter()
                .filter(|id| counts.get(id) != Some(&1))
                .take(5)
                .map(|id| (id, counts.get(id)))
                .collect();
            assert!(
                wrong.is_empty(),
                "{label}: jobs not {what} exactly once: {wrong:?}"
            );
            assert_eq!(
                counts.len(),
                ids.len(),
                "{label}: {what} jobs never enqueued"
            );
        }
    }
}

fn job() -> Job {
    let mut job = Job::new(QUEUE, b"pooled job".to_vec());
    job.run_at = NOW;
    job.enqueued_at = NOW;
    // Long enough that no claim lapses during a test.
    job.opts = queue_opts();
    job.opts.visibility_timeout_s = 3_600;
    job
}

/// A fresh engine schema holding `JOBS` due jobs (enqueued on a direct
/// connection), and their ids.
async fn seeded(prefix: &str) -> (SchemaName, Vec<i64>) {
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, prefix).await;
    let session = Session::new(admin, schema.clone());
    let batch = vec![job(); 500];
    let mut ids = Vec::with_capacity(JOBS);
    while ids.len() < JOBS {
        let added: Vec<i64> = session
            .run(&jobs::EnqueueMany {
                jobs: &batch,
                now: NOW,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        ids.extend(added);
    }
    (schema, ids)
}

/// One round of worker `worker` on `session`: the claim path, then an ack
/// of each job it claimed. False once a claim found the queue empty.
async fn round<C: Connection>(session: &Session<C>, worker: usize, tally: &Tally) -> bool {
    let worker_id = format!("worker-{worker}");
    let claimed = session
        .run_pipelined(
            &jobs::Promote {
                queue: QUEUE,
                now: NOW,
                limit: 100,
            },
            &jobs::Claim {
                queue: QUEUE,
                worker_id: &worker_id,
                now: NOW,
                limit: CLAIM_LIMIT,
            },
        )
        .await;
    let claimed = match claimed {
        Ok((_, claimed)) => claimed,
        Err(e) => {
            tally.error(&e);
            return true;
        }
    };
    if claimed.is_empty() {
        return false;
    }
    for job in &claimed {
        *tally.claimed.lock().unwrap().entry(job.id).or_default() += 1;
        let ack = jobs::Ack {
            id: job.id,
            worker_id: &worker_id,
            attempts: job.attempts,
        };
        match session.run(&ack).await {
            Ok(1) => *tally.acked.lock().unwrap().entry(job.id).or_default() += 1,
            Ok(n) => tally
                .errors
                .lock()
                .unwrap()
                .push((format!("ack of job {} changed {n} rows", job.id), None)),
            Err(e) => tally.error(&e),
        }
    }
    true
}

type Round = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Runs `WORKERS` workers, each calling `one_round(worker)` until it
/// returns false (or `MAX_ROUNDS` times), under an outer bound that only a
/// hung run reaches.
async fn drain(one_round: impl Fn(usize) -> Round + Send + Sync + 'static) {
    let one_round = Arc::new(one_round);
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let one_round = Arc::clone(&one_round);
            tokio::spawn(async move {
                for _ in 0..MAX_ROUNDS {
                    if !one_round(worker).await {
                        break;
                    }
                    // As an engine does between rounds: bb8 hands a
                    // returned connection to whoever asks first, and a
                    // worker asking again at once would starve the waiting
                    // ones.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    tokio::time::timeout(Duration::from_secs(300), async {
        for worker in workers {
            worker.await.unwrap();
        }
    })
    .await
    .expect("the workers did not finish within 300 s");
}

/// The workers drain the seeded queue on `connections` sessions of their
/// own connections to `url`, in `mode` (two workers share a session when
/// there are half as many: their calls meet on one connection).
async fn drain_with_sessions(
    url: &str,
    schema: &SchemaName,
    mode: StatementMode,
    connections: usize,
) -> Arc<Tally> {
    let sessions = Sessions::new(schema.clone()).with_mode(mode);
    let mut own = Vec::new();
    for _ in 0..connections {
        own.push(sessions.session(harness::connect_url(url).await));
    }
    let own = Arc::new(own);
    let tally = Arc::new(Tally::default());
    let in_rounds = Arc::clone(&tally);
    drain(move |worker| {
        let own = Arc::clone(&own);
        let tally = Arc::clone(&in_rounds);
        Box::pin(async move { round(&own[worker % own.len()], worker, &tally).await })
    })
    .await;
    tally
}

async fn jobs_left(schema: &SchemaName) -> i64 {
    harness::rows(
        &harness::connect().await,
        &format!("SELECT count(*) FROM {schema}.jobs"),
    )
    .await[0]
        .get(0)
}

/// Each statement text at most once per connection, and the number of
/// connections that parsed `claim`'s text.
fn assert_parsed_once_per_connection(parses: &[Parse], schema: &SchemaName, label: &str) -> usize {
    let mut per_connection: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for parse in parses {
        *per_connection
            .entry((parse.connection, parse.text.as_str()))
            .or_default() += 1;
    }
    let twice: Vec<_> = per_connection
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|((connection, text), n)| format!("{n} times on connection {connection}: {text:.60}"))
        .collect();
    assert!(
        twice.is_empty(),
        "{label}: {} statements parsed more than once on one connection: {:?}",
        twice.len(),
        twice.first()
    );
    let claim = jobs::claim(schema, QUEUE, "w", NOW, 1);
    parses
        .iter()
        .filter(|p| p.text == claim.sql())
        .map(|p| p.connection)
        .collect::<HashSet<_>>()
        .len()
}

/// Through pgbouncer 1.18 in transaction pooling, eight workers on four
/// sessions in the unnamed mode run 2,000 jobs: each claimed once and acked
/// once, no error, no named statement on the wire, nothing left in `jobs`;
/// and a session's transaction holds one server connection to its end.
/// The wire proxy in front of pgbouncer forwards each message on its own
/// (as a network may split a request): that is what made pipelined
/// requests go astray in pgbouncer before the unnamed mode sent one call at
/// a time (see `Session`, "Behind a pooler").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_sessions_through_pgbouncer_transaction_pooling_run_every_job_once() {
    if harness::skip_db_tests() {
        return;
    }
    let (schema, ids) = seeded("pool_bouncer").await;
    let bouncer = pgbouncer::url(PoolMode::Transaction);
    let proxy = CountingProxy::start(&bouncer).await;

    let tally = drain_with_sessions(
        &proxy.url(&bouncer),
        &schema,
        StatementMode::Unnamed,
        WORKERS / 2,
    )
    .await;

    tally.assert_exactly_once(&ids, "unnamed through pgbouncer");
    assert_eq!(jobs_left(&schema).await, 0);
    let parses = proxy.parses();
    assert!(parses.len() >= JOBS, "{} parses", parses.len());
    let named: Vec<_> = parses.iter().filter(|p| !p.name.is_empty()).collect();
    assert!(
        named.is_empty(),
        "named statements sent: {:?}",
        &named[..named.len().min(3)]
    );

    // A transaction: the pooler keeps its server connection until it ends.
    let mut session = Sessions::new(schema.clone())
        .with_mode(StatementMode::Unnamed)
        .session(harness::connect_url(&bouncer).await);
    let transaction = session.transaction().await.unwrap();
    let id = transaction
        .run(&jobs::Enqueue {
            job: &job(),
            now: NOW,
        })
        .await
        .unwrap();
    let seen: Vec<Job> = transaction
        .run(&jobs::Claim {
            queue: QUEUE,
            worker_id: "in-transaction",
            now: NOW,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(seen.iter().map(|j| j.id).collect::<Vec<_>>(), vec![id]);
    transaction.rollback().await.unwrap();
    assert_eq!(jobs_left(&schema).await, 0);
}

/// The guard of the test above: the same workload in the prepared mode
/// through the same pooler loses jobs. Statements prepared on one server
/// connection are missing on the others (SQLSTATE 26000), and the jobs
/// whose ack failed stay claimed until their visibility timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_sessions_through_pgbouncer_transaction_pooling_lose_jobs() {
    if harness::skip_db_tests() {
        return;
    }
    let (schema, ids) = seeded("pool_bouncer_named").await;
    let bouncer = pgbouncer::url(PoolMode::Transaction);

    let tally = drain_with_sessions(&bouncer, &schema, StatementMode::Prepared, WORKERS).await;

    let errors = tally.errors();
    assert!(
        !errors.is_empty(),
        "the prepared mode ran through transaction pooling unharmed"
    );
    assert!(
        errors.iter().any(
            |(text, code)| code == &Some(SqlState::INVALID_SQL_STATEMENT_NAME)
                && text.contains("does not exist")
        ),
        "{errors:?}"
    );
    let acked = tally.acked.lock().unwrap().len();
    assert!(
        acked < ids.len(),
        "every job was acked despite {} errors",
        errors.len()
    );
    assert!(jobs_left(&schema).await > 0);
    eprintln!(
        "prepared through pgbouncer transaction pooling: acked {acked} of {}; {} errors, the first: {}",
        ids.len(),
        errors.len(),
        errors[0].0
    );
}

/// Where the statement lives, step by step, on a transaction pool of two
/// server connections: a session's first call runs on one of them; the
/// test then holds that one in an open transaction, so the next call must
/// run on the other. In the prepared mode the statement is not there
/// (26000); in the unnamed mode the call runs.
#[tokio::test]
async fn a_prepared_statement_is_missing_on_the_pools_other_server_connection() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "pool_of_two").await;
    let url = pgbouncer::url(PoolMode::TransactionOfTwo);
    let ack = jobs::Ack {
        id: -1,
        worker_id: "nobody",
        attempts: 1,
    };
    let ack_text = jobs::ack(&schema, -1, "nobody", 1).sql().to_owned();
    for mode in [StatementMode::Prepared, StatementMode::Unnamed] {
        let session = Sessions::new(schema.clone())
            .with_mode(mode)
            .session(harness::connect_url(&url).await);
        assert_eq!(session.run(&ack).await.unwrap(), 0, "{mode:?}");

        // Both server connections held, each in an open transaction; the
        // one that ran the call keeps it (in the unnamed mode neither has
        // the statement, and the first keeps its own).
        let holders = [
            harness::connect_url(&url).await,
            harness::connect_url(&url).await,
        ];
        let mut has_it = Vec::new();
        for holder in &holders {
            let messages = holder
                .simple_query(&format!(
                    "BEGIN; SELECT count(*) FROM pg_catalog.pg_prepared_statements WHERE statement = {}",
                    schema_gen::render::quote_literal(&ack_text)
                ))
                .await
                .unwrap();
            let count = messages.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
                _ => None,
            });
            has_it.push(count.as_deref() == Some("1"));
        }
        let keep = match mode {
            StatementMode::Prepared => {
                assert_eq!(has_it.iter().filter(|h| **h).count(), 1, "{has_it:?}");
                has_it.iter().position(|h| *h).unwrap()
            }
            // Neither has this session's statement: it prepared none. (The
            // prepared round's statement is still on one of them: a
            // transaction pooler leaves named statements behind.)
            _ => has_it.iter().position(|h| *h).unwrap_or(0),
        };
        holders[1 - keep].batch_execute("COMMIT").await.unwrap();

        let next = tokio::time::timeout(Duration::from_secs(60), session.run(&ack))
            .await
            .expect("the call waited 60 s for a server connection");
        match mode {
            StatementMode::Prepared => {
                let e = next.unwrap_err();
                assert_eq!(e.code(), Some(&SqlState::INVALID_SQL_STATEMENT_NAME), "{e}");
                assert!(e.to_string().contains("does not exist"), "{e}");
            }
            _ => assert_eq!(next.unwrap(), 0),
        }
        holders[keep].batch_execute("COMMIT").await.unwrap();
    }
}

/// Calls of one statement racing on a fresh session share one
/// preparation: eight at once, one `Parse`.
#[tokio::test]
async fn racing_calls_prepare_a_statement_once() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "pool_race").await;
    let url = harness::database_url();
    let proxy = CountingProxy::start(&url).await;
    let session = Session::new(proxy.connect(&url).await, schema.clone());
    proxy.reset();
    let acks: Vec<_> = (0..8)
        .map(|id| jobs::Ack {
            id,
            worker_id: "nobody",
            attempts: 1,
        })
        .collect();
    let done = futures_util::future::join_all(acks.iter().map(|ack| session.run(ack))).await;
    assert!(done.iter().all(|acked| matches!(acked, Ok(0))), "{done:?}");
    let ack = jobs::ack(&schema, 0, "nobody", 1);
    let parses: Vec<_> = proxy
        .parses()
        .into_iter()
        .filter(|p| p.text == ack.sql())
        .collect();
    assert_eq!(parses.len(), 1, "{parses:?}");
}

/// deadpool-postgres, four connections for eight workers, each round on a
/// fresh checkout: every job once, and each statement parsed at most once
/// per physical connection (the pool's statement cache), so `claim`,
/// run about 500 times over about 500 checkouts, is parsed by at most four
/// connections. A session's transaction on a checkout shares that cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadpool_pool_prepares_each_statement_once_per_connection() {
    if harness::skip_db_tests() {
        return;
    }
    let (schema, ids) = seeded("pool_deadpool").await;
    let url = harness::database_url();
    let proxy = CountingProxy::start(&url).await;
    let (tally, checkouts) =
        drain_on_deadpool(&proxy.url(&url), &schema, StatementMode::Prepared).await;

    tally.assert_exactly_once(&ids, "deadpool");
    assert_eq!(jobs_left(&schema).await, 0);
    let parses = proxy.parses();
    let connections = assert_parsed_once_per_connection(&parses, &schema, "deadpool");
    assert!(
        (1..=4).contains(&connections),
        "claim parsed on {connections} connections"
    );
    assert!(
        proxy.connections() <= 4,
        "{} connections",
        proxy.connections()
    );
    assert!(checkouts > 100, "{checkouts} checkouts");
    assert!(parses.iter().all(|p| !p.name.is_empty()));

    // A transaction on a checkout: what it prepares is the connection's.
    let pool = deadpool(&proxy.url(&url), 1);
    let sessions = Sessions::new(schema.clone());
    proxy.reset();
    {
        let mut session = sessions.session(pool.get().await.unwrap());
        let transaction = session.transaction().await.unwrap();
        transaction
            .run(&jobs::Enqueue {
                job: &job(),
                now: NOW,
            })
            .await
            .unwrap();
        transaction.rollback().await.unwrap();
    }
    let session = sessions.session(pool.get().await.unwrap());
    session
        .run(&jobs::Enqueue {
            job: &job(),
            now: NOW,
        })
        .await
        .unwrap();
    let enqueue = jobs::enqueue(&schema, &job(), NOW);
    let enqueue_parses = proxy
        .parses()
        .iter()
        .filter(|p| p.text == enqueue.sql())
        .count();
    assert_eq!(enqueue_parses, 1);
    assert_eq!(jobs_left(&schema).await, 1);
}

fn deadpool(url: &str, size: usize) -> deadpool_postgres::Pool {
    let config = Config::from_str(url).unwrap();
    deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(config, NoTls))
        .max_size(size)
        .build()
        .unwrap()
}

async fn drain_on_deadpool(
    url: &str,
    schema: &SchemaName,
    mode: StatementMode,
) -> (Arc<Tally>, usize) {
    let pool = deadpool(url, 4);
    let sessions = Sessions::new(schema.clone()).with_mode(mode);
    let tally = Arc::new(Tally::default());
    let in_rounds = Arc::clone(&tally);
    drain(move |worker| {
        let (pool, sessions, tally) = (pool.clone(), sessions.clone(), Arc::clone(&in_rounds));
        Box::pin(async move {
            tally.checkouts.fetch_add(1, Ordering::SeqCst);
            let session = sessions.session(pool.get().await.unwrap());
            round(&session, worker, &tally).await
        })
    })
    .await;
    let checkouts = tally.checkouts.load(Ordering::SeqCst);
    (tally, checkouts)
}

async fn bb8_pool(
    url: &str,
    schema: &SchemaName,
    mode: StatementMode,
) -> bb8::Pool<SessionManager<NoTls>> {
    let config = Config::from_str(url).unwrap();
    let sessions = Sessions::new(schema.clone()).with_mode(mode);
    bb8::Pool::builder()
        .max_size(4)
        // Only a hung run waits this long (the drain's own bound).
        .connection_timeout(Duration::from_secs(300))
        .build(SessionManager::new(
            PostgresConnectionManager::new(config, NoTls),
            sessions,
        ))
        .await
        .unwrap()
}

async fn drain_on_bb8(url: &str, schema: &SchemaName, mode: StatementMode) -> (Arc<Tally>, usize) {
    let pool = bb8_pool(url, schema, mode).await;
    let tally = Arc::new(Tally::default());
    let in_rounds = Arc::clone(&tally);
    drain(move |worker| {
        let (pool, tally) = (pool.clone(), Arc::clone(&in_rounds));
        Box::pin(async move {
            tally.checkouts.fetch_add(1, Ordering::SeqCst);
            let session = pool.get().await.unwrap();
            round(&session, worker, &tally).await
        })
    })
    .await;
    let checkouts = tally.checkouts.load(Ordering::SeqCst);
    (tally, checkouts)
}

/// bb8, four connections for eight workers, each round on a fresh
/// checkout of a session: every job once, each statement parsed at most
/// once per physical connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bb8_pool_of_sessions_prepares_each_statement_once_per_connection() {
    if harness::skip_db_tests() {
        return;
    }
    let (schema, ids) = seeded("pool_bb8").await;
    let url = harness::database_url();
    let proxy = CountingProxy::start(&url).await;
    let (tally, checkouts) = drain_on_bb8(&proxy.url(&url), &schema, StatementMode::Prepared).await;

    tally.assert_exactly_once(&ids, "bb8");
    assert_eq!(jobs_left(&schema).await, 0);
    let parses = proxy.parses();
    let connections = assert_parsed_once_per_connection(&parses, &schema, "bb8");
    assert!(
        (1..=4).contains(&connections),
        "claim parsed on {connections} connections"
    );
    assert!(
        proxy.connections() <= 4,
        "{} connections",
        proxy.connections()
    );
    assert!(checkouts > 100, "{checkouts} checkouts");
}

/// Both pools in front of pgbouncer in transaction pooling (each pooled
/// client a pgbouncer client), in the unnamed mode: every job once, no
/// named statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_in_front_of_pgbouncer_run_every_job_once_in_the_unnamed_mode() {
    if harness::skip_db_tests() {
        return;
    }
    let bouncer = pgbouncer::url(PoolMode::Transaction);
    let proxy = CountingProxy::start(&bouncer).await;
    let (schema, ids) = seeded("pool_deadpool_bouncer").await;
    let (tally, _) = drain_on_deadpool(&proxy.url(&bouncer), &schema, StatementMode::Unnamed).await;
    tally.assert_exactly_once(&ids, "deadpool through pgbouncer");
    assert_eq!(jobs_left(&schema).await, 0);

    let (schema, ids) = seeded("pool_bb8_bouncer").await;
    let (tally, _) = drain_on_bb8(&proxy.url(&bouncer), &schema, StatementMode::Unnamed).await;
    tally.assert_exactly_once(&ids, "bb8 through pgbouncer");
    assert_eq!(jobs_left(&schema).await, 0);

    let parses = proxy.parses();
    assert!(parses.len() >= 2 * JOBS, "{} parses", parses.len());
    assert!(
        parses.iter().all(|p| p.name.is_empty()),
        "a named statement was sent"
    );
}

/// The probe tells a kept session (a direct connection, pgbouncer's
/// session pooling) from transaction and statement pooling, and picks the
/// statement mode that is correct for each.
#[tokio::test]
async fn the_pooler_probe_tells_session_from_transaction_pooling() {
    if harness::skip_db_tests() {
        return;
    }
    let cases = [
        (harness::database_url(), true),
        (pgbouncer::url(PoolMode::Session), true),
        (pgbouncer::url(PoolMode::Transaction), false),
        (pgbouncer::url(PoolMode::Statement), false),
        (pgbouncer::url(PoolMode::TransactionOfTwo), false),
    ];
    for (url, kept) in cases {
        let config = Config::from_str(&url).unwrap();
        let found = pooler::probe(&config, NoTls, pooler::DEFAULT_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        if kept {
            assert_eq!(found, Pooling::SessionKept, "{url}");
            assert_eq!(found.statement_mode(), StatementMode::Prepared);
        } else {
            assert!(matches!(found, Pooling::Pooled(_)), "{url}: {found:?}");
            assert_eq!(found.statement_mode(), StatementMode::Unnamed);
            eprintln!("{url}: {found:?}");
        }
    }
    // When the notification reaches no client (as behind a pooler whose
    // listening server connection went to nobody), the wait ends in no
    // proof of a session: treated as pooled. A proxy that drops
    // notifications stands in for that pooler.
    let url = harness::database_url();
    let proxy = CountingProxy::start(&url).await;
    proxy.drop_notifications();
    let config = Config::from_str(&proxy.url(&url)).unwrap();
    let wait = Duration::from_millis(300);
    let found = pooler::probe(&config, NoTls, wait).await.unwrap();
    assert_eq!(found, Pooling::Pooled(Evidence::NothingArrived(wait)));
    assert_eq!(found.statement_mode(), StatementMode::Unnamed);
}
