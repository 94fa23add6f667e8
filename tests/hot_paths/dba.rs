//! The hot paths beside a DBA's reporting indexes (foreign objects: `check`
//! reports them, bootstrap opens beside them): every statement keeps the
//! product's index, a queue filled after the last `ANALYZE` shows the
//! hazard, and a predicate no engine statement states keeps them out. A
//! module of `hot_paths.rs`, whose seed, mixes and plan checks it uses.

use std::collections::BTreeMap;

use harness::exec;
use harness::explain::{Measured, PlanMode, explain_analyze};
use schema_gen::statements::{jobs, streams};
use schema_model::SchemaName;
use tokio_postgres::Client;

use super::{
    BATCH, NOW, batch, case, cases, check_plan, churn, engine_schema, run, seed,
    until_horizon_passes, vacuumed_all_visible,
};

/// Jobs in the table the DBA's reporting indexes are measured on.
const FOREIGN_SIZE: i64 = 100_000;

/// Jobs of a queue that filled after the last `ANALYZE`: the planner
/// estimates it at about one row.
const BURST: i64 = 20_000;

/// Reporting indexes a DBA plausibly adds to `jobs` (each a foreign object:
/// `check` reports it, bootstrap opens beside it), the last one the claim's
/// own order without its predicate.
const DBA_INDEXES: &[(&str, &str)] = &[
    ("jobs_queue_priority_report_idx", "(queue, priority)"),
    ("jobs_queue_run_at_report_idx", "(queue, run_at)"),
    ("jobs_enqueued_at_report_idx", "(enqueued_at)"),
    (
        "jobs_claim_order_report_idx",
        "(queue, priority DESC, run_at, id)",
    ),
];

/// The predicate that keeps a reporting index out of the engine's plans:
/// the planner uses a partial index only for a query whose conditions imply
/// its predicate, and no engine statement states anything about
/// `enqueued_at`; the column is `NOT NULL`, so the index still holds every
/// row, for the reports that state it.
const KEEP_OUT: &str = "WHERE enqueued_at IS NOT NULL";

/// What one more index costs a write, in pages: per row, an insertion (the
/// metapage, root, inner and leaf page at this size) ...
const PAGES_PER_EXTRA_INDEX_ENTRY: i64 = 4;
/// ... and per statement a page split (a new page from the free space map,
/// the parent's entry): an index built by `CREATE INDEX` is packed full,
/// so the first writes split its pages (measured: an enqueue beside four
/// fresh indexes, 54 buffers instead of 7).
const PAGES_PER_INDEX_SPLIT: i64 = 12;

/// Drops the DBA's indexes if they exist and creates them with `predicate`.
async fn dba_indexes(client: &Client, schema: &SchemaName, predicate: &str) {
    for (name, keys) in DBA_INDEXES {
        exec(
            client,
            &format!(
                "DROP INDEX IF EXISTS \"{schema}\".{name}; \
                 CREATE INDEX {name} ON \"{schema}\".jobs {keys} {predicate}"
            ),
        )
        .await;
    }
}

fn dba_indexes_read(m: &Measured) -> Vec<&String> {
    m.indexes
        .iter()
        .filter(|i| DBA_INDEXES.iter().any(|(name, _)| name == i))
        .collect()
}

