//! The names an upgrade from a position would create: a foreign object
//! (a DBA's index, column or table) that already goes by one of them is in
//! the way (a step would find it and take it for its own, or fail on it),
//! so the verdict reports it as drift before anything runs.

use std::collections::BTreeSet;

use super::history::History;
use super::step::Action;
use crate::difference::Difference;

/// The names the versions after `expanded` up to the history's target use:
/// relations (tables, indexes, primary keys, identity sequences, and the
/// indexes their steps build under a name of their own) and columns
/// (`table.column`), each with the version that first uses it.
#[derive(Debug, Default)]
pub(super) struct Claimed {
    relations: Vec<(String, u32)>,
    columns: Vec<(String, u32)>,
}

impl Claimed {
    /// What the versions after `expanded` claim.
    pub(super) fn after(history: &History, expanded: u32) -> Self {
        let mut claimed = Self::default();
        let mut seen = BTreeSet::new();
        for version in history.versions().iter().filter(|v| v.number() > expanded) {
            let number = version.number();
            let mut relation = |name: &str| {
                if seen.insert(name.to_owned()) {
                    claimed.relations.push((name.to_owned(), number));
                }
            };
            for table in &version.shape {
                relation(&table.name);
                relation(&table.primary_key.name);
                for index in &table.indexes {
                    relation(&index.name);
                }
                for column in &table.columns {
                    if column.identity.is_some() {
                        relation(&format!("{}_{}_seq", table.name, column.name));
                    }
                }
            }
            let steps = version
                .plan
                .iter()
                .flat_map(|p| p.expand.iter().chain(&p.contract));
            for step in steps {
                match &step.action {
                    Action::CreateIndex { index, .. } => relation(index),
                    Action::SwapIndex {
                        replacement,
                        legacy,
                        ..
                    } => {
                        relation(replacement);
                        relation(legacy);
                    }
                    _ => {}
                }
            }
            for table in &version.shape {
                for column in &table.columns {
                    let name = format!("{}.{}", table.name, column.name);
                    if !claimed.columns.iter().any(|(c, _)| *c == name) {
                        claimed.columns.push((name, number));
                    }
                }
            }
        }
        claimed
    }

    /// `differences` with every foreign object that goes by a claimed name
    /// made drift, saying which version uses the name.
    pub(super) fn mark(&self, differences: Vec<Difference>) -> Vec<Difference> {
        differences
            .into_iter()
            .map(|difference| {
                let Some(name) = difference
                    .foreign_name()
                    .filter(|_| difference.is_foreign())
                else {
                    return difference;
                };
                let list = match difference {
                    Difference::ExtraColumn { .. } => &self.columns,
                    _ => &self.relations,
                };
                match list.iter().find(|(claimed, _)| *claimed == name) {
                    Some((_, version)) => difference.in_the_way(format!(
                        "version {version} of the model creates an object of this name, so an \
                         upgrade would take it for its own or fail on it: rename or drop it, \
                         then upgrade"
                    )),
                    None => difference,
                }
            })
            .collect()
    }
}
