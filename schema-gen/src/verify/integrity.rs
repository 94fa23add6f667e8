//! What the shape alone does not show and the engine still relies on: the
//! flags of every index (a key's index included), leftovers of interrupted
//! concurrent builds, one owner for the family, and identity sequences
//! ahead of every value drawn from them.

use schema_model::{SchemaName, TableDescription};

use crate::catalog::numbers::{SCAN_CAP, promises};
use crate::catalog::{LiveCatalog, LiveIndex, LiveRelation};
use crate::difference::Difference;
use crate::render::quote_ident;

fn qualified(schema: &SchemaName, name: &str) -> String {
    format!("{}.{}", quote_ident(schema.as_str()), quote_ident(name))
}

/// The flags of an index the engine reads (a model index, or the index of
/// a model constraint), when any is not what a usable index has: valid
/// (`indisvalid`, compared on its own for model indexes), ready
/// (`indisready`: writes maintain it) and live (`indislive`).
pub(super) fn index_flags(
    out: &mut Vec<Difference>,
    schema: &SchemaName,
    table: &str,
    index: &str,
    constraint: Option<&str>,
    (valid, ready, live): (bool, bool, bool),
) {
    if ready && live && (valid || constraint.is_none()) {
        return;
    }
    let fix = if live {
        format!("REINDEX INDEX CONCURRENTLY {}", qualified(schema, index))
    } else {
        format!(
            "DROP INDEX CONCURRENTLY {} finishes the drop; then rebuild it",
            qualified(schema, index)
        )
    };
    out.push(Difference::IndexState {
        table: table.to_owned(),
        index: index.to_owned(),
        constraint: constraint.map(str::to_owned),
        valid,
        ready,
        live,
        fix,
    });
}

/// An index the model does not declare that is the leftover of an
/// interrupted build, rebuild or drop (`_ccnew`, `_ccold`, or not valid,
/// ready or live): named as such, with the statement that removes it.
pub(super) fn leftover(schema: &SchemaName, table: &str, index: &LiveIndex) -> Option<Difference> {
    let base = index.name.trim_end_matches(|c: char| c.is_ascii_digit());
    let why = if base.ends_with("_ccnew") {
        "the new copy left by a cancelled REINDEX CONCURRENTLY"
    } else if base.ends_with("_ccold") {
        "the old copy left by an interrupted REINDEX CONCURRENTLY"
    } else if !index.live {
        "an index an interrupted DROP INDEX CONCURRENTLY was dropping"
    } else if !index.valid || !index.ready {
        "the leftover of a failed CREATE INDEX CONCURRENTLY"
    } else {
        return None;
    };
    Some(Difference::LeftoverIndex {
        table: table.to_owned(),
        index: index.name.clone(),
        why: format!(
            "{why} ({}{}{})",
            if index.valid { "valid" } else { "INVALID" },
            if index.ready {
                ", ready"
            } else {
                ", not ready"
            },
            if index.live { "" } else { ", not live" },
        ),
        fix: format!("DROP INDEX CONCURRENTLY {}", qualified(schema, &index.name)),
    })
}

/// The flags of every model constraint's index on `live`.
pub(super) fn constraint_indexes(
    out: &mut Vec<Difference>,
    schema: &SchemaName,
    live: &LiveRelation,
    model: &TableDescription,
) {
    let declared = std::iter::once(&model.primary_key).chain(&model.checks);
    for constraint in declared {
        let Some(index) = live
            .constraints
            .iter()
            .find(|c| c.name == constraint.name)
            .and_then(|c| c.index.as_ref())
        else {
            continue;
        };
        index_flags(
            out,
            schema,
            &model.name,
            &index.name,
            Some(&constraint.name),
            (index.valid, index.ready, index.live),
        );
    }
}

