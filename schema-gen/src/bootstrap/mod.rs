//! `bootstrap(client, schema)`: what the engine calls at open. Idempotent,
//! safe under concurrent opens, and cheap when the schema is already there.
//!
//! # Steady state: one round trip, reads only, bounded
//!
//! Bootstrap first reads the live catalog ([`catalog::read`]: one simple
//! query, `pg_catalog` only) and compares it with the model. When everything
//! is present and matches, it returns [`Outcome::AlreadyCurrent`]: no DDL, no
//! explicit transaction, no lock an engine workload could wait on. The read
//! waits at most [`Options::lock_timeout`] behind a session holding `ACCESS
//! EXCLUSIVE` on an engine table (a `VACUUM FULL`, an `ALTER TABLE`), then
//! fails with [`ErrorKind::LockTimeout`] naming that session: an open never
//! hangs. `CREATE ... IF NOT
//! EXISTS` would not do: `CREATE INDEX IF NOT EXISTS` takes a `SHARE` lock
//! before it looks at the name, so it queues behind every open write
//! transaction and every later writer queues behind it; and a runtime role
//! with only `USAGE` and DML cannot run it at all. The read works for that role.
//!
//! # Drift: refuse, change nothing
//!
//! When an engine-owned object exists with another shape than the model's
//! (a missing, extra or re-typed column, changed nullability or default, an
//! index or constraint with the right name and another definition, a missing
//! index or constraint on an existing table, or a relation the model does not
//! declare), bootstrap returns [`ErrorKind::Drift`] listing every
//! [`Difference`] and changes nothing. A database at another schema version
//! is refused naming both versions (`schema-gen upgrade` moves an older one).
//!
//! # Creating: one transaction
//!
//! When the schema or some of its tables do not exist (and nothing that
//! exists has drifted), bootstrap opens one transaction and:
//!
//! 1. bounds every lock wait to [`Options::lock_timeout`] and every statement
//!    to that plus [`STATEMENT_ALLOWANCE`](crate::options::STATEMENT_ALLOWANCE)
//!    ([`render::bounds_statement`](crate::render::bounds_statement), `SET LOCAL`), and takes the transaction-scoped advisory
//!    lock keyed on the schema name ([`render::advisory_lock_statement`](crate::render::advisory_lock_statement)),
//!    the same lock the printed script takes, so concurrent bootstraps and
//!    script runs of one schema take turns (concurrent `IF NOT EXISTS` DDL is
//!    not race-safe in PostgreSQL);
//! 2. reads the catalog again under the lock: another session may have
//!    created the schema meanwhile (then it is [`Outcome::AlreadyCurrent`])
//!    or something may have drifted (then it refuses);
//! 3. runs the statements of [`render::bootstrap_statements`](crate::render::bootstrap_statements), the one
//!    rendering function, for the objects that are missing: the schema if it
//!    is missing, and each missing table with its indexes and comments.
//!    Existing objects are never touched, so no DDL reaches a table that
//!    workers may be writing, and a role that owns nothing existing can
//!    still add a missing table (a table added to the model in a later
//!    release is created this way);
//! 4. verifies the result against the model, still inside the transaction:
//!    if what the statements made differs from the model (an event trigger
//!    that alters each new table, a rendering bug), it fails with
//!    [`ErrorKind::CreatedDiffers`] and rolls back;
//! 5. commits. Any failure rolls everything back.
//!
//! Comments are documentation: a comment that differs from the model is
//! reported by [`verify`](crate::check::verify) (and `schema-gen check`) but
//! never makes bootstrap refuse or issue DDL; re-running the printed script
//! refreshes comments.

mod create;

use std::fmt;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use schema_model::SchemaName;

use crate::catalog;
use crate::check;
use crate::difference::Difference;
use crate::error::{Error, ErrorKind};
use crate::options::Options;
use crate::versions::{Standing, Verdict};

