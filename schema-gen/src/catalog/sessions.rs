//! The other client sessions on this database, as `pg_stat_activity` shows
//! them to the role: who they are (pid, role, `application_name`, since
//! when) and, where the role may see it, what they last ran. What a
//! contract asks before it removes what older engines rely on.

use std::time::Duration;

use serde::Deserialize;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::options::Bounds;

/// How long the question may run.
const QUESTION_BOUND: Duration = Duration::from_secs(2);

/// Another client session on this database.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LiveSession {
    /// Its backend pid.
    pub pid: i32,
    /// Its role.
    pub role: Option<String>,
    /// Its `application_name`, when set.
    pub application: Option<String>,
    /// When it connected (UTC).
    pub since: Option<String>,
    /// Its last statement (the current one while it runs), `None` where the
    /// role may not see it (another role's session, without
    /// `pg_read_all_stats`).
    pub query: Option<String>,
}

/// The question `sessions` asks (after its bounds, which pin the search
/// path): one JSON array of [`LiveSession`]s.
///
/// ```
/// let sql = schema_gen::catalog::sessions_statement();
/// assert!(sql.contains("FROM pg_catalog.pg_stat_activity a"));
/// ```
pub fn sessions_statement() -> String {
    "SELECT COALESCE(pg_catalog.json_agg(pg_catalog.json_build_object(\
         'pid', a.pid, 'role', a.usename, \
         'application', NULLIF(a.application_name, ''), \
         'since', pg_catalog.to_char(a.backend_start AT TIME ZONE 'UTC', \
                                     'YYYY-MM-DD HH24:MI:SS \"UTC\"'), \
         'query', CASE WHEN a.state IS NOT NULL THEN a.query END\
     ) ORDER BY a.pid), '[]'::json)::text \
     FROM pg_catalog.pg_stat_activity a \
     WHERE a.datname = pg_catalog.current_database() \
       AND a.backend_type = 'client backend' \
       AND a.pid <> pg_catalog.pg_backend_pid()"
        .to_owned()
}

/// The other client sessions on this database, in one simple query bounded
/// to 2 s.
///
/// # Errors
///
/// The driver's error; a reply that does not decode is no session.
pub(crate) async fn sessions(client: &Client) -> Result<Vec<LiveSession>, tokio_postgres::Error> {
    let question = format!(
        "{};\n{}",
        Bounds::statement_only(QUESTION_BOUND).set_local(),
        sessions_statement()
    );
    let messages = client.simple_query(&question).await?;
    Ok(messages
        .iter()
        .find_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0),
            _ => None,
        })
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default())
}
