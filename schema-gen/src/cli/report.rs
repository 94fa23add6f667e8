//! What `apply` and `check` print: text for people, or JSON for tools.
//!
//! The JSON is stable: keys are only ever added. Every difference carries
//! its `kind` (the [`Difference`] variant in snake case) and fields, whether
//! it is `documentation_only` (a comment: `check` reports it, `apply` never
//! refuses over it), and the `message` the text output prints.

use schema_model::SchemaName;
use serde::Serialize;

use crate::Outcome;
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
pub(super) fn check_json(schema: &SchemaName, found: &[Difference]) -> String {
    json(&CheckReport {
        schema: schema.as_str(),
        matches: found.iter().all(Difference::is_comment),
        differences: differences(found),
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
