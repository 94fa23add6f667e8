//! What `schema-gen check` reports: where a database stands among the
//! versions, whether it serves this release's engines, what to run next,
//! and how its catalog differs from the shape its position implies.

use serde::Serialize;
use tokio_postgres::Client;

use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;

use crate::Options;
use crate::catalog;
use crate::error::Error;
use crate::verify::Difference;

use super::plan::Phase;
use super::position::{History, Located, Position, locate};

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
    /// Whether this release's engines work on it as it is.
    pub serves_model: bool,
    /// The differences from the shape its position implies (only comments,
    /// or none, when it is exactly that shape).
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
    /// Whether `check` passes: the database serves this release's engines
    /// and is exactly the shape its position implies (comments aside).
    pub fn passes(&self) -> bool {
        self.serves_model && self.differences.iter().all(Difference::is_comment)
    }
}

/// Reads the catalog (one round trip) and reports where `schema` stands.
///
/// # Errors
///
/// As [`catalog::read`]: a lost connection, a lock timeout, a server error.
pub async fn status(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Status, Error> {
    crate::citus::probe(client, schema, options.layout, options).await?;
    let live = catalog::read(client, schema, options).await?;
    let history = History::load().map_err(|e| {
        Error::from(crate::ErrorKind::Other {
            message: format!("{e} (a defect of this release)"),
        })
    })?;
    let mut status = of(&locate(&live, schema, &history), schema);
    let placed = crate::citus::differences(client, schema, options, live.schema.is_some()).await?;
    status.differences.extend(placed);
    Ok(status)
}

/// The status of a located database.
pub fn of(located: &Located, schema: &SchemaName) -> Status {
    let model = MODEL_VERSION;
    let upgrade = format!("`schema-gen upgrade --schema {schema}`");
    let contract = format!("`schema-gen upgrade --contract --schema {schema}`");
    let status = |state, found, contracted, serves_model, message: String| Status {
        state,
        found,
        contracted,
        model,
        serves_model,
        differences: located.differences.clone(),
        message,
    };
    let matches = located.matches();
    match &located.position {
        Position::NoSchema => status(
            VersionState::Missing,
            None,
            None,
            false,
            format!(
                "schema {schema} does not exist: `schema-gen apply --schema {schema}` creates it at version {model}"
            ),
        ),
        Position::Creatable => status(
            VersionState::Missing,
            None,
            None,
            false,
            format!(
                "schema {schema} lacks tables of the model: `schema-gen apply --schema {schema}` creates them"
            ),
        ),
        Position::Unrecognised => status(
            VersionState::Unknown,
            None,
            None,
            false,
            format!(
                "schema {schema} is no version this release knows (1 to {model}) and records none: it differs from the model"
            ),
        ),
        Position::Unreadable => status(
            VersionState::Unreadable,
            None,
            None,
            false,
            format!(
                "the role may not read {schema}.schema_versions, so the schema's version is unknown: GRANT SELECT ON {schema}.schema_versions to it"
            ),
        ),
        Position::Recognised { version } => status(
            VersionState::Older,
            Some(*version),
            Some(*version),
            false,
            format!(
                "schema {schema} is at version {version} (recognised by its shape: its release recorded no version), older than this release's version {model}: {upgrade} moves it online; its engines keep working until {contract}"
            ),
        ),
        Position::Recorded(recorded) => {
            let found = Some(recorded.expanded);
            let contracted = Some(recorded.contracted);
            if recorded.inconsistent {
                return status(
                    VersionState::Unknown,
                    found,
                    contracted,
                    false,
                    format!(
                        "schema {schema}'s schema_versions rows are no upgrade this release can follow"
                    ),
                );
            }
            if recorded.expanded > model || recorded.expanding.is_some_and(|v| v > model) {
                let serves = recorded.serves(model);
                return status(
                    VersionState::Newer,
                    found,
                    contracted,
                    serves,
                    if serves {
                        format!(
                            "schema {schema} is at version {}, newer than this release's {model}, and still serves version {model}'s engines (its contract is pending); this release cannot verify a version it does not know: the newer release's check does",
                            recorded.expanded
                        )
                    } else {
                        format!(
                            "schema {schema} is at version {} (contracted to {}), newer than this release's {model}, which it no longer serves: run the newer release",
                            recorded.expanded, recorded.contracted
                        )
                    },
                );
            }
            let progress = located.progress.as_ref();
            if let (Some(version), Some(p)) = (recorded.expanding, progress)
                && p.phase == Phase::Expand
            {
                return status(
                    VersionState::Upgrading,
                    found,
                    contracted,
                    recorded.serves(model),
                    format!(
                        "schema {schema} is being upgraded to version {version}: {} of {} expand steps done; if no upgrade is running, {upgrade} resumes it",
                        p.done, p.of
                    ),
                );
            }
            if recorded.expanded < model {
                return status(
                    VersionState::Older,
                    found,
                    contracted,
                    false,
                    format!(
                        "schema {schema} is at version {}, older than this release's version {model}: {upgrade} moves it online",
                        recorded.expanded
                    ),
                );
            }
            if recorded.contracted < model {
                let under_way = progress
                    .filter(|p| p.phase == Phase::Contract && p.done > 0)
                    .map(|p| format!(" ({} of {} steps of version {}'s contract done: if no contract is running, run it again)", p.done, p.of, p.version))
                    .unwrap_or_default();
                return status(
                    VersionState::ContractPending,
                    found,
                    contracted,
                    true,
                    format!(
                        "schema {schema} {} version {model} with its contract pending{under_way}: it serves the engines of versions {} to {model}; once none older than version {model} runs, {contract}",
                        if matches { "matches" } else { "differs from" },
                        recorded.contracted
                    ),
                );
            }
            status(
                VersionState::Current,
                found,
                contracted,
                true,
                if matches {
                    format!("schema {schema} matches the model (version {model})")
                } else {
                    format!("schema {schema} differs from the model (version {model})")
                },
            )
        }
    }
}
