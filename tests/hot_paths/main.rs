//! Proves the engine's hot paths at scale, on a real server, with the
//! product's own statements (`schema_gen::statements`) and their bound
//! parameters: for every statement, `EXPLAIN (ANALYZE, BUFFERS)` of the
//! prepared statement (custom and generic plan) reads through its named
//! index, has no sort node of any kind and no sequential scan, throws away
//! a bounded number of rows in filters, and touches about as many shared
//! buffers at 400k jobs as at 20k: a plan's shape alone proves nothing (the
//! old claim was "an index scan without a sort" while it read 5,000 buffers).
//!
//! The data holds the hostile mixes: not-yet-due jobs at a higher priority
//! ahead of due ones, a queue whose jobs are mostly claimed, a queue after
//! heavy churn (claims and acks without vacuum), a backlog of due jobs not
//! yet promoted, and an idle queue holding only not-yet-due jobs (whose poll
//! must cost what a poll of an empty queue costs).
//!
//! A test shows the plan checks reject a sort of either kind (`Sort`,
//! `Incremental Sort`), on the claim with its index replaced. The other
//! test shows a semantic the statements promise: a gap-free stream reader
//! does not skip an id that commits late (the rest are in
//! `tests/statements/`). The same statements beside a DBA's reporting
//! indexes: `dba.rs`.

mod cases;
mod dba;

use std::collections::BTreeMap;

use harness::engine::{engine_schema, run, until_horizon_passes};
use harness::explain::{Measured, PlanMode, explain_analyze};
use harness::{exec, rows};
use schema_gen::statements::{self, FromRow, Statement, jobs, streams};
use schema_model::{Job, Layout, SchemaName, StreamEvent};
use tokio_postgres::Client;

use cases::cases;

/// The unix second the seeded data is built around.
const NOW: i64 = 1_000_000;

/// Jobs in the small and the large table.
const SMALL: i64 = 20_000;

const LARGE: i64 = 400_000;

/// Jobs claimed and acked (without vacuum) before measuring.
const CHURNED_JOBS: u32 = 1_000;

/// A batch: claims take 10, sweeps 10, promotion 100.
const BATCH: u32 = 10;

const PROMOTE_BATCH: u32 = 100;

/// Stream reads take 100 events.
const READ_BATCH: u32 = 100;

