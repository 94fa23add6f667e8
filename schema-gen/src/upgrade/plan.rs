//! Planning an upgrade from one version's shape to the next: the steps, in
//! order, from the difference between the two descriptions and the target
//! version's [`UpgradeHints`], split into the expand phase (after which the
//! previous release's engines and the new one's both work) and the contract
//! phase (which removes what only the previous release needed).
//!
//! Planning is pure: it reads two descriptions and returns steps. It also
//! checks itself: applying the steps to the older description
//! ([`apply`]) must give exactly the newer one, or planning fails, so a
//! model change the planner cannot carry online is refused when the plan is
//! made (by a test, long before a deployment) rather than half-applied.

use std::collections::BTreeSet;

use serde::Serialize;

use schema_model::history::{Backfill, SchemaVersion, UpgradeHints};
use schema_model::{ColumnDescription, SchemaName, TableDescription};

use crate::verify::{catalog_of, compare};

/// Which phase a step belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Adds what the new version needs; the previous release keeps working.
    Expand,
    /// Removes what only the previous release needed; run once its engines
    /// are gone.
    Contract,
}

/// The strongest lock a step takes on an existing engine table, in
/// PostgreSQL's words. Every step's lock is declared, and the tests read
/// `pg_locks` while each step runs to hold it to that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableLock {
    /// No lock on an existing engine table (a new table, bookkeeping).
    None,
    /// `ROW EXCLUSIVE`: what the engine's own writes take (a backfill
    /// batch); it conflicts with no engine statement, only with row locks
    /// on the rows it changes, which it skips. (A backfill step declares
    /// `SHARE UPDATE EXCLUSIVE`, for the vacuum that follows its batches.)
    RowExclusive,
    /// `SHARE UPDATE EXCLUSIVE`: `CREATE INDEX CONCURRENTLY`, `VALIDATE
    /// CONSTRAINT`, storage parameters, comments, index renames: conflicts
    /// with no engine statement.
    ShareUpdateExclusive,
    /// `ACCESS EXCLUSIVE`, held for a catalog change only (no scan, no
    /// rewrite): the wait for it is bounded by the lock bound and retried,
    /// because while it waits every later statement on the table queues
    /// behind it.
    AccessExclusive,
}

impl TableLock {
    /// The mode as `pg_locks.mode` names it.
    pub fn pg_mode(self) -> Option<&'static str> {
        match self {
            Self::None => None,
            Self::RowExclusive => Some("RowExclusiveLock"),
            Self::ShareUpdateExclusive => Some("ShareUpdateExclusiveLock"),
            Self::AccessExclusive => Some("AccessExclusiveLock"),
        }
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Creates a table of the new version with its indexes and comments.
    CreateTable,
    /// `ALTER TABLE ... ADD COLUMN`, with the transitional default if the
    /// column is `NOT NULL` without a default of its own (a constant, so no
    /// rewrite).
    AddColumn {
        /// The column as the new version has it.
        column: ColumnDescription,
        /// The constant it holds until the contract, if any.
        transitional_default: Option<String>,
    },
    /// `ALTER COLUMN ... DROP NOT NULL`: a column the new version no longer
    /// writes.
    DropNotNull {
        /// The column.
        column: String,
    },
    /// `ALTER COLUMN ... DROP DEFAULT`: the contract of a transitional
    /// default.
    DropDefault {
        /// The column.
        column: String,
    },
    /// `ALTER TABLE ... DROP COLUMN`.
    DropColumn {
        /// The column.
        column: String,
    },
    /// `ALTER TABLE ... SET (...)` / `RESET (...)`: the storage parameters
    /// become exactly these.
    SetStorageParameters {
        /// `name=value`, as `reloptions` lists them.
        parameters: Vec<String>,
        /// The names of the parameters to reset.
        reset: Vec<String>,
    },
    /// `COMMENT ON TABLE`, or `COMMENT ON COLUMN` when `column` is set.
    Comment {
        /// The column, or `None` for the table.
        column: Option<String>,
        /// The doc.
        doc: String,
    },
    /// A batched backfill ([`Backfill`]).
    Backfill {
        /// What it sets, on which rows.
        backfill: Backfill,
    },
    /// `CREATE INDEX CONCURRENTLY` (an invalid leftover of an interrupted
    /// build is dropped `CONCURRENTLY` first).
    CreateIndex {
        /// The index's name.
        index: String,
        /// `USING ...`, as `pg_get_indexdef` reports it from `USING` on.
        definition: String,
    },
    /// Puts a replacement index in place of one whose definition changed,
    /// in one short transaction: `index` is renamed to `legacy` (kept for
    /// the previous release until the contract), `replacement` to `index`.
    SwapIndex {
        /// The index's name in both versions.
        index: String,
        /// The new definition's index, built under this name.
        replacement: String,
        /// The name the old definition's index keeps until the contract.
        legacy: String,
    },
    /// `DROP INDEX CONCURRENTLY`.
    DropIndex {
        /// The index's name.
        index: String,
    },
    /// `ALTER TABLE ... ADD CONSTRAINT ... CHECK (...) NOT VALID`: enforced
    /// for new rows at once, existing rows checked by the next step.
    AddCheck {
        /// The constraint's name.
        constraint: String,
        /// `CHECK (...)`, as `pg_get_constraintdef` reports it.
        definition: String,
    },
    /// `ALTER TABLE ... VALIDATE CONSTRAINT`: scans under `SHARE UPDATE
    /// EXCLUSIVE`, writers keep going.
    ValidateConstraint {
        /// The constraint's name.
        constraint: String,
    },
    /// `ALTER TABLE ... DROP CONSTRAINT`.
    DropConstraint {
        /// The constraint's name.
        constraint: String,
    },
    /// `DROP TABLE`.
    DropTable,
}

