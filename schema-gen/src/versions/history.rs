//! [`History`]: every version this release knows, each with its shape and
//! the plan that reaches it from the one before, built once per process
//! ([`History::shipped`]) and asked by everything that judges or moves a
//! database.

use std::sync::OnceLock;

use schema_model::history::{self, SchemaVersion};
use schema_model::{SchemaVersions, TableDescription, TableModel};

use super::plan::{self, PlanError, VersionPlan};

/// Every version of a history, oldest first, described and planned.
#[derive(Debug, Clone)]
pub struct History {
    versions: Vec<Version>,
}

/// One version of a [`History`]: what it is, its shape, and how to reach it.
#[derive(Debug, Clone)]
pub struct Version {
    /// The version as the model declares it ([`schema_model::history`]).
    pub declared: SchemaVersion,
    /// Its tables.
    pub shape: Vec<TableDescription>,
    /// The plan from the version before it; `None` for the first version.
    pub plan: Option<VersionPlan>,
}

impl Version {
    /// Its number.
    pub fn number(&self) -> u32 {
        self.declared.number
    }
}

impl History {
    /// This release's history ([`schema_model::history::versions`]), built
    /// on first use and kept for the life of the process: an engine that
    /// opens many times plans and parses the shipped versions once.
    ///
    /// # Errors
    ///
    /// The [`PlanError`] of a version that cannot be described or planned:
    /// a defect of this release, which its tests rule out.
    pub fn shipped() -> Result<&'static History, PlanError> {
        static SHIPPED: OnceLock<Result<History, PlanError>> = OnceLock::new();
        SHIPPED
            .get_or_init(|| History::new(history::versions()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Describes and plans `versions` (oldest first, numbered without a
    /// gap). [`History::shipped`] is this release's; another list is how a
    /// test tries a version before it ships.
    ///
    /// # Errors
    ///
    /// A [`PlanError`] when the list is empty or has a gap, a version does
    /// not describe itself, or a step between two cannot be planned online.
    pub fn new(versions: Vec<SchemaVersion>) -> Result<History, PlanError> {
        let mut built: Vec<Version> = Vec::with_capacity(versions.len());
        for declared in versions {
            let number = declared.number;
            let shape = declared.description().map_err(|e| PlanError {
                from: number,
                to: number,
                reason: format!("version {number} does not describe itself: {e}"),
            })?;
            let plan = match built.last() {
                None => None,
                Some(previous) if previous.number() + 1 != number => {
                    return Err(PlanError {
                        from: previous.number(),
                        to: number,
                        reason: "versions are numbered without a gap".to_owned(),
                    });
                }
                Some(previous) => Some(plan::plan_shapes(
                    &previous.declared,
                    &previous.shape,
                    &declared,
                    &shape,
                )?),
            };
            built.push(Version {
                declared,
                shape,
                plan,
            });
        }
        if built.is_empty() {
            return Err(PlanError {
                from: 0,
                to: 0,
                reason: "a history has at least one version".to_owned(),
            });
        }
        Ok(History { versions: built })
    }

    /// Every version, oldest first.
    pub fn versions(&self) -> &[Version] {
        &self.versions
    }

    /// The version numbered `number`, if this history has it.
    pub fn get(&self, number: u32) -> Option<&Version> {
        self.versions.iter().find(|v| v.number() == number)
    }

    /// The newest version: the one a fresh bootstrap creates and an upgrade
    /// moves to (for [`History::shipped`], the model's,
    /// [`MODEL_VERSION`](schema_model::history::MODEL_VERSION)).
    pub fn target(&self) -> &Version {
        // `new` refuses an empty history.
        &self.versions[self.versions.len() - 1]
    }

    /// The plan that reaches `number` from the version before it.
    pub fn plan_to(&self, number: u32) -> Option<&VersionPlan> {
        self.get(number).and_then(|v| v.plan.as_ref())
    }

    /// The shape of `number` as a database at it looks once the upgrade
    /// machinery is in place: with the version table, which the upgrade
    /// adds to a database of a version that predates it. `None` for a
    /// version this history does not have.
    pub fn shape_with_version_table(&self, number: u32) -> Option<Vec<TableDescription>> {
        let mut tables = self.get(number)?.shape.clone();
        if !tables
            .iter()
            .any(|t| t.name == SchemaVersions::table_name())
        {
            tables.push(TableDescription::of::<SchemaVersions>());
        }
        Some(tables)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schema_model::history::MODEL_VERSION;

    #[test]
    fn the_shipped_history_is_built_once_and_ends_at_the_model() {
        let first = History::shipped().unwrap();
        let again = History::shipped().unwrap();
        assert!(std::ptr::eq(first, again));
        assert_eq!(first.target().number(), MODEL_VERSION);
        assert!(first.versions()[0].plan.is_none());
        assert!(first.get(0).is_none());
        assert!(first.shape_with_version_table(MODEL_VERSION + 1).is_none());
    }

    #[test]
    fn a_gap_or_nothing_is_no_history() {
        let mut versions = history::versions();
        versions.remove(1);
        let err = History::new(versions).unwrap_err();
        assert!(err.reason.contains("without a gap"), "{err}");
        assert!(History::new(Vec::new()).is_err());
    }
}
