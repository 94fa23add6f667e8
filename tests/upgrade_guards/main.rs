//! Every guard of the upgrade machinery fires here by what it does to rows,
//! locks, waits, exit codes or words (never by the text of its SQL): the
//! bounds and the row locks of a backfill batch, the waits of an index
//! build, the final verification, the upgrade's session left as found, the
//! catalog reads' bound, the dry-run script's own bounds and lock, the
//! version rows' consistency, drift while a contract is pending, an upgrade
//! stopped after any step, the command line's `--lock-timeout`, and the
//! planner's refusals and self-check. Each test has a short bound of its
//! own, so a guard that regresses fails it in seconds.
//!
//! How these were found, and how to find the next ones: list every guard
//! of `schema-gen/src/upgrade/` and `schema-gen/src/versions/` (and what
//! bootstrap and `check` do with versions), remove or weaken it by hand,
//! run the test meant to catch it, see it fail, revert. The guards, where
//! they are, the test that catches each and what it reported without the
//! guard: `tests/UPGRADE_GUARDS.md`. A guard no test catches gets a test
//! here and a row there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use harness::history::{create_version, dump_rows, restricted};
use harness::upgrade::{
    RUN_LIMIT, Recorder, SideSession, backend_pid, bounded, fill, now, psql_within,
    ready_is_derived_from_run_at, run_contract, run_upgrade, status, within,
};
use harness::{exec, rows};
use schema_gen::check::VersionState;
use schema_gen::upgrade::{self, Action, Phase, Progress, Step, UpgradeOptions};
use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;
use tokio_postgres::Client;

mod backfill;
mod bounds;
mod planner;
mod refusals;
mod resume;
mod script;

/// Short bounds: 100 ms per lock wait, three tries, 5 s for a wait that
/// blocks no engine statement, 1,000 keys a batch.
fn short() -> UpgradeOptions {
    UpgradeOptions {
        lock_timeout: Duration::from_millis(100),
        lock_attempts: 3,
        wait_timeout: Duration::from_secs(5),
        batch_size: 1000,
        ..bounded()
    }
}

/// A schema created by version 1's release, filled with rows in every state.
async fn version_1(client: &Client, prefix: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    create_version(client, &schema, 1).await;
    fill(client, &schema, 1).await;
    schema
}

fn jobs(schema: &SchemaName) -> String {
    format!("\"{}\".jobs", schema.as_str())
}

/// Whether `event` starts a step doing `action`-like work.
fn starts(event: &Progress, what: fn(&Action) -> bool) -> bool {
    matches!(event, Progress::StepStarted { step, .. } if what(&step.action))
}

fn is_backfill(action: &Action) -> bool {
    matches!(action, Action::Backfill { .. })
}

fn is_first_index_build(action: &Action) -> bool {
    matches!(action, Action::CreateIndex { index, .. } if index == "jobs_claim_idx_next")
}

/// One integer a query returns.
async fn count(client: &Client, sql: &str) -> i64 {
    rows(client, sql).await[0].get(0)
}
