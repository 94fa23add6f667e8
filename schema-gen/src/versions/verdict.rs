//! Where a database stands among the versions, judged in one place:
//! [`verdict`] reads a live catalog against a [`History`] and returns a
//! [`Verdict`] that bootstrap, `check` and `upgrade` each act on.
//!
//! The database's position is what its `schema_versions` rows say (or, for
//! the releases before the table, which version's shape it has). The shape
//! a position implies is computed, not stored: the newest contracted
//! version's shape, with the expand steps of every version expanded since
//! applied, and, while an upgrade or a contract is under way or was
//! interrupted, some first steps of the next one. A database matches its
//! position when its catalog equals one of those shapes (comments aside,
//! which are documentation); anything else is drift.

use serde::Serialize;

use schema_model::{SchemaName, SchemaVersionRecord, TableDescription};

use super::history::History;
use super::names::Claimed;
use super::simulate::apply;
use super::step::{Action, Phase, Step};
use crate::catalog::LiveCatalog;
use crate::difference::Difference;
use crate::verify::compare;

/// Where a database stands, and how its catalog differs from the shape
/// that standing implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Where it stands, in one word with its numbers.
    pub standing: Standing,
    /// The versions it serves, when its rows or shape say (for a database
    /// of a release that recorded no version, its version twice).
    pub span: Option<Span>,
    /// The differences from the closest shape its standing allows (only
    /// comments, or none, when it matches). Empty for a standing this
    /// release cannot describe (a newer version, rows no upgrade follows).
    pub differences: Vec<Difference>,
    /// When an upgrade or a contract is under way (or was interrupted): its
    /// version, phase and how many of its steps the catalog shows done.
    pub progress: Option<StepsDone>,
    /// The version the history moves databases to: this release's.
    pub target: u32,
}

/// Where a database stands among the versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "standing", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Standing {
    /// The schema does not exist: a bootstrap creates it.
    Absent,
    /// The schema has no version table and holds nothing but (possibly none
    /// of) the target's tables, each exactly as the target has it: a
    /// bootstrap creates the rest.
    Unversioned,
    /// No version table, and the shape is no known version: the
    /// differences are from the `nearest` one (the fewest differences that
    /// are not comments or foreign objects; the newer of two as near).
    Unrecognised {
        /// The known version it is nearest to.
        nearest: u32,
    },
    /// The role may not read `schema_versions`.
    Unreadable,
    /// The `schema_versions` rows are no upgrade this release can follow (no
    /// contracted version, a gap, a version contracted before it expanded,
    /// or a version older than this release knows).
    Inconsistent,
    /// At an older version than the target: `upgrade` moves it.
    Older {
        /// The newest version it is expanded to.
        found: u32,
        /// Whether `found` was recognised by the shape (releases before the
        /// version table recorded none).
        recognised: bool,
    },
    /// An upgrade to `version` started and has not finished (it is running,
    /// or was interrupted; [`Verdict::progress`] says how far it got).
    Upgrading {
        /// The version being expanded to.
        version: u32,
    },
    /// Expanded to the target with its contract pending (or under way): it
    /// serves the engines from `oldest_served` to the target.
    ContractPending {
        /// The newest contracted version.
        oldest_served: u32,
    },
    /// At the target version, contracted.
    Current,
    /// At a newer version than this release knows.
    Newer {
        /// The newest version it is expanded (or expanding) to.
        found: u32,
        /// Whether it still serves the target's engines (its contract is
        /// pending).
        serves_target: bool,
    },
}

/// The versions whose engines a database serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// The newest version whose contract is done.
    pub contracted: u32,
    /// The newest version whose expand is done.
    pub expanded: u32,
}

/// How far an upgrade or contract of one version got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepsDone {
    /// The version.
    pub version: u32,
    /// Its phase.
    pub phase: Phase,
    /// Steps whose effect the catalog shows (the first `done` steps).
    pub done: usize,
    /// All its steps.
    pub of: usize,
}

impl Verdict {
    /// Whether the catalog is a shape the standing allows, comments and
    /// foreign objects aside (nothing is drift, nothing is missing).
    pub fn matches(&self) -> bool {
        self.differences
            .iter()
            .all(|d| !d.is_drift() && !d.is_missing_object())
    }

