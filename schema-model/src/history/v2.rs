//! Version 2 (`b8b70fe`): the ready/scheduled split of `jobs`.
//!
//! The difference from version 1 is `jobs.ready` (`NOT NULL`, no default),
//! `jobs_promote_idx`, `jobs_claim_idx` restricted to ready jobs, the CHECK
//! `jobs_claimed_job_is_ready` and `jobs`' autovacuum storage parameters.
//! Version 1's engines insert jobs without `ready` and claim any unclaimed
//! due job, ready or not, so:
//!
//! - `ready` holds `false` for their inserts until the contract: such a job
//!   waits for version 2's promotion step, which makes it ready once due
//!   (exactly what version 2 itself writes for a job not yet due);
//! - the unclaimed due jobs already there are backfilled ready (the claimed
//!   ones wait for the contract, so a batch never holds a row a worker acks);
//! - `jobs_claimed_job_is_ready` waits for the contract, because a version 1
//!   claim marks a not-ready job claimed; the contract first makes every
//!   claimed job ready.

use crate::jobs::Jobs;

use super::{Backfill, Condition, Literal, TransitionalDefault, UpgradeHints};

pub(super) fn hints() -> UpgradeHints {
    UpgradeHints {
        transitional_defaults: vec![TransitionalDefault::of(Jobs::Ready, Literal::Bool(false))],
        backfills: vec![Backfill::of(
            Jobs::Id,
            Jobs::Ready,
            Literal::Bool(true),
            // Unclaimed due jobs only: the engines take unclaimed rows with
            // SKIP LOCKED, so a batch holding them delays no one, while a
            // batch holding a claimed job would hold up its worker's ack
            // (measured: 370-690 ms at 10,000 keys a batch). The claimed
            // ones are the contract's.
            Condition::All(vec![
                Condition::is_false(Jobs::Ready),
                Condition::is_null(Jobs::ClaimedAt),
                Condition::not_after_now(Jobs::RunAt),
            ]),
        )],
        checks_at_contract: vec!["jobs_claimed_job_is_ready"],
        contract_backfills: vec![Backfill::of(
            Jobs::Id,
            Jobs::Ready,
            Literal::Bool(true),
            Condition::All(vec![
                Condition::is_false(Jobs::Ready),
                Condition::is_not_null(Jobs::ClaimedAt),
            ]),
        )],
    }
}