/// One step of an upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The version the step moves the database to.
    pub version: u32,
    /// Its phase.
    pub phase: Phase,
    /// The engine table it changes or creates.
    pub table: String,
    /// What it does.
    #[serde(flatten)]
    pub action: Action,
}

impl Step {
    /// The strongest lock the step takes on an existing engine table.
    pub fn lock(&self) -> TableLock {
        match &self.action {
            Action::CreateTable => TableLock::None,
            // The batches take ROW EXCLUSIVE; the vacuum after them SHARE
            // UPDATE EXCLUSIVE.
            Action::SetStorageParameters { .. }
            | Action::Backfill { .. }
            | Action::Comment { .. }
            | Action::CreateIndex { .. }
            | Action::SwapIndex { .. }
            | Action::DropIndex { .. }
            | Action::ValidateConstraint { .. } => TableLock::ShareUpdateExclusive,
            Action::AddColumn { .. }
            | Action::DropNotNull { .. }
            | Action::DropDefault { .. }
            | Action::DropColumn { .. }
            | Action::AddCheck { .. }
            | Action::DropConstraint { .. }
            | Action::DropTable => TableLock::AccessExclusive,
        }
    }

    /// Whether the step must run outside a transaction block
    /// (`CONCURRENTLY`) or as many transactions (a backfill).
    pub fn outside_transaction(&self) -> bool {
        matches!(
            self.action,
            Action::CreateIndex { .. } | Action::DropIndex { .. } | Action::Backfill { .. }
        )
    }