    /// The foreign objects ([`Difference::is_foreign`]): reported, left alone.
    pub fn foreign(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| d.is_foreign())
    }

    /// Whether anything differs that is neither documentation nor an
    /// object a bootstrap creates.
    pub fn drifts(&self) -> bool {
        self.differences.iter().any(Difference::is_drift)
    }

    /// Whether objects a bootstrap creates are missing.
    pub fn lacks_objects(&self) -> bool {
        self.differences.iter().any(Difference::is_missing_object)
    }

    /// Whether engines of the target version work on the database as it
    /// stands (its shape aside).
    pub fn serves_target(&self) -> bool {
        match self.standing {
            Standing::Current | Standing::ContractPending { .. } => true,
            Standing::Newer { serves_target, .. } => serves_target,
            _ => false,
        }
    }

    /// Where the database stands, as a span (none known: 0 to 0).
    pub fn span_or_zero(&self) -> Span {
        self.span.unwrap_or(Span {
            contracted: 0,
            expanded: 0,
        })
    }
}

/// What a database's `schema_versions` rows say.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    contracted: u32,
    expanded: u32,
    /// A version whose expand started and has not finished.
    expanding: Option<u32>,
    /// Rows this release cannot read as a position.
    inconsistent: bool,
}

impl Recorded {
    fn of(rows: &[SchemaVersionRecord]) -> Self {
        let number = |r: &SchemaVersionRecord| u32::try_from(r.version).ok();
        let contracted = rows.iter().filter(|r| r.is_contracted()).map(number).max();
        let expanded = rows.iter().filter(|r| r.is_expanded()).map(number).max();
        let expanding = rows.iter().filter(|r| !r.is_expanded()).map(number).max();
        let (Some(Some(contracted)), Some(Some(expanded))) = (contracted, expanded) else {
            return Self {
                contracted: 0,
                expanded: 0,
                expanding: None,
                inconsistent: true,
            };
        };
        let inconsistent = rows.iter().any(|r| number(r).is_none())
            || expanding.is_some_and(|e| e != Some(expanded + 1))
            || rows.iter().any(|r| r.is_contracted() && !r.is_expanded());
        Self {
            contracted,
            expanded,
            expanding: expanding.flatten(),
            inconsistent,
        }
    }

    fn serves(&self, version: u32) -> bool {
        self.contracted <= version && version <= self.expanded
    }
}

/// Judges where `live` stands among the versions of `history`: the one
/// verdict bootstrap, `check` and `upgrade` act on.
pub fn verdict(live: &LiveCatalog, schema: &SchemaName, history: &History) -> Verdict {
    let target = history.target().number();
    let judged = |standing, span, differences| Verdict {
        standing,
        span,
        differences,
        progress: None,
        target,
    };
    if live.schema.is_none() {
        let missing = Difference::MissingSchema {
            schema: schema.to_string(),
        };
        return judged(Standing::Absent, None, vec![missing]);
    }
    let Some(versions) = &live.versions else {
        return unversioned(live, schema, history);
    };
    let Some(rows) = &versions.rows else {
        return judged(Standing::Unreadable, None, Vec::new());
    };
    let recorded = Recorded::of(rows);
    let span = Some(Span {
        contracted: recorded.contracted,
        expanded: recorded.expanded,
    });
    if recorded.inconsistent {
        return judged(Standing::Inconsistent, span, Vec::new());
    }
    let newest = recorded.expanding.unwrap_or(0).max(recorded.expanded);
    if newest > target {
        let standing = Standing::Newer {
            found: newest,
            serves_target: recorded.serves(target),
        };
        return judged(standing, span, Vec::new());
    }
    let Some(allowed) = Allowed::of(&recorded, history) else {
        // A version older than this history's first.
        return judged(Standing::Inconsistent, span, Vec::new());
    };
    let (done, differences) = allowed.closest(live, schema);
    let differences = Claimed::after(history, recorded.expanded).mark(differences);
    let standing = match recorded.expanding {
        Some(version) => Standing::Upgrading { version },
        None if recorded.expanded < target => Standing::Older {
            found: recorded.expanded,
            recognised: false,
        },
        None if recorded.contracted < target => Standing::ContractPending {
            oldest_served: recorded.contracted,
        },
        None => Standing::Current,
    };
    Verdict {
        standing,
        span,
        differences,
        progress: allowed.phase.map(|(version, phase, _)| StepsDone {
            version,
            phase,
            done,
            of: allowed.shapes.len().saturating_sub(1),
        }),
        target,
    }
}

