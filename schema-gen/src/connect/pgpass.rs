//! libpq's password file (`~/.pgpass`, or `passfile` / `PGPASSFILE`): lines
//! of `hostname:port:database:username:password`, the first matching line
//! wins, `*` matches anything, `\` escapes `:` and `\`, and a file that group
//! or others may read is ignored with a warning.
//!
//! Written here after libpq's `passwordFromFile` and `pwdfMatchesString`
//! (PostgreSQL 15-17): the crates that parse this format either refuse lines
//! libpq accepts, skip the permission rule, or lack the `localhost` rule for
//! sockets (see [`super`]). `tests/pg_conninfo/` compares lookups with
//! psql's.

use std::path::{Path, PathBuf};

/// What looking in the password file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A line matched: its password, and its 1-based line number.
    Found { password: String, line: usize },
    /// The file is absent, unreadable, or no line matched.
    NotFound,
    /// The file exists but was ignored, as libpq ignores it: the reason.
    Ignored(String),
}

/// Looks up the password for `host` (a name, an address, or a socket
/// directory), `port`, `dbname` and `user` in `file`.
pub(crate) fn lookup(file: &Path, host: &str, port: u16, dbname: &str, user: &str) -> Lookup {
    if dbname.is_empty() || user.is_empty() {
        return Lookup::NotFound;
    }
    // libpq: no host is looked up as "localhost" (the caller passes
    // "localhost" for the default socket directory too).
    let host = if host.is_empty() { "localhost" } else { host };
    let Ok(meta) = std::fs::metadata(file) else {
        return Lookup::NotFound;
    };
    if !meta.is_file() {
        return Lookup::Ignored(format!(
            "the password file {} is not a plain file",
            file.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if meta.permissions().mode() & 0o077 != 0 {
            return Lookup::Ignored(format!(
                "the password file {} has group or world access, so it was ignored; \
                 chmod 0600 it",
                file.display()
            ));
        }
    }
    let Ok(bytes) = std::fs::read(file) else {
        return Lookup::NotFound;
    };
    let text = String::from_utf8_lossy(&bytes);
    let port = port.to_string();
    for (n, line) in text.split('\n').enumerate() {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let rest = [host, port.as_str(), dbname, user]
            .iter()
            .try_fold(line, |rest, token| matches_field(rest, token));
        if let Some(rest) = rest {
            return Lookup::Found {
                password: unescape_password(rest),
                line: n + 1,
            };
        }
    }
    Lookup::NotFound
}

/// libpq's `pwdfMatchesString`: if the field at the start of `field` matches
/// `token` (or is `*`), returns what follows its `:`.
fn matches_field<'a>(field: &'a str, token: &str) -> Option<&'a str> {
    if let Some(rest) = field.strip_prefix("*:") {
        return Some(rest);
    }
    let mut chars = field.char_indices();
    let mut token = token.chars().peekable();
    loop {
        let (i, c) = chars.next()?;
        let (c, escaped) = if c == '\\' {
            // A backslash at the very end matches nothing.
            (chars.next()?.1, true)
        } else {
            (c, false)
        };
        if c == ':' && !escaped && token.peek().is_none() {
            return Some(&field[i + 1..]);
        }
        // libpq compares an unescaped ':' with the token too, so a host
        // `db:x` matches the line `db:x:...`.
        if token.next() != Some(c) {
            return None;
        }
    }
}

/// The password field: up to the next unescaped `:`, with `\x` read as `x`.
fn unescape_password(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        match c {
            ':' => break,
            '\\' => match chars.next() {
                Some(next) => out.push(next),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

/// The default password file: `$HOME/.pgpass`.
pub(crate) fn default_file(home: Option<&Path>) -> Option<PathBuf> {
    home.map(|home| home.join(".pgpass"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(contents: &str, mode: u32) -> (PathBuf, impl Drop) {
        struct Remove(PathBuf);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("pgpass-test-{}-{n}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        (path.clone(), Remove(path))
    }

    fn found(password: &str, line: usize) -> Lookup {
        Lookup::Found {
            password: password.to_owned(),
            line,
        }
    }

    #[test]
    fn first_matching_line_wins_with_wildcards_and_comments() {
        let (path, _guard) = file_with(
            "# comment\ndb:5432:app:other:nope\ndb:*:app:alice:first\n*:*:*:*:second\n",
            0o600,
        );
        assert_eq!(lookup(&path, "db", 5432, "app", "alice"), found("first", 3));
        assert_eq!(lookup(&path, "db", 5433, "app", "alice"), found("first", 3));
        assert_eq!(
            lookup(&path, "db2", 5432, "app", "alice"),
            found("second", 4)
        );
    }

    #[test]
    fn escapes_and_a_star_inside_a_field() {
        let (path, _guard) = file_with(
            "db\\:x:5432:app:bob:pa\\:ss\\\\word:trailing\nlocal\\host:543*:app:bob:nostar\n",
            0o600,
        );
        assert_eq!(
            lookup(&path, "db:x", 5432, "app", "bob"),
            found("pa:ss\\word", 1)
        );
        let (path, _guard2) = file_with("db:x:5432:app:bob:unescaped\n", 0o600);
        assert_eq!(
            lookup(&path, "db:x", 5432, "app", "bob"),
            found("unescaped", 1)
        );
        // `*` is a wildcard only as a whole field; `\h` is `h`.
        assert_eq!(
            lookup(&path, "localhost", 5432, "app", "bob"),
            Lookup::NotFound
        );
    }

    #[test]
    fn no_host_is_localhost() {
        let (path, _guard) = file_with("localhost:5432:app:bob:sock\n", 0o600);
        assert_eq!(lookup(&path, "", 5432, "app", "bob"), found("sock", 1));
        assert_eq!(lookup(&path, "/tmp", 5432, "app", "bob"), Lookup::NotFound);
    }

    #[test]
    fn a_file_others_can_read_is_ignored_with_a_reason() {
        let (path, _guard) = file_with("*:*:*:*:secret\n", 0o640);
        let Lookup::Ignored(reason) = lookup(&path, "db", 5432, "app", "bob") else {
            panic!("a 0640 password file was used");
        };
        assert!(reason.contains("group or world access"), "{reason}");
        assert!(!reason.contains("secret"), "{reason}");
    }

    #[test]
    fn a_password_file_that_is_not_a_plain_file_is_ignored() {
        let dir = std::env::temp_dir();
        let Lookup::Ignored(reason) = lookup(&dir, "db", 5432, "app", "bob") else {
            panic!("a directory was read as the password file");
        };
        assert!(reason.contains("is not a plain file"), "{reason}");
    }

    #[test]
    fn a_missing_file_or_short_line_finds_nothing() {
        assert_eq!(
            lookup(Path::new("/nonexistent/pgpass"), "db", 5432, "app", "bob"),
            Lookup::NotFound
        );
        let (path, _guard) = file_with("db:5432:app\r\ndb:5432:app:bob\r\n", 0o600);
        // libpq needs the ':' that closes the user field.
        assert_eq!(lookup(&path, "db", 5432, "app", "bob"), Lookup::NotFound);
    }
}
