//! libpq's connection service file (`pg_service.conf`): `[name]` sections
//! of `keyword=value` lines that `service=name` (or `PGSERVICE`) pulls in.
//! Its settings come after the connection string's and before the
//! environment's.
//!
//! Written after libpq's `parseServiceInfo` / `parseServiceFile`
//! (PostgreSQL 15-17), for the same reason as the rest of [`super`]; the
//! files are the user's (`PGSERVICEFILE`, else `~/.pg_service.conf`), then
//! the system's (`$PGSYSCONFDIR/pg_service.conf`, else Debian's
//! `/etc/postgresql-common/pg_service.conf`).

use std::path::{Path, PathBuf};

use super::conninfo;

/// Where libpq, as Debian builds it, looks for the system's service file
/// when `PGSYSCONFDIR` is not set.
const DEFAULT_SYSCONFDIR: &str = "/etc/postgresql-common";

/// A section's `(keyword, value)` pairs, in file order.
type Section = Vec<(&'static str, String)>;

/// The settings of service `name`, from the first file that defines it.
pub(crate) fn lookup(
    name: &str,
    service_file: Option<&str>,
    sysconfdir: Option<&str>,
    home: Option<&Path>,
) -> Result<Section, String> {
    let user_file = match service_file.filter(|f| !f.is_empty()) {
        Some(file) => Some(PathBuf::from(file)),
        None => home.map(|home| home.join(".pg_service.conf")),
    };
    let system_file = Path::new(
        sysconfdir
            .filter(|d| !d.is_empty())
            .unwrap_or(DEFAULT_SYSCONFDIR),
    )
    .join("pg_service.conf");
    for file in user_file.into_iter().chain([system_file]) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if let Some(settings) = section(&text, name, &file)? {
            return Ok(settings);
        }
    }
    Err(format!(
        "the definition of service `{name}` was not found in ~/.pg_service.conf (or \
         PGSERVICEFILE) nor in the system's pg_service.conf (PGSYSCONFDIR)"
    ))
}

/// The `[name]` section of one file, if it has one.
fn section(text: &str, name: &str, file: &Path) -> Result<Option<Section>, String> {
    let mut found = false;
    let mut settings = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            if found {
                break;
            }
            found = rest.strip_prefix(name).is_some_and(|r| r.starts_with(']'));
            continue;
        }
        if !found {
            continue;
        }
        let syntax = || {
            format!(
                "syntax error in the service file {}, line {}: expected keyword=value",
                file.display(),
                n + 1
            )
        };
        let (key, value) = line.split_once('=').ok_or_else(syntax)?;
        if key == "service" {
            return Err(format!(
                "the service file {}, line {}: a service cannot name another service",
                file.display(),
                n + 1
            ));
        }
        let keyword = conninfo::keyword(key).ok_or_else(syntax)?;
        settings.push((keyword.name, value.to_owned()));
    }
    Ok(found.then_some(settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_section_is_read_up_to_the_next() {
        let text = "# comment\n[other]\nhost=elsewhere\n\n  [prod]  \nhost=db\n port=6432\nsslmode=verify-full\n[prod2]\nhost=no\n";
        let settings = section(text, "prod", Path::new("f")).unwrap().unwrap();
        assert_eq!(
            settings,
            vec![
                ("host", "db".to_owned()),
                ("port", "6432".to_owned()),
                ("sslmode", "verify-full".to_owned())
            ]
        );
        assert_eq!(section(text, "pro", Path::new("f")).unwrap(), None);
    }

    #[test]
    fn bad_lines_name_the_file_and_line() {
        let err = section("[a]\nhost db\n", "a", Path::new("/s.conf")).unwrap_err();
        assert_eq!(
            err,
            "syntax error in the service file /s.conf, line 2: expected keyword=value"
        );
        let err = section("[a]\nhots=db\n", "a", Path::new("/s.conf")).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        let err = section("[a]\nservice=b\n", "a", Path::new("/s.conf")).unwrap_err();
        assert!(err.contains("cannot name another service"), "{err}");
        // Lines of other sections are not judged.
        assert_eq!(
            section("[b]\nnonsense\n", "a", Path::new("/s.conf")).unwrap(),
            None
        );
    }

    #[test]
    fn a_missing_service_is_an_error() {
        let err = lookup(
            "nowhere",
            Some("/nonexistent/a"),
            Some("/nonexistent"),
            None,
        )
        .unwrap_err();
        assert!(
            err.starts_with("the definition of service `nowhere` was not found"),
            "{err}"
        );
    }
}
