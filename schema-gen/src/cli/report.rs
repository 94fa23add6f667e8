//! What `apply` and `check` print: text for people, or JSON for tools.
//!
//! The JSON is stable: keys are only ever added. Every difference carries
//! its `kind` (the [`Difference`] variant in snake case) and fields, its
//! `class` (`missing`, `documentation`, `foreign`, `drift`), whether it is
//! `documentation_only` (a comment: `check` reports it, `apply` never
//! refuses over it), and the `message` the text output prints.

use schema_model::SchemaName;
use serde::Serialize;

use crate::bootstrap::Outcome;
use crate::check::{ForeignPolicy, State, Status, VersionState};
use crate::verify::{Class, Difference};

/// One difference, as the JSON reports it.
#[derive(Debug, Serialize)]
pub(super) struct DifferenceReport<'a> {
    #[serde(flatten)]
    difference: &'a Difference,
    /// `missing`, `documentation`, `foreign` or `drift`.
    class: Class,
    documentation_only: bool,
    /// For a foreign object under `check`: whether `--allow-foreign` names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed: Option<bool>,
    message: String,
}

/// Each difference as the JSON reports it.
pub(super) fn differences(list: &[Difference]) -> Vec<DifferenceReport<'_>> {
    list.iter()
        .map(|difference| DifferenceReport {
            difference,
            class: difference.class(),
            documentation_only: difference.is_comment(),
            allowed: None,
            message: difference.to_string(),
        })
        .collect()
}

/// `check --format json`.
#[derive(Debug, Serialize)]
struct CheckReport<'a> {
    schema: &'a str,
    state: State,
    exit_code: u8,
    matches: bool,
    differences: Vec<DifferenceReport<'a>>,
    version: &'a Status,
}

/// `apply --format json`: what was done, or why nothing was.
#[derive(Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum ApplyReport<'a> {
    /// Missing objects were created.
    Created {
        schema: &'a str,
        schema_created: bool,
        tables_created: &'a [String],
        statements_run: usize,
        foreign: Vec<DifferenceReport<'a>>,
        message: String,
    },
    /// Nothing to do.
    AlreadyCurrent {
        schema: &'a str,
        stale_comments: Vec<DifferenceReport<'a>>,
        foreign: Vec<DifferenceReport<'a>>,
        message: String,
    },
    /// Nothing to do: the schema serves this release with its contract
    /// pending.
    ContractPending {
        schema: &'a str,
        version: u32,
        oldest_served: u32,
        stale_comments: Vec<DifferenceReport<'a>>,
        foreign: Vec<DifferenceReport<'a>>,
        message: String,
    },
    /// Nothing to do: a newer version that still serves this release.
    ServedByNewer {
        schema: &'a str,
        found: u32,
        model: u32,
        message: String,
    },
    /// Drift: apply refused and changed nothing.
    Refused {
        schema: &'a str,
        differences: Vec<DifferenceReport<'a>>,
        /// The known version the differences are from, when the schema is none.
        #[serde(skip_serializing_if = "Option::is_none")]
        nearest: Option<u32>,
        message: String,
    },
}

fn json(value: &impl Serialize) -> String {
    // Serializing these plain structs cannot fail; keep a message if it does.
    let mut text = serde_json::to_string_pretty(value)
        .unwrap_or_else(|err| format!("{{\"error\": \"cannot serialize the report: {err}\"}}"));
    text.push('\n');
    text
}

/// `check`'s report.
///
/// `state` is what `check` concludes ([`State`], by name) and `exit_code`
/// its exit code; `matches` is `state == "matches"` (exit 0). `version`
/// says where the database stands (`state`, `found`, `contracted`, `model`,
/// `nearest`, `serves_model`, `message`), and `differences` are from the
/// shape that position implies, each with its `class`; a foreign object
/// also says whether the policy `allowed` it.
pub(super) fn check_json(schema: &SchemaName, status: &Status, policy: &ForeignPolicy) -> String {
    let state = status.state(policy);
    let mut listed = differences(&status.differences);
    for report in &mut listed {
        if report.difference.is_foreign() {
            report.allowed = Some(policy.allows(report.difference));
        }
    }
    json(&CheckReport {
        schema: schema.as_str(),
        state,
        exit_code: state.exit_code(),
        matches: state == State::Matches,
        differences: listed,
        version: status,
    })
}

/// `apply`'s report when it ran.
pub(super) fn apply_json(outcome: &Outcome) -> String {
    let message = outcome.to_string();
    json(&match outcome {
        Outcome::Created {
            schema,
            schema_created,
            tables_created,
            statements_run,
            foreign,
        } => ApplyReport::Created {
            schema: schema.as_str(),
            schema_created: *schema_created,
            tables_created,
            statements_run: *statements_run,
            foreign: differences(foreign),
            message,
        },
        Outcome::AlreadyCurrent {
            schema,
            stale_comments,
            foreign,
        } => ApplyReport::AlreadyCurrent {
            schema: schema.as_str(),
            stale_comments: differences(stale_comments),
            foreign: differences(foreign),
            message,
        },
        Outcome::ContractPending {
            schema,
            version,
            oldest_served,
            stale_comments,
            foreign,
        } => ApplyReport::ContractPending {
            schema: schema.as_str(),
            version: *version,
            oldest_served: *oldest_served,
            stale_comments: differences(stale_comments),
            foreign: differences(foreign),
            message,
        },
        Outcome::ServedByNewer {
            schema,
            found,
            model,
        } => ApplyReport::ServedByNewer {
            schema: schema.as_str(),
            found: *found,
            model: *model,
            message,
        },
    })
}

