//! TLS for tokio-postgres over rustls (`tokio-postgres-rustls`), with
//! libpq's `sslmode` meanings:
//!
//! | sslmode | TLS | what is verified |
//! |---|---|---|
//! | `disable` | never | - |
//! | `allow` | if the server refuses clear text | as `prefer` |
//! | `prefer` | if the server offers it | nothing, or the chain when a root certificate file is given (libpq: a root file makes every mode check the chain) |
//! | `require` | always | as `prefer` |
//! | `verify-ca` | always | the chain, against `sslrootcert` or the system's roots |
//! | `verify-full` | always | the chain and the host name |
//!
//! rustls rather than OpenSSL: no C library or system headers to build
//! against on the operators' machines, one TLS stack whatever the
//! distribution, and the `ring` provider needs only a C compiler.
//!
//! `require` and `verify-ca` need verifiers of their own (rustls always
//! checks both chain and name); each is a few lines over rustls's own
//! functions, and the handshake signatures are always checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Clear text first, TLS if the server refuses clear text.
    Allow,
    /// TLS when the server offers it, else clear text (libpq's default).
    Prefer,
    /// Always TLS; the certificate is not checked unless a root certificate
    /// file is given.
    Require,
    /// Always TLS; the certificate chain must lead to a trusted root.
    VerifyCa,
    /// Always TLS; the chain must be trusted and name the host.
    VerifyFull,
}

impl SslMode {
    /// Parses libpq's spelling.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Allow => "allow",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether the connection must be encrypted.
    pub fn requires_tls(self) -> bool {
        matches!(self, Self::Require | Self::VerifyCa | Self::VerifyFull)
    }
}

/// Where the trusted roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// A PEM file (`sslrootcert`, or `~/.postgresql/root.crt` when present).
    File(PathBuf),
    /// The operating system's store (`sslrootcert=system`, or `verify-*`
    /// without a file).
    System,
    /// None: the certificate is not checked.
    None,
}

/// The TLS side of a resolved connection, files already read.
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    pub mode: SslMode,
    pub roots: Roots,
    pub config: Option<Arc<rustls::ClientConfig>>,
}

/// What the TLS settings ask for, before the files are read.
#[derive(Debug, Clone)]
pub(crate) struct TlsRequest {
    pub mode: SslMode,
    pub roots: Roots,
    pub client: Option<(PathBuf, PathBuf)>,
    pub sni: bool,
    pub versions: Vec<&'static rustls::SupportedProtocolVersion>,
}

/// A TLS setting that cannot be used; the message names the key and file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFileError(pub String);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads the certificates and keys and builds the rustls configuration.
pub(crate) fn build(request: &TlsRequest) -> Result<TlsSettings, TlsFileError> {
    if request.mode == SslMode::Disable {
        return Ok(TlsSettings {
            mode: request.mode,
            roots: Roots::None,
            config: None,
        });
    }
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&request.versions)
        .map_err(|e| TlsFileError(format!("the TLS protocol versions cannot be used: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (&request.roots, request.mode) {
        (Roots::None, _) => Arc::new(CaOnly {
            roots: None,
            provider: provider.clone(),
        }),
        (roots, mode) => {
            let store = Arc::new(root_store(roots)?);
            if mode == SslMode::VerifyFull {
                rustls::client::WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                    .build()
                    .map_err(|e| TlsFileError(format!("cannot use the root certificates: {e}")))?
            } else {
                Arc::new(CaOnly {
                    roots: Some(store),
                    provider: provider.clone(),
                })
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &request.client {
        Some((cert, key)) => {
            let chain = read_certificates(cert, "sslcert")?;
            check_key_permissions(key)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                TlsFileError(format!(
                    "sslkey {}: cannot read a private key from it: {e}",
                    key.display()
                ))
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                TlsFileError(format!(
                    "sslcert {} and sslkey {} cannot be used together: {e}",
                    cert.display(),
                    key.display()
                ))
            })?
        }
        None => builder.with_no_client_auth(),
    };
    config.enable_sni = request.sni;
    Ok(TlsSettings {
        mode: request.mode,
        roots: request.roots.clone(),
        config: Some(Arc::new(config)),
    })
}

fn read_certificates(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            TlsFileError(format!(
                "{key} {}: cannot read certificates from it: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(TlsFileError(format!(
            "{key} {}: the file holds no PEM certificate (BEGIN CERTIFICATE)",
            path.display()
        )));
    }
    Ok(certs)
}

