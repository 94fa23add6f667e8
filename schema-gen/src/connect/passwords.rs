//! Password lookup: the password given (string, service, `PGPASSWORD`), else
//! the password file's line for each host ([`super::pgpass`] reads the file).

use std::fmt;
use std::path::PathBuf;

use super::settings::Settings;
use super::targets::{Host, Target};
use super::{Environment, Origin, pgpass};

/// Where a password came from, so a failed login can say which one to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordSource {
    /// The connection string.
    ConnectionString,
    /// `PGPASSWORD`.
    Environment,
    /// The connection service file.
    ServiceFile,
    /// A line of the password file.
    File {
        /// The password file.
        path: PathBuf,
        /// The 1-based line that matched.
        line: usize,
    },
}

impl fmt::Display for PasswordSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionString => f.write_str("the connection string"),
            Self::Environment => f.write_str("PGPASSWORD"),
            Self::ServiceFile => f.write_str("the connection service file"),
            Self::File { path, line } => write!(f, "line {line} of {}", path.display()),
        }
    }
}

/// The password of each target: the one given, else the password file's
/// (looked up per host, as libpq does). Returns the warnings too.
pub(super) fn passwords(
    s: &Settings,
    env: &Environment,
    mut targets: Vec<Target>,
    dbname: &str,
    user: &str,
) -> (Vec<Target>, Option<String>) {
    if let Some(password) = s.value("password") {
        let source = match s.origin("password") {
            Origin::Environment(_) => PasswordSource::Environment,
            Origin::ConnectionString(_) => PasswordSource::ConnectionString,
            Origin::ServiceFile(_) => PasswordSource::ServiceFile,
        };
        for target in &mut targets {
            target.password = Some((password.to_owned(), source.clone()));
        }
        return (targets, None);
    }
    let file = match s.value("passfile") {
        Some(path) => Some(PathBuf::from(path)),
        None => pgpass::default_file(env.home.as_deref()),
    };
    let Some(file) = file else {
        return (targets, None);
    };
    let mut warning = None;
    for target in &mut targets {
        let host = match &target.host {
            Host::Name(name) => name.clone(),
            Host::Addr {
                name: Some(name), ..
            } => name.clone(),
            Host::Addr { name: None, addr } => addr.to_string(),
            // libpq looks up its default socket directory as `localhost`,
            // also when the connection string names it.
            Host::DefaultSocket(_) => "localhost".to_owned(),
            Host::Socket(dir) if dir == env.primary_socket_dir() => "localhost".to_owned(),
            Host::Socket(dir) => dir.display().to_string(),
        };
        match pgpass::lookup(&file, &host, target.port, dbname, user) {
            pgpass::Lookup::Found { password, line } => {
                target.password = Some((
                    password,
                    PasswordSource::File {
                        path: file.clone(),
                        line,
                    },
                ));
            }
            pgpass::Lookup::NotFound => {}
            pgpass::Lookup::Ignored(why) => warning = Some(why),
        }
    }
    (targets, warning)
}