/// `apply`'s (or `upgrade`'s) report when it refused over drift.
pub(super) fn refused_json(
    schema: &SchemaName,
    found: &[Difference],
    nearest: Option<u32>,
    message: &str,
) -> String {
    json(&ApplyReport::Refused {
        schema: schema.as_str(),
        differences: differences(found),
        nearest,
        message: message.to_owned(),
    })
}

/// `schema x <verdict> (N differences):` and one difference per line,
/// comments marked as documentation only.
pub(super) fn differences_text(
    schema: &SchemaName,
    differences: &[Difference],
    verdict: &str,
) -> String {
    let mut out = format!(
        "schema {schema} {verdict} ({} difference{}):\n",
        differences.len(),
        if differences.len() == 1 { "" } else { "s" }
    );
    for difference in differences {
        let note = if difference.is_comment() {
            " (documentation only)"
        } else {
            ""
        };
        out.push_str(&format!("  {difference}{note}\n"));
    }
    out
}

/// `schema x matches the model; N comments differ ...:` and one per line:
/// what a passing `check` prints when only documentation differs.
pub(super) fn comments_text(schema: &SchemaName, differences: &[Difference]) -> String {
    let one = differences.len() == 1;
    let mut out = format!(
        "schema {schema} matches the model; {} comment{} differ{} (documentation only, so check \
         passes; `schema-gen sql --schema {schema} | psql -v ON_ERROR_STOP=1` run by the owner \
         refreshes {}):\n",
        differences.len(),
        if one { "" } else { "s" },
        if one { "s" } else { "" },
        if one { "it" } else { "them" },
    );
    for difference in differences {
        out.push_str(&format!("  {difference}\n"));
    }
    out
}

/// What `check` prints, and the state it concludes under `policy`: where
/// the database stands (one line), then the differences from the shape that
/// position implies, if any, then the foreign objects (each marked when the
/// policy allows it). Comments that differ are listed as documentation only.
pub(super) fn check_text(
    schema: &SchemaName,
    status: &Status,
    policy: &ForeignPolicy,
) -> (String, State) {
    let state = status.state(policy);
    let (foreign, listed): (Vec<Difference>, Vec<Difference>) = status
        .differences
        .iter()
        .cloned()
        .partition(Difference::is_foreign);
    let drift = listed.iter().any(|d| !d.is_comment());
    let mut text = match (status.state, drift) {
        (VersionState::Current, false) if listed.is_empty() => {
            format!("{}\n", status.message)
        }
        (VersionState::Current, false) => comments_text(schema, &listed),
        (VersionState::Unknown, true) if status.nearest.is_some() => differences_text(
            schema,
            &listed,
            &format!(
                "is no version this release knows and records none; it is nearest to version {}, \
                 from which it differs",
                status.nearest.unwrap_or_default()
            ),
        ),
        (VersionState::Current | VersionState::Unknown, true) | (VersionState::Missing, _) => {
            differences_text(schema, &listed, "differs from the model")
        }
        (_, true) => {
            let mut out = format!("{}\n", status.message);
            out.push_str(&differences_text(
                schema,
                &listed,
                "differs from the shape its version implies",
            ));
            out
        }
        (_, false) => {
            let mut out = format!("{}\n", status.message);
            for difference in &listed {
                out.push_str(&format!("  {difference} (documentation only)\n"));
            }
            out
        }
    };
    if !foreign.is_empty() {
        text.push_str(&foreign_text(&foreign, policy, state));
    }
    (text, state)
}

/// The foreign objects `check` found: one line saying what they are and
/// whether they fail it, then one per object.
fn foreign_text(foreign: &[Difference], policy: &ForeignPolicy, state: State) -> String {
    let allowed = foreign.iter().filter(|d| policy.allows(d)).count();
    let verdict = if allowed == foreign.len() {
        "all allowed by --allow-foreign".to_owned()
    } else if state == State::ForeignObjects {
        format!(
            "{} not allowed, so check exits {} (name them with --allow-foreign NAME to let them \
             pass)",
            foreign.len() - allowed,
            State::ForeignObjects.exit_code()
        )
    } else {
        format!("{} not allowed by --allow-foreign", foreign.len() - allowed)
    };
    let mut out = format!(
        "{} object{} not in the model (foreign: the engine neither reads nor needs {}, and \
         leaves {} alone; {verdict}):\n",
        foreign.len(),
        if foreign.len() == 1 { "" } else { "s" },
        if foreign.len() == 1 { "it" } else { "them" },
        if foreign.len() == 1 { "it" } else { "them" },
    );
    for difference in foreign {
        let note = if policy.allows(difference) {
            " (allowed)"
        } else {
            ""
        };
        out.push_str(&format!("  {difference}{note}\n"));
    }
    out
}