/// What [`bootstrap`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Missing objects were created, in one committed transaction.
    Created {
        /// The engine schema.
        schema: SchemaName,
        /// Whether the schema itself was created (false when it existed and
        /// only tables were missing).
        schema_created: bool,
        /// The tables created, in creation order.
        tables_created: Vec<String>,
        /// How many statements ran (DDL and comments).
        statements_run: usize,
        /// Objects the model does not own that were already there, left
        /// alone ([`Difference::is_foreign`]).
        foreign: Vec<Difference>,
    },
    /// Everything was present and matched the model: nothing was done.
    AlreadyCurrent {
        /// The engine schema.
        schema: SchemaName,
        /// Comments that differ from the model's docs (documentation only;
        /// bootstrap never rewrites existing objects).
        stale_comments: Vec<Difference>,
        /// Objects the model does not own and that cannot change what the
        /// engine's statements do (a DBA's reporting index, say): seen, left
        /// alone ([`Difference::is_foreign`]).
        foreign: Vec<Difference>,
    },
    /// The schema is upgraded to this release's version and its contract
    /// is pending: it serves this release's engines and those of the
    /// versions since `oldest_served`. Nothing was done.
    ContractPending {
        /// The engine schema.
        schema: SchemaName,
        /// This release's version, which the schema is expanded to.
        version: u32,
        /// The oldest version whose engines it still serves.
        oldest_served: u32,
        /// Comments that differ from the model's docs (documentation only).
        stale_comments: Vec<Difference>,
        /// Objects the model does not own, left alone
        /// ([`Difference::is_foreign`]).
        foreign: Vec<Difference>,
    },
    /// The schema is at a newer version than this release's, expanded so
    /// that it still serves this release's engines (its contract is
    /// pending). This release cannot verify a version it does not know; the
    /// newer release's `schema-gen check` does. Nothing was done.
    ServedByNewer {
        /// The engine schema.
        schema: SchemaName,
        /// The newer version the schema is expanded to.
        found: u32,
        /// This release's version.
        model: u32,
    },
}

impl Outcome {
    /// Whether this bootstrap created anything.
    pub fn created(&self) -> bool {
        matches!(self, Self::Created { .. })
    }

    /// The objects the model does not own that bootstrap saw and left
    /// alone: what a DBA added that cannot change what the engine's
    /// statements read, write or return. An engine may log them.
    pub fn foreign(&self) -> &[Difference] {
        match self {
            Self::Created { foreign, .. }
            | Self::AlreadyCurrent { foreign, .. }
            | Self::ContractPending { foreign, .. } => foreign,
            Self::ServedByNewer { .. } => &[],
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_done(f)?;
        let foreign = self.foreign();
        if !foreign.is_empty() {
            let list: Vec<String> = foreign.iter().map(ToString::to_string).collect();
            write!(
                f,
                "; {} object{} not in the model left alone (foreign: {})",
                foreign.len(),
                if foreign.len() == 1 { "" } else { "s" },
                list.join("; ")
            )?;
        }
        Ok(())
    }
}

impl Outcome {
    /// What was done, in words, foreign objects aside.
    fn fmt_done(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created {
                schema,
                schema_created: true,
                tables_created,
                statements_run,
                ..
            } => write!(
                f,
                "created schema {schema} with {} tables ({}): {statements_run} statements in one \
                 transaction",
                tables_created.len(),
                tables_created.join(", ")
            ),
            Self::Created {
                schema,
                schema_created: false,
                tables_created,
                statements_run,
                ..
            } => write!(
                f,
                "created {} missing table{} in existing schema {schema} ({}): {statements_run} \
                 statements in one transaction",
                tables_created.len(),
                if tables_created.len() == 1 { "" } else { "s" },
                tables_created.join(", ")
            ),
            Self::AlreadyCurrent {
                schema,
                stale_comments,
                ..
            } if stale_comments.is_empty() => {
                write!(f, "schema {schema} is already current: nothing to do")
            }
            Self::AlreadyCurrent {
                schema,
                stale_comments,
                ..
            } => write!(
                f,
                "schema {schema} is already current: nothing to do; {} comment{} differ{} from \
                 the model (documentation only): run `schema-gen sql --schema {schema} | psql -v \
                 ON_ERROR_STOP=1` as the owner to refresh them",
                stale_comments.len(),
                if stale_comments.len() == 1 { "" } else { "s" },
                if stale_comments.len() == 1 { "s" } else { "" },
            ),
            Self::ContractPending {
                schema,
                version,
                oldest_served,
                ..
            } => write!(
                f,
                "schema {schema} is at version {version} with its contract pending (it serves \
                 the engines of versions {oldest_served} to {version}): nothing to do; once no \
                 engine older than version {version} runs, run `schema-gen upgrade --contract \
                 --schema {schema}`"
            ),
            Self::ServedByNewer {
                schema,
                found,
                model,
            } => write!(
                f,
                "schema {schema} is at version {found}, newer than this release's {model}, and \
                 still serves version {model}'s engines (its contract is pending): nothing to \
                 do; this release cannot verify version {found}: the newer release's `schema-gen \
                 check` does"
            ),
        }
    }
}

