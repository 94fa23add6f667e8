//! Host and target expansion: libpq's `connectOptions2`, one target per
//! `hostaddr` (or `host`) entry with its port, and the order they are tried in.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use super::settings::Settings;
use super::{ConfigError, Environment, PasswordSource};

/// One server to try.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// What to connect to.
    pub(super) host: Host,
    pub(super) port: u16,
    pub(super) password: Option<(String, PasswordSource)>,
}

#[derive(Debug, Clone)]
pub(super) enum Host {
    /// A host name or address, resolved by the driver.
    Name(String),
    /// `hostaddr`: connect to the address, verify and look up passwords by
    /// the name when there is one.
    Addr { name: Option<String>, addr: IpAddr },
    /// A Unix-domain socket directory.
    Socket(PathBuf),
    /// No host or hostaddr anywhere: libpq's default socket directory.
    DefaultSocket(PathBuf),
}

impl Host {
    /// The socket directory, when this is a Unix-domain socket.
    pub(super) fn socket_dir(&self) -> Option<&std::path::Path> {
        match self {
            Self::Socket(dir) | Self::DefaultSocket(dir) => Some(dir),
            Self::Name(_) | Self::Addr { .. } => None,
        }
    }
}

impl fmt::Display for Target {
    /// `host:port`, or `socket DIR (port N)`; never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Socket(_) | Host::DefaultSocket(_) => {
                write!(f, "{} (port {})", self.host, self.port)
            }
            host => write!(f, "{host}:{}", self.port),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Addr {
                name: Some(name),
                addr,
            } => write!(f, "{name} ({addr})"),
            Self::Addr { name: None, addr } => write!(f, "{addr}"),
            Self::Socket(dir) | Self::DefaultSocket(dir) => write!(f, "socket {}", dir.display()),
        }
    }
}

/// libpq's connectOptions2: one target per `hostaddr` (or `host`) entry,
/// ports matched one-to-one or one for all.
pub(super) fn targets(s: &Settings, env: &Environment) -> Result<Vec<Target>, ConfigError> {
    let split = |key: &str| -> Vec<String> {
        s.value(key)
            .map(|v| v.split(',').map(|part| part.trim().to_owned()).collect())
            .unwrap_or_default()
    };
    let hosts = split("host");
    let addrs = split("hostaddr");
    let ports = split("port");
    let count = if !addrs.is_empty() {
        addrs.len()
    } else {
        hosts.len().max(1)
    };
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(ConfigError::Invalid {
            origin: s.origin("hostaddr"),
            message: format!(
                "{} host names and {} hostaddr values do not pair up: give one address per host",
                hosts.len(),
                addrs.len()
            ),
        });
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(ConfigError::Invalid {
            origin: s.origin("port"),
            message: format!(
                "{} ports for {count} hosts: give one port for all, or one per host",
                ports.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let host = hosts.get(i).filter(|h| !h.is_empty());
        let addr = addrs.get(i).filter(|a| !a.is_empty());
        let port_text = if ports.len() == 1 {
            ports.first()
        } else {
            ports.get(i)
        };
        let port = match port_text.filter(|p| !p.is_empty()) {
            None => 5432,
            Some(text) => text
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| s.invalid("port", "a port number from 1 to 65535"))?,
        };
        let host = match (host, addr) {
            (name, Some(addr)) => Host::Addr {
                name: name.cloned(),
                addr: addr.parse().map_err(|_| {
                    s.invalid("hostaddr", "numeric IP addresses (host= takes names)")
                })?,
            },
            (Some(name), None) if name.starts_with('/') => Host::Socket(PathBuf::from(name)),
            (Some(name), None) if name.starts_with('@') => {
                return Err(ConfigError::Unsupported {
                    origin: s.origin("host"),
                    reason: "abstract Unix-domain sockets (@name) are not supported by the \
                             driver; give the socket directory or a TCP host"
                        .to_owned(),
                });
            }
            (Some(name), None) => Host::Name(name.clone()),
            // libpq: nothing names a server, so its compiled-in socket directory.
            (None, None) => Host::DefaultSocket(env.default_socket_dir(port).to_owned()),
        };
        out.push(Target {
            host,
            port,
            password: None,
        });
    }
    Ok(out)
}

/// A Fisher-Yates shuffle seeded from the standard library's per-process
/// random hasher keys (no random-number crate for one shuffle).
pub(super) fn shuffle(items: &mut [usize]) {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    for i in (1..items.len()).rev() {
        hasher.write_usize(i);
        let j = usize::try_from(hasher.finish() % (i as u64 + 1)).unwrap_or(0);
        items.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_keeps_every_item() {
        let mut items: Vec<usize> = (0..10).collect();
        shuffle(&mut items);
        items.sort_unstable();
        assert_eq!(items, (0..10).collect::<Vec<_>>());
    }
}