/// A schema without a version table: a release before it (recognised by
/// its shape), the target's tables in part (a bootstrap to come), or drift.
fn unversioned(live: &LiveCatalog, schema: &SchemaName, history: &History) -> Verdict {
    let target = history.target();
    let judged = |standing, span, differences| Verdict {
        standing,
        span,
        differences,
        progress: None,
        target: target.number(),
    };
    // The version whose shape it has, its foreign objects aside; of two
    // (a later version that only added what would be foreign to an earlier
    // one), the one with fewer foreign objects.
    let mut recognised: Option<((usize, usize), u32, Vec<Difference>)> = None;
    for version in history
        .versions()
        .iter()
        .filter(|v| !v.declared.records_itself())
    {
        let differences = compare(live, schema, &version.shape);
        let distance = distance(&differences);
        if distance.0 == 0 && recognised.as_ref().is_none_or(|(b, _, _)| distance <= *b) {
            recognised = Some((distance, version.number(), differences));
        }
    }
    if let Some((_, found, differences)) = recognised {
        let span = Some(Span {
            contracted: found,
            expanded: found,
        });
        let standing = Standing::Older {
            found,
            recognised: true,
        };
        let differences = Claimed::after(history, found).mark(differences);
        return judged(standing, span, differences);
    }
    let differences = compare(live, schema, &target.shape);
    if differences.iter().all(|d| !d.is_drift()) {
        // A bootstrap creates the missing tables, under the target's names.
        let differences = Claimed::after(history, 0).mark(differences);
        return judged(Standing::Unversioned, None, differences);
    }
    // The nearest version: the fewest differences a DBA must look at.
    let mut nearest = (target.number(), differences);
    for version in history.versions().iter().rev().skip(1) {
        let differences = compare(live, schema, &version.shape);
        if distance(&differences) < distance(&nearest.1) {
            nearest = (version.number(), differences);
        }
    }
    let (nearest, differences) = nearest;
    judged(Standing::Unrecognised { nearest }, None, differences)
}

/// How many differences a DBA must act on: neither comments nor foreign
/// objects.
fn drift_count(differences: &[Difference]) -> usize {
    differences
        .iter()
        .filter(|d| d.is_drift() || d.is_missing_object())
        .count()
}

/// How far a catalog is from a shape: the differences a DBA must act on,
/// then the foreign objects (comments are documentation).
fn distance(differences: &[Difference]) -> (usize, usize) {
    let foreign = differences.iter().filter(|d| d.is_foreign()).count();
    (drift_count(differences), foreign)
}

/// The shapes a recorded position allows: the expanded shape, and while an
/// expand (or a contract) is pending, each shape after its first steps.
struct Allowed {
    shapes: Vec<Vec<TableDescription>>,
    /// The version and phase under way (or pending), with its steps.
    phase: Option<(u32, Phase, Vec<Step>)>,
}

impl Allowed {
    /// `None` when the rows name a version this history does not have.
    fn of(recorded: &Recorded, history: &History) -> Option<Self> {
        let mut base = history.shape_with_version_table(recorded.contracted)?;
        for number in recorded.contracted + 1..=recorded.expanded {
            let version = history.get(number)?;
            apply(&mut base, &version.shape, &version.plan.as_ref()?.expand);
        }
        let pending = match recorded.expanding {
            Some(expanding) => Some((expanding, Phase::Expand)),
            None if recorded.expanded > recorded.contracted => {
                Some((recorded.contracted + 1, Phase::Contract))
            }
            None => None,
        };
        let Some((number, phase)) = pending else {
            return Some(Self {
                shapes: vec![base],
                phase: None,
            });
        };
        let version = history.get(number)?;
        let plan = version.plan.as_ref()?;
        let steps = match phase {
            Phase::Expand => plan.expand.clone(),
            Phase::Contract => plan.contract.clone(),
        };
        let shapes = (0..=steps.len())
            .map(|k| {
                let mut shape = base.clone();
                apply(&mut shape, &version.shape, &steps[..k]);
                shape
            })
            .collect();
        Some(Self {
            shapes,
            phase: Some((number, phase, steps)),
        })
    }

