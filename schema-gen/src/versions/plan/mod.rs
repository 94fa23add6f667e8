//! Planning an upgrade from one version's shape to the next: the steps, in
//! order, from the difference between the two descriptions and the target
//! version's [`UpgradeHints`](schema_model::history::UpgradeHints), split
//! into the expand phase (after which the previous release's engines and the
//! new one's both work) and the contract phase (which removes what only the
//! previous release needed).
//!
//! Planning is pure: it reads two descriptions and returns steps
//! (`tables.rs` walks them). It also checks itself: the simulator
//! ([`super::simulate`]) applies the steps to the older description, which
//! must then be exactly the newer one, or planning fails, so a model change
//! the planner cannot carry online is refused when the plan is made (by a
//! test, long before a deployment) rather than half-applied.

mod tables;

use std::collections::BTreeSet;

use serde::Serialize;

use schema_model::history::SchemaVersion;
use schema_model::{SchemaName, TableDescription};

use super::simulate::apply;
use super::step::{Action, Step};
use crate::verify::{catalog_of, compare};

/// The steps that move a database from one version to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionPlan {
    /// The version it starts from.
    pub from: u32,
    /// The version it reaches.
    pub to: u32,
    /// The expand steps, in order.
    pub expand: Vec<Step>,
    /// The contract steps, in order.
    pub contract: Vec<Step>,
}

impl VersionPlan {
    /// The tables, columns, indexes and constraints the steps touch
    /// (`table`, `table.column`, `table.index`), to tell whether another
    /// version's expand may run before this contract.
    fn touched(steps: &[Step]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for step in steps {
            let t = &step.table;
            let object = match &step.action {
                Action::CreateTable | Action::DropTable => t.clone(),
                Action::AddColumn { column, .. } => format!("{t}.{}", column.name),
                Action::DropNotNull { column }
                | Action::DropDefault { column }
                | Action::DropColumn { column }
                | Action::Comment {
                    column: Some(column),
                    ..
                } => format!("{t}.{column}"),
                Action::Comment { column: None, .. } | Action::SetStorageParameters { .. } => {
                    format!("{t} (table)")
                }
                Action::Backfill { backfill } => format!("{t}.{}", backfill.set),
                Action::CreateIndex { index, .. } | Action::DropIndex { index } => {
                    format!("{t}.{index}")
                }
                Action::SwapIndex { index, legacy, .. } => {
                    out.insert(format!("{t}.{legacy}"));
                    format!("{t}.{index}")
                }
                Action::AddCheck { constraint, .. }
                | Action::ValidateConstraint { constraint }
                | Action::DropConstraint { constraint } => format!("{t}.{constraint}"),
            };
            out.insert(object);
        }
        out
    }

    /// Whether `next`'s expand touches something this plan's contract does:
    /// then this contract must run before `next` expands.
    pub fn contract_must_precede(&self, next: &VersionPlan) -> bool {
        !Self::touched(&self.contract).is_disjoint(&Self::touched(&next.expand))
    }
}

/// Why a plan (or a history) cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot plan an online upgrade from version {from} to {to}: {reason}")]
pub struct PlanError {
    /// The version the plan starts from.
    pub from: u32,
    /// The version it would reach.
    pub to: u32,
    /// What the planner cannot carry online, and what to declare.
    pub reason: String,
}

/// Plans the upgrade from `from` to `to` (the next version), from their
/// descriptions and `to`'s hints, and checks the plan reaches `to` exactly.
///
/// # Errors
///
/// A [`PlanError`] naming what cannot be done online or what hint is
/// missing: a new `NOT NULL` column without a default or a transitional
/// default, a changed column type, a column made `NOT NULL`, a new identity
/// or generated column (each rewrites or scans the table under `ACCESS
/// EXCLUSIVE`), a changed primary key, or a hint naming nothing.
pub fn plan(from: &SchemaVersion, to: &SchemaVersion) -> Result<VersionPlan, PlanError> {
    let describe = |version: &SchemaVersion| {
        version.description().map_err(|e| PlanError {
            from: from.number,
            to: to.number,
            reason: format!("version {} does not describe itself: {e}", version.number),
        })
    };
    plan_shapes(from, &describe(from)?, to, &describe(to)?)
}

