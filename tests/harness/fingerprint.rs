//! A fingerprint of one family, for "`check` changed nothing": the dump
//! ([`crate::dump::dump_schema`]) plus what the dump leaves out and a
//! tampering test moves: every relation's owner and privileges, every
//! index's flags, every sequence's position, the schema's owner and
//! privileges, and the version rows.

use tokio_postgres::Client;

use crate::pg::describe_error;

/// The fingerprint of `schema` (see the module docs).
///
/// # Panics
///
/// If the catalog cannot be read.
pub async fn fingerprint(client: &Client, schema: &str) -> String {
    let mut out = crate::dump::dump_schema(client, schema).await;
    let extra: String = client
        .query_one(
            "SELECT coalesce(string_agg(line, E'\\n' ORDER BY line), '') FROM (
                 SELECT format('relation %s owner %s acl %s', c.relname,
                               pg_get_userbyid(c.relowner), c.relacl) AS line
                 FROM pg_class c WHERE c.relnamespace = $1::text::regnamespace
                 UNION ALL
                 SELECT format('index %s ready %s live %s valid %s', c.relname,
                               i.indisready, i.indislive, i.indisvalid)
                 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                 WHERE c.relnamespace = $1::text::regnamespace
                 UNION ALL
                 SELECT format('sequence %s last %s', s.sequencename, s.last_value)
                 FROM pg_sequences s WHERE s.schemaname = $1
                 UNION ALL
                 SELECT format('schema owner %s acl %s', pg_get_userbyid(n.nspowner), n.nspacl)
                 FROM pg_namespace n WHERE n.nspname = $1
             ) lines",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("fingerprint of {schema}: {}", describe_error(&e)))
        .get(0);
    out.push_str(&extra);
    let versions = client
        .query(
            &format!(
                "SELECT format('%s', v) FROM \"{schema}\".schema_versions v ORDER BY v.version"
            ),
            &[],
        )
        .await;
    if let Ok(rows) = versions {
        for row in rows {
            out.push_str("\nversion row ");
            out.push_str(row.get(0));
        }
    }
    out
}
