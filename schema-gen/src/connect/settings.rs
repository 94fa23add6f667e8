//! Precedence: which value of each keyword is in force, and where it came
//! from. What the connection string says wins over the service file's
//! section, which wins over the environment (libpq's `conninfo_add_defaults`);
//! the defaults come last, where each setting is read.

use std::collections::BTreeMap;
use std::fmt;

use super::conninfo::{self, ParseError, Support};
use super::service;
use super::{ConfigError, Environment};

/// Where a setting came from, as an error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The connection string's keyword (or URL part).
    ConnectionString(&'static str),
    /// An environment variable.
    Environment(&'static str),
    /// A keyword of the connection service file's section.
    ServiceFile(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ConnectionString(key) => write!(f, "`{key}`"),
            Self::Environment(var) => f.write_str(var),
            Self::ServiceFile(key) => write!(f, "`{key}` of the service file"),
        }
    }
}

/// The settings in force, each with where it came from.
pub(super) struct Settings(BTreeMap<&'static str, (String, Origin)>);

impl Settings {
    pub(super) fn get(&self, key: &str) -> Option<(&str, Origin)> {
        self.0.get(key).map(|(v, o)| (v.as_str(), *o))
    }

    /// The value when set and not empty (libpq treats empty as unset).
    pub(super) fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(|(v, _)| v).filter(|v| !v.is_empty())
    }

    pub(super) fn origin(&self, key: &'static str) -> Origin {
        self.get(key)
            .map(|(_, o)| o)
            .unwrap_or(Origin::ConnectionString(key))
    }

    pub(super) fn invalid(&self, key: &'static str, expected: &str) -> ConfigError {
        let origin = self.origin(key);
        let shown = if conninfo::is_secret(key) {
            String::new()
        } else {
            format!(": `{}`", self.get(key).map(|(v, _)| v).unwrap_or(""))
        };
        ConfigError::Invalid {
            origin,
            message: format!("invalid value for {origin}{shown} (expected {expected})"),
        }
    }

    pub(super) fn one_of<T: Copy>(
        &self,
        key: &'static str,
        default: T,
        choices: &[(&str, T)],
    ) -> Result<T, ConfigError> {
        match self.value(key) {
            None => Ok(default),
            Some(v) => choices
                .iter()
                .find(|(name, _)| *name == v)
                .map(|(_, t)| *t)
                .ok_or_else(|| {
                    let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                    self.invalid(key, &names.join(", "))
                }),
        }
    }

    pub(super) fn int(&self, key: &'static str) -> Result<Option<i64>, ConfigError> {
        self.value(key)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| self.invalid(key, "an integer"))
            })
            .transpose()
    }
}

/// Gathers the settings of `conninfo` (a URL, `key=value` pairs, or empty),
/// the service it names (or `PGSERVICE`) and `env`, each keyword from the
/// first of them that sets it, and refuses the keywords schema-gen cannot
/// honour.
pub(super) fn gather(conninfo: &str, env: &Environment) -> Result<Settings, ConfigError> {
    let mut settings = BTreeMap::new();
    if !conninfo.trim().is_empty() {
        if !conninfo::is_connection_string(conninfo) {
            // Not quoted: a mistyped URL may hold a password.
            return Err(ParseError::Uri {
                message: "it is neither a postgresql:// (or postgres://) URL nor key=value \
                          pairs (a bare word is not taken for a database name: write \
                          dbname=NAME)"
                    .to_owned(),
            }
            .into());
        }
        for pair in conninfo::parse(conninfo)? {
            settings.insert(pair.key, (pair.value, Origin::ConnectionString(pair.key)));
        }
    }
    // libpq's parseServiceInfo: the service's section fills in what the
    // string did not set, before the environment does.
    let service = settings
        .get("service")
        .map(|(v, _)| v.clone())
        .or_else(|| env.var("PGSERVICE").map(str::to_owned))
        .filter(|name| !name.is_empty());
    if let Some(name) = service {
        let found = service::lookup(
            &name,
            env.var("PGSERVICEFILE"),
            env.var("PGSYSCONFDIR"),
            env.home.as_deref(),
        )
        .map_err(|message| ConfigError::Invalid {
            origin: match settings.get("service") {
                Some(_) => Origin::ConnectionString("service"),
                None => Origin::Environment("PGSERVICE"),
            },
            message,
        })?;
        for (key, value) in found {
            settings
                .entry(key)
                .or_insert((value, Origin::ServiceFile(key)));
        }
    }
    // libpq's conninfo_add_defaults: a keyword the string did not set
    // takes its environment variable, even an empty one.
    for keyword in conninfo::KEYWORDS {
        if settings.contains_key(keyword.name) {
            continue;
        }
        if let Some(var) = keyword.env
            && let Some(value) = env.var(var)
        {
            settings.insert(keyword.name, (value.to_owned(), Origin::Environment(var)));
        }
    }
    let settings = Settings(settings);
    for keyword in conninfo::KEYWORDS {
        if let (Support::Refused(reason), Some(_)) = (keyword.support, settings.value(keyword.name))
        {
            return Err(ConfigError::Unsupported {
                origin: settings.origin(keyword.name),
                reason: reason.to_owned(),
            });
        }
    }
    Ok(settings)
}
