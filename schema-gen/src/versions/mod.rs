//! The versions floor: everything about schema versions that needs no
//! server, below bootstrap, `check` and `upgrade`, which all ask it.
//!
//! - [`history`]: every version this release knows, with its shape and the
//!   plan that reaches it, built once per process ([`History::shipped`]);
//! - [`step`]: the vocabulary of an upgrade, and how each step runs
//!   ([`Execution`]) as data;
//! - [`plan`]: the planner, from two versions' shapes and the hints;
//! - [`simulate`]: the shape simulator (what steps make of a shape);
//! - [`sql`]: each step's SQL, by how it is sent ([`Work`]);
//! - [`done`]: whether the catalog shows a step done;
//! - [`mod@verdict`]: where a database stands, judged once ([`Verdict`]);
//! - [`itinerary`]: what an upgrade or a contract does from there, in
//!   order ([`Itinerary`]), which the executor runs and the dry run prints.

pub mod done;
pub mod history;
pub mod itinerary;
mod names;
pub mod plan;
pub mod simulate;
pub mod sql;
pub mod step;
pub mod verdict;

pub use history::{History, Version};
pub use itinerary::{Itinerary, Leg, Record, StepLeg};
pub use plan::{PlanError, VersionPlan};
pub use sql::Work;
pub use step::{Action, Execution, Phase, Step, TableLock, Wait};
pub use verdict::{Span, Standing, StepsDone, Verdict, verdict};