/// [`bootstrap_with`] under the default [`Options`] (a 5 s lock bound).
///
/// # Errors
///
/// As [`bootstrap_with`].
pub async fn bootstrap(client: &mut Client, schema: &SchemaName) -> Result<Outcome, Error> {
    bootstrap_with(client, schema, &Options::default()).await
}

/// Brings `schema` to the model, or proves it is there: see the module docs.
///
/// At steady state this is one round trip that only reads `pg_catalog`,
/// bounded by `options`.
///
/// # Errors
///
/// - [`ErrorKind::Drift`]: objects exist with another shape; nothing changed.
/// - [`ErrorKind::Privilege`]: the role lacks a privilege to create what is
///   missing (the message names it, e.g. `CREATE on database app`).
/// - [`ErrorKind::LockTimeout`]: a lock wait exceeded `options.lock_timeout`;
///   the message says which lock and, where the role may see it, which
///   session holds it.
/// - [`ErrorKind::CreatedDiffers`]: the statements ran but what they made
///   differs from the model; rolled back.
/// - [`ErrorKind::StatementPooling`]: the connection goes through pgbouncer
///   in statement pooling mode, which cannot create (retrying will not help).
/// - [`ErrorKind::Connection`]: the connection was lost; nothing was committed.
/// - [`ErrorKind::OlderVersion`], [`ErrorKind::NewerVersion`],
///   [`ErrorKind::UpgradeInProgress`]: the schema is at another version.
/// - [`ErrorKind::VersionsUnreadable`], [`ErrorKind::InconsistentVersions`]:
///   its version cannot be told.
/// - [`ErrorKind::Layout`]: under the Citus layout, a server without Citus
///   or a worker.
/// - [`ErrorKind::ConcurrentChange`]: another session left the schema
///   incomplete while this one waited for the lock; nothing changed.
/// - [`ErrorKind::UndecodableReply`], [`ErrorKind::Defect`]: a reply or a
///   shipped version that cannot be read.
/// - [`ErrorKind::Query`]: any other server error.
pub async fn bootstrap_with(
    client: &mut Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Outcome, Error> {
    let history = check::shipped_history()?;
    let inspection = check::inspect(client, schema, options, history).await?;
    // A family placed otherwise than the layout says is drift, whether it
    // is complete or not: nothing is created into it.
    if !inspection.placement.is_empty() {
        return Err(ErrorKind::Drift {
            schema: schema.clone(),
            differences: inspection.placement,
            nearest: None,
        }
        .into());
    }
    let live = inspection.live;
    if let Some(current) = decide(inspection.verdict, schema, &live.role)? {
        return Ok(current);
    }
    let result = match create::create(client, schema, history, options, &live).await {
        // A creator that does not take the advisory lock (a hand-written
        // script) can still clash with us on a catalog unique index; the
        // transaction rolled back, so one more try sees its committed result.
        Err(err) if is_creation_clash(&err) => {
            let again = check::inspect(client, schema, options, history).await?;
            match decide(again.verdict, schema, &again.live.role)? {
                Some(outcome) => Ok(outcome),
                None => create::create(client, schema, history, options, &again.live).await,
            }
        }
        other => other,
    };
    match result {
        // Rolled back by now, so the session can ask who held the lock.
        Err(err) => Err(catalog::explain(client, err).await),
        ok => ok,
    }
}

/// What to do about a judged database: `Ok(Some(outcome))` when nothing is
/// to be done (the schema is current, serves this release with a contract
/// pending, or is served by a newer version), `Ok(None)` when objects must
/// be created, `Err` when the schema is another version (older, newer,
/// being upgraded), has drifted, or cannot be judged.
fn decide(verdict: Verdict, schema: &SchemaName, role: &str) -> Result<Option<Outcome>, Error> {
    // What a DBA must fix; comments and foreign objects are not in the way.
    let drift = |differences: Vec<Difference>, nearest: Option<u32>| -> Error {
        ErrorKind::Drift {
            schema: schema.clone(),
            differences: differences
                .into_iter()
                .filter(|d| d.is_drift() || d.is_missing_object())
                .collect(),
            nearest,
        }
        .into()
    };
    let model = verdict.target;
    let (comments, foreign): (Vec<Difference>, Vec<Difference>) = verdict
        .differences
        .iter()
        .filter(|d| d.is_comment() || d.is_foreign())
        .cloned()
        .partition(Difference::is_comment);
    match verdict.standing {
        Standing::Absent | Standing::Unversioned => Ok(None),
        Standing::Unrecognised { nearest } => Err(drift(verdict.differences, Some(nearest))),
        Standing::Unreadable => Err(ErrorKind::VersionsUnreadable {
            schema: schema.clone(),
            role: role.to_owned(),
        }
        .into()),
        Standing::Inconsistent => Err(ErrorKind::InconsistentVersions {
            schema: schema.clone(),
        }
        .into()),
        Standing::Older { found, recognised } => Err(ErrorKind::OlderVersion {
            schema: schema.clone(),
            found,
            recognised,
            model,
        }
        .into()),
        // An engine of the target waits for the upgrade to its version; an
        // upgrade to an earlier one leaves the database at the older version.
        Standing::Upgrading { version } if version == model => {
            let (done, of) = verdict.progress.as_ref().map_or((0, 0), |p| (p.done, p.of));
            Err(ErrorKind::UpgradeInProgress {
                schema: schema.clone(),
                version,
                done,
                of,
            }
            .into())
        }
        Standing::Upgrading { .. } => Err(ErrorKind::OlderVersion {
            schema: schema.clone(),
            found: verdict.span_or_zero().expanded,
            recognised: false,
            model,
        }
        .into()),
        Standing::Newer {
            found,
            serves_target: true,
        } => Ok(Some(Outcome::ServedByNewer {
            schema: schema.clone(),
            found,
            model,
        })),
        Standing::Newer { .. } => {
            let span = verdict.span_or_zero();
            Err(ErrorKind::NewerVersion {
                schema: schema.clone(),
                found: span.expanded,
                contracted: span.contracted,
                model,
            }
            .into())
        }
        Standing::ContractPending { .. } | Standing::Current if verdict.drifts() => {
            Err(drift(verdict.differences, None))
        }
        Standing::ContractPending { .. } | Standing::Current if verdict.lacks_objects() => Ok(None),
        Standing::ContractPending { oldest_served } => Ok(Some(Outcome::ContractPending {
            schema: schema.clone(),
            version: model,
            oldest_served,
            stale_comments: comments,
            foreign,
        })),
        Standing::Current => Ok(Some(Outcome::AlreadyCurrent {
            schema: schema.clone(),
            stale_comments: comments,
            foreign,
        })),
    }
}

fn is_creation_clash(err: &Error) -> bool {
    match err.kind() {
        ErrorKind::Query { source, .. } => source.code().is_some_and(|code| {
            [
                SqlState::UNIQUE_VIOLATION,
                SqlState::DUPLICATE_SCHEMA,
                SqlState::DUPLICATE_TABLE,
                SqlState::DUPLICATE_OBJECT,
            ]
            .contains(code)
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::create::{plan, statement_step};
    use super::*;
    use crate::catalog::{LiveCatalog, LiveSchema};
    use crate::render::{self, StatementKind};
    use crate::verify::tests::perfect;
    use crate::versions::{History, verdict};

    fn assess(live: &LiveCatalog) -> Result<Option<Outcome>, Error> {
        decide(
            verdict(live, &schema(), History::shipped().unwrap()),
            &schema(),
            &live.role,
        )
    }

    fn schema() -> SchemaName {
        SchemaName::new("alk").unwrap()
    }

    #[test]
    fn a_missing_schema_runs_every_statement() {
        let live = LiveCatalog {
            role: "r".into(),
            database: "d".into(),
            schema: None,
            relations: vec![],
            objects: vec![],
            versions: None,
        };
        let all = render::bootstrap_statements(&schema());
        let planned = plan(&live, all.clone());
        assert_eq!(planned.len(), all.len());
        assert_eq!(planned[0].statement.kind, StatementKind::CreateSchema);
        assert_eq!(
            statement_step(&planned[0], &schema(), "d", &Options::default())
                .privilege
                .as_deref(),
            Some("CREATE on database d")
        );
        assert!(assess(&live).unwrap().is_none());
    }

    #[test]
    fn only_missing_tables_are_created_in_an_existing_schema() {
        let mut live = perfect(&schema());
        live.relations.retain(|r| r.name != "locks");
        live.schema = Some(LiveSchema { comment: None });
        let planned = plan(&live, render::bootstrap_statements(&schema()));
        assert!(
            planned.iter().all(|p| p.table.as_deref() == Some("locks")),
            "{planned:#?}"
        );
        let kinds: Vec<StatementKind> = planned.iter().map(|p| p.statement.kind).collect();
        assert_eq!(kinds[0], StatementKind::CreateTable);
        assert!(kinds.contains(&StatementKind::CreateIndex));
        let comment = planned
            .iter()
            .find(|p| p.statement.kind == StatementKind::Comment)
            .unwrap();
        assert_eq!(
            statement_step(comment, &schema(), "d", &Options::default())
                .privilege
                .as_deref(),
            Some("ownership of table alk.locks")
        );
        assert!(assess(&live).unwrap().is_none());
    }

    #[test]
    fn a_complete_schema_plans_nothing_and_is_current_despite_comments() {
        let mut live = perfect(&schema());
        assert!(plan(&live, render::bootstrap_statements(&schema())).is_empty());
        live.relations[0].comment = Some("old doc".into());
        match assess(&live).unwrap() {
            Some(Outcome::AlreadyCurrent { stale_comments, .. }) => {
                assert_eq!(stale_comments.len(), 1)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn drift_with_missing_tables_is_refused() {
        let mut live = perfect(&schema());
        live.relations.retain(|r| r.name != "locks");
        live.relations[0].columns.pop();
        let err = assess(&live).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
        assert_eq!(err.differences().len(), 2, "{err}");
    }

    #[test]
    fn outcomes_read_as_sentences() {
        let created = Outcome::Created {
            schema: schema(),
            schema_created: false,
            tables_created: vec!["locks".into()],
            statements_run: 8,
            foreign: vec![],
        };
        assert_eq!(
            created.to_string(),
            "created 1 missing table in existing schema alk (locks): 8 statements in one transaction"
        );
        let current = Outcome::AlreadyCurrent {
            schema: schema(),
            stale_comments: vec![],
            foreign: vec![],
        };
        assert_eq!(
            current.to_string(),
            "schema alk is already current: nothing to do"
        );
        assert!(!current.created());
    }
}