    /// The shape `live` is closest to (fewest differences that are not
    /// comments; the first that matches): how many steps it shows done, and
    /// its differences from it.
    fn closest(&self, live: &LiveCatalog, schema: &SchemaName) -> (usize, Vec<Difference>) {
        // An index build or drop `CONCURRENTLY` that was interrupted leaves
        // the index invalid; the phase's rerun drops and rebuilds (or
        // drops) it, so it is a step under way, not drift.
        let rebuilt: Vec<&String> = self
            .phase
            .iter()
            .flat_map(|(_, _, steps)| steps)
            .filter_map(|step| match &step.action {
                Action::CreateIndex { index, .. } | Action::DropIndex { index } => Some(index),
                _ => None,
            })
            .collect();
        // The fewest differences a DBA must act on, then the fewest foreign
        // objects: an object a step creates is the step's, not a DBA's.
        let mut best: Option<((usize, usize), usize, Vec<Difference>)> = None;
        for (done, shape) in self.shapes.iter().enumerate() {
            let mut differences = compare(live, schema, shape);
            differences.retain(
                |d| !matches!(d, Difference::InvalidIndex { index, .. } if rebuilt.contains(&index)),
            );
            let distance = distance(&differences);
            if best.as_ref().is_none_or(|(b, _, _)| distance < *b) {
                best = Some((distance, done, differences));
            }
            if distance == (0, 0) {
                break;
            }
        }
        best.map(|(_, done, differences)| (done, differences))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::catalog_of;
    use schema_model::history::MODEL_VERSION;

    fn schema() -> SchemaName {
        SchemaName::new("alk").unwrap()
    }

    fn row(version: i32, expanded: bool, contracted: bool) -> SchemaVersionRecord {
        SchemaVersionRecord {
            version,
            release: "r".into(),
            started_at: 0,
            expanded_at: expanded.then_some(1),
            contracted_at: contracted.then_some(2),
        }
    }

    #[test]
    fn the_model_is_current_and_each_shipped_version_is_recognised_or_recorded() {
        let history = History::shipped().unwrap();
        let model = catalog_of(&schema(), &history.target().shape);
        let judged = verdict(&model, &schema(), history);
        assert_eq!(judged.standing, Standing::Current);
        assert!(judged.matches() && judged.serves_target());
        for version in history.versions() {
            if version.number() == MODEL_VERSION {
                continue;
            }
            let mut live = catalog_of(&schema(), &version.shape);
            // A version that records itself says so in its rows (the
            // catalog of a shape records the model's version).
            if let Some(versions) = live.versions.as_mut() {
                versions.rows = Some(vec![row(version.number() as i32, true, true)]);
            }
            let judged = verdict(&live, &schema(), history);
            assert_eq!(
                judged.standing,
                Standing::Older {
                    found: version.number(),
                    recognised: !version.declared.records_itself()
                },
                "version {}",
                version.number()
            );
            assert!(judged.matches(), "{:?}", judged.differences);
        }
    }

    fn jobs(live: &mut LiveCatalog) -> &mut crate::catalog::LiveRelation {
        live.relations
            .iter_mut()
            .find(|r| r.name == "jobs")
            .unwrap()
    }

    fn extra_column(name: &str, sql_type: &str) -> crate::catalog::LiveColumn {
        crate::catalog::LiveColumn {
            name: name.into(),
            sql_type: sql_type.into(),
            ..Default::default()
        }
    }

    fn extra_index(name: &str, keys: &str) -> crate::catalog::LiveIndex {
        crate::catalog::LiveIndex {
            name: name.into(),
            definition: format!("CREATE INDEX {name} ON alk.jobs USING btree ({keys})"),
            valid: true,
            evaluates: vec![],
        }
    }

    #[test]
    fn foreign_objects_leave_a_version_recognised_and_a_current_schema_current() {
        let history = History::shipped().unwrap();
        let mut v1 = catalog_of(&schema(), &history.versions()[0].shape);
        jobs(&mut v1).columns.push(extra_column("note", "text"));
        jobs(&mut v1)
            .indexes
            .push(extra_index("jobs_note_idx", "note"));
        let judged = verdict(&v1, &schema(), history);
        assert_eq!(
            judged.standing,
            Standing::Older {
                found: 1,
                recognised: true
            }
        );
        assert!(judged.matches(), "{:?}", judged.differences);
        assert_eq!(judged.foreign().count(), 2);

        let mut current = catalog_of(&schema(), &history.target().shape);
        jobs(&mut current)
            .indexes
            .push(extra_index("jobs_enqueued_at_report_idx", "enqueued_at"));
        let judged = verdict(&current, &schema(), history);
        assert_eq!(judged.standing, Standing::Current);
        assert!(judged.matches() && !judged.drifts());
        assert_eq!(judged.foreign().count(), 1);
    }

    #[test]
    fn a_foreign_object_named_as_a_later_version_names_something_is_drift() {
        let history = History::shipped().unwrap();
        let v1 = &history.versions()[0];
        let later = &history.versions()[1];
        // A column and an index the next version adds to jobs, made by hand.
        let column = later
            .shape
            .iter()
            .find(|t| t.name == "jobs")
            .and_then(|t| {
                t.columns
                    .iter()
                    .find(|c| !v1.shape[0].columns.iter().any(|o| o.name == c.name))
            })
            .unwrap();
        let index = later
            .shape
            .iter()
            .flat_map(|t| &t.indexes)
            .find(|i| {
                !v1.shape
                    .iter()
                    .flat_map(|t| &t.indexes)
                    .any(|o| o.name == i.name)
            })
            .unwrap();
        for (what, change) in [
            ("column", {
                let name = column.name.clone();
                Box::new(move |live: &mut LiveCatalog| {
                    jobs(live).columns.push(extra_column(&name, "boolean"))
                }) as Box<dyn Fn(&mut LiveCatalog)>
            }),
            ("index", {
                let name = index.name.clone();
                Box::new(move |live: &mut LiveCatalog| {
                    jobs(live).indexes.push(extra_index(&name, "run_at"))
                })
            }),
        ] {
            let mut live = catalog_of(&schema(), &v1.shape);
            change(&mut live);
            let judged = verdict(&live, &schema(), history);
            assert!(
                matches!(judged.standing, Standing::Older { found: 1, .. }),
                "{what}: {:?}",
                judged.standing
            );
            assert!(judged.drifts(), "{what}: {:?}", judged.differences);
            assert!(
                judged.differences[0].to_string().contains(&format!(
                    "version {} of the model creates an object of this name",
                    later.number()
                )),
                "{what}: {}",
                judged.differences[0]
            );
        }
        // The same names at the target version are the model's own.
        let current = catalog_of(&schema(), &history.target().shape);
        assert!(verdict(&current, &schema(), history).matches());
    }

    #[test]
    fn a_shape_of_no_version_is_measured_against_the_nearest_one() {
        let history = History::shipped().unwrap();
        let mut live = catalog_of(&schema(), &history.versions()[0].shape);
        jobs(&mut live).indexes.retain(|i| i.name != "jobs_pkey");
        let dropped = jobs(&mut live).indexes.remove(0).name;
        jobs(&mut live).columns.push(extra_column("note", "text"));
        jobs(&mut live)
            .indexes
            .push(extra_index("jobs_note_idx", "note"));
        let judged = verdict(&live, &schema(), history);
        assert_eq!(judged.standing, Standing::Unrecognised { nearest: 1 });
        let drift: Vec<String> = judged
            .differences
            .iter()
            .filter(|d| d.is_drift())
            .map(ToString::to_string)
            .collect();
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert!(
            drift[0].starts_with(&format!("missing index {dropped}")),
            "{drift:?}"
        );
        assert_eq!(judged.foreign().count(), 2);
    }

    #[test]
    fn rows_no_upgrade_follows_are_inconsistent_never_an_older_version() {
        let history = History::shipped().unwrap();
        let mut live = catalog_of(&schema(), &history.target().shape);
        for rows in [
            vec![row(0, true, true)],
            vec![row(-1, true, true)],
            vec![row(MODEL_VERSION as i32, false, true)],
            vec![],
        ] {
            live.versions.as_mut().unwrap().rows = Some(rows.clone());
            let judged = verdict(&live, &schema(), history);
            assert_eq!(judged.standing, Standing::Inconsistent, "{rows:?}");
        }
    }

    #[test]
    fn a_newer_version_says_whether_it_still_serves_the_target() {
        let history = History::shipped().unwrap();
        let mut live = catalog_of(&schema(), &history.target().shape);
        let next = MODEL_VERSION as i32 + 1;
        live.versions.as_mut().unwrap().rows = Some(vec![
            row(MODEL_VERSION as i32, true, true),
            row(next, true, false),
        ]);
        let judged = verdict(&live, &schema(), history);
        assert_eq!(
            judged.standing,
            Standing::Newer {
                found: MODEL_VERSION + 1,
                serves_target: true
            }
        );
        assert!(judged.serves_target());
    }
}