    /// What the step does, in words: `jobs: add column ready (boolean NOT
    /// NULL, false until the contract)`.
    pub fn describe(&self) -> String {
        let table = &self.table;
        match &self.action {
            Action::CreateTable => format!("create table {table}"),
            Action::AddColumn {
                column,
                transitional_default,
            } => format!(
                "{table}: add column {} ({}{}{})",
                column.name,
                column.sql_type,
                if column.nullable { "" } else { " NOT NULL" },
                transitional_default
                    .as_ref()
                    .map(|d| format!(", {d} until the contract"))
                    .unwrap_or_default()
            ),
            Action::DropNotNull { column } => {
                format!("{table}: let {column} be NULL (the new release does not write it)")
            }
            Action::DropDefault { column } => {
                format!("{table}: drop the transitional default of {column}")
            }
            Action::DropColumn { column } => format!("{table}: drop column {column}"),
            Action::SetStorageParameters { parameters, reset } => {
                let mut words = Vec::new();
                if !parameters.is_empty() {
                    words.push(format!("set {}", parameters.join(", ")));
                }
                if !reset.is_empty() {
                    words.push(format!("reset {}", reset.join(", ")));
                }
                format!("{table}: storage parameters: {}", words.join("; "))
            }
            Action::Comment { column: None, .. } => format!("{table}: comment"),
            Action::Comment {
                column: Some(column),
                ..
            } => format!("{table}.{column}: comment"),
            Action::Backfill { backfill } => format!(
                "{table}: backfill {} = {} in batches",
                backfill.set,
                backfill.value.sql()
            ),
            Action::CreateIndex { index, .. } => {
                format!("{table}: create index {index} concurrently")
            }
            Action::SwapIndex {
                index,
                replacement,
                legacy,
            } => format!(
                "{table}: swap in the new {index} (rename {index} to {legacy}, kept until the \
                 contract, and {replacement} to {index})"
            ),
            Action::DropIndex { index } => format!("{table}: drop index {index} concurrently"),
            Action::AddCheck { constraint, .. } => {
                format!("{table}: add check {constraint} NOT VALID")
            }
            Action::ValidateConstraint { constraint } => {
                format!("{table}: validate {constraint}")
            }
            Action::DropConstraint { constraint } => {
                format!("{table}: drop constraint {constraint}")
            }
            Action::DropTable => format!("drop table {table}"),
        }
    }
}

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

/// Why a plan cannot be made.
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
    let fail = |reason: String| PlanError {
        from: from.number,
        to: to.number,
        reason,
    };
    let old = from.description().map_err(|e| {
        fail(format!(
            "version {} does not describe itself: {e}",
            from.number
        ))
    })?;
    let new = to.description().map_err(|e| {
        fail(format!(
            "version {} does not describe itself: {e}",
            to.number
        ))
    })?;
    let plan = plan_tables(&old, &new, &to.hints, from.number, to.number).map_err(fail)?;
    let mut reached = old.clone();
    apply(&mut reached, &new, &plan.expand);
    apply(&mut reached, &new, &plan.contract);
    let schema = SchemaName::default();
    let left = compare(&catalog_of(&schema, &reached), &schema, &new);
    if !left.is_empty() {
        let words: Vec<String> = left.iter().map(ToString::to_string).collect();
        return Err(fail(format!(
            "the planned steps leave {} (a difference the planner does not carry)",
            words.join("; ")
        )));
    }
    Ok(plan)
}

