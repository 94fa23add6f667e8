//! What libpq reads from the process besides the connection string: the
//! `PG*` variables, the home directory and the operating-system user, and
//! what it has compiled in: the socket directory it tries when nothing names
//! a server.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The Unix-domain socket directories libpq tries when nothing names a
/// server (libpq's compiled-in `DEFAULT_PGSOCKET_DIR`): Debian's and
/// Ubuntu's libpq use `/var/run/postgresql` (their servers put the socket
/// there), an upstream build uses `/tmp`. schema-gen cannot know which libpq
/// the operator's psql has, so it takes the first of these holding the
/// port's socket (`.s.PGSQL.5432`), else the first.
pub const LIBPQ_SOCKET_DIRS: [&str; 2] = ["/var/run/postgresql", "/tmp"];

/// The environment libpq reads: `PG*` variables, the home directory (for
/// `~/.pgpass` and `~/.postgresql/`), and the operating-system user name
/// (the default user).
///
/// [`Environment::from_process`] reads the real one; tests build one with
/// [`Environment::new`] and the `with_*` methods, so no test has to change
/// the process's environment.
#[derive(Clone)]
pub struct Environment {
    vars: BTreeMap<String, String>,
    pub(super) home: Option<PathBuf>,
    pub(super) os_user: Option<String>,
    /// Where to look for the server when nothing names one, in order
    /// ([`LIBPQ_SOCKET_DIRS`] unless a test says otherwise); never empty.
    default_socket_dirs: Vec<PathBuf>,
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            vars: BTreeMap::new(),
            home: None,
            os_user: None,
            default_socket_dirs: LIBPQ_SOCKET_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let vars: BTreeMap<&str, &str> = self
            .vars
            .iter()
            .map(|(k, v)| {
                let v = if k == "PGPASSWORD" { "***" } else { v.as_str() };
                (k.as_str(), v)
            })
            .collect();
        f.debug_struct("Environment")
            .field("vars", &vars)
            .field("home", &self.home)
            .field("os_user", &self.os_user)
            .field("default_socket_dirs", &self.default_socket_dirs)
            .finish()
    }
}

impl Environment {
    /// An empty environment: no variables, no home directory, no user name;
    /// libpq's default socket directories ([`LIBPQ_SOCKET_DIRS`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The process's environment: every variable that is valid UTF-8, the
    /// home directory as libpq finds it (`HOME`, else the password database),
    /// and the effective user's name.
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            home: std::env::home_dir(),
            os_user: whoami::username().ok(),
            ..Self::default()
        }
    }

    /// Sets a variable.
    pub fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Sets the home directory.
    pub fn with_home(mut self, dir: impl Into<PathBuf>) -> Self {
        self.home = Some(dir.into());
        self
    }

    /// Sets the operating-system user name (libpq's default user).
    pub fn with_os_user(mut self, name: &str) -> Self {
        self.os_user = Some(name.to_owned());
        self
    }

    /// Replaces libpq's default socket directories ([`LIBPQ_SOCKET_DIRS`])
    /// with `dir`: where a connection goes when nothing names a server. For
    /// tests, which cannot start a server in `/var/run/postgresql`.
    pub fn with_default_socket_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.default_socket_dirs = vec![dir.into()];
        self
    }

    /// The socket directory a connection to `port` goes to when nothing names
    /// a server: the first default directory holding the port's socket
    /// (`.s.PGSQL.<port>`), else the first (which the error then names).
    pub fn default_socket_dir(&self, port: u16) -> &Path {
        let socket = format!(".s.PGSQL.{port}");
        self.default_socket_dirs
            .iter()
            .find(|dir| is_socket(&dir.join(&socket)))
            .or(self.default_socket_dirs.first())
            .map_or(Path::new(LIBPQ_SOCKET_DIRS[0]), PathBuf::as_path)
    }

    /// The first default socket directory: the one libpq looks up as
    /// `localhost` in the password file when a connection string names it.
    pub(super) fn primary_socket_dir(&self) -> &Path {
        self.default_socket_dirs
            .first()
            .map_or(Path::new(LIBPQ_SOCKET_DIRS[0]), PathBuf::as_path)
    }

    /// A variable's value, if set.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

/// Whether `path` is a Unix-domain socket (a server listens there, or did).
fn is_socket(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_socket_dir_is_the_first_holding_the_ports_socket() {
        let root = std::env::temp_dir().join(format!("connect-sockets-{}", std::process::id()));
        let (first, second) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&first).unwrap();
        std::fs::create_dir_all(&second).unwrap();
        let mut env = Environment::new();
        env.default_socket_dirs = vec![first.clone(), second.clone()];
        // No socket anywhere: the first, which the error will name.
        assert_eq!(env.default_socket_dir(5432), first);
        // A plain file of that name is not a server.
        std::fs::write(first.join(".s.PGSQL.5432"), "").unwrap();
        assert_eq!(env.default_socket_dir(5432), first);
        let listener = std::os::unix::net::UnixListener::bind(second.join(".s.PGSQL.5432"));
        let found = env.default_socket_dir(5432).to_owned();
        let other_port = env.default_socket_dir(5433).to_owned();
        drop(listener);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(found, second);
        assert_eq!(other_port, first);
        assert_eq!(
            Environment::new().default_socket_dirs,
            [PathBuf::from("/var/run/postgresql"), PathBuf::from("/tmp")]
        );
    }
}
