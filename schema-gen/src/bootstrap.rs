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
//!    ([`render::bounds_statement`], `SET LOCAL`), and takes the transaction-scoped advisory
//!    lock keyed on the schema name ([`render::advisory_lock_statement`]),
//!    the same lock the printed script takes, so concurrent bootstraps and
//!    script runs of one schema take turns (concurrent `IF NOT EXISTS` DDL is
//!    not race-safe in PostgreSQL);
//! 2. reads the catalog again under the lock: another session may have
//!    created the schema meanwhile (then it is [`Outcome::AlreadyCurrent`])
//!    or something may have drifted (then it refuses);
//! 3. runs the statements of [`render::bootstrap_statements`], the one
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
//! reported by [`verify`](crate::verify::verify) (and `schema-gen check`) but
//! never makes bootstrap refuse or issue DDL; re-running the printed script
//! refreshes comments.

use std::fmt;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::history::MODEL_VERSION;
use schema_model::{SchemaName, TableDescription, engine_family};

use crate::Options;
use crate::catalog::{self, LiveCatalog};
use crate::error::{Context, Error, ErrorKind, LockTarget, Step, classify};
use crate::render::{self, Statement, StatementKind};
use crate::upgrade::{History, Position, locate};
use crate::verify::{Difference, compare};

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
    },
    /// Everything was present and matched the model: nothing was done.
    AlreadyCurrent {
        /// The engine schema.
        schema: SchemaName,
        /// Comments that differ from the model's docs (documentation only;
        /// bootstrap never rewrites existing objects).
        stale_comments: Vec<Difference>,
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
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created {
                schema,
                schema_created: true,
                tables_created,
                statements_run,
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
            } if stale_comments.is_empty() => {
                write!(f, "schema {schema} is already current: nothing to do")
            }
            Self::AlreadyCurrent {
                schema,
                stale_comments,
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
/// - [`ErrorKind::Query`] / [`ErrorKind::Other`]: anything else.
pub async fn bootstrap_with(
    client: &mut Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Outcome, Error> {
    let model = engine_family();
    let history = History::load().map_err(|e| {
        Error::from(ErrorKind::Other {
            message: format!("{e} (a defect of this release)"),
        })
    })?;
    crate::citus::probe(client, schema, options.layout, options).await?;
    let live = catalog::read(client, schema, options).await?;
    let assessed = assess(&live, schema, &model, &history)?;
    // A family placed otherwise than the layout says is drift, whether it
    // is complete or not: nothing is created into it.
    let placed = crate::citus::differences(client, schema, options, live.schema.is_some()).await?;
    if !placed.is_empty() {
        return Err(ErrorKind::Drift {
            schema: schema.clone(),
            differences: placed,
        }
        .into());
    }
    if let Some(current) = assessed {
        return Ok(current);
    }
    let result = match create(client, schema, &model, &history, options, &live).await {
        // A creator that does not take the advisory lock (a hand-written
        // script) can still clash with us on a catalog unique index; the
        // transaction rolled back, so one more try sees its committed result.
        Err(err) if is_creation_clash(&err) => {
            let live = catalog::read(client, schema, options).await?;
            match assess(&live, schema, &model, &history)? {
                Some(outcome) => Ok(outcome),
                None => create(client, schema, &model, &history, options, &live).await,
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

/// `Ok(Some(outcome))` when nothing is to be done (the schema is current,
/// or serves this release with a contract pending), `Ok(None)` when objects
/// must be created, `Err` when the schema is another version (older, newer,
/// being upgraded) or has drifted.
fn assess(
    live: &LiveCatalog,
    schema: &SchemaName,
    model: &[TableDescription],
    history: &History,
) -> Result<Option<Outcome>, Error> {
    let located = locate(live, schema, history);
    let drift = |differences: Vec<Difference>| -> Error {
        ErrorKind::Drift {
            schema: schema.clone(),
            differences,
        }
        .into()
    };
    let recorded = match &located.position {
        Position::NoSchema => return Ok(None),
        Position::Creatable => {
            // Only missing tables, each exactly as the model has it.
            let differences = compare(live, schema, model);
            return if differences.iter().any(Difference::is_missing_object) {
                Ok(None)
            } else {
                Err(drift(differences))
            };
        }
        Position::Unrecognised => return Err(drift(located.differences)),
        Position::Unreadable => {
            return Err(ErrorKind::VersionsUnreadable {
                schema: schema.clone(),
                role: live.role.clone(),
            }
            .into());
        }
        Position::Recognised { version } => {
            return Err(ErrorKind::OlderVersion {
                schema: schema.clone(),
                found: *version,
                recognised: true,
                model: MODEL_VERSION,
            }
            .into());
        }
        Position::Recorded(recorded) => recorded,
    };
    if recorded.inconsistent {
        return Err(drift(located.differences));
    }
    if recorded.expanded > MODEL_VERSION || recorded.expanding.is_some_and(|v| v > MODEL_VERSION) {
        return if recorded.serves(MODEL_VERSION) {
            Ok(Some(Outcome::ServedByNewer {
                schema: schema.clone(),
                found: recorded.expanded.max(recorded.expanding.unwrap_or(0)),
                model: MODEL_VERSION,
            }))
        } else {
            Err(ErrorKind::NewerVersion {
                schema: schema.clone(),
                found: recorded.expanded,
                contracted: recorded.contracted,
                model: MODEL_VERSION,
            }
            .into())
        };
    }
    if recorded.expanding == Some(MODEL_VERSION) {
        let (done, of) = located.progress.as_ref().map_or((0, 0), |p| (p.done, p.of));
        return Err(ErrorKind::UpgradeInProgress {
            schema: schema.clone(),
            version: MODEL_VERSION,
            done,
            of,
        }
        .into());
    }
    if recorded.expanded < MODEL_VERSION {
        return Err(ErrorKind::OlderVersion {
            schema: schema.clone(),
            found: recorded.expanded,
            recognised: false,
            model: MODEL_VERSION,
        }
        .into());
    }
    let differences = located.differences;
    if differences.iter().any(Difference::is_drift) {
        return Err(drift(differences));
    }
    if differences.iter().any(Difference::is_missing_object) {
        return Ok(None);
    }
    if recorded.contracted < MODEL_VERSION {
        return Ok(Some(Outcome::ContractPending {
            schema: schema.clone(),
            version: MODEL_VERSION,
            oldest_served: recorded.contracted,
            stale_comments: differences,
        }));
    }
    Ok(Some(Outcome::AlreadyCurrent {
        schema: schema.clone(),
        stale_comments: differences,
    }))
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

/// Creates what `live` lacks in three round trips, the one that read `live`
/// included: one pipeline (`BEGIN`, the bounds and the advisory lock, the
/// catalog read again under the lock, every planned statement, the catalog
/// read once more to verify), then `COMMIT`, or `ROLLBACK` when anything in
/// the pipeline failed, when the read under the lock shows another session
/// got there first (the planned statements, all `IF NOT EXISTS`, then did
/// nothing), or when the result differs from the model. Each statement is
/// its own request on the wire, so a failure names the statement it was.
async fn create(
    client: &mut Client,
    schema: &SchemaName,
    model: &[TableDescription],
    history: &History,
    options: &Options,
    live: &LiveCatalog,
) -> Result<Outcome, Error> {
    let mut context = Context {
        role: live.role.clone(),
        schema: schema.clone(),
    };
    let key = render::advisory_lock_key(schema);
    let lock_step = Step {
        doing: format!("bootstrapping schema {schema}"),
        waiting_for: Some(format!(
            "the bootstrap lock of schema {schema} (advisory lock {key}), which another \
             bootstrap of it or its `schema-gen sql` script holds"
        )),
        lock: Some(LockTarget::Advisory {
            schema: schema.clone(),
            key,
        }),
        timeout: Some(options.effective_lock_timeout()),
        in_transaction: true,
        ..Step::default()
    };
    let begin_step = Step {
        doing: "starting the bootstrap transaction".to_owned(),
        ..Step::default()
    };
    let plan = plan(
        live,
        render::bootstrap_statements_for(schema, options.layout),
    );
    let read = catalog::statement(schema);
    let read_step = Step {
        doing: format!("reading the catalog of schema {schema}"),
        in_transaction: true,
        ..Step::default()
    };
    // The statements of the one query, each with how to word its failure.
    let mut statements: Vec<(String, Step)> = vec![("BEGIN".to_owned(), begin_step)];
    // `bounds_statement` is two `SET LOCAL`s: one entry each, so that the
    // count of completed statements points at the one that failed.
    for bound in render::bounds_statement(options).split("; ") {
        statements.push((bound.to_owned(), lock_step.clone()));
    }
    statements.push((render::advisory_lock_statement(schema), lock_step));
    statements.push((read.clone(), read_step.clone()));
    for planned in &plan {
        statements.push((
            planned.statement.sql.clone(),
            statement_step(planned, schema, &live.database, options),
        ));
    }
    statements.push((read, read_step));
    // BEGIN goes as a message of its own, pipelined before the rest: behind
    // pgbouncer's statement pooling, which ends the connection at the first
    // transaction block, its refusal then comes whole (measured: a refusal
    // in the middle of one long reply comes cut off, as a lost connection).
    let text = statements[1..]
        .iter()
        .map(|(sql, _)| sql.as_str())
        .collect::<Vec<_>>()
        .join(";\n");
    // Each row with the statement it came from (the advisory lock's
    // `SELECT` returns one too).
    let mut rows: Vec<(usize, String)> = Vec::new();
    let mut completed = 1usize;
    let mut failure: Option<Error> = None;
    let (begun, rest) = {
        let client: &Client = client;
        futures_util::future::join(client.batch_execute("BEGIN"), async {
            let mut messages = Vec::new();
            match client.simple_query_raw(&text).await {
                Err(err) => messages.push(Err(err)),
                Ok(stream) => {
                    let mut stream = std::pin::pin!(stream);
                    while let Some(message) = futures_util::StreamExt::next(&mut stream).await {
                        let failed = message.is_err();
                        messages.push(message);
                        if failed {
                            break;
                        }
                    }
                }
            }
            messages
        })
        .await
    };
    if let Err(err) = begun {
        failure = Some(classify(err, &statements[0].1, &context));
    }
    for message in rest {
        match message {
            Ok(SimpleQueryMessage::Row(row)) => {
                rows.push((completed, row.get(0).unwrap_or_default().to_owned()))
            }
            Ok(SimpleQueryMessage::CommandComplete(_)) => completed += 1,
            Ok(_) => {}
            Err(err) => {
                // The statements before it completed; this is the one.
                if failure.is_none() {
                    let step = statements
                        .get(completed)
                        .map_or(&statements[0].1, |(_, step)| step);
                    failure = Some(classify(err, step, &context));
                }
                break;
            }
        }
    }
    let decode = |statement: usize| {
        rows.iter()
            .find(|(at, _)| *at == statement)
            .and_then(|(_, text)| catalog::parse(text, schema).ok())
    };
    // BEGIN, two bounds, the lock, then the first read; the last statement
    // is the second read.
    let before = decode(4);
    let after = decode(statements.len() - 1);
    if let Some(before) = &before {
        context.role = before.role.clone();
    }
    let rollback = async |client: &Client| {
        // Ends the transaction, releasing the lock; a failure here means the
        // connection is gone, which rolls back too.
        let _ = client.batch_execute("ROLLBACK").await;
    };
    if let Some(err) = failure {
        rollback(client).await;
        return Err(err);
    }
    let (Some(before), Some(after)) = (before, after) else {
        rollback(client).await;
        return Err(ErrorKind::Other {
            message: format!(
                "decoding the catalog of schema {schema}: the server returned no row (a bug in \
                 schema-gen, or a proxy that drops rows)"
            ),
        }
        .into());
    };
    // Another session may have created the schema between our first read
    // and the lock: then its result stands (our statements did nothing).
    if before != *live {
        rollback(client).await;
        return match assess(&before, schema, model, history)? {
            Some(outcome) => Ok(outcome),
            None => Err(ErrorKind::Other {
                message: format!(
                    "schema {schema} changed while it was being bootstrapped, and is still \
                     incomplete: nothing was changed; run the bootstrap again"
                ),
            }
            .into()),
        };
    }
    let known = compare(&before, schema, model);
    let left: Vec<Difference> = compare(&after, schema, model)
        .into_iter()
        .filter(|d| !(d.is_comment() && known.contains(d)))
        .collect();
    if !left.is_empty() {
        rollback(client).await;
        return Err(ErrorKind::CreatedDiffers {
            schema: schema.clone(),
            differences: left,
        }
        .into());
    }
    client.batch_execute("COMMIT").await.map_err(|err| {
        classify(
            err,
            &Step {
                doing: format!("committing the bootstrap of schema {schema}"),
                in_transaction: true,
                ..Step::default()
            },
            &context,
        )
    })?;
    Ok(Outcome::Created {
        schema: schema.clone(),
        schema_created: before.schema.is_none(),
        tables_created: plan
            .iter()
            .filter(|p| p.statement.kind == StatementKind::CreateTable)
            .map(|p| p.statement.object.clone())
            .collect(),
        statements_run: plan.len(),
    })
}

/// A statement to run, with the table it belongs to (`None` for the schema).
#[derive(Debug)]
struct Planned {
    statement: Statement,
    table: Option<String>,
}

/// The statements that create what is missing, in rendering order: the
/// schema's when the schema is missing, and each missing table's. Relies on
/// the order [`render::bootstrap_statements`] documents: the schema's
/// statements, then per table its `CREATE TABLE` followed by its indexes and
/// comments.
fn plan(live: &LiveCatalog, statements: Vec<Statement>) -> Vec<Planned> {
    let schema_missing = live.schema.is_none();
    let mut table: Option<String> = None;
    let mut out = Vec::new();
    for statement in statements {
        if statement.kind == StatementKind::CreateTable {
            table = Some(statement.object.clone());
        }
        let needed = match &table {
            None => schema_missing,
            Some(name) => live.relation(name).is_none(),
        };
        if needed {
            out.push(Planned {
                statement,
                table: table.clone(),
            });
        }
    }
    out
}

/// How to word a failure of one planned statement.
fn statement_step(
    planned: &Planned,
    schema: &SchemaName,
    database: &str,
    options: &Options,
) -> Step {
    let statement = &planned.statement;
    let what = match statement.kind {
        StatementKind::CreateSchema => "CREATE SCHEMA",
        StatementKind::CreateTable => "CREATE TABLE",
        StatementKind::CreateIndex => "CREATE INDEX",
        StatementKind::Comment => "COMMENT",
        StatementKind::RecordVersion => "INSERT (the schema's version)",
        StatementKind::Distribute => "the Citus call",
    };
    let privilege = match (statement.kind, &planned.table) {
        (StatementKind::CreateSchema, _) => format!("CREATE on database {database}"),
        (StatementKind::CreateTable, _) => format!("CREATE on schema {schema}"),
        (StatementKind::Distribute, _) => format!("ownership of schema {schema} and its tables"),
        (_, Some(table)) => format!("ownership of table {schema}.{table}"),
        (_, None) => format!("ownership of schema {schema}"),
    };
    Step {
        doing: format!("running {what} for {}", statement.object),
        privilege: Some(privilege),
        waiting_for: Some(
            "a lock another session holds (a conflicting lock on the object, or the same \
             object being created without the bootstrap lock)"
                .to_owned(),
        ),
        lock: None,
        timeout: Some(options.effective_lock_timeout()),
        in_transaction: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::LiveSchema;
    use crate::verify::tests::perfect;

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
        assert!(
            assess(
                &live,
                &schema(),
                &engine_family(),
                &History::load().unwrap()
            )
            .unwrap()
            .is_none()
        );
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
        assert!(
            assess(
                &live,
                &schema(),
                &engine_family(),
                &History::load().unwrap()
            )
            .unwrap()
            .is_none()
        );
    }

    #[test]
    fn a_complete_schema_plans_nothing_and_is_current_despite_comments() {
        let mut live = perfect(&schema());
        assert!(plan(&live, render::bootstrap_statements(&schema())).is_empty());
        live.relations[0].comment = Some("old doc".into());
        match assess(
            &live,
            &schema(),
            &engine_family(),
            &History::load().unwrap(),
        )
        .unwrap()
        {
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
        let err = assess(
            &live,
            &schema(),
            &engine_family(),
            &History::load().unwrap(),
        )
        .unwrap_err();
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
        };
        assert_eq!(
            created.to_string(),
            "created 1 missing table in existing schema alk (locks): 8 statements in one transaction"
        );
        let current = Outcome::AlreadyCurrent {
            schema: schema(),
            stale_comments: vec![],
        };
        assert_eq!(
            current.to_string(),
            "schema alk is already current: nothing to do"
        );
        assert!(!current.created());
    }
}
