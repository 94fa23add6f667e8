//! What `apply` and `check` print: text for people, or JSON for tools.
//!
//! The JSON is stable: keys are only ever added. Every difference carries
//! its `kind` (the [`Difference`] variant in snake case) and fields, whether
//! it is `documentation_only` (a comment: `check` reports it, `apply` never
//! refuses over it), and the `message` the text output prints.

use schema_model::SchemaName;
use serde::Serialize;

use crate::bootstrap::Outcome;
use crate::check::{Status, VersionState};
use crate::verify::Difference;

/// One difference, as the JSON reports it.
#[derive(Debug, Serialize)]
pub(super) struct DifferenceReport<'a> {
    #[serde(flatten)]
    difference: &'a Difference,
    documentation_only: bool,
    message: String,
}

fn differences(list: &[Difference]) -> Vec<DifferenceReport<'_>> {
    list.iter()
        .map(|difference| DifferenceReport {
            difference,
            documentation_only: difference.is_comment(),
            message: difference.to_string(),
        })
        .collect()
}

/// `check --format json`.
#[derive(Debug, Serialize)]
struct CheckReport<'a> {
    schema: &'a str,
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
        message: String,
    },
    /// Nothing to do.
    AlreadyCurrent {
        schema: &'a str,
        stale_comments: Vec<DifferenceReport<'a>>,
        message: String,
    },
    /// Nothing to do: the schema serves this release with its contract
    /// pending.
    ContractPending {
        schema: &'a str,
        version: u32,
        oldest_served: u32,
        stale_comments: Vec<DifferenceReport<'a>>,
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
/// `matches` is true when nothing but documentation differs: comments never
/// change what the engine reads or writes, and `check` then exits 0.
/// `version` says where the database stands (`state`, `found`,
/// `contracted`, `model`, `serves_model`, `message`); `matches` is whether
/// `check` passes (the database serves this release and has the shape its
/// version implies), and `differences` are from that shape.
pub(super) fn check_json(schema: &SchemaName, status: &Status) -> String {
    json(&CheckReport {
        schema: schema.as_str(),
        matches: status.passes(),
        differences: differences(&status.differences),
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
        } => ApplyReport::Created {
            schema: schema.as_str(),
            schema_created: *schema_created,
            tables_created,
            statements_run: *statements_run,
            message,
        },
        Outcome::AlreadyCurrent {
            schema,
            stale_comments,
        } => ApplyReport::AlreadyCurrent {
            schema: schema.as_str(),
            stale_comments: differences(stale_comments),
            message,
        },
        Outcome::ContractPending {
            schema,
            version,
            oldest_served,
            stale_comments,
        } => ApplyReport::ContractPending {
            schema: schema.as_str(),
            version: *version,
            oldest_served: *oldest_served,
            stale_comments: differences(stale_comments),
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

/// `apply`'s report when it refused over drift.
pub(super) fn refused_json(schema: &SchemaName, found: &[Difference], message: &str) -> String {
    json(&ApplyReport::Refused {
        schema: schema.as_str(),
        differences: differences(found),
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

/// What `check` prints, and its exit code: where the database stands (one
/// line), then the differences from the shape that position implies, if
/// any. It passes (exit 0) when the database serves this release and has
/// that shape; comments that differ are listed as documentation only.
pub(super) fn check_text(schema: &SchemaName, status: &Status) -> (String, std::process::ExitCode) {
    let code = if status.passes() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(super::EXIT_DRIFT)
    };
    let drift = status.differences.iter().any(|d| !d.is_comment());
    let text = match (status.state, drift) {
        (VersionState::Current, false) if status.differences.is_empty() => {
            format!("{}\n", status.message)
        }
        (VersionState::Current, false) => comments_text(schema, &status.differences),
        (VersionState::Current | VersionState::Unknown, true) | (VersionState::Missing, _) => {
            differences_text(schema, &status.differences, "differs from the model")
        }
        (_, true) => {
            let mut out = format!("{}\n", status.message);
            out.push_str(&differences_text(
                schema,
                &status.differences,
                "differs from the shape its version implies",
            ));
            out
        }
        (_, false) => {
            let mut out = format!("{}\n", status.message);
            for difference in &status.differences {
                out.push_str(&format!("  {difference} (documentation only)\n"));
            }
            out
        }
    };
    (text, code)
}
