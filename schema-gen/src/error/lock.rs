//! The locks a step can wait for, the sessions found holding them, and the
//! words of a lock timeout.

use std::fmt;
use std::time::Duration;

use schema_model::SchemaName;
use serde::{Deserialize, Serialize};

use super::{ErrorKind, one_line};
use crate::options::duration_words;

/// What a lock wait was for, so that the sessions holding it can be found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockTarget {
    /// A relation of the schema: the catalog read takes `ACCESS SHARE` on
    /// each table, which only `ACCESS EXCLUSIVE` (held or queued) blocks.
    SchemaRelations {
        /// The engine schema.
        schema: SchemaName,
    },
    /// A table (or index) of the schema that an upgrade step locks: any
    /// lock another session holds on it, or has queued for, conflicts.
    Relation {
        /// The engine schema.
        schema: SchemaName,
        /// The table or index.
        name: String,
    },
    /// A table of the schema that an upgrade step is about to lock: the
    /// sessions holding or awaiting a lock on it stronger than the engine's
    /// statements take (`SHARE UPDATE EXCLUSIVE` and up: an autovacuum, a
    /// `VACUUM`, an index build, DDL), which the step waits out first.
    Alterers {
        /// The engine schema.
        schema: SchemaName,
        /// The table.
        name: String,
    },
    /// An advisory lock of the product
    /// ([`AdvisoryLock`](crate::render::AdvisoryLock)).
    Advisory {
        /// The engine schema.
        schema: SchemaName,
        /// The lock's key.
        key: i64,
    },
}

/// A session that held, or was queued ahead for, a lock a step gave up
/// waiting for, from `pg_locks` and `pg_stat_activity`. What
/// `pg_stat_activity` hides from a role (another role's state and query,
/// without `pg_read_all_stats`) is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    /// Its backend pid (`pg_terminate_backend(pid)` ends it).
    pub pid: i32,
    /// The lock mode, as `pg_locks` names it (`AccessExclusiveLock`).
    pub mode: String,
    /// Whether it holds the lock (false: it is queued for it, ahead of us).
    pub granted: bool,
    /// The relation, qualified, for a relation lock.
    pub relation: Option<String>,
    /// Its role.
    pub role: Option<String>,
    /// Its `application_name`.
    pub application: Option<String>,
    /// `active`, `idle in transaction`, ...
    pub state: Option<String>,
    /// When its transaction started (UTC).
    pub since: Option<String>,
    /// The start of its current or last query.
    pub query: Option<String>,
    /// For a queued session: the sessions it waits behind.
    pub blocked_by: Option<Vec<i32>>,
    /// What the session is (`pg_stat_activity.backend_type`: `client
    /// backend`, `autovacuum worker`, ...).
    #[serde(default)]
    pub backend: Option<String>,
}

impl LockHolder {
    /// `ACCESS EXCLUSIVE` for `AccessExclusiveLock`.
    fn mode_words(&self) -> String {
        let name = self.mode.strip_suffix("Lock").unwrap_or(&self.mode);
        let mut out = String::new();
        for c in name.chars() {
            if c.is_uppercase() && !out.is_empty() {
                out.push(' ');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    }
}

impl fmt::Display for LockHolder {
    /// `session 42 (role admin, application psql, idle in transaction since
    /// ..., query `LOCK ...`) holds ACCESS EXCLUSIVE on alk.jobs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut about = Vec::new();
        if let Some(role) = &self.role {
            about.push(format!("role {role}"));
        }
        if let Some(application) = &self.application {
            about.push(format!("application {application:?}"));
        }
        match (&self.state, &self.since) {
            (Some(state), Some(since)) => about.push(format!("{state}, transaction since {since}")),
            (Some(state), None) => about.push(state.clone()),
            _ => about.push(
                "its activity is hidden from this role (pg_read_all_stats shows it)".to_owned(),
            ),
        }
        if let Some(query) = &self.query {
            about.push(format!("query `{}`", one_line(query)));
        }
        write!(f, "session {} ({})", self.pid, about.join(", "))?;
        let on = self
            .relation
            .as_ref()
            .map(|relation| format!(" on {relation}"))
            .unwrap_or_default();
        if self.granted {
            write!(f, " holds {}{on}", self.mode_words())
        } else {
            let behind: Vec<String> = self
                .blocked_by
                .iter()
                .flatten()
                .map(|pid| pid.to_string())
                .collect();
            write!(f, " is queued for {}{on}", self.mode_words())?;
            if behind.is_empty() {
                Ok(())
            } else {
                write!(f, " behind session {}", behind.join(", "))
            }
        }
    }
}

/// How often a wait was tried before it was given up, and over how long
/// (from the first attempt's start to the last one's end, pauses included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tries {
    /// Attempts made, each waiting at most the `lock_timeout`.
    pub attempts: u32,
    /// The time they took in all.
    pub over: Duration,
}

/// A span for people: `850ms`, `4.2s`, `35s`.
pub(crate) fn span_words(span: Duration) -> String {
    let ms = span.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{:.1}s", span.as_secs_f64())
    } else {
        format!("{}s", span.as_secs())
    }
}

pub(super) fn lock_timeout_message(kind: &ErrorKind) -> String {
    let ErrorKind::LockTimeout {
        doing,
        waiting_for,
        target,
        holders,
        timeout,
        in_transaction,
        tries,
        ..
    } = kind
    else {
        return String::new();
    };
    let mut relations: Vec<&str> = holders
        .iter()
        .filter_map(|h| h.relation.as_deref())
        .collect();
    relations.dedup();
    let what = match target {
        Some(LockTarget::SchemaRelations { .. }) if !relations.is_empty() => {
            format!("ACCESS SHARE on {}", relations.join(" and "))
        }
        _ => waiting_for.clone(),
    };
    let mut text = match tries {
        Some(tries) if tries.attempts > 1 => format!(
            "gave up after {} attempts over {} (each waiting at most {}, its lock_timeout) \
             {doing}: waiting for {what}",
            tries.attempts,
            span_words(tries.over),
            duration_words(*timeout)
        ),
        _ => format!(
            "gave up after {} (lock_timeout) {doing}: waiting for {what}",
            duration_words(*timeout)
        ),
    };
    if !holders.is_empty() {
        let list: Vec<String> = holders.iter().map(ToString::to_string).collect();
        text.push_str(&format!("; {}", list.join("; ")));
    } else if target.is_some() {
        text.push_str(
            "; no other session held or awaited it any more when schema-gen looked, so it was \
             released just after",
        );
    }
    text.push_str("; ");
    if *in_transaction {
        text.push_str("the bootstrap transaction was rolled back, ");
    }
    text.push_str("nothing was changed: ");
    let pids: Vec<String> = holders
        .iter()
        .filter(|h| h.granted)
        .map(|h| h.pid.to_string())
        .collect();
    if pids.is_empty() {
        text.push_str("retry once the lock is released");
    } else {
        text.push_str(&format!(
            "retry once that session ends, or end it with SELECT pg_terminate_backend({})",
            pids.join("), pg_terminate_backend(")
        ));
    }
    text
}