fn plan_tables(
    old: &[TableDescription],
    new: &[TableDescription],
    hints: &UpgradeHints,
    from: u32,
    to: u32,
) -> Result<VersionPlan, String> {
    let mut expand = Vec::new();
    let mut contract = Vec::new();
    let step = |phase, table: &str, action| Step {
        version: to,
        phase,
        table: table.to_owned(),
        action,
    };
    let mut used_defaults = BTreeSet::new();
    let mut used_deferred = BTreeSet::new();

    for table in new {
        if !old.iter().any(|t| t.name == table.name) {
            expand.push(step(Phase::Expand, &table.name, Action::CreateTable));
        }
    }

    // Per table present in both: the catalog changes first (each a brief
    // lock), then comments, backfills, checks and indexes.
    let mut later = Vec::new();
    for new_table in new {
        let Some(old_table) = old.iter().find(|t| t.name == new_table.name) else {
            continue;
        };
        let name = new_table.name.as_str();
        if old_table.primary_key != new_table.primary_key {
            return Err(format!(
                "{name}'s primary key changes from {} to {}, which needs a step of its own",
                old_table.primary_key.definition, new_table.primary_key.definition
            ));
        }
        for column in &new_table.columns {
            match old_table.columns.iter().find(|c| c.name == column.name) {
                None => {
                    if column.identity.is_some() || column.generated.is_some() {
                        return Err(format!(
                            "{name}.{} is a new identity or generated column, which rewrites \
                             the table",
                            column.name
                        ));
                    }
                    if column.default.is_some() {
                        return Err(format!(
                            "{name}.{} is a new column with a default of its own, which may \
                             rewrite the table (a volatile default does): it needs a step of its \
                             own",
                            column.name
                        ));
                    }
                    let transitional = hints
                        .transitional_defaults
                        .iter()
                        .find(|d| d.table == name && d.column == column.name);
                    if transitional.is_some() {
                        used_defaults.insert((name.to_owned(), column.name.clone()));
                    }
                    if !column.nullable && column.default.is_none() && transitional.is_none() {
                        return Err(format!(
                            "{name}.{} is a new NOT NULL column without a default: declare \
                             its transitional default in the version's hints, so the previous \
                             release's inserts keep working",
                            column.name
                        ));
                    }
                    expand.push(step(
                        Phase::Expand,
                        name,
                        Action::AddColumn {
                            column: column.clone(),
                            transitional_default: transitional.map(|d| d.value.sql().to_owned()),
                        },
                    ));
                    if transitional.is_some() {
                        contract.push(step(
                            Phase::Contract,
                            name,
                            Action::DropDefault {
                                column: column.name.clone(),
                            },
                        ));
                    }
                }
                Some(was) => {
                    if was.sql_type != column.sql_type {
                        return Err(format!(
                            "{name}.{} changes type from {} to {}, which rewrites the table",
                            column.name, was.sql_type, column.sql_type
                        ));
                    }
                    if was.nullable && !column.nullable {
                        return Err(format!(
                            "{name}.{} becomes NOT NULL, which needs a step of its own",
                            column.name
                        ));
                    }
                    if !was.nullable && column.nullable {
                        expand.push(step(
                            Phase::Expand,
                            name,
                            Action::DropNotNull {
                                column: column.name.clone(),
                            },
                        ));
                    }
                    if (&was.default, &was.identity, &was.generated)
                        != (&column.default, &column.identity, &column.generated)
                    {
                        return Err(format!(
                            "{name}.{} changes its default, identity or generation, which \
                             needs a step of its own",
                            column.name
                        ));
                    }
                    if was.doc != column.doc {
                        later.push(step(
                            Phase::Expand,
                            name,
                            Action::Comment {
                                column: Some(column.name.clone()),
                                doc: column.doc.clone(),
                            },
                        ));
                    }
                }
            }
        }
        for was in &old_table.columns {
            if !new_table.columns.iter().any(|c| c.name == was.name) {
                if !was.nullable && was.default.is_none() && was.identity.is_none() {
                    expand.push(step(
                        Phase::Expand,
                        name,
                        Action::DropNotNull {
                            column: was.name.clone(),
                        },
                    ));
                }
                contract.push(step(
                    Phase::Contract,
                    name,
                    Action::DropColumn {
                        column: was.name.clone(),
                    },
                ));
            }
        }
        // A CHECK the new version drops or changes goes first: the new
        // release's writes may break it.
        for was in &old_table.checks {
            if !new_table
                .checks
                .iter()
                .any(|c| c.name == was.name && c.definition == was.definition)
            {
                expand.push(step(
                    Phase::Expand,
                    name,
                    Action::DropConstraint {
                        constraint: was.name.clone(),
                    },
                ));
            }
        }
        if old_table.storage_parameters != new_table.storage_parameters {
            let reset = old_table
                .storage_parameters
                .iter()
                .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_owned()))
                .filter(|k| {
                    !new_table
                        .storage_parameters
                        .iter()
                        .any(|p| p.split_once('=').is_some_and(|(n, _)| n == k))
                })
                .collect();
            expand.push(step(
                Phase::Expand,
                name,
                Action::SetStorageParameters {
                    parameters: new_table.storage_parameters.clone(),
                    reset,
                },
            ));
        }
        if old_table.doc != new_table.doc {
            later.push(step(
                Phase::Expand,
                name,
                Action::Comment {
                    column: None,
                    doc: new_table.doc.clone(),
                },
            ));
        }
    }
    expand.append(&mut later);

    for backfill in &hints.backfills {
        expand.push(step(
            Phase::Expand,
            backfill.table,
            Action::Backfill {
                backfill: backfill.clone(),
            },
        ));
    }
    for backfill in &hints.contract_backfills {
        contract.insert(
            0,
            step(
                Phase::Contract,
                backfill.table,
                Action::Backfill {
                    backfill: backfill.clone(),
                },
            ),
        );
    }

    let mut contract_checks = Vec::new();
    for new_table in new {
        let Some(old_table) = old.iter().find(|t| t.name == new_table.name) else {
            continue;
        };
        let name = new_table.name.as_str();
        for check in &new_table.checks {
            if old_table
                .checks
                .iter()
                .any(|c| c.name == check.name && c.definition == check.definition)
            {
                continue;
            }
            let deferred = hints.checks_at_contract.contains(&check.name.as_str());
            if deferred {
                used_deferred.insert(check.name.clone());
            }
            let (phase, steps) = if deferred {
                (Phase::Contract, &mut contract_checks)
            } else {
                (Phase::Expand, &mut expand)
            };
            steps.push(step(
                phase,
                name,
                Action::AddCheck {
                    constraint: check.name.clone(),
                    definition: check.definition.clone(),
                },
            ));
            steps.push(step(
                phase,
                name,
                Action::ValidateConstraint {
                    constraint: check.name.clone(),
                },
            ));
        }
        for index in &new_table.indexes {
            match old_table.indexes.iter().find(|i| i.name == index.name) {
                None => expand.push(step(
                    Phase::Expand,
                    name,
                    Action::CreateIndex {
                        index: index.name.clone(),
                        definition: index.definition.clone(),
                    },
                )),
                Some(was) if was.definition != index.definition => {
                    let replacement = derived_name(&index.name, "next")?;
                    let legacy = derived_name(&index.name, &format!("v{from}"))?;
                    expand.push(step(
                        Phase::Expand,
                        name,
                        Action::CreateIndex {
                            index: replacement.clone(),
                            definition: index.definition.clone(),
                        },
                    ));
                    expand.push(step(
                        Phase::Expand,
                        name,
                        Action::SwapIndex {
                            index: index.name.clone(),
                            replacement,
                            legacy: legacy.clone(),
                        },
                    ));
                    contract.push(step(
                        Phase::Contract,
                        name,
                        Action::DropIndex { index: legacy },
                    ));
                }
                Some(_) => {}
            }
        }
        for was in &old_table.indexes {
            if !new_table.indexes.iter().any(|i| i.name == was.name) {
                contract.push(step(
                    Phase::Contract,
                    name,
                    Action::DropIndex {
                        index: was.name.clone(),
                    },
                ));
            }
        }
    }
    // The deferred checks go after the contract's backfills, before the
    // contract drops anything.
    let at = hints.contract_backfills.len();
    for (offset, check) in contract_checks.into_iter().enumerate() {
        contract.insert(at + offset, check);
    }
    for table in old {
        if !new.iter().any(|t| t.name == table.name) {
            contract.push(step(Phase::Contract, &table.name, Action::DropTable));
        }
    }

    for default in &hints.transitional_defaults {
        if !used_defaults.contains(&(default.table.to_owned(), default.column.to_owned())) {
            return Err(format!(
                "the hints declare a transitional default for {}.{}, which is not a new column",
                default.table, default.column
            ));
        }
    }
    for check in &hints.checks_at_contract {
        if !used_deferred.contains(*check) {
            return Err(format!(
                "the hints defer check {check} to the contract, but it is not a new check"
            ));
        }
    }
    Ok(VersionPlan {
        from,
        to,
        expand,
        contract,
    })
}

