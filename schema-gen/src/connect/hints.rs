//! Error hints: the driver's or the server's words for a failed attempt,
//! and what to do about them.

use super::targets::{Host, Target};
use super::tls::Roots;
use super::{ConnectOptions, LIBPQ_SOCKET_DIRS, SslMode};
use crate::error;

impl ConnectOptions {
    /// The driver's or server's words, and what to do about them.
    pub(super) fn explain(&self, target: &Target, err: &tokio_postgres::Error) -> String {
        let detail = error::detail(err);
        let code = err.code().map(|c| c.code().to_owned());
        let hint = if code.as_deref() == Some("28P01") {
            match &target.password {
                Some((_, source)) => format!("; the password came from {source}: correct it there"),
                None => String::new(),
            }
        } else if detail.contains("password missing") {
            let mut hint = "; the server asks for a password and none was given: set \
                            PGPASSWORD, add a line host:port:database:user:password to \
                            ~/.pgpass (mode 0600, or name the file with PGPASSFILE), or put it in \
                            the connection string"
                .to_owned();
            for warning in &self.warnings {
                hint.push_str("; ");
                hint.push_str(warning);
            }
            hint
        } else if code.as_deref() == Some("28000") && detail.contains("no encryption") {
            format!(
                "; the server accepts this user only over TLS and sslmode={} let the connection \
                 go without it: use sslmode=require or stronger",
                self.tls.mode.as_str()
            )
        } else if detail.contains("server did not use channel binding") {
            "; channel_binding=require needs SCRAM authentication over TLS: use sslmode=require \
             or stronger, or drop channel_binding"
                .to_owned()
        } else if detail.contains("server does not support TLS") {
            format!(
                "; sslmode={} demands TLS and this server does not offer it: turn ssl on in \
                 the server, or connect with sslmode=prefer",
                self.tls.mode.as_str()
            )
        } else if let Some(tls_err) = rustls_error(err) {
            certificate_hint(tls_err, &target.host, self.tls.mode, &self.tls.roots)
        } else if matches!(target.host, Host::DefaultSocket(_)) {
            format!(
                "; nothing names a server (host in the connection string, PGHOST or \
                 PGHOSTADDR), so libpq's default was tried: the local socket in {} (port {}); \
                 start the server there, or name the server",
                LIBPQ_SOCKET_DIRS.join(" or "),
                target.port
            )
        } else if detail.contains("timed out") {
            "; the server did not answer within connect_timeout: check the host, the port and \
             the firewall"
                .to_owned()
        } else {
            "; check the connection string (or the PG* variables) and that the server is up"
                .to_owned()
        };
        format!("{detail}{hint}")
    }
}

/// The rustls error somewhere in `err`'s causes (tokio-rustls wraps it in an
/// `io::Error`, whose `source` skips it).
fn rustls_error(err: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        cause = e.source();
    }
    None
}

fn certificate_hint(err: &rustls::Error, host: &Host, mode: SslMode, roots: &Roots) -> String {
    use rustls::CertificateError as C;
    let rustls::Error::InvalidCertificate(cert) = err else {
        return "; the TLS handshake failed: check that the server's TLS settings and \
                ssl_min_protocol_version allow TLS 1.2 or 1.3"
            .to_owned();
    };
    let trusted = match roots {
        Roots::File(path) => format!("the roots in sslrootcert {}", path.display()),
        Roots::System => "the system's trusted roots".to_owned(),
        Roots::None => "no roots".to_owned(),
    };
    match cert {
        C::NotValidForName | C::NotValidForNameContext { .. } => format!(
            "; the server's certificate does not name the host {host} (sslmode={} checks the \
             host name): connect by a name the certificate carries, or use sslmode=verify-ca \
             to check the chain only",
            mode.as_str()
        ),
        C::UnknownIssuer | C::BadSignature => format!(
            "; the server's certificate is not signed by {trusted}: give the CA certificate \
             that signed it as sslrootcert"
        ),
        C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => {
            "; the server's certificate is outside its validity period: renew it on the server"
                .to_owned()
        }
        C::Other(other)
            if matches!(
                other.0.downcast_ref::<webpki::Error>(),
                Some(webpki::Error::UnsupportedCertVersion)
            ) =>
        {
            format!(
                "; the server's certificate is X.509 version 1 (as Citus and `openssl x509 -req` \
                 make them), which sslmode={} cannot verify against {trusted}: a version 1 \
                 certificate can neither say it is a CA nor name a host; re-issue it as version 3 \
                 (a CA-signed certificate with the host in subjectAltName), or use sslmode=require \
                 without a root certificate, which, as in libpq, encrypts without verifying",
                mode.as_str()
            )
        }
        _ => format!("; the server's certificate was refused (checked against {trusted})"),
    }
}