/// Seeds `n` jobs in the hostile mixes, and the other tables in proportion.
/// Bulk rows come from generate_series (sea-query does not express it);
/// the statements under test are the product's.
async fn seed(client: &Client, schema: &SchemaName, n: i64) {
    let jobs_insert = "INSERT INTO jobs (queue, payload, priority, run_at, ready, expires_at, \
        enqueued_at, visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
        attempts, worker_id, claimed_at, claim_expires_at)";
    let due = format!("{NOW} - 1000 + g % 1000");
    let future = format!("{NOW} + 1000 + g");
    exec(
        client,
        &format!(
            r#"
            SET search_path TO "{schema}";
            -- The test cluster commits asynchronously; vacuum can only mark
            -- pages all-visible once the commit is flushed, as on a server
            -- with synchronous commit (set for the session: it must hold at
            -- this batch's commit).
            SET synchronous_commit = on;
            -- Churn is measured without vacuum, whenever autovacuum would wake.
            ALTER TABLE jobs SET (autovacuum_enabled = off);
            -- normal: due jobs at five priorities; every tenth expires later.
            {jobs_insert}
            SELECT 'normal', '\x00', g % 5, {due}, true, CASE WHEN g % 10 = 0 THEN {NOW} + g END,
                   {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 8) g;
            -- future_ahead: many not-yet-due jobs at a higher priority than the due ones.
            {jobs_insert}
            SELECT 'future_ahead', '\x00', 9, {future}, false, NULL, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 4) g;
            {jobs_insert}
            SELECT 'future_ahead', '\x00', 0, {due}, true, NULL, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 40) g;
            -- mostly_claimed: 19 of 20 jobs held by a worker.
            {jobs_insert}
            SELECT 'mostly_claimed', '\x00', g % 5, {due}, true, NULL, {NOW} - 2000, 30, 3, 2, 86400,
                   CASE WHEN g % 20 = 0 THEN 0 ELSE 1 END,
                   CASE WHEN g % 20 = 0 THEN NULL ELSE 'w' END,
                   CASE WHEN g % 20 = 0 THEN NULL ELSE {NOW} - 10 END,
                   CASE WHEN g % 20 = 0 THEN NULL ELSE {NOW} + 1000000 END
            FROM generate_series(1, {n} / 4) g;
            -- idle_future: only not-yet-due jobs.
            {jobs_insert}
            SELECT 'idle_future', '\x00', g % 5, {future}, false, NULL, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 8) g;
            -- promotable: a backlog of due jobs not yet promoted.
            {jobs_insert}
            SELECT 'promotable', '\x00', g % 5, {due}, false, NULL, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 8) g;
            -- churned: due jobs, claimed and acked below.
            {jobs_insert}
            SELECT 'churned', '\x00', g % 5, {due}, true, NULL, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, {n} / 8) g;
            -- lapsed: claims past their visibility timeout, one in ten on the last attempt.
            {jobs_insert}
            SELECT 'lapsed', '\x00', 0, {due}, true, NULL, {NOW} - 2000, 30, 3, 2, 86400,
                   CASE WHEN g % 10 = 0 THEN 3 ELSE 1 END, 'w', {NOW} - 200, {NOW} - 100 + g % 50
            FROM generate_series(1, 200) g;
            -- expiring: jobs past their expiry.
            {jobs_insert}
            SELECT 'expiring', '\x00', 0, {due}, true, {NOW} - 10 - g % 5, {NOW} - 2000, 30, 3, 2, 86400, 0, NULL, NULL, NULL
            FROM generate_series(1, 200) g;

            INSERT INTO dead_jobs (id, queue, payload, priority, run_at, enqueued_at, visibility_timeout_s,
                                   max_attempts, backoff_base_s, dead_letter_retention_s, attempts, died_at)
            SELECT -g, 'q' || (g % 20), '\x00', 0, 1000, 1000, 30, 3, 2,
                   86400 + g, 3, CASE WHEN g <= 200 THEN {NOW} - 100000 ELSE {NOW} END
            FROM generate_series(1, {n} / 2) g;
            INSERT INTO stream_events (stream, key, payload, created_at)
            SELECT 's' || (g % 50), CASE WHEN g % 2 = 0 THEN 'k' END, '\x00', {NOW}
            FROM generate_series(1, {n}) g;
            INSERT INTO stream_offsets (stream, consumer, "offset")
            SELECT 's' || (g % 50), 'c' || g, g FROM generate_series(1, {n} / 4) g;
            INSERT INTO schedules (name, spec, every_s, queue, payload, priority, max_attempts,
                                   visibility_timeout_s, backoff_base_s, dead_letter_retention_s,
                                   next_fire_at, enabled)
            SELECT 'sched' || g, '@every 1m', 60, 'normal', '\x00', 0, 3, 30, 2, 86400,
                   CASE WHEN g <= 100 THEN {NOW} - g ELSE {NOW} + g END, g % 4 <> 0
            FROM generate_series(1, {n} / 4) g;
            INSERT INTO locks (name, owner, expires_at)
            SELECT 'lock' || g, 'owner' || g, CASE WHEN g <= 100 THEN {NOW} - g ELSE {NOW} + 1000 + g END
            FROM generate_series(1, {n} / 4) g;
            INSERT INTO consumed_events (consumer, event_id, consumed_at)
            SELECT 'c' || (g % 100), 'e' || g, {NOW} FROM generate_series(1, {n}) g;
            RESET search_path;
            "#
        ),
    )
    .await;
}

/// Claims and acks [`CHURNED_JOBS`] jobs of `churned` one transaction at a
/// time, as workers do: each claim leaves a dead entry at the front of the
/// claim index, each ack a dead row.
async fn churn(client: &Client, schema: &SchemaName) {
    let mut done = 0;
    while done < CHURNED_JOBS {
        run(
            client,
            &jobs::promote(schema, "churned", NOW, PROMOTE_BATCH),
        )
        .await;
        let claimed = run(
            client,
            &jobs::claim(schema, "churned", "churner", NOW, BATCH),
        )
        .await;
        assert!(!claimed.is_empty(), "the churned queue ran dry");
        for row in claimed {
            let job = Job::from_row(&row).unwrap_or_else(|e| panic!("{e}"));
            let ack = jobs::ack(schema, job.id, "churner", job.attempts);
            let acked = client
                .execute(ack.sql(), &ack.args())
                .await
                .unwrap_or_else(|e| panic!("ack: {}", harness::describe_error(&e)));
            assert_eq!(acked, 1);
            done += 1;
        }
    }
}

