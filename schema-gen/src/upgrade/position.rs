//! Where a database stands among the versions: what its `schema_versions`
//! rows say (or, for the releases before version 3, which version's shape
//! it has), and whether its catalog is the shape that position implies.
//!
//! The shape a position implies is computed, not stored: the newest
//! contracted version's description, with the expand steps of every version
//! expanded since applied, and, while an upgrade or a contract is under way
//! or was interrupted, some first steps of the next one. A database matches
//! its position when its catalog equals one of those shapes (comments
//! aside, which are documentation); anything else is drift.

use serde::Serialize;

use schema_model::history::{self, MODEL_VERSION, SchemaVersion};
use schema_model::{SchemaName, SchemaVersionRecord, SchemaVersions, TableDescription, TableModel};

use crate::catalog::LiveCatalog;
use crate::verify::{Difference, compare};

use super::plan::{self, PlanError, Step, VersionPlan, apply};

/// Every version and the plan that reaches each from the one before.
#[derive(Debug, Clone)]
pub struct History {
    /// Every version this release knows, oldest first.
    pub versions: Vec<SchemaVersion>,
    /// `plans[i]` moves version `versions[i]` to `versions[i + 1]`.
    pub plans: Vec<VersionPlan>,
    /// Each version's tables.
    pub descriptions: Vec<Vec<TableDescription>>,
}

impl History {
    /// The history of this release: every version, described and planned.
    ///
    /// # Errors
    ///
    /// A [`PlanError`] when a version cannot be planned (which the tests
    /// rule out before a release).
    pub fn load() -> Result<Self, PlanError> {
        let versions = history::versions();
        let mut plans = Vec::new();
        for pair in versions.windows(2) {
            plans.push(plan::plan(&pair[0], &pair[1])?);
        }
        let mut descriptions = Vec::new();
        for version in &versions {
            descriptions.push(version.description().map_err(|e| PlanError {
                from: version.number,
                to: version.number,
                reason: format!("version {} does not describe itself: {e}", version.number),
            })?);
        }
        Ok(Self {
            versions,
            plans,
            descriptions,
        })
    }

    /// The version numbered `number`.
    pub fn version(&self, number: u32) -> Option<&SchemaVersion> {
        self.versions.iter().find(|v| v.number == number)
    }

    /// The plan that reaches `number` from the version before it.
    pub fn plan_to(&self, number: u32) -> Option<&VersionPlan> {
        self.plans.iter().find(|p| p.to == number)
    }

    /// The description of `number`, with the version table the upgrade
    /// machinery adds to a database of a version that predates it.
    fn shape(&self, number: u32) -> Vec<TableDescription> {
        let index = self
            .versions
            .iter()
            .position(|v| v.number == number)
            .unwrap_or(0);
        let mut tables = self.descriptions.get(index).cloned().unwrap_or_default();
        if !tables
            .iter()
            .any(|t| t.name == SchemaVersions::table_name())
        {
            tables.push(TableDescription::of::<SchemaVersions>());
        }
        tables
    }
}

/// Where a database stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Position {
    /// The schema does not exist.
    NoSchema,
    /// The schema has no version table and holds nothing but (possibly
    /// none of) the model's tables, each exactly as the model has it: a
    /// bootstrap creates the rest.
    Creatable,
    /// The schema has no version table and is exactly a version of a
    /// release that did not record one.
    Recognised {
        /// That version.
        version: u32,
    },
    /// The schema records its versions.
    Recorded(Recorded),
    /// The role may not read `schema_versions`.
    Unreadable,
    /// No version table, and the shape is no known version.
    Unrecognised,
}

/// What a database's `schema_versions` rows say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recorded {
    /// The newest version whose contract is done: engines older than it no
    /// longer work.
    pub contracted: u32,
    /// The newest version whose expand is done: engines of the versions
    /// from `contracted` to it work.
    pub expanded: u32,
    /// A version whose expand started and has not finished.
    pub expanding: Option<u32>,
    /// Whether the rows say anything this release cannot read as a
    /// position (no contracted version, a gap): then it is drift.
    pub inconsistent: bool,
}

impl Recorded {
    fn of(rows: &[SchemaVersionRecord]) -> Self {
        let number = |r: &SchemaVersionRecord| u32::try_from(r.version).unwrap_or(0);
        let contracted = rows.iter().filter(|r| r.is_contracted()).map(number).max();
        let expanded = rows.iter().filter(|r| r.is_expanded()).map(number).max();
        let expanding = rows.iter().filter(|r| !r.is_expanded()).map(number).max();
        let inconsistent = contracted.is_none()
            || expanding.is_some_and(|e| Some(e) != expanded.map(|x| x + 1))
            || rows.iter().any(|r| r.is_contracted() && !r.is_expanded());
        Self {
            contracted: contracted.unwrap_or(0),
            expanded: expanded.unwrap_or(0),
            expanding,
            inconsistent,
        }
    }

    /// The version engines of this release need, and whether they are served.
    pub fn serves(&self, version: u32) -> bool {
        self.contracted <= version && version <= self.expanded
    }
}

/// A database's position and how its catalog compares with the shape that
/// position implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Where it stands.
    pub position: Position,
    /// The differences from the closest shape the position allows (only
    /// comments when it matches). For a position this release cannot
    /// describe (a newer version), empty.
    pub differences: Vec<Difference>,
    /// When an upgrade or a contract is under way (or was interrupted):
    /// its version, phase and how many of its steps the catalog shows done.
    pub progress: Option<StepsDone>,
}

