//! The suite leaves the shared server as it found it, also when that server
//! is an external one (`ALKSTORE_TEST_DATABASE_URL`): every name the harness
//! hands out ([`crate::unique_schema`], [`crate::unique_name`],
//! [`crate::create_database`]) is remembered, and when the test process
//! exits (after every test, passed or failed) the schemas, databases and
//! roles of those names are dropped. Then the server's inventory (schemas,
//! roles, databases, event triggers, relations in `public`) is compared with
//! the one taken when the process first used the server: anything new that
//! is not another test process's (a name with another process's tag) is
//! listed on stderr and the process exits 1, so a test that creates an
//! object under a name of its own fails the run, on the throwaway cluster as
//! on an external server.
//!
//! `.ci/external-server-check` runs the whole suite against a server of its
//! own and compares the inventories from outside, as a second witness.

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::process::Command;
use std::sync::{Mutex, Once};

/// The names handed out so far in this process.
static NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// What the server held when this process first used it, and how to reach it.
static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);

struct Watched {
    /// `psql -X -q -v ON_ERROR_STOP=1 -d URL`, as the harness runs it.
    psql: Command,
    /// This process's tag in the names it hands out.
    tag: String,
    before: BTreeSet<String>,
}

/// The inventory compared before and after: one `kind name` line each.
const INVENTORY: &str = "\
SELECT 'schema ' || nspname FROM pg_namespace
UNION ALL SELECT 'role ' || rolname FROM pg_roles
UNION ALL SELECT 'database ' || datname FROM pg_database
UNION ALL SELECT 'event trigger ' || evtname FROM pg_event_trigger
UNION ALL SELECT 'relation public.' || relname FROM pg_class
    WHERE relnamespace = 'public'::regnamespace";

/// Remembers `name` for the clean-up at exit.
pub(crate) fn remember(name: &str) {
    NAMES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(name.to_owned());
}

/// Takes the server's inventory once per process and registers the clean-up
/// at exit. `psql` builds a psql command for the shared server.
///
/// # Panics
///
/// If the inventory cannot be read (the server was just reached, so this
/// names a real problem).
pub(crate) fn watch(psql: impl Fn() -> Command, tag: &str) {
    static WATCH: Once = Once::new();
    WATCH.call_once(|| {
        let before = inventory(&mut psql())
            .unwrap_or_else(|e| panic!("taking the test server's inventory: {e}"));
        *WATCHED.lock().unwrap_or_else(|p| p.into_inner()) = Some(Watched {
            psql: psql(),
            tag: tag.to_owned(),
            before,
        });
        unsafe extern "C" {
            fn atexit(callback: extern "C" fn()) -> c_int;
        }
        // SAFETY: `atexit` is the C library's; `clean_up_at_exit` is a plain
        // `extern "C" fn` that catches every panic. Registered after the
        // cluster's own hook, so it runs first (atexit is last in, first out)
        // while the throwaway cluster still runs.
        if unsafe { atexit(clean_up_at_exit) } != 0 {
            eprintln!("harness: could not register the clean-up of the test server");
        }
    });
}

fn inventory(psql: &mut Command) -> Result<BTreeSet<String>, String> {
    let out = psql
        .args(["-At", "-c", INVENTORY])
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Quotes an identifier for SQL (the harness's names are plain, but a
/// quoted one cannot turn into something else).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The script that drops what `names` may name: schemas (with what is in
/// them), databases (with their sessions), then roles (after what they own
/// or were granted in this database).
fn drop_script(names: &[String]) -> String {
    // No "does not exist, skipping" notice for every name not used.
    let mut script = String::from("SET client_min_messages = warning;\n");
    for name in names {
        script.push_str(&format!("DROP SCHEMA IF EXISTS {} CASCADE;\n", ident(name)));
    }
    for name in names {
        script.push_str(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE);\n",
            ident(name)
        ));
    }
    let list = names
        .iter()
        .map(|n| format!("'{}'", n.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ");
    if !list.is_empty() {
        script.push_str(&format!(
            "SELECT format('DROP OWNED BY %I', rolname) FROM pg_roles WHERE rolname IN ({list}) \
             \\gexec\n\
             SELECT format('DROP ROLE %I', rolname) FROM pg_roles WHERE rolname IN ({list}) \
             \\gexec\n"
        ));
    }
    script
}

/// Whether `entry` (`kind name`) is a name another test process handed out:
/// `prefix_TAG_N` with another 8-character tag.
fn is_another_process(entry: &str, tag: &str) -> bool {
    let name = entry.rsplit([' ', '.']).next().unwrap_or(entry);
    let mut parts = name.rsplit('_');
    let (Some(n), Some(other)) = (parts.next(), parts.next()) else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && other.len() == 8
        && other
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        && other != tag
}

/// Drops what this process's names name, then fails the process (exit 1)
/// when the server holds anything new of this process's.
fn clean_up() -> Result<(), String> {
    let Some(mut watched) = WATCHED.lock().unwrap_or_else(|p| p.into_inner()).take() else {
        return Ok(());
    };
    let names: Vec<String> = NAMES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if !names.is_empty() {
        let mut child = watched
            .psql
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("running psql: {e}"))?;
        // Written from another thread while this one reads psql's stderr, so
        // neither pipe can fill up and stall the other.
        let writer = child.stdin.take().map(|mut stdin| {
            let script = drop_script(&names);
            std::thread::spawn(move || {
                use std::io::Write as _;
                stdin.write_all(script.as_bytes())
            })
        });
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for psql: {e}"))?;
        if let Some(writer) = writer {
            writer
                .join()
                .map_err(|_| "the thread feeding psql panicked".to_owned())?
                .map_err(|e| format!("writing to psql: {e}"))?;
        }
        if !out.status.success() {
            return Err(format!(
                "dropping what the tests created failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let mut psql = Command::new(watched.psql.get_program());
    psql.args(watched.psql.get_args());
    let after = inventory(&mut psql)?;
    let left: Vec<&String> = after
        .difference(&watched.before)
        .filter(|entry| !is_another_process(entry, &watched.tag))
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the tests left {} object(s) on the test server that the harness did not hand out a \
         name for; create them under harness::unique_schema / unique_name (dropped at exit), \
         or drop them in the test: {}",
        left.len(),
        left.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

extern "C" fn clean_up_at_exit() {
    let outcome = std::panic::catch_unwind(clean_up)
        .unwrap_or_else(|_| Err("the clean-up of the test server panicked".to_owned()));
    if let Err(message) = outcome {
        eprintln!("harness: {message}");
        unsafe extern "C" {
            fn _exit(status: c_int) -> !;
        }
        // SAFETY: the C library's `_exit`, allowed in an atexit handler
        // (unlike `exit`): the process ends here with status 1, so the run
        // fails. The clusters' watchdogs stop them when the pipe closes.
        unsafe { _exit(1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_process_is_told_by_its_tag() {
        assert!(is_another_process("schema drift_ab12cd34_7", "zz99zz99"));
        assert!(!is_another_process("schema drift_ab12cd34_7", "ab12cd34"));
        assert!(!is_another_process("schema alkstore", "ab12cd34"));
        assert!(!is_another_process("event trigger tamper", "ab12cd34"));
        assert!(is_another_process(
            "relation public.t_ab12cd34_0",
            "zz99zz99"
        ));
    }
}
