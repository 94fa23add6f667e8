//! The planner's walk over two versions' tables: new tables, then per table
//! present in both its columns, dropped `CHECK`s, storage parameters and
//! docs, then the hints' backfills, new `CHECK`s and indexes, and last the
//! tables the new version drops. Each part is one method of [`Planner`],
//! which collects the steps in the order they must run.

use std::collections::BTreeSet;

use schema_model::history::UpgradeHints;
use schema_model::{ColumnDescription, TableDescription};

use super::VersionPlan;
use crate::versions::step::{Action, Phase, Step};

/// Plans the steps from `old` to `new` (the shapes of versions `from` and
/// `to`), or says what cannot be carried online.
pub(super) fn plan_tables(
    old: &[TableDescription],
    new: &[TableDescription],
    hints: &UpgradeHints,
    from: u32,
    to: u32,
) -> Result<VersionPlan, String> {
    let mut planner = Planner {
        hints,
        from,
        to,
        steps: Steps::default(),
        used_defaults: BTreeSet::new(),
        used_deferred: BTreeSet::new(),
    };
    for table in new.iter().filter(|t| !old.iter().any(|o| o.name == t.name)) {
        planner.expand(&table.name, Action::CreateTable);
    }
    // Per table present in both: the catalog changes first (each a brief
    // lock), then comments, backfills, checks and indexes.
    for (was, table) in pairs(old, new) {
        planner.altered_table(was, table)?;
    }
    planner.backfills();
    for (was, table) in pairs(old, new) {
        planner.new_checks(was, table);
        planner.indexes(was, table)?;
    }
    for table in old.iter().filter(|t| !new.iter().any(|n| n.name == t.name)) {
        let step = planner.step(Phase::Contract, &table.name, Action::DropTable);
        planner.steps.dropped_tables.push(step);
    }
    planner.check_hints_used()?;
    Ok(planner.steps.into_plan(from, to))
}

/// The tables present in both versions, as (old, new), in the new order.
fn pairs<'a>(
    old: &'a [TableDescription],
    new: &'a [TableDescription],
) -> impl Iterator<Item = (&'a TableDescription, &'a TableDescription)> {
    new.iter().filter_map(move |table| {
        old.iter()
            .find(|t| t.name == table.name)
            .map(|was| (was, table))
    })
}

/// The steps planned so far, by where they go in the plan.
#[derive(Default)]
struct Steps {
    /// Expand: catalog changes, table by table.
    expand: Vec<Step>,
    /// Expand, after every catalog change: comments.
    comments: Vec<Step>,
    /// Expand, after the comments: backfills, new checks and indexes.
    expand_late: Vec<Step>,
    /// Contract, first: the backfills the deferred checks need.
    contract_backfills: Vec<Step>,
    /// Contract, next: the checks the previous release's writes would break.
    contract_checks: Vec<Step>,
    /// Contract, then: what only the previous release needed.
    contract: Vec<Step>,
    /// Contract, last: the tables the new version drops.
    dropped_tables: Vec<Step>,
}

impl Steps {
    fn into_plan(self, from: u32, to: u32) -> VersionPlan {
        let Self {
            mut expand,
            comments,
            expand_late,
            contract_backfills,
            contract_checks,
            contract,
            dropped_tables,
        } = self;
        expand.extend(comments);
        expand.extend(expand_late);
        let contract = contract_backfills
            .into_iter()
            .chain(contract_checks)
            .chain(contract)
            .chain(dropped_tables)
            .collect();
        VersionPlan {
            from,
            to,
            expand,
            contract,
        }
    }
}

struct Planner<'a> {
    hints: &'a UpgradeHints,
    from: u32,
    to: u32,
    steps: Steps,
    /// The transitional defaults and deferred checks a step used: a hint
    /// that names nothing is refused.
    used_defaults: BTreeSet<(String, String)>,
    used_deferred: BTreeSet<String>,
}