/// How far an upgrade or contract of one version got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepsDone {
    /// The version.
    pub version: u32,
    /// Its phase.
    pub phase: plan::Phase,
    /// Steps whose effect the catalog shows (the first `done` steps).
    pub done: usize,
    /// All its steps.
    pub of: usize,
}

impl Located {
    /// Whether the catalog is a shape the position allows (comments aside).
    pub fn matches(&self) -> bool {
        self.differences.iter().all(Difference::is_comment)
    }
}

/// Locates `live` among the versions of `history`.
pub fn locate(live: &LiveCatalog, schema: &SchemaName, history: &History) -> Located {
    let found = |position, differences| Located {
        position,
        differences,
        progress: None,
    };
    if live.schema.is_none() {
        return found(
            Position::NoSchema,
            vec![Difference::MissingSchema {
                schema: schema.to_string(),
            }],
        );
    }
    let Some(versions) = &live.versions else {
        // No version table: a release before version 3, or a bootstrap to come.
        for version in history.versions.iter().filter(|v| !v.records_itself()) {
            let index = history
                .versions
                .iter()
                .position(|v| v.number == version.number)
                .unwrap_or(0);
            let differences = compare(live, schema, &history.descriptions[index]);
            if differences.iter().all(Difference::is_comment) {
                return found(
                    Position::Recognised {
                        version: version.number,
                    },
                    differences,
                );
            }
        }
        let model = schema_model::engine_family();
        let differences = compare(live, schema, &model);
        if differences.iter().all(|d| !d.is_drift()) {
            return found(Position::Creatable, differences);
        }
        return found(Position::Unrecognised, differences);
    };
    let Some(rows) = &versions.rows else {
        return found(Position::Unreadable, Vec::new());
    };
    let recorded = Recorded::of(rows);
    if recorded.inconsistent {
        return found(Position::Recorded(recorded), Vec::new());
    }
    let newest_known = history.versions.last().map_or(0, |v| v.number);
    if recorded.expanded > newest_known || recorded.expanding.is_some_and(|e| e > newest_known) {
        return found(Position::Recorded(recorded), Vec::new());
    }
    let (candidates, phase_version, phase) = candidates(&recorded, history);
    // An index build or drop `CONCURRENTLY` that was interrupted leaves the
    // index invalid; the phase's rerun drops and rebuilds (or drops) it, so
    // it is a step under way, not drift.
    let rebuilt: Vec<String> = phase
        .and_then(|phase| {
            history.plan_to(phase_version).map(|plan| match phase {
                plan::Phase::Expand => plan.expand.clone(),
                plan::Phase::Contract => plan.contract.clone(),
            })
        })
        .unwrap_or_default()
        .into_iter()
        .filter_map(|step| match step.action {
            plan::Action::CreateIndex { index, .. } | plan::Action::DropIndex { index } => {
                Some(index)
            }
            _ => None,
        })
        .collect();
    let mut best: Option<(usize, Vec<Difference>)> = None;
    for (done, shape) in candidates.iter().enumerate() {
        let mut differences = compare(live, schema, shape);
        differences.retain(
            |d| !matches!(d, Difference::InvalidIndex { index, .. } if rebuilt.contains(index)),
        );
        let drift = differences.iter().filter(|d| !d.is_comment()).count();
        if best
            .as_ref()
            .is_none_or(|(_, b)| drift < b.iter().filter(|d| !d.is_comment()).count())
        {
            best = Some((done, differences));
        }
        if drift == 0 {
            break;
        }
    }
    let (done, differences) = best.unwrap_or_default();
    let progress = phase.map(|phase| StepsDone {
        version: phase_version,
        phase,
        done,
        of: candidates.len().saturating_sub(1),
    });
    Located {
        position: Position::Recorded(recorded),
        differences,
        progress,
    }
}

/// The shapes a recorded position allows: the expanded shape, and when an
/// expand (or a contract) is pending, each shape after its first steps.
fn candidates(
    recorded: &Recorded,
    history: &History,
) -> (Vec<Vec<TableDescription>>, u32, Option<plan::Phase>) {
    let mut base = history.shape(recorded.contracted);
    for number in recorded.contracted + 1..=recorded.expanded {
        if let (Some(plan), Some(index)) = (
            history.plan_to(number),
            history.versions.iter().position(|v| v.number == number),
        ) {
            apply(&mut base, &history.descriptions[index], &plan.expand);
        }
    }
    let prefixes = |steps: &[Step], target: u32, base: &Vec<TableDescription>| {
        let index = history
            .versions
            .iter()
            .position(|v| v.number == target)
            .unwrap_or(0);
        (0..=steps.len())
            .map(|k| {
                let mut shape = base.clone();
                apply(&mut shape, &history.descriptions[index], &steps[..k]);
                shape
            })
            .collect::<Vec<_>>()
    };
    if let Some(expanding) = recorded.expanding {
        let steps = history
            .plan_to(expanding)
            .map(|p| p.expand.clone())
            .unwrap_or_default();
        return (
            prefixes(&steps, expanding, &base),
            expanding,
            Some(plan::Phase::Expand),
        );
    }
    if recorded.expanded > recorded.contracted {
        let next = recorded.contracted + 1;
        let steps = history
            .plan_to(next)
            .map(|p| p.contract.clone())
            .unwrap_or_default();
        return (
            prefixes(&steps, next, &base),
            next,
            Some(plan::Phase::Contract),
        );
    }
    (vec![base], recorded.expanded, None)
}

/// The model's version, for messages.
pub const fn model_version() -> u32 {
    MODEL_VERSION
}
