//! Runs the `schema-gen` command line in-process through
//! `schema_gen::cli::run` (all the binary's `main` does), capturing what it
//! writes, so tests can assert on exit code, stdout and stderr.

use std::process::ExitCode;

use schema_gen::connect::Environment;

/// What one run of the command line produced.
#[derive(Debug)]
pub struct Ran {
    /// The exit code `main` would return.
    pub code: ExitCode,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

/// A multi-threaded runtime for a plain `#[test]`'s own set-up (connecting,
/// seeding) around [`run`], which must not be nested in a runtime.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("tokio runtime: {e}"))
}

/// Runs `schema-gen ARGS...` in-process, in an environment without
/// `DATABASE_URL`, `PG*` variables or a home directory (so neither the
/// machine's `~/.pgpass` nor its `PGHOST` can change the outcome).
///
/// `apply` and `check` start their own tokio runtime, so call this from a
/// plain `#[test]`, not from inside a `#[tokio::test]`.
pub fn run(args: &[&str]) -> Ran {
    run_in(args, &Environment::new().with_os_user("schema_gen_tests"))
}

/// Runs `schema-gen ARGS...` in-process with `env` as its environment
/// (`DATABASE_URL`, `PG*`, the home directory of `~/.pgpass`).
pub fn run_in(args: &[&str], env: &Environment) -> Ran {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = schema_gen::cli::run_in(
        std::iter::once("schema-gen").chain(args.iter().copied()),
        env,
        &mut stdout,
        &mut stderr,
    );
    Ran {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Asserts that `schema-gen ARGS...` exits 2 with nothing on stdout and one
/// line on stderr that contains `needle`.
pub fn assert_usage_error(args: &[&str], needle: &str) {
    let out = run(args);
    assert_eq!(out.code, ExitCode::from(2), "{args:?}: {}", out.stderr);
    assert_eq!(
        out.stdout, "",
        "{args:?}: nothing may reach stdout on an error"
    );
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "{args:?}: one line: {:?}",
        out.stderr
    );
    assert!(
        out.stderr.contains(needle),
        "{args:?}: {:?} lacks {needle:?}",
        out.stderr
    );
}