/// Every statement, on the hostile mixes, beside a DBA's reporting indexes
/// ([`DBA_INDEXES`]), with statistics as autovacuum's analyze keeps them:
///
/// - as DBAs write them, every statement that finds work reads the
///   product's index and none of the DBA's, passing the same checks as
///   without them (no sort, no sequential scan, the same rows, bounded rows
///   removed); a poll of a queue with no job at all may read one (the
///   planner expects no row either way) and stays as cheap;
/// - with the predicate that keeps them out ([`KEEP_OUT`]), every statement
///   reads only the product's indexes, polls included;
/// - in both, no more buffers than without them plus what keeping them up
///   to date costs a write ([`PAGES_PER_EXTRA_INDEX_ENTRY`] per row and
///   index, [`PAGES_PER_INDEX_SPLIT`] per index).
///
/// Then a queue that filled after the last `ANALYZE` (the planner expects
/// one row of it): a claim that showed the planner its queue read the whole
/// queue through a DBA's index and sorted it; the product's claim hides its
/// queue from the planner, and reads the claim index beside the indexes as
/// written and kept out alike.
#[tokio::test]
async fn the_hot_paths_keep_their_indexes_beside_a_dbas_reporting_indexes() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = engine_schema(&client, "hot_paths_dba").await;
    seed(&client, &schema, FOREIGN_SIZE).await;
    exec(&client, &format!("ANALYZE \"{schema}\".jobs")).await;
    for table in [
        "dead_jobs",
        "stream_events",
        "stream_offsets",
        "schedules",
        "locks",
        "consumed_events",
    ] {
        vacuumed_all_visible(&client, &schema, table).await;
    }
    churn(&client, &schema).await;
    until_horizon_passes(
        async || run(&client, &streams::read_in_commit_order(&schema, "s3", 0, 1)).await,
        |rows| !rows.is_empty(),
    )
    .await;
    let all = cases(&client, &schema).await;
    // `kept_out`: the strict checks for every case; otherwise a poll of a
    // queue with no job may read a DBA index.
    let measure = async |setting: &str, kept_out: bool| {
        let mut measured = BTreeMap::new();
        for case in &all {
            for (mode, mode_name) in [(PlanMode::Custom, "custom"), (PlanMode::Generic, "generic")]
            {
                let m = explain_analyze(&client, &case.statement, mode).await;
                let what = format!("{} ({mode_name} plan, {setting})", case.label);
                let theirs = dba_indexes_read(&m);
                if kept_out || theirs.is_empty() {
                    check_plan(&what, case, &m);
                    assert!(
                        theirs.is_empty(),
                        "{what}: reads {theirs:?}\n{}",
                        m.pretty()
                    );
                } else {
                    assert!(
                        case.idle && m.rows_worked == 0,
                        "{what}: reads {theirs:?}\n{}",
                        m.pretty()
                    );
                    println!("{what}: reads {theirs:?}, {} buffers", m.buffers);
                }
                measured.insert((case.label.clone(), mode_name), (case.rows, m));
            }
        }
        measured
    };
    let before = measure("no DBA index", true).await;
    dba_indexes(&client, &schema, "").await;
    exec(&client, &format!("ANALYZE \"{schema}\".jobs")).await;
    // Foreign objects, every one: reported, not drift (the seed's
    // `autovacuum_enabled = off` is the other difference).
    let found = schema_gen::verify(&client, &schema).await.unwrap();
    let indexes: Vec<&schema_gen::Difference> = found
        .iter()
        .filter(|d| matches!(d, schema_gen::Difference::ExtraIndex { .. }))
        .collect();
    assert_eq!(indexes.len(), DBA_INDEXES.len(), "{found:?}");
    assert!(indexes.iter().all(|d| d.is_foreign()), "{found:?}");
    let written = measure("DBA indexes", false).await;
    dba_indexes(&client, &schema, KEEP_OUT).await;
    exec(&client, &format!("ANALYZE \"{schema}\".jobs")).await;
    let kept = measure("DBA indexes kept out", true).await;

    println!(
        "{:<34} {:>8} {:>10} {:>12} {:>10}",
        "statement (mix)", "plan", "buffers", "+DBA idx", "kept out"
    );
    let extra = i64::try_from(DBA_INDEXES.len()).unwrap_or(i64::MAX);
    let mut failures = Vec::new();
    for ((label, mode), (rows, b)) in &before {
        let key = (label.clone(), *mode);
        let (w, k) = (&written[&key].1, &kept[&key].1);
        println!(
            "{label:<34} {mode:>8} {:>10} {:>12} {:>10}",
            b.buffers, w.buffers, k.buffers
        );
        let bound =
            b.buffers + extra * (rows * PAGES_PER_EXTRA_INDEX_ENTRY + PAGES_PER_INDEX_SPLIT) + 8;
        for (setting, m) in [("beside", w), ("kept out", k)] {
            if m.buffers > bound {
                failures.push(format!(
                    "{label} ({mode} plan): {} buffers {setting} the DBA's indexes, {} without \
                     (bound {bound})\n{}",
                    m.buffers,
                    b.buffers,
                    m.pretty()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A queue that filled since the last ANALYZE.
    exec(
        &client,
        &format!(
            "INSERT INTO \"{schema}\".jobs (queue, payload, priority, run_at, ready, \
             enqueued_at, visibility_timeout_s, max_attempts, backoff_base_s, \
             dead_letter_retention_s, attempts) \
             SELECT 'burst', '\\x00', g % 5, {NOW} - 1000 + g % 1000, true, {NOW}, 30, 3, 2, \
             86400, 0 FROM generate_series(1, {BURST}) g"
        ),
    )
    .await;
    let burst = batch(
        BATCH,
        case(
            "claim burst",
            jobs::claim(&schema, "burst", "w2", NOW, BATCH),
            Some("jobs_claim_idx"),
        ),
    );
    // The same work as a claim of the seeded queue beside the same indexes.
    let normal = &kept[&("claim normal".to_owned(), "custom")].1;
    let kept_out = explain_analyze(&client, &burst.statement, PlanMode::Custom).await;
    check_plan(
        "claim burst (custom plan, DBA indexes kept out)",
        &burst,
        &kept_out,
    );
    assert!(
        dba_indexes_read(&kept_out).is_empty(),
        "{}",
        kept_out.pretty()
    );
    assert!(
        kept_out.buffers <= normal.buffers + 8,
        "claim burst, kept out: {} buffers, claim normal {}\n{}",
        kept_out.buffers,
        normal.buffers,
        kept_out.pretty()
    );
    // The same indexes as written (CREATE INDEX leaves the column
    // statistics as they were). A claim that showed the planner its queue
    // took one of them here and sorted the whole queue (the planner expects
    // about one row of a queue it has no statistics of); the product's
    // claim hides its queue from the planner (`jobs`, "The claim path is
    // planned once"), so its plan is the one of any queue: the claim index.
    dba_indexes(&client, &schema, "").await;
    let beside = explain_analyze(&client, &burst.statement, PlanMode::Custom).await;
    check_plan(
        "claim burst (custom plan, beside the DBA indexes as written)",
        &burst,
        &beside,
    );
    assert!(
        dba_indexes_read(&beside).is_empty() && beside.buffers <= normal.buffers + 8,
        "the claim of a queue new since the last ANALYZE reads a DBA's index or more than a \
         claim of the seeded queue ({} buffers)\n{}",
        normal.buffers,
        beside.pretty()
    );
    println!(
        "claim of a queue filled after ANALYZE ({BURST} jobs), custom plan: {} buffers beside \
         the DBA's indexes ({:?}), {} with them kept out ({:?})",
        beside.buffers, beside.indexes, kept_out.buffers, kept_out.indexes
    );
}
