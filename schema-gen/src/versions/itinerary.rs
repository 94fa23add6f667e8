//! The work of an upgrade or a contract from where a database stands, in
//! order, as data: [`Itinerary`]. The executor runs its legs and the dry run
//! prints them, walking the one list, so the two cannot disagree about what
//! runs, in which order, or how.

use schema_model::history::SchemaVersion;
use schema_model::{SchemaName, SchemaVersions, TableModel};

use super::history::History;
use super::sql::{Work, table_statements, work};
use super::step::{Action, Phase, Step};
use super::verdict::{Span, Standing, Verdict};
use crate::error::{Error, ErrorKind};
use crate::render::record;

/// What an upgrade (or a contract) does, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Itinerary {
    /// Where the database stood.
    pub before: Span,
    /// Expand or contract.
    pub phase: Phase,
    /// The version it reaches.
    pub target: u32,
    /// The legs, in order.
    pub legs: Vec<Leg>,
}

/// One leg of an [`Itinerary`].
#[derive(Debug, Clone, PartialEq)]
pub enum Leg {
    /// Bookkeeping in `schema_versions`, in one short transaction.
    Record {
        /// What it records.
        record: Record,
        /// Its statements.
        statements: Vec<String>,
    },
    /// A step of a version's plan (skipped when the catalog shows it done).
    Step(Box<StepLeg>),
}

/// A step of a version's plan, where it stands in its phase, and its SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct StepLeg {
    /// The step.
    pub step: Step,
    /// Its place in its version's phase, from 1.
    pub index: usize,
    /// The steps of its version's phase.
    pub of: usize,
    /// Its SQL, by how it is sent.
    pub work: Work,
    /// The later step of its phase that swaps the index it builds in under
    /// the old name, if any: once that one is done, so is this one
    /// ([`done::leg_done`](super::done::leg_done)).
    pub swapped_in_by: Option<Step>,
}

/// What a [`Leg::Record`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// The version table is created, recording the version a database of a
    /// release before it was recognised as, whole.
    Recognised {
        /// That version.
        version: u32,
    },
    /// The upgrade to `version` starts.
    Started {
        /// The version.
        version: u32,
    },
    /// The expand steps of `version` are done.
    Expanded {
        /// The version.
        version: u32,
    },
    /// The contract steps of `version` are done.
    Contracted {
        /// The version.
        version: u32,
    },
}

impl Record {
    /// What it records, in words.
    pub fn describe(self) -> String {
        match self {
            Self::Recognised { version } => {
                format!("create the version table, recording version {version}")
            }
            Self::Started { version } => format!("version {version}: the upgrade starts"),
            Self::Expanded { version } => format!("version {version}: expand done"),
            Self::Contracted { version } => format!("version {version}: contract done"),
        }
    }
}

impl Itinerary {
    /// The expand of every version after the database's, up to the
    /// history's target; `release` is written in the rows (`schema-gen
    /// 0.3.0`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::ContractFirst`] when a pending contract must run before
    /// the next version's expand; [`ErrorKind::Defect`] when the history
    /// lacks a plan it needs.
    pub fn expand(
        verdict: &Verdict,
        history: &History,
        schema: &SchemaName,
        release: &str,
    ) -> Result<Self, Error> {
        let before = verdict.span_or_zero();
        let target = history.target();
        let mut legs = Vec::new();
        if let Standing::Older {
            found,
            recognised: true,
        } = verdict.standing
        {
            let mut statements =
                table_statements(&target.declared, schema, &SchemaVersions::table_name());
            statements.push(record::reached(
                schema,
                found,
                &format!("{release} (recognised by shape)"),
            ));
            legs.push(Leg::Record {
                record: Record::Recognised { version: found },
                statements,
            });
        }
        let first = verdict
            .progress
            .as_ref()
            .filter(|p| p.phase == Phase::Expand)
            .map_or(before.expanded + 1, |p| p.version);
        for number in first..=target.number() {
            let (version, plan) = planned(history, number)?;
            for pending in before.contracted + 1..number {
                if history
                    .plan_to(pending)
                    .is_some_and(|earlier| earlier.contract_must_precede(plan))
                {
                    return Err(ErrorKind::ContractFirst {
                        schema: schema.clone(),
                        pending,
                        next: number,
                    }
                    .into());
                }
            }
            legs.push(Leg::Record {
                record: Record::Started { version: number },
                statements: vec![record::started(schema, number, release)],
            });
            push_steps(&mut legs, &plan.expand, version, schema);
            legs.push(Leg::Record {
                record: Record::Expanded { version: number },
                statements: vec![record::expanded(schema, number)],
            });
        }
        Ok(Self {
            before,
            phase: Phase::Expand,
            target: target.number(),
            legs,
        })
    }

    /// The contract of every expanded version not yet contracted, up to the
    /// history's target.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotExpanded`] when the database is not expanded to the
    /// target (or an expand is under way); [`ErrorKind::Defect`] when the
    /// history lacks a plan it needs.
    pub fn contract(
        verdict: &Verdict,
        history: &History,
        schema: &SchemaName,
    ) -> Result<Self, Error> {
        let before = verdict.span_or_zero();
        let target = history.target().number();
        let expanding = verdict
            .progress
            .as_ref()
            .is_some_and(|p| p.phase == Phase::Expand);
        if before.expanded != target || expanding {
            let reason = if before.expanded > target {
                format!(
                    "it is at version {}, newer than this release",
                    before.expanded
                )
            } else {
                format!(
                    "it is expanded to version {} only{}: run `schema-gen upgrade --schema \
                     {schema}` first",
                    before.expanded,
                    if expanding {
                        ", with an expand under way or interrupted"
                    } else {
                        ""
                    }
                )
            };
            return Err(ErrorKind::NotExpanded {
                schema: schema.clone(),
                model: target,
                reason,
            }
            .into());
        }
        let mut legs = Vec::new();
        for number in before.contracted + 1..=target {
            let (version, plan) = planned(history, number)?;
            push_steps(&mut legs, &plan.contract, version, schema);
            legs.push(Leg::Record {
                record: Record::Contracted { version: number },
                statements: vec![record::contracted(schema, number)],
            });
        }
        Ok(Self {
            before,
            phase: Phase::Contract,
            target,
            legs,
        })
    }

    /// The steps, in order.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.legs.iter().filter_map(|leg| match leg {
            Leg::Step(leg) => Some(&leg.step),
            Leg::Record { .. } => None,
        })
    }
}

fn planned(
    history: &History,
    number: u32,
) -> Result<(&SchemaVersion, &super::plan::VersionPlan), Error> {
    history
        .get(number)
        .and_then(|v| v.plan.as_ref().map(|plan| (&v.declared, plan)))
        .ok_or_else(|| {
            ErrorKind::Defect {
                message: format!("this release has no plan to version {number}"),
            }
            .into()
        })
}

fn push_steps(legs: &mut Vec<Leg>, steps: &[Step], version: &SchemaVersion, schema: &SchemaName) {
    for (index, step) in steps.iter().enumerate() {
        let swapped_in_by = match &step.action {
            Action::CreateIndex { index: built, .. } => steps[index + 1..]
                .iter()
                .find(|later| {
                    matches!(&later.action, Action::SwapIndex { replacement, .. }
                        if replacement == built)
                })
                .cloned(),
            _ => None,
        };
        legs.push(Leg::Step(Box::new(StepLeg {
            step: step.clone(),
            index: index + 1,
            of: steps.len(),
            work: work(step, schema, version),
            swapped_in_by,
        })));
    }
}
