//! `Session::claim` against a real server: it promotes on a queue's first
//! claim of each unix second and after a promote that filled its limit, and
//! otherwise claims alone; each rule is shown by the rows it leaves
//! not-ready, and by what the proxy saw (one statement or two).

use harness::engine::{engine_schema, job};
use harness::wire::CountingProxy;
use schema_gen::statements::{Sessions, jobs};
use schema_model::SchemaName;
use tokio_postgres::Client;

const NOW: i64 = 1_700_000_000;

/// Jobs of `queue` still waiting for a promote.
async fn not_ready(admin: &Client, schema: &SchemaName, queue: &str) -> i64 {
    admin
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".jobs WHERE queue = $1 AND NOT ready"),
            &[&queue],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0)
}

/// `n` jobs of `queue` due at `run_at`, enqueued at `NOW` (so not ready).
async fn schedule(session: &schema_gen::statements::Session, queue: &str, run_at: i64, n: usize) {
    for _ in 0..n {
        session
            .run(&jobs::Enqueue {
                job: &job(queue, run_at, NOW),
                now: NOW,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[tokio::test]
async fn a_queue_is_promoted_once_a_second_and_again_after_a_full_promote() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "pacing").await;
    let proxy = CountingProxy::start(&url).await;
    let sessions = Sessions::new(schema.clone());
    let session = sessions.session(proxy.connect(&url).await);
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let claim = |now: i64, limit: u32| jobs::Claim {
        queue: "paced",
        worker_id: "worker-1",
        now,
        limit,
    };

    // The second's first claim promotes, then claims what it promoted.
    let due = NOW + 5;
    schedule(&session, "paced", due, 1).await;
    proxy.reset();
    let claimed = session
        .claim(&claim(due, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(claimed.len(), 1, "the first claim of the second promotes");
    assert_eq!(proxy.requests(), 2, "promote and claim");

    // Within the same second the claim runs alone: a job written not-ready
    // for that second meanwhile (an enqueuer whose clock is behind) waits.
    schedule(&session, "paced", due, 1).await;
    proxy.reset();
    let claimed = session
        .claim(&claim(due, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(claimed.is_empty(), "{claimed:?}");
    assert_eq!(proxy.requests(), 1, "the claim alone");
    assert_eq!(not_ready(&admin, &schema, "paced").await, 1);

    // A session of the same `Sessions` shares the pacer; another queue
    // does not.
    let other = sessions.session(harness::connect().await);
    let claimed = other
        .claim(&claim(due, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(claimed.is_empty(), "the pacer is shared: {claimed:?}");
    schedule(&session, "other", due, 1).await;
    let claimed = other
        .claim(&jobs::Claim {
            queue: "other",
            ..claim(due, 1)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let state: Vec<(String, bool, Option<String>)> = admin
        .query(
            &format!("SELECT queue, ready, worker_id FROM \"{schema}\".jobs"),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        claimed.len(),
        1,
        "another queue has its own second: {state:?}"
    );

    // The next second promotes it.
    let claimed = session
        .claim(&claim(due + 1, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(claimed.len(), 1, "the next second promotes");
    assert_eq!(not_ready(&admin, &schema, "paced").await, 0);

    // A promote that fills its limit (10 per claimed job) leaves more due
    // jobs, so the next claim in the same second promotes again.
    let later = NOW + 30;
    schedule(&session, "paced", later, 25).await;
    session
        .claim(&claim(later, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(not_ready(&admin, &schema, "paced").await, 15);
    proxy.reset();
    session
        .claim(&claim(later, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(proxy.requests(), 2, "a full promote is followed by another");
    assert_eq!(not_ready(&admin, &schema, "paced").await, 5);
    session
        .claim(&claim(later, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(not_ready(&admin, &schema, "paced").await, 0);
    proxy.reset();
    session
        .claim(&claim(later, 1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        proxy.requests(),
        1,
        "a promote short of its limit left nothing due this second"
    );
}

/// A promote that fails records nothing in the pacer: the next claim in the
/// same second promotes again (`Session::claim`, "the next claim then
/// promotes again"), and the error carries the server's message.
#[tokio::test]
async fn a_failed_promote_records_nothing_so_the_next_claim_promotes_again() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "pacing_fail").await;
    let sessions = Sessions::new(schema.clone());
    let session = sessions.session(harness::connect().await);
    let due = NOW + 5;
    schedule(&session, "failing", due, 1).await;
    // An object another role added refuses promotes (a job made ready); the
    // claim, which never sets `ready`, is untouched by it.
    harness::exec(
        &admin,
        &format!(
            r#"CREATE FUNCTION "{schema}".refuse_promote() RETURNS trigger LANGUAGE plpgsql
               AS $$BEGIN RAISE EXCEPTION 'promote refused by the test'; END$$;
               CREATE TRIGGER refuse_promote BEFORE UPDATE OF ready ON "{schema}".jobs
               FOR EACH ROW WHEN (NOT OLD.ready AND NEW.ready)
               EXECUTE FUNCTION "{schema}".refuse_promote()"#
        ),
    )
    .await;
    let claim = jobs::Claim {
        queue: "failing",
        worker_id: "worker-1",
        now: due,
        limit: 1,
    };
    let error = match session.claim(&claim).await {
        Ok(claimed) => panic!("the promote was refused, yet the claim returned {claimed:?}"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("promote refused by the test"), "{error}");
    assert_eq!(not_ready(&admin, &schema, "failing").await, 1);

    harness::exec(
        &admin,
        &format!(r#"DROP TRIGGER refuse_promote ON "{schema}".jobs"#),
    )
    .await;
    let claimed = session
        .claim(&claim)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        claimed.len(),
        1,
        "the failed promote recorded nothing, so this claim in the same second promotes"
    );
    assert_eq!(not_ready(&admin, &schema, "failing").await, 0);
}