/// One measured call: a statement with real parameters, the index it must
/// read, and how many rows its filters may throw away.
struct Case {
    label: String,
    statement: Statement,
    /// The index a node must scan (or arbitrate on); `None` for a plain
    /// insert, which reads no index.
    index: Option<&'static str>,
    max_rows_removed: i64,
    /// The rows one call reads or writes at most (its batch; 1 for a
    /// single-row statement): the buffer bound allows one more B-tree level
    /// per row's descents at the large size.
    rows: i64,
    /// Whether the call finds nothing to do on the seeded data (a poll of a
    /// queue with nothing due to promote or claim): it must work on 0 rows;
    /// every other case works on exactly `rows`, so a case that silently
    /// stopped doing its work cannot pass the bounds by doing none.
    idle: bool,
}

fn case(label: &str, statement: Statement, index: Option<&'static str>) -> Case {
    Case {
        label: label.to_owned(),
        statement,
        index,
        max_rows_removed: 0,
        rows: 1,
        idle: false,
    }
}

fn batch(rows: u32, case: Case) -> Case {
    Case {
        rows: i64::from(rows),
        ..case
    }
}

async fn first_i64(client: &Client, sql: &str) -> i64 {
    rows(client, sql)
        .await
        .first()
        .map(|row| row.get(0))
        .unwrap_or_else(|| panic!("no row for {sql}"))
}

