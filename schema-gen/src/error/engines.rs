//! The sessions of older releases a contract found connected, and the
//! words of its refusal.

use std::fmt;

use serde::Serialize;

use super::ErrorKind;

/// A session a contract attributes to an engine of an older schema
/// version, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineSession {
    /// Its backend pid (`pg_terminate_backend(pid)` ends it).
    pub pid: i32,
    /// Its role.
    pub role: Option<String>,
    /// Its `application_name`.
    pub application: Option<String>,
    /// When it connected (UTC).
    pub since: Option<String>,
    /// The schema version it runs.
    pub version: u32,
    /// How that was told: `its application_name`, or `its last statement,
    /// version 1's enqueue`.
    pub by: String,
}

impl fmt::Display for EngineSession {
    /// `session 42 (role app, application "alkstore-engine/e63468a",
    /// connected since ...) runs version 1 (by its application_name)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut about = Vec::new();
        if let Some(role) = &self.role {
            about.push(format!("role {role}"));
        }
        if let Some(application) = &self.application {
            about.push(format!("application {application:?}"));
        }
        if let Some(since) = &self.since {
            about.push(format!("connected since {since}"));
        }
        write!(
            f,
            "session {} ({}) runs version {} (by {})",
            self.pid,
            about.join(", "),
            self.version,
            self.by
        )
    }
}

pub(super) fn older_engines_message(kind: &ErrorKind) -> String {
    let ErrorKind::OlderEngines {
        schema,
        version,
        sessions,
        breaks,
        unseen,
    } = kind
    else {
        return String::new();
    };
    let list: Vec<String> = sessions.iter().map(ToString::to_string).collect();
    let unseen = if *unseen > 0 {
        format!(
            " ({unseen} more session{} of other roles could not be looked into: their \
             application_name names no release, and their statements are hidden from this role; \
             pg_read_all_stats shows them)",
            if *unseen == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    format!(
        "schema {schema}: engines older than version {version} are still connected: {}{unseen}; \
         the contract removes what they rely on, and from then on their statements fail: {}, \
         their enqueues included; nothing was changed: stop them (or let them finish) once this \
         release's engines run, then run the contract again, or run it anyway with \
         --allow-older-engines",
        list.join("; "),
        breaks.join(", ")
    )
}
