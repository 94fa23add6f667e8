//! Reading the catalog: one simple query, the bounds first, then the
//! catalog `SELECT` (and any other one-row `SELECT` a caller asks in the
//! same round trip), decoded.

use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::SchemaName;

use super::LiveCatalog;
use super::holders::explain;
use crate::error::{Context, Error, ErrorKind, LockTarget, Step, classify};
use crate::options::Options;

/// Reads the live catalog of `schema` in one round trip, bounded by
/// `options` (see the module docs). Outside any transaction: the bounds are
/// `SET LOCAL` in the simple query's own implicit transaction.
///
/// # Errors
///
/// [`ErrorKind::Connection`] when the connection is gone,
/// [`ErrorKind::LockTimeout`] when another session held `ACCESS EXCLUSIVE`
/// on a relation of the schema for longer than `options.lock_timeout` (the
/// error names the sessions holding it, as far as the role may see them),
/// [`ErrorKind::StatementPooling`] behind pgbouncer's statement pooling,
/// [`ErrorKind::Query`] for any other server error,
/// [`ErrorKind::UndecodableReply`] when the reply cannot be decoded.
pub async fn read(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<LiveCatalog, Error> {
    read_with(client, schema, options, &[])
        .await
        .map(|(live, _)| live)
}

/// [`read`], and in the same simple query (the same round trip, under the
/// same bounds) each `SELECT` of `more`, which must return one row of one
/// text column: their texts, in order.
///
/// # Errors
///
/// As [`read`].
pub async fn read_with(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
    more: &[String],
) -> Result<(LiveCatalog, Vec<Option<String>>), Error> {
    let mut text = super::batch(schema, options);
    for select in more {
        text.push_str(";\n");
        text.push_str(select);
    }
    let step = read_step(schema, options);
    let messages = match client.simple_query(&text).await {
        Ok(messages) => messages,
        Err(err) => {
            let err = classify(err, &step, &Context::unnamed(schema));
            return Err(explain(client, err).await);
        }
    };
    let mut texts = messages.iter().filter_map(|message| match message {
        SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
        _ => None,
    });
    let Some(Some(catalog)) = texts.next() else {
        return Err(ErrorKind::UndecodableReply {
            what: format!("the catalog of schema {schema}"),
            detail: "the server returned no row".to_owned(),
        }
        .into());
    };
    let answers: Vec<Option<String>> = texts.collect();
    if answers.len() != more.len() {
        return Err(ErrorKind::UndecodableReply {
            what: format!("the catalog of schema {schema}"),
            detail: format!(
                "{} answers to {} questions",
                answers.len() + 1,
                more.len() + 1
            ),
        }
        .into());
    }
    Ok((parse(&catalog, schema)?, answers))
}

fn read_step(schema: &SchemaName, options: &Options) -> Step {
    Step {
        doing: format!("reading the catalog of schema {schema}"),
        waiting_for: Some(format!(
            "ACCESS SHARE on a table of schema {schema}, which only ACCESS EXCLUSIVE blocks \
             (ALTER TABLE, DROP, TRUNCATE, VACUUM FULL, LOCK TABLE)"
        )),
        lock: Some(LockTarget::SchemaRelations {
            schema: schema.clone(),
        }),
        timeout: Some(options.effective_lock_timeout()),
        in_transaction: false,
        ..Step::default()
    }
}

/// Decodes the catalog document of [`super::statement`].
pub(crate) fn parse(text: &str, schema: &SchemaName) -> Result<LiveCatalog, Error> {
    serde_json::from_str(text).map_err(|err| {
        ErrorKind::UndecodableReply {
            what: format!("the catalog of schema {schema}"),
            detail: err.to_string(),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_missing_schema_and_a_table() {
        let schema = SchemaName::new("alk").unwrap();
        let missing = parse(
            r#"{"role":"r","database":"d","schema":null,"relations":[],"objects":[]}"#,
            &schema,
        )
        .unwrap();
        assert!(missing.schema.is_none());
        let one = parse(
            r#"{"role":"r","database":"d","schema":{"comment":null},"relations":[
                {"name":"t","kind":"r","persistence":"p","access_method":"heap",
                 "options":["fillfactor=70"],"row_security":false,"force_row_security":false,
                 "comment":"c","parents":[],"children":[],"sequence":null,
                 "columns":[{"name":"a","type":"bigint","not_null":true,"identity":"a",
                             "generated":"","expression":null,"collation":null,
                             "comment":null}],
                 "indexes":[{"name":"i","definition":"CREATE INDEX i ON alk.t USING btree (a)",
                             "valid":true}],
                 "constraints":[{"name":"t_pkey","type":"p","definition":"PRIMARY KEY (a)"}],
                 "triggers":[],"rules":[],"policies":[]},
                {"name":"t_a_seq","kind":"S","persistence":"p","sequence":{"type":"bigint",
                 "start":1,"increment":1,"min":1,"max":9223372036854775807,"cache":1,
                 "cycle":false,"persistence":"p",
                 "owner":{"table":"t","column":"a","identity":true}}}],
                "objects":["function alk.f(integer)"]}"#,
            &schema,
        )
        .unwrap();
        let t = one.relation("t").unwrap();
        assert_eq!(t.columns[0].sql_type, "bigint");
        assert_eq!(
            one.identity_sequence("t", "a").map(|s| s.max),
            Some(i64::MAX)
        );
        assert_eq!(t.indexes[0].from_using(), "USING btree (a)");
        assert_eq!(t.constraints[0].constraint_type, "p");
        assert_eq!(one.objects, ["function alk.f(integer)"]);
    }

    #[test]
    fn an_undecodable_reply_is_an_error_not_a_panic() {
        let schema = SchemaName::new("alk").unwrap();
        let err = parse("{", &schema).unwrap_err();
        assert!(err.to_string().contains("decoding the catalog"), "{err}");
        assert_eq!(err.kind().name(), "undecodable_reply");
    }
}