/// `VACUUM (ANALYZE)` of `table` until every page is all-visible, as a
/// vacuum at a quiet moment leaves an append-only table. A snapshot open
/// elsewhere on the server (another test of this binary, in parallel) keeps
/// a vacuum from marking the fresh rows visible; the table's
/// `relallvisible` then depends on scheduling, and with it the planner's
/// choice between an index-only scan and a bitmap scan plus a sort for the
/// stream read (seen once in a loaded run of the suite).
async fn vacuumed_all_visible(client: &Client, schema: &SchemaName, table: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        exec(client, &format!("VACUUM (ANALYZE) \"{schema}\".{table}")).await;
        let missing = first_i64(
            client,
            &format!(
                "SELECT (relpages - relallvisible)::bigint FROM pg_class \
                 WHERE oid = '\"{schema}\".{table}'::regclass"
            ),
        )
        .await;
        if missing <= 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{table}: {missing} pages still not all-visible after vacuuming for 2 minutes: \
             a transaction held open on the test server?"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Seeds a table of `n` jobs, churns it, and measures every case in both
/// plan modes. Checks each plan on the way.
async fn measure_at(client: &Client, n: i64) -> BTreeMap<(String, &'static str), (i64, Measured)> {
    let schema = engine_schema(client, "hot_paths").await;
    seed(client, &schema, n).await;
    // Statistics, as autovacuum's analyze keeps them; the append-only and
    // small tables are vacuumed too (autovacuum's insert threshold does that
    // for an append-only table), jobs is not: its churn is measured unvacuumed.
    exec(client, &format!("ANALYZE \"{schema}\".jobs")).await;
    for table in [
        "dead_jobs",
        "stream_events",
        "stream_offsets",
        "schedules",
        "locks",
        "consumed_events",
    ] {
        vacuumed_all_visible(client, &schema, table).await;
    }
    churn(client, &schema).await;
    // The gap-free reader's case needs its stream below the snapshot horizon.
    until_horizon_passes(
        async || run(client, &streams::read_in_commit_order(&schema, "s3", 0, 1)).await,
        |rows| !rows.is_empty(),
    )
    .await;
    let all = cases(client, &schema).await;
    let listed: std::collections::BTreeSet<&str> = all.iter().map(|c| c.statement.name()).collect();
    // Every statement of every layout (the horizon read and the wake-up's
    // notify touch no table).
    let every_layout = statements::all(&schema)
        .into_iter()
        .chain(statements::all_for(&schema, Layout::CitusSchemaSharding))
        .filter(|s| !matches!(s.name(), "commit_horizon" | "wake"));
    for statement in every_layout {
        assert!(
            listed.contains(statement.name()),
            "statement {} has no hot-path proof",
            statement.name()
        );
    }
    let mut measured = BTreeMap::new();
    for case in &all {
        for (mode, mode_name) in [(PlanMode::Custom, "custom"), (PlanMode::Generic, "generic")] {
            let m = explain_analyze(client, &case.statement, mode).await;
            check_plan(
                &format!("{} ({mode_name} plan, {n} jobs)", case.label),
                case,
                &m,
            );
            measured.insert((case.label.clone(), mode_name), (case.rows, m));
        }
    }
    measured
}

/// The checks every plan of [`measure_at`] passes: no sort node of any
/// kind, no sequential scan, the case's index read, and no more rows
/// thrown away by filters than the case allows.
fn check_plan(what: &str, case: &Case, m: &Measured) {
    assert!(
        m.sort_nodes().is_empty(),
        "{what}: sorts: {:?}\n{}",
        m.sort_nodes(),
        m.pretty()
    );
    assert!(
        !m.node_types.iter().any(|t| t == "Seq Scan"),
        "{what}: a sequential scan\n{}",
        m.pretty()
    );
    match case.index {
        Some(index) => assert!(
            m.indexes.iter().any(|i| i == index),
            "{what}: does not read {index}, reads {:?}\n{}",
            m.indexes,
            m.pretty()
        ),
        None => assert!(
            m.indexes.is_empty() && m.tables_read.is_empty(),
            "{what}: a plain insert reads nothing\n{}",
            m.pretty()
        ),
    }
    let expected = if case.idle { 0 } else { case.rows };
    assert_eq!(
        m.rows_worked,
        expected,
        "{what}: worked on {} rows; the seeded data gives it {expected}\n{}",
        m.rows_worked,
        m.pretty()
    );
    assert!(
        m.rows_removed <= case.max_rows_removed,
        "{what}: {} rows removed by filters (bound {})\n{}",
        m.rows_removed,
        case.max_rows_removed,
        m.pretty()
    );
}

#[tokio::test]
async fn every_hot_path_touches_the_same_buffers_at_20k_and_400k_jobs() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let small = measure_at(&client, SMALL).await;
    let large = measure_at(&client, LARGE).await;
    println!(
        "{:<34} {:>8} {:>14} {:>14}",
        "statement (mix)", "plan", "buffers@20k", "buffers@400k"
    );
    let mut failures = Vec::new();
    for ((label, mode), (batch, s)) in &small {
        let (_, l) = &large[&(label.clone(), *mode)];
        println!("{label:<34} {mode:>8} {:>14} {:>14}", s.buffers, l.buffers);
        if l.buffers > allowed(s.buffers, *batch) {
            failures.push(format!(
                "{label} ({mode} plan): {} buffers at {LARGE} jobs, {} at {SMALL}\n{}",
                l.buffers,
                s.buffers,
                l.pretty()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A poll (the claim path) of a queue holding only not-yet-due jobs costs
    // what a poll of an empty queue costs.
    for measured in [&small, &large] {
        for mode in ["custom", "generic"] {
            let poll = |queue: &str| {
                measured[&(format!("promote {queue}"), mode)].1.buffers
                    + measured[&(format!("claim {queue}"), mode)].1.buffers
            };
            assert!(
                poll("idle_future") <= poll("empty") + 4,
                "{mode} plan: a poll of an idle queue of future jobs touched {} buffers, of an empty queue {}",
                poll("idle_future"),
                poll("empty")
            );
        }
    }
}

/// The most buffers a call may touch at the large size, given the small:
/// the same, plus one page per B-tree descent, since the trees are one level
/// deeper at 20x the rows (20k to 400k). A row read or written costs at most
/// [`DESCENTS_PER_ROW`] descents (its key lookup, an entry in each of the
/// jobs table's five indexes, a free-space lookup), plus a few for the scan
/// itself. The slack is fixed per statement: it does not grow with the table.
fn allowed(small: i64, rows: i64) -> i64 {
    small + DESCENTS_PER_ROW * rows + 8
}

/// See [`allowed`].
const DESCENTS_PER_ROW: i64 = 7;

/// Two appends commit in the opposite order of their ids. A naive `id >
/// offset` reader skips the lower id; the gap-free reader, in `(tx_id, id)`
/// order below the snapshot horizon, delivers both.
#[tokio::test]
async fn a_gap_free_stream_reader_does_not_skip_an_id_that_commits_late() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "commit_order").await;
    let early = harness::connect().await;
    let late = harness::connect().await;
    let reader = harness::connect().await;
    let append = streams::append(&schema, &{
        let mut event = StreamEvent::default();
        event.stream = "s".into();
        event.payload = vec![1];
        event
    });
    let offsets = |rows: Vec<tokio_postgres::Row>| -> Vec<i64> {
        rows.iter()
            .map(|row| {
                StreamEvent::from_row(row)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .id
            })
            .collect()
    };
    // `early` takes the lower id and stays open; `late` takes a higher id and commits.
    exec(&early, "BEGIN").await;
    let low: i64 = run(&early, &append).await[0].get(0);
    let high: i64 = run(&late, &append).await[0].get(0);
    assert!(low < high);

    let naive = |offset| streams::read(&schema, "s", offset, 100);
    let gap_free = |offset| streams::read_in_commit_order(&schema, "s", offset, 100);
    // The Citus layout's reader, on one server: the horizon first, then the
    // read below it; it must deliver exactly what the one-statement reader does.
    let below = async |offset| {
        let horizon: i64 = run(&reader, &streams::commit_horizon(&schema)).await[0].get("horizon");
        offsets(
            run(
                &reader,
                &streams::read_in_commit_order_below(&schema, "s", offset, 100, horizon),
            )
            .await,
        )
    };

    // While `early` is open, the naive reader delivers `high` and checkpoints past `low`.
    assert_eq!(offsets(run(&reader, &naive(0)).await), vec![high]);
    // The gap-free reader holds `high` back: a transaction below it is still running.
    assert_eq!(offsets(run(&reader, &gap_free(0)).await), Vec::<i64>::new());
    assert_eq!(below(0).await, Vec::<i64>::new());

    exec(&early, "COMMIT").await;

    assert_eq!(
        offsets(run(&reader, &naive(high)).await),
        Vec::<i64>::new(),
        "the naive reader has skipped {low} for good"
    );
    // Wait (bounded) for the horizon to pass both appends.
    let careful = until_horizon_passes(
        async || offsets(run(&reader, &gap_free(0)).await),
        |careful| careful.len() >= 2,
    )
    .await;
    assert_eq!(careful, vec![low, high], "commit order delivers both");
    assert_eq!(below(0).await, vec![low, high]);
    assert_eq!(below(low).await, vec![high]);
    assert_eq!(
        offsets(run(&reader, &gap_free(low)).await),
        vec![high],
        "resuming after the checkpoint's (tx_id, id)"
    );
}

/// [`check_plan`] rejects a claim that sorts, with either kind of sort
/// node: with `jobs_claim_idx` gone, a plain `Sort` (nothing gives the
/// claim's order); with an index giving only its `priority DESC` prefix,
/// an `Incremental Sort` on the rest.
#[tokio::test]
async fn a_claim_that_sorts_is_rejected_whatever_the_kind_of_sort() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "sorting_claim").await;
    seed(&client, &schema, SMALL).await;
    let claim = case(
        "claim",
        jobs::claim(&schema, "normal", "w", NOW, BATCH),
        Some("jobs_claim_idx"),
    );
    exec(
        &client,
        &format!("DROP INDEX \"{schema}\".jobs_claim_idx; ANALYZE \"{schema}\".jobs"),
    )
    .await;
    let prefix_only = format!(
        "CREATE INDEX claim_prefix_idx ON \"{schema}\".jobs (queue, priority DESC) \
         WHERE claimed_at IS NULL AND ready; ANALYZE \"{schema}\".jobs"
    );
    for (setup, sort) in [(None, "Sort"), (Some(prefix_only), "Incremental Sort")] {
        if let Some(setup) = setup {
            exec(&client, &setup).await;
        }
        let m = explain_analyze(&client, &claim.statement, PlanMode::Custom).await;
        assert!(
            m.node_types.iter().any(|t| t == sort),
            "the claim does not run a {sort} node here, the test proves nothing\n{}",
            m.pretty()
        );
        let refused = std::panic::catch_unwind(|| check_plan(sort, &claim, &m))
            .err()
            .and_then(|panic| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        assert!(
            refused.contains(&format!("{sort}: sorts: [\"{sort}\"]")),
            "a claim with a {sort} node passed the plan checks: {refused:?}"
        );
    }
}
