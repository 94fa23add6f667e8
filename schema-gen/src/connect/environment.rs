//! What libpq reads from the process besides the connection string: the
//! `PG*` variables, the home directory and the operating-system user.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// The environment libpq reads: `PG*` variables, the home directory (for
/// `~/.pgpass` and `~/.postgresql/`), and the operating-system user name
/// (the default user).
///
/// [`Environment::from_process`] reads the real one; tests build one with
/// [`Environment::new`] and the `with_*` methods, so no test has to change
/// the process's environment.
#[derive(Clone, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
    pub(super) home: Option<PathBuf>,
    pub(super) os_user: Option<String>,
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
            .finish()
    }
}

impl Environment {
    /// An empty environment: no variables, no home directory, no user name.
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

    /// A variable's value, if set.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}
