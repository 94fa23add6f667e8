//! How the command line fails (exit 2): one line on stderr, always, and with
//! `--format json` the same failure as one JSON object on stdout, so a tool
//! reads stdout in every case and branches on `outcome`:
//!
//! ```json
//! {
//!   "outcome": "error",
//!   "kind": "lock_timeout",
//!   "schema": "alkstore",
//!   "sqlstate": "55P03",
//!   "message": "gave up after 300ms (lock_timeout) reading the catalog of schema alkstore: ..."
//! }
//! ```
//!
//! `kind` is one of [`Failure::kind`]'s names; `schema` is the schema the
//! command was about (null before it was validated); `sqlstate` is the
//! server's error code when the server said one (null otherwise); `done` is
//! what an upgrade had done when it failed, once it had started its steps
//! (steps run and skipped, backfill batches and their rows, version phases
//! recorded), null otherwise. Keys are only ever added.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

#[cfg(doc)]
use super::EXIT_USAGE;
use crate::check::State;
use crate::error::{self, Done, Error};

/// A failure of the command line, before it is printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failure {
    /// What kind of failure, in snake case (the JSON's `kind`):
    ///
    /// - `usage`: the arguments do not parse (an unknown flag, a value out of
    ///   range such as `--lock-timeout 5` or `--format yaml`);
    /// - `refused_input`: a schema or database name is refused, or a flag
    ///   does not go with the dialect;
    /// - `configuration`: the connection string, a `PG*` variable, the
    ///   service file or a TLS file cannot be used (nothing was sent);
    /// - `runtime`: the command line could not start its async runtime;
    /// - any other: the [`ErrorKind::name`](crate::error::ErrorKind::name) of the
    ///   library's error (`drift` is not a failure: `apply` and `upgrade`
    ///   report it as `"outcome": "refused"` with exit code 1).
    kind: &'static str,
    schema: Option<String>,
    sqlstate: Option<String>,
    message: String,
    done: Option<Done>,
    /// The state the failure puts the database in ([`State::of_error`]),
    /// whose exit code the command returns.
    state: State,
}

/// The JSON form of a [`Failure`].
#[derive(Serialize)]
struct FailureReport<'a> {
    outcome: &'static str,
    kind: &'static str,
    state: State,
    schema: Option<&'a str>,
    sqlstate: Option<&'a str>,
    message: String,
    done: Option<&'a Done>,
}

impl Failure {
    /// Arguments that do not parse.
    pub(super) fn usage(message: impl Into<String>) -> Self {
        Self::new("usage", message)
    }

    /// A refused name, or a flag of the other dialect.
    pub(super) fn refused_input(message: impl Into<String>) -> Self {
        Self::new("refused_input", message)
    }

    /// A connection that cannot be configured.
    pub(super) fn configuration(message: impl Into<String>) -> Self {
        Self::new("configuration", message)
    }

    /// The command line could not start its async runtime.
    pub(super) fn runtime(message: impl Into<String>) -> Self {
        Self::new("runtime", message)
    }

    fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            schema: None,
            sqlstate: None,
            message: message.into(),
            done: None,
            state: State::Error,
        }
    }

    /// The library's error, its kind named, its SQLSTATE when the server
    /// said one.
    pub(super) fn from_error(err: &Error) -> Self {
        let kind = err.kind();
        Self {
            kind: kind.name(),
            schema: None,
            sqlstate: kind
                .driver_error()
                .and_then(|e| e.code())
                .map(|c| c.code().to_owned()),
            message: err.to_string(),
            done: err.done().copied(),
            state: State::of_error(kind),
        }
    }

    /// The same failure, about `schema`.
    pub(super) fn about(mut self, schema: &str) -> Self {
        self.schema = Some(schema.to_owned());
        self
    }

    /// Prints the failure (one line on `stderr`; with `json` the object on
    /// `stdout` too) and returns its state's exit code: [`EXIT_USAGE`] (2)
    /// for an error, 3 for an older version, 4 for a contract to run first,
    /// 6 for a newer version ([`State::of_error`]).
    pub(super) fn print(
        &self,
        json: bool,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> ExitCode {
        let message = error::one_line(&self.message);
        let _ = writeln!(stderr, "schema-gen: {message}");
        if json {
            let report = FailureReport {
                outcome: "error",
                kind: self.kind,
                state: self.state,
                schema: self.schema.as_deref(),
                sqlstate: self.sqlstate.as_deref(),
                message,
                done: self.done.as_ref(),
            };
            // Serializing this plain struct cannot fail; stdout may be gone
            // (the line on stderr already says what failed).
            if let Ok(mut text) = serde_json::to_string_pretty(&report) {
                text.push('\n');
                let _ = stdout
                    .write_all(text.as_bytes())
                    .and_then(|()| stdout.flush());
            }
        }
        ExitCode::from(self.state.exit_code())
    }
}

/// Whether the raw arguments ask for `--format json` (`--format json` or
/// `--format=json`): read before clap parses them, so that a usage error is
/// reported as JSON to a tool that asked for JSON.
pub(super) fn asks_for_json(args: &[std::ffi::OsString]) -> bool {
    args.windows(2)
        .any(|pair| pair[0] == "--format" && pair[1] == "json")
        || args.iter().any(|arg| arg == "--format=json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_for_either_way() {
        let args = |list: &[&str]| -> Vec<std::ffi::OsString> {
            list.iter().map(std::ffi::OsString::from).collect()
        };
        assert!(asks_for_json(&args(&[
            "schema-gen",
            "check",
            "--format",
            "json"
        ])));
        assert!(asks_for_json(&args(&[
            "schema-gen",
            "check",
            "--format=json"
        ])));
        assert!(!asks_for_json(&args(&[
            "schema-gen",
            "check",
            "--format",
            "text"
        ])));
        assert!(!asks_for_json(&args(&["schema-gen", "check", "json"])));
    }
}