/// One owner for the family: the tables of `model` that exist, by owner
/// (their indexes and identity sequences always share their table's
/// owner). Mixed owners are drift (the owner of one table can restart its
/// sequence, drop or alter it, whatever the rest's owner decides); a schema
/// owned by another role than the family's is reported with what that role
/// can do, for the DBA to decide.
pub(super) fn owners(
    out: &mut Vec<Difference>,
    live: &LiveCatalog,
    schema: &SchemaName,
    model: &[TableDescription],
) {
    let mut by_owner: Vec<(String, Vec<String>)> = Vec::new();
    for table in model {
        let Some(relation) = live.relation(&table.name) else {
            continue;
        };
        match by_owner.iter_mut().find(|(o, _)| *o == relation.owner) {
            Some((_, tables)) => tables.push(table.name.clone()),
            None => by_owner.push((relation.owner.clone(), vec![table.name.clone()])),
        }
    }
    if by_owner.len() > 1 {
        by_owner.sort_by_key(|(_, tables)| std::cmp::Reverse(tables.len()));
        out.push(Difference::MixedOwners {
            owners: by_owner
                .iter()
                .map(|(owner, tables)| format!("{owner} owns {}", tables.join(", ")))
                .collect(),
        });
        return;
    }
    let (Some((family, _)), Some(live_schema)) = (by_owner.first(), &live.schema) else {
        return;
    };
    if !live_schema.owner.is_empty() && live_schema.owner != *family {
        out.push(Difference::SchemaOwner {
            schema: schema.to_string(),
            owner: live_schema.owner.clone(),
            family_owner: family.clone(),
        });
    }
}

/// The tables of `model` that exist and are owned by another role than
/// `role`, which would create the rest of the family.
pub fn owned_by_another(
    live: &LiveCatalog,
    role: &str,
    model: &[TableDescription],
) -> Vec<Difference> {
    model
        .iter()
        .filter_map(|table| live.relation(&table.name))
        .filter(|relation| relation.owner != role)
        .map(|relation| Difference::OwnedByAnother {
            table: relation.name.clone(),
            owner: relation.owner.clone(),
            role: role.to_owned(),
        })
        .collect()
}

/// Each identity sequence ahead of every value drawn from it: its own
/// column's and the columns that keep its values ([`promises`]).
pub(super) fn numbers(
    out: &mut Vec<Difference>,
    live: &LiveCatalog,
    schema: &SchemaName,
    model: &[TableDescription],
) {
    for promise in promises(model) {
        let Some(maximum) = live
            .maxima
            .iter()
            .find(|m| m.table == promise.table && m.column == promise.column)
        else {
            continue;
        };
        let (from_table, from_column) = &promise.drawn_from;
        let Some((sequence_name, sequence)) = live.relations.iter().find_map(|r| {
            let sequence = r.sequence.as_ref()?;
            let owner = sequence.owner.as_ref()?;
            (owner.identity && owner.table == *from_table && owner.column == *from_column)
                .then_some((r.name.as_str(), sequence))
        }) else {
            continue;
        };
        let unverified = |why: String| Difference::NumberUnverified {
            table: promise.table.clone(),
            column: promise.column.clone(),
            why,
        };
        if !maximum.readable {
            out.push(unverified(format!(
                "the role may not read {}",
                promise.table
            )));
            continue;
        }
        let Some(next) = sequence.next_value() else {
            out.push(unverified(format!(
                "the role may not read the sequence {sequence_name} (SELECT on it)"
            )));
            continue;
        };
        if maximum.capped {
            out.push(unverified(format!(
                "{} holds more than {SCAN_CAP} rows and no index orders {}",
                promise.table, promise.column
            )));
            continue;
        }
        let Some(max) = maximum.max else {
            continue;
        };
        if next <= max {
            out.push(Difference::SequenceBehind {
                table: promise.table.clone(),
                column: promise.column.clone(),
                sequence: sequence_name.to_owned(),
                next,
                max,
                breaks: promise.breaks.clone(),
                fix: format!(
                    "ALTER SEQUENCE {} RESTART WITH {}",
                    qualified(schema, sequence_name),
                    max.saturating_add(1)
                ),
            });
        }
    }
}