/// `jobs_claim_idx` + `next` = `jobs_claim_idx_next`, within PostgreSQL's
/// 63-byte identifiers (a longer one would be truncated silently).
fn derived_name(name: &str, suffix: &str) -> Result<String, String> {
    let derived = format!("{name}_{suffix}");
    if derived.len() > 63 {
        return Err(format!(
            "the name {derived} for a replaced index is longer than 63 bytes"
        ));
    }
    Ok(derived)
}

/// Applies `steps` to a description of the tables (what the database looks
/// like once they have run); `target` is the version the steps lead to,
/// where new tables come from.
pub fn apply(tables: &mut Vec<TableDescription>, target: &[TableDescription], steps: &[Step]) {
    for step in steps {
        apply_one(tables, target, step);
    }
}

fn apply_one(tables: &mut Vec<TableDescription>, target: &[TableDescription], step: &Step) {
    if step.action == Action::CreateTable {
        if let Some(table) = target.iter().find(|t| t.name == step.table)
            && !tables.iter().any(|t| t.name == step.table)
        {
            tables.push(table.clone());
        }
        return;
    }
    if step.action == Action::DropTable {
        tables.retain(|t| t.name != step.table);
        return;
    }
    let Some(table) = tables.iter_mut().find(|t| t.name == step.table) else {
        return;
    };
    let column = |table: &mut TableDescription, name: &str| -> Option<usize> {
        table.columns.iter().position(|c| c.name == name)
    };
    match &step.action {
        Action::CreateTable | Action::DropTable | Action::Backfill { .. } => {}
        Action::AddColumn {
            column: added,
            transitional_default,
        } => {
            if column(table, &added.name).is_none() {
                let mut added = added.clone();
                if let Some(default) = transitional_default {
                    added.default = Some(default.clone());
                }
                table.columns.push(added);
            }
        }
        Action::DropNotNull { column: name } => {
            if let Some(at) = column(table, name) {
                table.columns[at].nullable = true;
            }
        }
        Action::DropDefault { column: name } => {
            if let Some(at) = column(table, name) {
                table.columns[at].default = None;
            }
        }
        Action::DropColumn { column: name } => table.columns.retain(|c| &c.name != name),
        Action::SetStorageParameters { parameters, .. } => {
            table.storage_parameters = parameters.clone()
        }
        Action::Comment { column: None, doc } => table.doc = doc.clone(),
        Action::Comment {
            column: Some(name),
            doc,
        } => {
            if let Some(at) = column(table, name) {
                table.columns[at].doc = doc.clone();
            }
        }
        Action::CreateIndex { index, definition } => {
            if !table.indexes.iter().any(|i| &i.name == index) {
                table.indexes.push(schema_model::IndexDescription {
                    name: index.clone(),
                    definition: definition.clone(),
                    doc: String::new(),
                });
            }
        }
        Action::SwapIndex {
            index,
            replacement,
            legacy,
        } => {
            for existing in &mut table.indexes {
                if &existing.name == index {
                    existing.name = legacy.clone();
                } else if &existing.name == replacement {
                    existing.name = index.clone();
                }
            }
        }
        Action::DropIndex { index } => table.indexes.retain(|i| &i.name != index),
        Action::AddCheck {
            constraint,
            definition,
        } => {
            if !table.checks.iter().any(|c| &c.name == constraint) {
                table.checks.push(schema_model::ConstraintDescription {
                    name: constraint.clone(),
                    definition: format!("{definition} NOT VALID"),
                });
            }
        }
        Action::ValidateConstraint { constraint } => {
            for check in &mut table.checks {
                if &check.name == constraint
                    && let Some(valid) = check.definition.strip_suffix(" NOT VALID")
                {
                    check.definition = valid.to_owned();
                }
            }
        }
        Action::DropConstraint { constraint } => table.checks.retain(|c| &c.name != constraint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schema_model::history::version;

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
        let err = plan_tables(&old, &new, &UpgradeHints::default(), 2, 3).unwrap_err();
        assert!(err.contains("rewrites the table"), "{err}");
    }

    #[test]
    fn every_step_declares_a_lock_and_concurrent_ones_run_outside_transactions() {
        let plan = plan_to(2);
        for step in plan.expand.iter().chain(&plan.contract) {
            if let Action::CreateIndex { .. } | Action::DropIndex { .. } = step.action {
                assert!(step.outside_transaction());
                assert_eq!(step.lock(), TableLock::ShareUpdateExclusive);
            }
        }
        assert_eq!(plan.expand[0].lock(), TableLock::AccessExclusive);
    }
}
