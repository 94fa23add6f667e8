//! The TLS request: from the settings, which roots, which client
//! certificate, SNI and protocol versions ([`super::tls`] reads the files and
//! builds rustls's configuration).

use std::path::PathBuf;

use super::settings::Settings;
use super::tls::{self, Roots, TlsRequest};
use super::{ConfigError, Environment, SslMode};

/// The TLS settings: which roots, which client certificate, SNI, versions.
pub(super) fn tls_request(
    s: &Settings,
    env: &Environment,
    mode: SslMode,
) -> Result<TlsRequest, ConfigError> {
    let pg_dir = env.home.as_deref().map(|home| home.join(".postgresql"));
    let default_file = |name: &str| {
        pg_dir
            .as_deref()
            .map(|dir| dir.join(name))
            .filter(|p| p.is_file())
    };
    let named_file = |key: &'static str| -> Result<Option<PathBuf>, ConfigError> {
        match s.value(key) {
            None => Ok(None),
            Some(path) => {
                let path = PathBuf::from(path);
                if mode != SslMode::Disable && !path.is_file() {
                    return Err(ConfigError::TlsFile(format!(
                        "{} names {}, which is not a readable file",
                        s.origin(key),
                        path.display()
                    )));
                }
                Ok(Some(path))
            }
        }
    };
    let roots = match s.value("sslrootcert") {
        Some("system") => {
            if mode != SslMode::VerifyFull {
                return Err(ConfigError::Invalid {
                    origin: s.origin("sslrootcert"),
                    message: format!(
                        "sslrootcert=system needs sslmode=verify-full, not {} (libpq's rule: the \
                         system's roots vouch for any host they signed)",
                        mode.as_str()
                    ),
                });
            }
            Roots::System
        }
        _ => match named_file("sslrootcert")?.or_else(|| default_file("root.crt")) {
            Some(path) => Roots::File(path),
            None if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) => Roots::System,
            None => Roots::None,
        },
    };
    let cert_mode = s.one_of("sslcertmode", true, &[("disable", false), ("allow", true)])?;
    let client = if cert_mode {
        let cert = named_file("sslcert")?.or_else(|| default_file("postgresql.crt"));
        match cert {
            None => None,
            Some(cert) => {
                let key = named_file("sslkey")?
                    .or_else(|| pg_dir.as_deref().map(|dir| dir.join("postgresql.key")));
                match key.filter(|k| k.is_file()) {
                    Some(key) => Some((cert, key)),
                    None => {
                        return Err(ConfigError::TlsFile(format!(
                            "the client certificate {} has no private key file: give sslkey",
                            cert.display()
                        )));
                    }
                }
            }
        }
    } else {
        None
    };
    let sni = s.value("sslsni").is_none_or(|v| v.starts_with('1'));
    let versions = tls::protocol_versions(
        s.value("ssl_min_protocol_version"),
        s.value("ssl_max_protocol_version"),
    )
    .map_err(|message| ConfigError::Invalid {
        origin: s.origin("ssl_min_protocol_version"),
        message,
    })?;
    Ok(TlsRequest {
        mode,
        roots,
        client,
        sni,
        versions,
    })
}
