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
//!
//! X.509 version 1 certificates (no extensions; what Citus and
//! `openssl x509 -req` make): where nothing is verified (`allow`, `prefer`,
//! `require` without a root file, as libpq), the handshake signature is
//! checked against the certificate's public key, read by `x509-cert`
//! whatever the version, so they connect as with psql. Where the chain is
//! verified (`verify-ca`, `verify-full`, or a root file), webpki refuses
//! them: a version 1 certificate cannot say it is a CA or name a host, and
//! the error says to re-issue it as version 3 (libpq, through OpenSSL,
//! accepts one that is its own root).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{
    CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature,
    verify_tls13_signature_with_raw_key,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
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
        let algorithms = &self.provider.signature_verification_algorithms;
        match &self.roots {
            Some(_) => verify_tls12_signature(message, cert, dss, algorithms),
            None => verify_tls12_signature_by_key(
                message,
                &public_key(cert)?,
                dss.scheme,
                dss.signature(),
                algorithms,
            ),
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        match &self.roots {
            Some(_) => verify_tls13_signature(message, cert, dss, algorithms),
            None => {
                verify_tls13_signature_with_raw_key(message, &public_key(cert)?, dss, algorithms)
            }
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The subject public key of `cert`, whatever its X.509 version (webpki,
/// behind rustls's own signature checks, parses version 3 only).
fn public_key(
    cert: &CertificateDer<'_>,
) -> Result<SubjectPublicKeyInfoDer<'static>, rustls::Error> {
    use x509_cert::der::{Decode as _, Encode as _};
    let bad = |_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding);
    let parsed = x509_cert::Certificate::from_der(cert.as_ref()).map_err(bad)?;
    let spki = parsed
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(bad)?;
    Ok(SubjectPublicKeyInfoDer::from(spki))
}

/// rustls's `verify_tls12_signature` over a public key rather than a
/// certificate (rustls has the TLS 1.3 form only,
/// `verify_tls13_signature_with_raw_key`): TLS 1.2 does not say which
/// algorithm a scheme means, so each of the scheme's candidates is tried.
fn verify_tls12_signature_by_key(
    message: &[u8],
    spki: &SubjectPublicKeyInfoDer<'_>,
    scheme: SignatureScheme,
    signature: &[u8],
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    // A scheme the provider does not map was not advertised by us.
    let unadvertised = || rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(mapped, _)| *mapped == scheme)
        .map(|(_, candidates)| *candidates)
        .ok_or_else(unadvertised)?;
    let key = webpki::RawPublicKeyEntity::try_from(spki)
        .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))?;
    for algorithm in candidates {
        match key.verify_signature(*algorithm, message, signature) {
            Ok(()) => return Ok(HandshakeSignatureValid::assertion()),
            // Another key type than this candidate's: try the next one.
            Err(webpki::Error::UnsupportedSignatureAlgorithmForPublicKeyContext(_)) => {}
            Err(_) => {
                return Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::BadSignature,
                ));
            }
        }
    }
    // No candidate fits the key: the signature cannot be the key's.
    Err(rustls::Error::InvalidCertificate(
        rustls::CertificateError::BadSignature,
    ))
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
    fn without_roots_the_handshake_signature_is_still_checked_against_the_key() {
        use rcgen::{PublicKeyData as _, SigningKey as _};
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["db".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        // The certificate's key, read by x509-cert, is the key that signed it.
        let spki = public_key(cert.der()).unwrap();
        assert_eq!(spki.as_ref(), key.subject_public_key_info().as_slice());
        assert!(matches!(
            public_key(&CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01])),
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::BadEncoding
            ))
        ));

        let algorithms = provider().signature_verification_algorithms;
        let message = b"the handshake transcript";
        let signature = key.sign(message).unwrap();
        let verify = |message: &[u8], scheme, signature: &[u8]| {
            verify_tls12_signature_by_key(message, &spki, scheme, signature, &algorithms)
        };
        let p256 = SignatureScheme::ECDSA_NISTP256_SHA256;
        assert!(verify(message, p256, &signature).is_ok());
        // Another message, a signature by another key, a scheme of another
        // key type, a scheme nobody advertised: all refused.
        let bad_signature = Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::BadSignature,
        ));
        assert_eq!(
            verify(b"another transcript", p256, &signature).map(|_| ()),
            bad_signature
        );
        let other = rcgen::KeyPair::generate().unwrap().sign(message).unwrap();
        assert_eq!(verify(message, p256, &other).map(|_| ()), bad_signature);
        assert_eq!(
            verify(message, SignatureScheme::RSA_PKCS1_SHA256, &signature).map(|_| ()),
            bad_signature
        );
        assert!(matches!(
            verify(message, SignatureScheme::Unknown(0x0101), &signature),
            Err(rustls::Error::PeerMisbehaved(_))
        ));
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