impl Planner<'_> {
    fn step(&self, phase: Phase, table: &str, action: Action) -> Step {
        Step {
            version: self.to,
            phase,
            table: table.to_owned(),
            action,
        }
    }

    fn expand(&mut self, table: &str, action: Action) {
        let step = self.step(Phase::Expand, table, action);
        self.steps.expand.push(step);
    }

    fn contract(&mut self, table: &str, action: Action) {
        let step = self.step(Phase::Contract, table, action);
        self.steps.contract.push(step);
    }

    /// A table in both versions: its key, columns, dropped checks, storage
    /// parameters and doc.
    fn altered_table(
        &mut self,
        was: &TableDescription,
        table: &TableDescription,
    ) -> Result<(), String> {
        let name = table.name.as_str();
        if was.primary_key != table.primary_key {
            return Err(format!(
                "{name}'s primary key changes from {} to {}, which needs a step of its own",
                was.primary_key.definition, table.primary_key.definition
            ));
        }
        for column in &table.columns {
            match was.columns.iter().find(|c| c.name == column.name) {
                None => self.new_column(name, column)?,
                Some(before) => self.changed_column(name, before, column)?,
            }
        }
        for before in &was.columns {
            if !table.columns.iter().any(|c| c.name == before.name) {
                if !before.nullable && before.default.is_none() && before.identity.is_none() {
                    self.expand(
                        name,
                        Action::DropNotNull {
                            column: before.name.clone(),
                        },
                    );
                }
                self.contract(
                    name,
                    Action::DropColumn {
                        column: before.name.clone(),
                    },
                );
            }
        }
        // A CHECK the new version drops or changes goes first: the new
        // release's writes may break it.
        for check in &was.checks {
            if !table
                .checks
                .iter()
                .any(|c| c.name == check.name && c.definition == check.definition)
            {
                self.expand(
                    name,
                    Action::DropConstraint {
                        constraint: check.name.clone(),
                    },
                );
            }
        }
        if was.storage_parameters != table.storage_parameters {
            let reset = was
                .storage_parameters
                .iter()
                .filter_map(|p| p.split_once('=').map(|(k, _)| k.to_owned()))
                .filter(|k| {
                    !table
                        .storage_parameters
                        .iter()
                        .any(|p| p.split_once('=').is_some_and(|(n, _)| n == k))
                })
                .collect();
            self.expand(
                name,
                Action::SetStorageParameters {
                    parameters: table.storage_parameters.clone(),
                    reset,
                },
            );
        }
        if was.doc != table.doc {
            let step = self.step(
                Phase::Expand,
                name,
                Action::Comment {
                    column: None,
                    doc: table.doc.clone(),
                },
            );
            self.steps.comments.push(step);
        }
        Ok(())
    }

    /// A column the new version adds: `NULL`able, or `NOT NULL` with the
    /// transitional default its hints declare (dropped by the contract).
    fn new_column(&mut self, table: &str, column: &ColumnDescription) -> Result<(), String> {
        let name = &column.name;
        if column.identity.is_some() || column.generated.is_some() {
            return Err(format!(
                "{table}.{name} is a new identity or generated column, which rewrites the table"
            ));
        }
        if column.default.is_some() {
            return Err(format!(
                "{table}.{name} is a new column with a default of its own, which may rewrite \
                 the table (a volatile default does): it needs a step of its own"
            ));
        }
        let transitional = self
            .hints
            .transitional_defaults
            .iter()
            .find(|d| d.table == table && d.column == name);
        if !column.nullable && transitional.is_none() {
            return Err(format!(
                "{table}.{name} is a new NOT NULL column without a default: declare its \
                 transitional default in the version's hints, so the previous release's \
                 inserts keep working"
            ));
        }
        let transitional_default = transitional.map(|d| d.value.sql().to_owned());
        self.expand(
            table,
            Action::AddColumn {
                column: column.clone(),
                transitional_default: transitional_default.clone(),
            },
        );
        if transitional_default.is_some() {
            self.used_defaults.insert((table.to_owned(), name.clone()));
            self.contract(
                table,
                Action::DropDefault {
                    column: name.clone(),
                },
            );
        }
        Ok(())
    }

    /// A column in both versions: only a dropped `NOT NULL` and a new doc
    /// are carried online.
    fn changed_column(
        &mut self,
        table: &str,
        was: &ColumnDescription,
        column: &ColumnDescription,
    ) -> Result<(), String> {
        let name = &column.name;
        if was.sql_type != column.sql_type {
            return Err(format!(
                "{table}.{name} changes type from {} to {}, which rewrites the table",
                was.sql_type, column.sql_type
            ));
        }
        if was.nullable && !column.nullable {
            return Err(format!(
                "{table}.{name} becomes NOT NULL, which needs a step of its own"
            ));
        }
        if !was.nullable && column.nullable {
            self.expand(
                table,
                Action::DropNotNull {
                    column: name.clone(),
                },
            );
        }
        if (&was.default, &was.identity, &was.generated)
            != (&column.default, &column.identity, &column.generated)
        {
            return Err(format!(
                "{table}.{name} changes its default, identity or generation, which needs a \
                 step of its own"
            ));
        }
        if was.doc != column.doc {
            let step = self.step(
                Phase::Expand,
                table,
                Action::Comment {
                    column: Some(name.clone()),
                    doc: column.doc.clone(),
                },
            );
            self.steps.comments.push(step);
        }
        Ok(())
    }

    /// The hints' backfills: the expand's, once the new columns exist, and
    /// the contract's, before it validates the deferred checks.
    fn backfills(&mut self) {
        for backfill in &self.hints.backfills {
            let step = self.step(
                Phase::Expand,
                backfill.table,
                Action::Backfill {
                    backfill: backfill.clone(),
                },
            );
            self.steps.expand_late.push(step);
        }
        for backfill in &self.hints.contract_backfills {
            let step = self.step(
                Phase::Contract,
                backfill.table,
                Action::Backfill {
                    backfill: backfill.clone(),
                },
            );
            self.steps.contract_backfills.push(step);
        }
    }

    /// The `CHECK`s the new version adds (or changes): added `NOT VALID`,
    /// then validated, in the expand, or in the contract when the hints
    /// defer them.
    fn new_checks(&mut self, was: &TableDescription, table: &TableDescription) {
        for check in &table.checks {
            if was
                .checks
                .iter()
                .any(|c| c.name == check.name && c.definition == check.definition)
            {
                continue;
            }
            let deferred = self.hints.checks_at_contract.contains(&check.name.as_str());
            let phase = if deferred {
                self.used_deferred.insert(check.name.clone());
                Phase::Contract
            } else {
                Phase::Expand
            };
            let add = self.step(
                phase,
                &table.name,
                Action::AddCheck {
                    constraint: check.name.clone(),
                    definition: check.definition.clone(),
                },
            );
            let validate = self.step(
                phase,
                &table.name,
                Action::ValidateConstraint {
                    constraint: check.name.clone(),
                },
            );
            let into = if deferred {
                &mut self.steps.contract_checks
            } else {
                &mut self.steps.expand_late
            };
            into.extend([add, validate]);
        }
    }

    /// New indexes (built `CONCURRENTLY`), changed ones (built under another
    /// name and swapped in, the old one kept until the contract) and
    /// dropped ones (dropped by the contract).
    fn indexes(&mut self, was: &TableDescription, table: &TableDescription) -> Result<(), String> {
        let name = table.name.as_str();
        for index in &table.indexes {
            match was.indexes.iter().find(|i| i.name == index.name) {
                None => {
                    let step = self.step(
                        Phase::Expand,
                        name,
                        Action::CreateIndex {
                            index: index.name.clone(),
                            definition: index.definition.clone(),
                        },
                    );
                    self.steps.expand_late.push(step);
                }
                Some(before) if before.definition != index.definition => {
                    let replacement = derived_name(&index.name, "next")?;
                    let legacy = derived_name(&index.name, &format!("v{}", self.from))?;
                    let build = self.step(
                        Phase::Expand,
                        name,
                        Action::CreateIndex {
                            index: replacement.clone(),
                            definition: index.definition.clone(),
                        },
                    );
                    let swap = self.step(
                        Phase::Expand,
                        name,
                        Action::SwapIndex {
                            index: index.name.clone(),
                            replacement,
                            legacy: legacy.clone(),
                        },
                    );
                    self.steps.expand_late.extend([build, swap]);
                    self.contract(name, Action::DropIndex { index: legacy });
                }
                Some(_) => {}
            }
        }
        for before in &was.indexes {
            if !table.indexes.iter().any(|i| i.name == before.name) {
                self.contract(
                    name,
                    Action::DropIndex {
                        index: before.name.clone(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Every hint must name something the plan uses.
    fn check_hints_used(&self) -> Result<(), String> {
        for default in &self.hints.transitional_defaults {
            if !self
                .used_defaults
                .contains(&(default.table.to_owned(), default.column.to_owned()))
            {
                return Err(format!(
                    "the hints declare a transitional default for {}.{}, which is not a new \
                     column",
                    default.table, default.column
                ));
            }
        }
        for check in &self.hints.checks_at_contract {
            if !self.used_deferred.contains(*check) {
                return Err(format!(
                    "the hints defer check {check} to the contract, but it is not a new check"
                ));
            }
        }
        Ok(())
    }
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
