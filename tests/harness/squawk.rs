//! squawk, the linter of PostgreSQL migrations (`squawk-cli` on PyPI, a
//! native binary), pinned, for the upgrade tests: the binary named by
//! [`SQUAWK_ENV`] when set, else the one in a virtual environment under the
//! cargo target directory, created on first use (`python3 -m venv`, then
//! `pip install squawk-cli==2.70.0`, a few seconds, needs PyPI). Without it
//! the tests fail and name that step.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde::Deserialize;

/// A squawk binary to use instead of provisioning one.
pub const SQUAWK_ENV: &str = "ALKSTORE_SQUAWK";

/// The pinned release.
pub const SQUAWK_VERSION: &str = "2.70.0";

fn setup_hint(venv: &Path) -> String {
    format!(
        "python3 -m venv {v} && {v}/bin/pip install squawk-cli=={SQUAWK_VERSION}, or set \
         {SQUAWK_ENV} to a squawk {SQUAWK_VERSION} binary (Debian: apt-get install python3-venv \
         first)",
        v = venv.display()
    )
}

/// One finding of squawk's JSON report.
#[derive(Debug, Clone, Deserialize)]
pub struct Finding {
    /// The rule that fired (`renaming-object`, ...).
    pub rule_name: String,
    /// Its line in the linted file.
    pub line: u64,
    /// What squawk says.
    pub message: String,
}

/// The squawk binary, provisioned once per test process.
///
/// # Panics
///
/// When it cannot be had: the message names the set-up step.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BINARY.get_or_init(find_or_provision) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

fn find_or_provision() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(SQUAWK_ENV) {
        let path = PathBuf::from(path);
        return match version(&path) {
            Ok(v) if v == SQUAWK_VERSION => Ok(path),
            Ok(v) => Err(format!(
                "{SQUAWK_ENV}={} is squawk {v}, not the pinned {SQUAWK_VERSION}",
                path.display()
            )),
            Err(e) => Err(format!("{SQUAWK_ENV}={}: {e}", path.display())),
        };
    }
    let venv = crate::paths::cargo_target_dir().join("squawk-venv");
    let binary = venv.join("bin").join("squawk");
    if version(&binary).is_ok_and(|v| v == SQUAWK_VERSION) {
        return Ok(binary);
    }
    let partial = venv.with_file_name(format!("squawk-venv.partial-{}", std::process::id()));
    let built = (|| {
        run(Command::new("python3").arg("-m").arg("venv").arg(&partial))?;
        run(Command::new(partial.join("bin").join("pip"))
            .args(["install", "--disable-pip-version-check", "-q"])
            .arg(format!("squawk-cli=={SQUAWK_VERSION}")))
    })();
    if let Err(e) = built {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(format!(
            "could not provision squawk in {}: {e}\nSet-up: {}",
            venv.display(),
            setup_hint(&venv)
        ));
    }
    // Another test process may have finished first: either venv will do.
    if std::fs::rename(&partial, &venv).is_err() {
        let _ = std::fs::remove_dir_all(&venv);
        let _ = std::fs::rename(&partial, &venv);
    }
    let _ = std::fs::remove_dir_all(&partial);
    match version(&binary) {
        Ok(v) if v == SQUAWK_VERSION => Ok(binary),
        other => Err(format!(
            "squawk in {} does not run ({other:?})\nSet-up: {}",
            venv.display(),
            setup_hint(&venv)
        )),
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `squawk --version` of `binary`: `2.70.0`.
fn version(binary: &Path) -> Result<String, String> {
    let out = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .strip_prefix("squawk ")
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected `squawk --version`: {text}"))
}

/// Lints `sql` (written to a file under the target directory) for
/// PostgreSQL `pg_version`, every rule on, and returns the findings.
///
/// # Panics
///
/// When squawk cannot be run or its report does not parse.
pub fn lint(sql: &str, name: &str, pg_version: &str) -> Vec<Finding> {
    let dir = crate::paths::cargo_target_dir().join("squawk-input");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let file = dir.join(format!("{name}-{}.sql", std::process::id()));
    std::fs::write(&file, sql).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let out = Command::new(binary())
        .arg("--pg-version")
        .arg(pg_version)
        .args(["--reporter", "json"])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running squawk: {e}"));
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    // A clean file may print no report at all; a squawk that failed to run
    // (a refused flag, a crash) must not read as "no findings".
    assert!(
        text.contains('[') || out.status.success(),
        "squawk failed on {name} ({}) without a report: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let json = text
        .find('[')
        .and_then(|start| text.rfind(']').map(|end| &text[start..=end]))
        .unwrap_or("[]");
    serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("squawk's report does not parse ({e}): {text}"))
}
