//! Before a contract removes what older engines rely on: the sessions of
//! older releases still connected, told apart in the two ways
//! `pg_stat_activity` allows, and refused unless allowed.
//!
//! - **`application_name`** carrying `alkstore-engine/<release>`, as the
//!   README asks operators to name each release's engines: `<release>` is
//!   a release as [`schema_model::history`] lists it (`e63468a`, `b8b70fe`,
//!   `0.3.0`) or a schema version as `v<N>` (`v1`); any other tag says
//!   nothing.
//! - **its last statement**, where the role may see it (its own sessions,
//!   or any with `pg_read_all_stats`): one of the statements an older
//!   release runs (its shipped `statements.json`, for this schema) that no
//!   newer one runs; a statement every release shares tells nothing.
//!
//! What cannot be observed is said, not guessed: sessions of other roles
//! that name no release are counted, and reported as not looked into. An
//! engine that has run nothing yet since it connected, and names no
//! release, cannot be told from any other client.

use serde::Deserialize;
use tokio_postgres::Client;

use schema_model::history;
use schema_model::{Layout, SchemaName};

use super::Progress;
use crate::catalog::{self, LiveSession};
use crate::error::{Context, EngineSession, Error, Step as ErrorStep, classify};
use crate::statements::all_for;
use crate::versions::{Action, Itinerary, Leg, Phase};

/// The `application_name` prefix a release's engines carry.
pub const APPLICATION_PREFIX: &str = "alkstore-engine/";

/// What the contract of `itinerary` breaks for older engines: the newest
/// version whose contract removes something they rely on (engines older
/// than it break), and what fails for them, in words. `None` when it
/// removes nothing an engine statement needs (only indexes, say).
pub(super) fn breaks(itinerary: &Itinerary) -> Option<(u32, Vec<String>)> {
    let mut newest = None;
    let mut words = Vec::new();
    for leg in &itinerary.legs {
        let Leg::Step(leg) = leg else { continue };
        let step = &leg.step;
        if step.phase != Phase::Contract {
            continue;
        }
        let table = &step.table;
        let broken = match &step.action {
            Action::DropDefault { column } => {
                format!("inserts into {table} (null value in column \"{column}\")")
            }
            Action::AddCheck { constraint, .. } => {
                format!("writes to {table} that break {constraint}")
            }
            Action::DropColumn { column } => format!("statements that use {table}.{column}"),
            Action::DropTable => format!("statements on {table}"),
            _ => continue,
        };
        words.push(broken);
        newest = newest.max(Some(step.version));
    }
    newest.map(|version| (version, words))
}

/// The sessions that run an engine older than `version` on `schema`, and
/// how many others could not be looked into.
///
/// # Errors
///
/// The question's failure, classified.
pub(super) async fn older_than(
    client: &Client,
    schema: &SchemaName,
    version: u32,
) -> Result<(Vec<EngineSession>, usize), Error> {
    let sessions = catalog::sessions(client).await.map_err(|err| {
        let step = ErrorStep {
            doing: format!(
                "looking for engines of older versions connected to schema {schema}'s database"
            ),
            ..ErrorStep::default()
        };
        classify(err, &step, &Context::unnamed(schema))
    })?;
    let known = Statements::of(schema);
    let mut older = Vec::new();
    let mut unseen = 0;
    for session in sessions {
        match known.identify(&session) {
            Some((found, by)) if found < version => older.push(EngineSession {
                pid: session.pid,
                role: session.role,
                application: session.application,
                since: session.since,
                version: found,
                by,
            }),
            Some(_) => {}
            None if session.query.is_none() => unseen += 1,
            None => {}
        }
    }
    Ok((older, unseen))
}

/// Reports what `older_than` found when the contract runs anyway.
pub(super) fn report(
    progress: &mut (dyn FnMut(&Progress) + Send),
    older: Vec<EngineSession>,
    unseen: usize,
) {
    if !older.is_empty() {
        progress(&Progress::OlderEnginesConnected { sessions: older });
    }
    if unseen > 0 {
        progress(&Progress::SessionsUnseen { count: unseen });
    }
}

/// One release's statement, for `schema`.
#[derive(Deserialize)]
struct Shipped {
    name: String,
    sql: String,
}

#[derive(Deserialize)]
struct ShippedList {
    statements: Vec<Shipped>,
}

/// The statements of every shipped release (by version), and this
/// release's, for one schema.
struct Statements {
    older: Vec<(u32, String, String)>,
    current: Vec<String>,
}

