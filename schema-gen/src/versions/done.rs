//! Whether a step's effect is in the catalog already, so a rerun (of the
//! upgrade or of the printed plan) skips it.

use crate::catalog::LiveCatalog;

use super::itinerary::StepLeg;
use super::step::{Action, Step};

/// Whether the catalog shows the step of `leg` done: as [`done`], and an
/// index built under another name to be swapped in is also done once the
/// swap is (it bears the old name then, so looking for its own name would
/// build it a second time, and the swap would then fail on the name it
/// left behind).
pub fn leg_done(leg: &StepLeg, live: &LiveCatalog) -> bool {
    done(&leg.step, live)
        || leg
            .swapped_in_by
            .as_ref()
            .is_some_and(|swap| done(swap, live))
}

/// Whether the catalog shows `step` done, so a rerun skips it. A backfill
/// always runs again: it finds only the rows still to do.
pub fn done(step: &Step, live: &LiveCatalog) -> bool {
    let table = live.relation(&step.table);
    let column = |name: &str| table.and_then(|t| t.columns.iter().find(|c| c.name == name));
    let index = |name: &str| table.and_then(|t| t.indexes.iter().find(|i| i.name == name));
    let constraint = |name: &str| table.and_then(|t| t.constraints.iter().find(|c| c.name == name));
    match &step.action {
        Action::CreateTable => table.is_some(),
        Action::DropTable => table.is_none(),
        Action::AddColumn { column: added, .. } => column(&added.name).is_some(),
        Action::DropNotNull { column: name } => column(name).is_none_or(|c| !c.not_null),
        Action::DropDefault { column: name } => column(name).is_none_or(|c| c.expression.is_none()),
        Action::DropColumn { column: name } => column(name).is_none(),
        Action::SetStorageParameters { parameters, .. } => table.is_some_and(|t| {
            let mut found = t.options.clone();
            found.sort();
            let mut wanted = parameters.clone();
            wanted.sort();
            found == wanted
        }),
        Action::Comment { column: None, doc } => {
            table.is_some_and(|t| t.comment.as_deref() == Some(doc.as_str()))
        }
        Action::Comment {
            column: Some(name),
            doc,
        } => column(name).is_some_and(|c| c.comment.as_deref() == Some(doc.as_str())),
        Action::Backfill { .. } => false,
        Action::CreateIndex { index: name, .. } => index(name).is_some_and(|i| i.valid),
        Action::SwapIndex {
            replacement,
            legacy,
            ..
        } => index(replacement).is_none() && index(legacy).is_some(),
        Action::DropIndex { index: name } => index(name).is_none(),
        Action::AddCheck {
            constraint: name, ..
        } => constraint(name).is_some(),
        Action::ValidateConstraint { constraint: name } => {
            constraint(name).is_some_and(|c| !c.definition.ends_with(" NOT VALID"))
        }
        Action::DropConstraint { constraint: name } => constraint(name).is_none(),
    }
}
