//! The claim path keeps its generic plan: on a session that prepares its
//! statements (a direct connection, or a pool's physical connection),
//! PostgreSQL's plan cache plans `promote` and `claim` five times, then
//! reuses one generic plan for every later call, whatever the values. The
//! statements hide every value the planner would estimate with
//! (`(SELECT CAST($n AS ...))`); written with plain placeholders, the
//! cache replanned on every call (each custom plan looked cheaper than the
//! generic one, which must assume `LIMIT $n` takes a tenth of the table),
//! and planning was up to half the claim path's time (BENCHMARKS.md,
//! "Where the claim path's time goes").
//!
//! The generic plans themselves are proven bounded by `tests/hot_paths/`
//! (index, no sort, buffers flat at scale, on the hostile mixes).

use harness::engine::engine_schema;
use schema_gen::statements::{Job, Session, jobs};
use schema_model::SchemaName;

const NOW: i64 = 1_700_000_000;
/// Claim paths run: past the cache's five custom plans.
const CALLS: i64 = 12;
/// Due jobs in the queue, and scheduled jobs (one a second from `NOW`):
/// enough that a generic plan of plain placeholders (`LIMIT $n` taken as a
/// tenth of the rows, `run_at <= $n` as a third) is estimated far above a
/// custom plan for a few jobs, as in production; on a handful of rows the
/// cache picks the generic plan of any text, and the test could not fail.
const JOBS: i64 = 10_000;

fn job(run_at: i64) -> Job {
    harness::engine::job("cached", run_at, NOW)
}

/// `(generic_plans, custom_plans)` of the statement `sql` prepared on
/// `session`'s connection (the plan cache is the connection's own).
async fn plans(session: &Session, sql: &str) -> (i64, i64) {
    let row = session
        .client()
        .query_one(
            "SELECT generic_plans, custom_plans FROM pg_catalog.pg_prepared_statements \
             WHERE statement = $1",
            &[&sql],
        )
        .await
        .unwrap_or_else(|e| panic!("{sql} is not prepared on the session: {e}"));
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn the_claim_path_is_planned_five_times_then_reuses_its_generic_plan() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema: SchemaName = engine_schema(&admin, "plan_cache").await;
    let session = Session::new(harness::connect().await, schema.clone());
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Due jobs, and jobs that fall due one a second as the calls go on, so
    // both statements have work with values that change call by call.
    let batch: Vec<Job> = (0..JOBS)
        .map(|_| job(NOW))
        .chain((1..=JOBS).map(|i| job(NOW + i)))
        .collect();
    session
        .run(&jobs::EnqueueMany {
            jobs: &batch,
            now: NOW,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    harness::exec(&admin, &format!("ANALYZE \"{schema}\".jobs")).await;

    let mut promoted = 0;
    let mut claimed = 0;
    for i in 1..=CALLS {
        let limit = u32::try_from(1 + i % 3).unwrap_or(1);
        let (p, c) = session
            .run_pipelined(
                &jobs::Promote {
                    queue: "cached",
                    now: NOW + i,
                    limit: limit * 10,
                },
                &jobs::Claim {
                    queue: "cached",
                    worker_id: "w",
                    now: NOW + i,
                    limit,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        promoted += p;
        claimed += c.len();
    }
    // The calls did the work the plans were used for.
    assert_eq!(promoted, u64::try_from(CALLS).unwrap_or(0));
    assert!(claimed >= usize::try_from(CALLS).unwrap_or(0), "{claimed}");

    let promote_sql = jobs::promote(&schema, "cached", NOW, 10).sql().to_owned();
    let claim_sql = jobs::claim(&schema, "cached", "w", NOW, 1).sql().to_owned();
    for (name, sql) in [("promote", promote_sql), ("claim", claim_sql)] {
        let (generic, custom) = plans(&session, &sql).await;
        assert_eq!(
            (generic, custom),
            (CALLS - 5, 5),
            "{name}: the plan cache built {custom} custom plans in {CALLS} calls \
             (a generic plan after the fifth was expected)"
        );
    }
}
