//! The edits of `ship-version`, on a checkout's files: the three texts of
//! the version written, the lines added before the markers of
//! `schema-model/src/history/mod.rs`, the next version's hints file, the
//! release bumped.

use std::fs;
use std::path::{Path, PathBuf};

use schema_model::history::{MODEL_VERSION, pin_line};

/// The texts of the version this build renders, as its binary prints them.
pub struct Texts {
    /// The version (this build's model).
    pub number: u32,
    /// The release that ships it (`0.3.0`).
    pub release: String,
    /// `schema-gen sql`.
    pub schema_sql: String,
    /// `schema-gen describe --format json`.
    pub describe_json: String,
    /// `schema-gen statements --format json`.
    pub statements_json: String,
}

impl Texts {
    /// Runs this build's `schema-gen` in-process for the three texts.
    pub fn of_this_build() -> Result<Self, String> {
        let print = |args: &[&str]| -> Result<String, String> {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let code = schema_gen::cli::run(
                std::iter::once("schema-gen").chain(args.iter().copied()),
                &mut out,
                &mut err,
            );
            if code != std::process::ExitCode::SUCCESS {
                return Err(format!(
                    "schema-gen {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&err)
                ));
            }
            String::from_utf8(out).map_err(|e| format!("schema-gen {}: {e}", args.join(" ")))
        };
        Ok(Self {
            number: MODEL_VERSION,
            release: env!("CARGO_PKG_VERSION").to_owned(),
            schema_sql: print(&["sql"])?,
            describe_json: print(&["describe", "--format", "json"])?,
            statements_json: print(&["statements", "--format", "json"])?,
        })
    }

    /// The pin test's line for these texts.
    fn pin_line(&self) -> String {
        pin_line(
            self.number,
            [&self.schema_sql, &self.describe_json, &self.statements_json],
        )
    }
}

/// Ships `texts` in the checkout at `root`; returns the files written or
/// edited.
pub fn ship(root: &Path, texts: &Texts) -> Result<Vec<PathBuf>, String> {
    let number = texts.number;
    let next = number + 1;
    let dir = root.join(format!("schema-model/history/v{number}"));
    if dir.exists() {
        return Err(format!(
            "{} exists: version {number} is shipped already",
            dir.display()
        ));
    }
    let history = root.join("schema-model/src/history/mod.rs");
    let hints = root.join(format!("schema-model/src/history/v{next}.rs"));
    let cargo = root.join("Cargo.toml");
    let mut module = read(&history)?;
    for (marker, line) in [
        (
            "    // release: shipped versions end here",
            format!("    shipped!({number}, \"{}\"),", texts.release),
        ),
        (
            "        // release: pins end here",
            format!("        {}", texts.pin_line()),
        ),
        ("// release: hint modules end here", format!("mod v{next};")),
        (
            "        // release: hints end here",
            format!("        {next} => v{next}::hints(),"),
        ),
    ] {
        module = insert_before(&module, marker, &line)?;
    }
    let manifest = bump_release(&read(&cargo)?)?;

    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut touched = Vec::new();
    for (name, text) in [
        ("schema.sql", &texts.schema_sql),
        ("describe.json", &texts.describe_json),
        ("statements.json", &texts.statements_json),
    ] {
        touched.push(write(&dir.join(name), text)?);
    }
    touched.push(write(&history, &module)?);
    if !hints.exists() {
        touched.push(write(&hints, &hints_template(number))?);
    }
    touched.push(write(&cargo, &manifest)?);
    Ok(touched)
}

/// The next version's hints file, to fill in with the model change.
fn hints_template(shipped: u32) -> String {
    let next = shipped + 1;
    format!(
        "//! Version {next} (the model, until it ships): what changes from version \
         {shipped}, in a\n\
         //! sentence, and why.\n\
         //!\n\
         //! The upgrade is planned from the difference between the two versions' shapes;\n\
         //! declare here what that difference cannot say (see `UpgradeHints`): the value\n\
         //! a new `NOT NULL` column holds until the contract, the backfills, the `CHECK`s\n\
         //! the previous release's writes would break.\n\
         \n\
         use super::UpgradeHints;\n\
         \n\
         pub(super) fn hints() -> UpgradeHints {{\n    \
         UpgradeHints::default()\n\
         }}\n"
    )
}

fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, text: &str) -> Result<PathBuf, String> {
    fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path.to_owned())
}

/// `text` with `line` on a line of its own before the line `marker`.
fn insert_before(text: &str, marker: &str, line: &str) -> Result<String, String> {
    let at = text
        .find(&format!("{marker}\n"))
        .ok_or_else(|| format!("no line `{}` to add `{line}` before", marker.trim()))?;
    Ok(format!("{}{line}\n{}", &text[..at], &text[at..]))
}