/// Shorter than this, a cut-off `pg_stat_activity.query` (it keeps
/// `track_activity_query_size` bytes) is not taken for a statement.
const SHORTEST_PREFIX: usize = 100;

impl Statements {
    fn of(schema: &SchemaName) -> Self {
        let quoted = format!("\"{}\"", schema.as_str());
        let mut older = Vec::new();
        for version in history::versions() {
            let Some(shipped) = version.shipped else {
                continue;
            };
            // A shipped file is pinned by the history's tests; one that
            // did not parse would only tell nothing.
            let list = serde_json::from_str::<ShippedList>(shipped.statements_json)
                .map(|list| list.statements)
                .unwrap_or_default();
            for statement in list {
                let sql = statement.sql.replace("\"alkstore\"", &quoted);
                older.push((version.number, statement.name, sql));
            }
        }
        let current = Layout::ALL
            .iter()
            .flat_map(|layout| all_for(schema, *layout))
            .map(|s| s.sql().to_owned())
            .collect();
        Self { older, current }
    }

    /// The version `session` runs and how that was told, if it can be.
    fn identify(&self, session: &LiveSession) -> Option<(u32, String)> {
        if let Some(version) = session.application.as_deref().and_then(tagged) {
            return Some((version, "its application_name".to_owned()));
        }
        let query = session.query.as_deref()?.trim();
        let is =
            |sql: &str| sql == query || (query.len() >= SHORTEST_PREFIX && sql.starts_with(query));
        if self.current.iter().any(|sql| is(sql)) {
            return None;
        }
        // The newest release that runs it: an engine of that release or
        // of an older one.
        self.older
            .iter()
            .filter(|(_, _, sql)| is(sql))
            .max_by_key(|(number, _, _)| *number)
            .map(|(number, name, _)| {
                (
                    *number,
                    format!("its last statement, version {number}'s {name}"),
                )
            })
    }
}

/// The version an `application_name` names: `alkstore-engine/<release>` or
/// `alkstore-engine/v<N>`.
fn tagged(application: &str) -> Option<u32> {
    let (_, rest) = application.split_once(APPLICATION_PREFIX)?;
    let tag = rest.split_whitespace().next()?;
    if let Some(number) = tag.strip_prefix('v').and_then(|n| n.parse().ok()) {
        return history::version(number).map(|v| v.number);
    }
    history::versions()
        .into_iter()
        .find(|v| v.release == tag)
        .map(|v| v.number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_told_by_its_tag_and_nothing_else() {
        assert_eq!(tagged("alkstore-engine/e63468a"), Some(1));
        assert_eq!(tagged("alkstore-engine/v1"), Some(1));
        assert_eq!(tagged("billing alkstore-engine/b8b70fe worker-3"), Some(2));
        assert_eq!(
            tagged(&format!("alkstore-engine/{}", env!("CARGO_PKG_VERSION"))),
            Some(history::MODEL_VERSION)
        );
        assert_eq!(tagged("alkstore-engine/9.9.9"), None);
        assert_eq!(tagged("alkstore-engine/v99"), None);
        assert_eq!(tagged("psql"), None);
    }

    #[test]
    fn a_statement_only_an_older_release_runs_tells_its_version() {
        let schema = SchemaName::new("alk").unwrap();
        let known = Statements::of(&schema);
        let session = |query: &str| LiveSession {
            pid: 1,
            role: None,
            application: None,
            since: None,
            query: Some(query.to_owned()),
        };
        let (_, _, enqueue_v1) = known
            .older
            .iter()
            .find(|(n, name, _)| *n == 1 && name == "enqueue")
            .unwrap();
        assert!(enqueue_v1.contains("\"alk\".\"jobs\""), "{enqueue_v1}");
        let (version, by) = known.identify(&session(enqueue_v1)).unwrap();
        assert_eq!(version, 1, "{by}");
        assert_eq!(by, "its last statement, version 1's enqueue");
        // Cut off by track_activity_query_size: still told, unless what is
        // left is also the start of this release's enqueue.
        let cut = &enqueue_v1[..enqueue_v1.len() - 10];
        assert_eq!(known.identify(&session(cut)).map(|(v, _)| v), Some(1));
        assert_eq!(
            known.identify(&session(&enqueue_v1[..SHORTEST_PREFIX])),
            None
        );
        // This release's own statements, and anything else, tell nothing.
        for sql in &known.current {
            assert_eq!(known.identify(&session(sql)), None, "{sql}");
        }
        assert_eq!(known.identify(&session("SELECT 1")), None);
    }
}