fn root_store(roots: &Roots) -> Result<RootCertStore, TlsFileError> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            for cert in read_certificates(path, "sslrootcert")? {
                store.add(cert).map_err(|e| {
                    TlsFileError(format!(
                        "sslrootcert {}: a certificate in it cannot be a root: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(TlsFileError(format!(
                    "no trusted root certificates were found in the system's store{}; give \
                     sslrootcert=FILE (the server's CA certificate in PEM)",
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", why.join("; "))
                    }
                )));
            }
        }
        Roots::None => {}
    }
    Ok(store)
}

/// libpq's rule for client keys: no group or world access, except group read
/// for a root-owned key.
fn check_key_permissions(path: &Path) -> Result<(), TlsFileError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| TlsFileError(format!("sslkey {}: cannot read it: {e}", path.display())))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let mode = meta.permissions().mode();
        let allowed = if meta.uid() == 0 { 0o040 } else { 0 };
        if mode & 0o077 & !allowed != 0 {
            return Err(TlsFileError(format!(
                "sslkey {}: the private key has group or world access; chmod 0600 it (0640 if \
                 owned by root), as libpq requires",
                path.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    Ok(())
}

/// The verifier of every mode but `verify-full` (which uses rustls's own):
/// the handshake signatures are always checked, so the session key belongs
/// to whoever holds the certificate's key; the certificate itself is
/// checked only against `roots`, when given.
///
/// - `roots: None` is `require` (and `prefer`) without a root certificate:
///   any certificate is accepted, as libpq does.
/// - `roots: Some(..)` is `verify-ca` (and `require` with a root file, libpq's
///   rule): the chain must lead to a trusted root; the host name is not
///   compared (rustls's own verifier always compares it).
#[derive(Debug)]
struct CaOnly {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for CaOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Parses `ssl_min_protocol_version` / `ssl_max_protocol_version` into the
/// versions rustls may use (it speaks TLS 1.2 and 1.3 only).
pub(crate) fn protocol_versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    // libpq's names, in order; rustls has no TLS 1.0 or 1.1.
    const NAMES: [&str; 4] = ["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];
    let rank = |key: &str, value: &str| {
        NAMES
            .iter()
            .position(|name| name.eq_ignore_ascii_case(value))
            .ok_or_else(|| {
                format!("invalid value for `{key}`: `{value}` (expected TLSv1.2 or TLSv1.3)")
            })
    };
    let low = match min.filter(|v| !v.is_empty()) {
        Some(v) => rank("ssl_min_protocol_version", v)?,
        // libpq's default minimum is TLS 1.2.
        None => 2,
    };
    let high = match max.filter(|v| !v.is_empty()) {
        Some(v) => rank("ssl_max_protocol_version", v)?,
        None => 3,
    };
    let mut versions = Vec::new();
    if low <= 3 && high >= 3 {
        versions.push(&rustls::version::TLS13);
    }
    if low <= 2 && high >= 2 {
        versions.push(&rustls::version::TLS12);
    }
    if versions.is_empty() {
        return Err(
            "ssl_min_protocol_version and ssl_max_protocol_version leave no TLS version that \
             schema-gen speaks (TLSv1.2, TLSv1.3)"
                .to_owned(),
        );
    }
    Ok(versions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_spellings_round_trip() {
        for mode in [
            SslMode::Disable,
            SslMode::Allow,
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert_eq!(SslMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(SslMode::parse("verify_full"), None);
    }

    #[test]
    fn protocol_versions_follow_min_and_max() {
        assert_eq!(protocol_versions(None, None).unwrap().len(), 2);
        assert_eq!(
            protocol_versions(Some("TLSv1.3"), None).unwrap(),
            vec![&rustls::version::TLS13]
        );
        assert_eq!(
            protocol_versions(Some("TLSv1"), Some("TLSv1.2")).unwrap(),
            vec![&rustls::version::TLS12]
        );
        assert!(protocol_versions(None, Some("TLSv1.1")).is_err());
        assert!(
            protocol_versions(Some("SSLv3"), None)
                .unwrap_err()
                .contains("SSLv3")
        );
    }
}