/// [`plan`] from shapes already described.
pub(super) fn plan_shapes(
    from: &SchemaVersion,
    old: &[TableDescription],
    to: &SchemaVersion,
    new: &[TableDescription],
) -> Result<VersionPlan, PlanError> {
    let fail = |reason: String| PlanError {
        from: from.number,
        to: to.number,
        reason,
    };
    let plan = tables::plan_tables(old, new, &to.hints, from.number, to.number).map_err(fail)?;
    let mut reached = old.to_vec();
    apply(&mut reached, new, &plan.expand);
    apply(&mut reached, new, &plan.contract);
    let schema = SchemaName::default();
    let left = compare(&catalog_of(&schema, &reached), &schema, new);
    if !left.is_empty() {
        let words: Vec<String> = left.iter().map(ToString::to_string).collect();
        return Err(fail(format!(
            "the planned steps leave {} (a difference the planner does not carry)",
            words.join("; ")
        )));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::step::TableLock;
    use schema_model::history::{UpgradeHints, version};

    fn plan_to(to: u32) -> VersionPlan {
        plan(
            &version(to - 1).expect("older version"),
            &version(to).expect("version"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn words(steps: &[Step]) -> Vec<String> {
        steps.iter().map(Step::describe).collect()
    }

    #[test]
    fn version_2_splits_ready_from_scheduled_jobs_online() {
        let plan = plan_to(2);
        assert_eq!(
            words(&plan.expand),
            [
                "jobs: add column ready (boolean NOT NULL, false until the contract)",
                "jobs: storage parameters: set autovacuum_vacuum_scale_factor=0, \
                 autovacuum_vacuum_threshold=1000",
                "jobs: backfill ready = true in batches",
                "jobs: create index jobs_claim_idx_next concurrently",
                "jobs: swap in the new jobs_claim_idx (rename jobs_claim_idx to \
                 jobs_claim_idx_v1, kept until the contract, and jobs_claim_idx_next to \
                 jobs_claim_idx)",
                "jobs: create index jobs_promote_idx concurrently",
            ]
        );
        assert_eq!(
            words(&plan.contract),
            [
                "jobs: backfill ready = true in batches",
                "jobs: add check jobs_claimed_job_is_ready NOT VALID",
                "jobs: validate jobs_claimed_job_is_ready",
                "jobs: drop the transitional default of ready",
                "jobs: drop index jobs_claim_idx_v1 concurrently",
            ]
        );
    }

    #[test]
    fn version_3_creates_the_version_table() {
        let plan = plan_to(3);
        assert_eq!(words(&plan.expand), ["create table schema_versions"]);
        assert!(plan.contract.is_empty());
        assert!(!plan_to(2).contract_must_precede(&plan));
    }

    #[test]
    fn a_new_not_null_column_needs_a_transitional_default() {
        let mut to = version(2).unwrap();
        to.hints.transitional_defaults.clear();
        let err = plan(&version(1).unwrap(), &to).unwrap_err();
        assert!(
            err.reason
                .contains("jobs.ready is a new NOT NULL column without a default"),
            "{err}"
        );
    }

    #[test]
    fn a_hint_naming_nothing_is_refused() {
        let mut to = version(3).unwrap();
        to.hints = version(2).unwrap().hints;
        to.hints.backfills.clear();
        to.hints.contract_backfills.clear();
        let err = plan(&version(2).unwrap(), &to).unwrap_err();
        assert!(err.reason.contains("not a new column"), "{err}");
    }

    #[test]
    fn a_changed_type_is_refused_as_not_online() {
        let mut old = version(2).unwrap().description().unwrap();
        let new = old.clone();
        let priority = old[0]
            .columns
            .iter_mut()
            .find(|c| c.name == "priority")
            .unwrap();
        priority.sql_type = "bigint".into();
        let err = tables::plan_tables(&old, &new, &UpgradeHints::default(), 2, 3).unwrap_err();
        assert!(err.contains("rewrites the table"), "{err}");
    }

    #[test]
    fn every_step_declares_a_lock_and_concurrent_ones_wait_long() {
        let plan = plan_to(2);
        for step in plan.expand.iter().chain(&plan.contract) {
            if let Action::CreateIndex { .. } | Action::DropIndex { .. } = step.action {
                assert_eq!(step.execution().wait, crate::versions::step::Wait::Long);
                assert_eq!(step.lock(), TableLock::ShareUpdateExclusive);
            }
        }
        assert_eq!(plan.expand[0].lock(), TableLock::AccessExclusive);
    }
}