/// The workspace manifest with its release's minor number raised
/// (`0.3.0` to `0.4.0`).
fn bump_release(manifest: &str) -> Result<String, String> {
    let section = manifest
        .find("[workspace.package]")
        .ok_or("no [workspace.package] in Cargo.toml")?;
    let start = manifest[section..]
        .find("\nversion = \"")
        .map(|at| section + at + "\nversion = \"".len())
        .ok_or("no version in [workspace.package]")?;
    let end = manifest[start..]
        .find('"')
        .map(|at| start + at)
        .ok_or("an unterminated version in [workspace.package]")?;
    let parts: Vec<u64> = manifest[start..end]
        .split('.')
        .map(|part| part.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the workspace version `{}`: {e}", &manifest[start..end]))?;
    let [major, minor, _] = parts[..] else {
        return Err(format!(
            "the workspace version `{}` is not major.minor.patch",
            &manifest[start..end]
        ));
    };
    Ok(format!(
        "{}{major}.{}.0{}",
        &manifest[..start],
        minor + 1,
        &manifest[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch copy of the files `ship` edits, from this checkout.
    fn scratch(name: &str) -> PathBuf {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let root = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("schema-model/src/history")).unwrap();
        for file in ["Cargo.toml", "schema-model/src/history/mod.rs"] {
            fs::copy(here.join(file), root.join(file)).unwrap();
        }
        root
    }

    #[test]
    fn shipping_writes_the_texts_lists_pins_and_starts_the_next_version() {
        let root = scratch("ship");
        let texts = Texts::of_this_build().unwrap();
        let n = texts.number;
        let touched = ship(&root, &texts).unwrap();
        assert_eq!(touched.len(), 6, "{touched:?}");
        let dir = root.join(format!("schema-model/history/v{n}"));
        assert_eq!(read(&dir.join("schema.sql")).unwrap(), texts.schema_sql);
        assert!(
            texts
                .schema_sql
                .contains("CREATE TABLE IF NOT EXISTS \"alkstore\".\"jobs\"")
        );
        assert!(texts.describe_json.contains("\"tables\""));
        assert!(texts.statements_json.contains("\"statements\""));

        let module = read(&root.join("schema-model/src/history/mod.rs")).unwrap();
        let release = env!("CARGO_PKG_VERSION");
        let before = |line: &str, marker: &str| {
            let (at, end) = (module.find(line), module.find(marker));
            assert!(at.is_some() && at < end, "`{line}` not before `{marker}`");
        };
        before(
            &format!("    shipped!({n}, \"{release}\"),\n"),
            "// release: shipped versions end here",
        );
        before(&format!("        ({n}, [0x"), "// release: pins end here");
        before(
            &format!("mod v{};\n", n + 1),
            "// release: hint modules end here",
        );
        before(
            &format!("        {} => v{}::hints(),\n", n + 1, n + 1),
            "// release: hints end here",
        );
        let hints = read(&root.join(format!("schema-model/src/history/v{}.rs", n + 1))).unwrap();
        assert!(
            hints.contains("pub(super) fn hints() -> UpgradeHints"),
            "{hints}"
        );
        let manifest = read(&root.join("Cargo.toml")).unwrap();
        let [major, minor, _]: [u64; 3] = release
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect::<Vec<_>>()
            .try_into()
            .unwrap();
        assert!(
            manifest.contains(&format!("\nversion = \"{major}.{}.0\"", minor + 1)),
            "{manifest}"
        );
        // A version ships once.
        let again = ship(&root, &texts).unwrap_err();
        assert!(again.contains("shipped already"), "{again}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_without_its_markers_is_refused_and_nothing_is_written() {
        let root = scratch("markers");
        let history = root.join("schema-model/src/history/mod.rs");
        let module = read(&history).unwrap();
        fs::write(&history, module.replace("// release: pins end here", "")).unwrap();
        let texts = Texts::of_this_build().unwrap();
        let err = ship(&root, &texts).unwrap_err();
        assert!(err.contains("release: pins end here"), "{err}");
        assert!(
            !root
                .join(format!("schema-model/history/v{}", texts.number))
                .exists()
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_release_bump_raises_the_minor_number_only() {
        let manifest = "[workspace]\nmembers = []\n\n[workspace.package]\nversion = \"0.3.7\"\nedition = \"2024\"\n";
        assert_eq!(
            bump_release(manifest).unwrap(),
            manifest.replace("0.3.7", "0.4.0")
        );
        assert!(bump_release("[package]\nversion = \"1\"\n").is_err());
    }
}
