//! Who holds a lock: the sessions `pg_locks` and `pg_stat_activity` show
//! holding or awaiting a lock that a wait conflicts with. The one filter per
//! kind of wait, asked after a lock timeout (to name the holder) and by an
//! upgrade step before it queues (to wait the holder out).

use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::SchemaName;

use crate::error::{Error, LockHolder, LockTarget};
use crate::options::Bounds;
use crate::render::quote_literal;

/// How long a question asked about a failure (who holds a lock, which role
/// this is) may run.
const QUESTION_BOUND: Duration = Duration::from_secs(2);

/// After a failure, asks the server what the error lacks, in one bounded
/// round trip each: who holds (or is queued for) the lock a lock timeout
/// waited for, and which role a privilege error is about when the catalog
/// had not named it yet. Any failure of the question leaves the error as it
/// was.
pub(crate) async fn explain(client: &Client, err: Error) -> Error {
    if err.lacks_role() {
        let question = format!(
            "{};\nSELECT current_user::text",
            Bounds::statement_only(QUESTION_BOUND).set_local()
        );
        let role = match client.simple_query(&question).await {
            Ok(messages) => first_text(&messages).map(str::to_owned),
            Err(_) => None,
        };
        return err.with_role(role.unwrap_or_else(|| "of this connection".to_owned()));
    }
    let Some(target) = err.lock_target().cloned() else {
        return err;
    };
    match lock_holders(client, &target).await {
        Some(holders) => err.with_lock_holders(holders),
        None => err,
    }
}

/// The sessions that hold or wait for a lock a wait on `target` conflicts
/// with ([`holders`]); `None` when the question fails.
pub(crate) async fn lock_holders(client: &Client, target: &LockTarget) -> Option<Vec<LockHolder>> {
    holders(client, target).await.ok()
}

/// The sessions that hold or wait for a lock a wait on `target` conflicts
/// with, in one round trip bounded to 2 s, held ones first.
///
/// # Errors
///
/// The driver's error when the question fails; a reply that does not
/// decode is no holder.
pub(crate) async fn holders(
    client: &Client,
    target: &LockTarget,
) -> Result<Vec<LockHolder>, tokio_postgres::Error> {
    let question = format!(
        "{};\n{}",
        Bounds::statement_only(QUESTION_BOUND).set_local(),
        holders_statement(target)
    );
    let messages = client.simple_query(&question).await?;
    Ok(first_text(&messages)
        .and_then(|text| serde_json::from_str::<Vec<LockHolder>>(text).ok())
        .unwrap_or_default())
}

/// The first column of the first row of a simple query's reply.
fn first_text(messages: &[SimpleQueryMessage]) -> Option<&str> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0),
        _ => None,
    })
}

/// The sessions, other than this one, that hold or wait for a lock that a
/// wait on `target` conflicts with, with what `pg_stat_activity` lets the
/// role see of them (for another role's session without `pg_read_all_stats`:
/// pid, role and application only).
fn holders_statement(target: &LockTarget) -> String {
    let relation_oid = |schema: &SchemaName, name: &str| {
        format!(
            "(SELECT c.oid FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = {} AND c.relname = {})",
            quote_literal(schema.as_str()),
            quote_literal(name)
        )
    };
    let filter = match target {
        // `ACCESS SHARE` (what the catalog read takes) conflicts only with
        // `ACCESS EXCLUSIVE`, held or queued ahead of it.
        LockTarget::SchemaRelations { schema } => format!(
            "l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock'
             AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                                JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                WHERE n.nspname = {})",
            quote_literal(schema.as_str())
        ),
        LockTarget::Relation { schema, name } => format!(
            "l.locktype = 'relation' AND l.relation = {}",
            relation_oid(schema, name)
        ),
        // Stronger than ROW EXCLUSIVE, the strongest lock an engine
        // statement takes.
        LockTarget::Alterers { schema, name } => format!(
            "l.locktype = 'relation' AND l.relation = {}
             AND l.mode NOT IN ('AccessShareLock', 'RowShareLock', 'RowExclusiveLock')",
            relation_oid(schema, name)
        ),
        // A bigint advisory key shows as its high half in classid, its low
        // half in objid, and objsubid 1.
        LockTarget::Advisory { key, .. } => {
            let bits = u64::from_ne_bytes(key.to_ne_bytes());
            format!(
                "l.locktype = 'advisory' AND l.classid = {} AND l.objid = {} AND l.objsubid = 1",
                bits >> 32,
                bits & 0xffff_ffff
            )
        }
    };
    format!(
        "SELECT COALESCE(json_agg(json_build_object(
             'pid', l.pid,
             'mode', l.mode,
             'granted', l.granted,
             'relation', (SELECT format('%I.%I', n.nspname, c.relname)
                          FROM pg_catalog.pg_class c
                          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                          WHERE c.oid = l.relation),
             'role', a.usename,
             'application', NULLIF(a.application_name, ''),
             'state', a.state,
             'since', to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'),
             'query', CASE WHEN a.state IS NOT NULL THEN left(a.query, 200) END,
             'blocked_by', CASE WHEN NOT l.granted THEN pg_catalog.pg_blocking_pids(l.pid) END,
             'backend', a.backend_type
         ) ORDER BY l.granted DESC, l.pid), '[]'::json)::text
         FROM pg_catalog.pg_locks l
         LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         WHERE l.pid <> pg_catalog.pg_backend_pid()
           AND l.database = (SELECT oid FROM pg_catalog.pg_database
                             WHERE datname = pg_catalog.current_database())
           AND {filter}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advisory_key_is_split_as_pg_locks_shows_it() {
        let sql = holders_statement(&LockTarget::Advisory {
            schema: SchemaName::new("alk").unwrap(),
            key: -2,
        });
        assert!(
            sql.contains("l.classid = 4294967295 AND l.objid = 4294967294"),
            "{sql}"
        );
    }
}
