//! The shape simulator: what a database looks like once steps have run,
//! computed on descriptions. The planner checks each plan with it (the steps
//! must reach the next version exactly), and the verdict computes the shapes
//! an upgrade under way may have left ([`super::verdict()`]).

use schema_model::TableDescription;

use super::step::{Action, Step};

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
