//! What `schema-gen check` reports of a [`Verdict`]: where a database stands
//! among the versions, whether it serves this release's engines, what to
//! run next, and how its catalog differs from the shape its position
//! implies.

use serde::Serialize;

use schema_model::SchemaName;

use super::state::{ForeignPolicy, State};
use crate::difference::{Class, Difference};
use crate::versions::{Phase, Standing, Verdict};

/// A database's version, as `check` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    /// What the version says, in one word.
    pub state: VersionState,
    /// The newest version the database is expanded to (for a database of a
    /// release before version 3, the version its shape is), if known.
    pub found: Option<u32>,
    /// The newest version whose contract is done, if known.
    pub contracted: Option<u32>,
    /// This release's version.
    pub model: u32,
    /// When the schema records no version and has the shape of none: the
    /// known version it is nearest to, which `differences` are from.
    pub nearest: Option<u32>,
    /// Whether this release's engines work on it as it is.
    pub serves_model: bool,
    /// The differences from the shape its position implies (only comments
    /// and foreign objects, or none, when it is that shape).
    #[serde(skip)]
    pub differences: Vec<Difference>,
    /// What it means and what to run, in one line.
    pub message: String,
}

/// Where a database stands, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VersionState {
    /// At this release's version, contracted.
    Current,
    /// Expanded to this release's version; the contract is pending (or under way).
    ContractPending,
    /// At an older version: `schema-gen upgrade` moves it.
    Older,
    /// An upgrade to a version is under way or was interrupted.
    Upgrading,
    /// At a newer version than this release knows.
    Newer,
    /// No schema, or only some of the model's tables: `apply` creates them.
    Missing,
    /// Its shape is no known version or upgrade step (drift).
    Unknown,
    /// The role may not read `schema_versions`.
    Unreadable,
}

impl Status {
    /// Whether the database serves this release's engines and is the shape
    /// its position implies, comments and foreign objects aside (nothing is
    /// drift, nothing missing). Not the exit code: [`Status::state`] is.
    pub fn passes(&self) -> bool {
        self.serves_model
            && self
                .differences
                .iter()
                .all(|d| !d.is_drift() && !d.is_missing_object())
    }

    /// What `check` concludes under `policy`: the worst of where the
    /// version stands, what differs, and the foreign objects the policy
    /// does not allow ([`State`], whose exit code `check` returns).
    pub fn state(&self, policy: &ForeignPolicy) -> State {
        let standing = match self.state {
            VersionState::Current => State::Matches,
            VersionState::ContractPending => State::ContractPending,
            VersionState::Older | VersionState::Upgrading => State::NeedsUpgrade,
            VersionState::Newer => State::NewerVersion,
            VersionState::Missing | VersionState::Unknown => State::Drift,
            VersionState::Unreadable => State::Error,
        };
        self.differences
            .iter()
            .map(|d| match d.class() {
                Class::Drift | Class::Missing => State::Drift,
                Class::Foreign if !policy.allows(d) => State::ForeignObjects,
                Class::Foreign | Class::Documentation => State::Matches,
            })
            .fold(standing, State::worst)
    }

    /// The status of a judged database, in `check`'s words.
    pub fn of(verdict: &Verdict, schema: &SchemaName) -> Status {
        let model = verdict.target;
        let upgrade = format!("`schema-gen upgrade --schema {schema}`");
        let contract = format!("`schema-gen upgrade --contract --schema {schema}`");
        let span = verdict.span;
        let (found, contracted) = (span.map(|s| s.expanded), span.map(|s| s.contracted));
        let (state, message) = match &verdict.standing {
            Standing::Absent => (
                VersionState::Missing,
                format!(
                    "schema {schema} does not exist: `schema-gen apply --schema {schema}` \
                     creates it at version {model}"
                ),
            ),
            Standing::Unversioned => (
                VersionState::Missing,
                format!(
                    "schema {schema} lacks tables of the model: `schema-gen apply --schema \
                     {schema}` creates them"
                ),
            ),
            Standing::Unrecognised { nearest } => (
                VersionState::Unknown,
                format!(
                    "schema {schema} is no version this release knows (1 to {model}) and records \
                     none: it is nearest to version {nearest}, from which it differs"
                ),
            ),
            Standing::Unreadable => (
                VersionState::Unreadable,
                format!(
                    "the role may not read {schema}.schema_versions, so the schema's version is \
                     unknown: GRANT SELECT ON {schema}.schema_versions to it"
                ),
            ),
            Standing::Inconsistent => (
                VersionState::Unknown,
                format!(
                    "schema {schema}'s schema_versions rows are no upgrade this release can follow"
                ),
            ),
            Standing::Older {
                found,
                recognised: true,
            } => (
                VersionState::Older,
                format!(
                    "schema {schema} is at version {found} (recognised by its shape: its release \
                     recorded no version), older than this release's version {model}: {upgrade} \
                     moves it online; its engines keep working until {contract}"
                ),
            ),
            Standing::Older { found, .. } => (
                VersionState::Older,
                format!(
                    "schema {schema} is at version {found}, older than this release's version \
                     {model}: {upgrade} moves it online"
                ),
            ),
            Standing::Upgrading { version } => {
                let (done, of) = verdict.progress.as_ref().map_or((0, 0), |p| (p.done, p.of));
                (
                    VersionState::Upgrading,
                    format!(
                        "schema {schema} is being upgraded to version {version}: {done} of {of} \
                         expand steps done; if no upgrade is running, {upgrade} resumes it"
                    ),
                )
            }
            Standing::Newer {
                found,
                serves_target: true,
            } => (
                VersionState::Newer,
                format!(
                    "schema {schema} is at version {found}, newer than this release's {model}, and \
                     still serves version {model}'s engines (its contract is pending); this \
                     release cannot verify a version it does not know: the newer release's check \
                     does"
                ),
            ),
            Standing::Newer { found, .. } => (
                VersionState::Newer,
                format!(
                    "schema {schema} is at version {found} (contracted to {}), newer than this \
                     release's {model}, which it no longer serves: run the newer release",
                    contracted.unwrap_or_default()
                ),
            ),
            Standing::ContractPending { oldest_served } => {
                let under_way = verdict
                    .progress
                    .as_ref()
                    .filter(|p| p.phase == Phase::Contract && p.done > 0)
                    .map(|p| {
                        format!(
                            " ({} of {} steps of version {}'s contract done: if no contract is \
                             running, run it again)",
                            p.done, p.of, p.version
                        )
                    })
                    .unwrap_or_default();
                (
                    VersionState::ContractPending,
                    format!(
                        "schema {schema} {} version {model} with its contract pending{under_way}: \
                         it serves the engines of versions {oldest_served} to {model}; once none \
                         older than version {model} runs, {contract}",
                        if verdict.matches() {
                            "matches"
                        } else {
                            "differs from"
                        },
                    ),
                )
            }
            Standing::Current if verdict.matches() => (
                VersionState::Current,
                format!("schema {schema} matches the model (version {model})"),
            ),
            Standing::Current => (
                VersionState::Current,
                format!("schema {schema} differs from the model (version {model})"),
            ),
        };
        let nearest = match verdict.standing {
            Standing::Unrecognised { nearest } => Some(nearest),
            _ => None,
        };
        Status {
            state,
            found,
            contracted,
            model,
            nearest,
            serves_model: verdict.serves_target(),
            differences: verdict.differences.clone(),
            message,
        }
    }
}
