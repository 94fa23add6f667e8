//! Creating what is missing: one pipelined transaction (the bounds and the
//! advisory lock, the catalog read again under the lock, the statements,
//! the catalog read once more to verify), committed only when what it made
//! is the model.

use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::SchemaName;

use super::{Outcome, decide};
use crate::catalog::{self, LiveCatalog};
use crate::difference::Difference;
use crate::error::{Context, Error, ErrorKind, LockTarget, Step, classify};
use crate::options::Bounds;
use crate::options::Options;
use crate::render::{self, Statement, StatementKind};
use crate::verify::compare;
use crate::versions::{History, verdict};

/// Creates what `live` lacks in three round trips, the one that read `live`
/// included: one pipeline (`BEGIN`, the bounds and the advisory lock, the
/// catalog read again under the lock, every planned statement, the catalog
/// read once more to verify), then `COMMIT`, or `ROLLBACK` when anything in
/// the pipeline failed, when the read under the lock shows another session
/// got there first (the planned statements, all `IF NOT EXISTS`, then did
/// nothing), or when the result differs from the model. Each statement is
/// its own request on the wire, so a failure names the statement it was.
pub(super) async fn create(
    client: &mut Client,
    schema: &SchemaName,
    history: &History,
    options: &Options,
    live: &LiveCatalog,
) -> Result<Outcome, Error> {
    let model = &history.target().shape;
    let mut context = Context::of(&live.role, schema);
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
    // The bounds are two `SET LOCAL`s: one entry each, so that the count of
    // completed statements points at the one that failed.
    let bounds = options.bounds();
    for bound in [
        Bounds {
            statement: None,
            ..bounds
        },
        Bounds {
            lock: None,
            ..bounds
        },
    ] {
        statements.push((bound.set_local(), lock_step.clone()));
    }
    statements.push((render::advisory_lock_statement(schema), lock_step));
    let first_read = statements.len();
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
    let before = decode(first_read);
    let after = decode(statements.len() - 1);
    if let Some(before) = &before {
        context.role = Some(before.role.clone());
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
        return Err(ErrorKind::UndecodableReply {
            what: format!("the catalog of schema {schema}, read in the bootstrap transaction"),
            detail: "the server returned no row".to_owned(),
        }
        .into());
    };
    // Another session may have created the schema between our first read
    // and the lock: then its result stands (our statements did nothing).
    if before != *live {
        rollback(client).await;
        return match decide(verdict(&before, schema, history), schema, &before.role)? {
            Some(outcome) => Ok(outcome),
            None => Err(ErrorKind::ConcurrentChange {
                schema: schema.clone(),
            }
            .into()),
        };
    }
    // Comments and foreign objects that were there before stay as they
    // were; anything else the statements did not make the model's is theirs.
    let known = compare(&before, schema, model);
    let left: Vec<Difference> = compare(&after, schema, model)
        .into_iter()
        .filter(|d| !((d.is_comment() || d.is_foreign()) && known.contains(d)))
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
        foreign: known.into_iter().filter(Difference::is_foreign).collect(),
    })
}

/// A statement to run, with the table it belongs to (`None` for the schema).
#[derive(Debug)]
pub(super) struct Planned {
    pub(super) statement: Statement,
    pub(super) table: Option<String>,
}

/// The statements that create what is missing, in rendering order: the
/// schema's when the schema is missing, and each missing table's. Relies on
/// the order [`render::bootstrap_statements`] documents: the schema's
/// statements, then per table its `CREATE TABLE` followed by its indexes and
/// comments.
pub(super) fn plan(live: &LiveCatalog, statements: Vec<Statement>) -> Vec<Planned> {
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
pub(super) fn statement_step(
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
