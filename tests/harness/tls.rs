//! A second throwaway PostgreSQL cluster that accepts only TLS connections
//! over TCP, with certificates this harness makes (rcgen): a CA, the
//! server's certificate (for `localhost` and `127.0.0.1`) signed by it, a
//! client certificate for certificate authentication, and a second CA that
//! signed nothing the server shows.
//!
//! `pg_hba.conf`, first match wins:
//!
//! ```text
//! local     all  all                      trust          # set-up over the socket
//! hostssl   all  alk_cert   127.0.0.1/32  cert           # client certificate, CN = role
//! hostnossl all  alk_plain  127.0.0.1/32  scram-sha-256  # the one role clear text may log in
//! hostssl   all  all        127.0.0.1/32  scram-sha-256  # everyone else: TLS and a password
//! ```
//!
//! so a clear-text connection of any role but `alk_plain` is refused, and
//! `prefer` can be seen choosing TLS for `alk_plain`, which could do without.
//! The passwords contain `@`, spaces, quotes, `:` and `\`, so every test
//! that uses them also shows that no error prints them.
//!
//! One cluster per test process, started on first use, stopped and removed
//! when the process exits (the watchdog of [`crate::pg`]).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::pg::{ClusterSetup, LocalCluster, start_cluster};

/// The superuser that logs in over TLS with a password.
pub const ADMIN: &str = "alk_tls";
/// Its password: `@`, spaces, both quotes, `:` and `\` (hostile to URLs,
/// key/value strings, the password file and error messages alike).
pub const ADMIN_PASSWORD: &str = "s3cr@t pa:ss 'q' \"dq\" \\x";
/// The role that authenticates with its client certificate.
pub const CERT_USER: &str = "alk_cert";
/// The role that may also log in without TLS.
pub const PLAIN_USER: &str = "alk_plain";
/// Its password.
pub const PLAIN_PASSWORD: &str = "plain @pw";

/// The TLS-only server and the files the tests point at.
pub struct TlsServer {
    cluster: LocalCluster,
    files: PathBuf,
}

static TLS_SERVER: OnceLock<Result<TlsServer, String>> = OnceLock::new();

/// The TLS-only server of this test process, started on first use.
///
/// # Panics
///
/// If it cannot be started; the message names the failing step.
pub fn tls_server() -> &'static TlsServer {
    match TLS_SERVER.get_or_init(start) {
        Ok(server) => server,
        Err(message) => panic!("no TLS-only PostgreSQL server for the tests: {message}"),
    }
}

impl TlsServer {
    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.cluster.port
    }

    /// The directory of the server's Unix-domain socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.cluster.dir.clone()
    }

    /// The CA that signed the server's and the client's certificates (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.files.join("ca.pem")
    }

    /// A CA that signed neither (PEM).
    pub fn other_ca_file(&self) -> PathBuf {
        self.files.join("other-ca.pem")
    }

    /// The client certificate of [`CERT_USER`] (PEM).
    pub fn client_cert_file(&self) -> PathBuf {
        self.files.join("client.pem")
    }

    /// Its private key (PEM, mode 0600).
    pub fn client_key_file(&self) -> PathBuf {
        self.files.join("client.key")
    }

    /// A directory for the test's own files (password files, homes).
    pub fn scratch_dir(&self) -> PathBuf {
        self.files.clone()
    }

    /// The path of the psql binary that matches the server.
    pub fn psql_bin(&self) -> PathBuf {
        self.cluster.bindir.join("psql")
    }

    /// Runs `sql` as the superuser over the socket (trust).
    ///
    /// # Panics
    ///
    /// If psql fails; the message has its output.
    pub fn admin_sql(&self, sql: &str) -> Output {
        let out = self
            .cluster
            .psql_over_socket()
            .args(["-Atc", sql])
            .output()
            .unwrap_or_else(|e| panic!("running psql over the TLS server's socket: {e}"));
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Percent-encodes `text` for the user-info part of a URL (everything but
/// unreserved characters).
pub fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Quotes a value for libpq's key/value form: `'...'` with `'` and `\`
/// escaped.
pub fn kv_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Escapes a field of the password file: `\` and `:` take a backslash.
pub fn pgpass_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace(':', "\\:")
}

/// Writes `contents` to `path` with permission bits `mode`.
///
/// # Panics
///
/// If either step fails; the message names the file.
pub fn write_file(path: &Path, contents: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn start() -> Result<TlsServer, String> {
    let certs = make_certificates().map_err(|e| format!("making the test certificates: {e}"))?;
    let setup = ClusterSetup {
        settings: "ssl = on\n\
                   ssl_cert_file = 'server.pem'\n\
                   ssl_key_file = 'server.key'\n\
                   ssl_ca_file = 'ca.pem'\n\
                   password_encryption = 'scram-sha-256'\n"
            .to_owned(),
        hba: Some(format!(
            "local all all trust\n\
             hostssl all {CERT_USER} 127.0.0.1/32 cert\n\
             hostnossl all {PLAIN_USER} 127.0.0.1/32 scram-sha-256\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n"
        )),
        files: vec![
            (
                "server.pem".to_owned(),
                certs.server_cert.clone().into_bytes(),
            ),
            (
                "server.key".to_owned(),
                certs.server_key.clone().into_bytes(),
            ),
            ("ca.pem".to_owned(), certs.ca.clone().into_bytes()),
        ],
        ..ClusterSetup::default()
    };
    let cluster = start_cluster(&setup)?;
    if !cluster.has_socket {
        return Err(format!(
            "the cluster directory {} is too long a path for a Unix-domain socket; set TMPDIR \
             to a short directory such as /tmp",
            cluster.dir.display()
        ));
    }
    // The client's files live apart from the server's (which belong to the
    // cluster's OS user), in a directory of the test process's own.
    let files = cluster.dir.join("client-files");
    std::fs::create_dir(&files).map_err(|e| format!("creating {}: {e}", files.display()))?;
    let write = |name: &str, contents: &str, mode: u32| -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = files.join(name);
        std::fs::write(&path, contents)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)))
            .map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write("ca.pem", &certs.ca, 0o644)?;
    write("other-ca.pem", &certs.other_ca, 0o644)?;
    write("client.pem", &certs.client_cert, 0o644)?;
    write("client.key", &certs.client_key, 0o600)?;
    let server = TlsServer { cluster, files };
    let sql_password = |pw: &str| pw.replace('\'', "''");
    server.admin_sql(&format!(
        "CREATE ROLE {ADMIN} LOGIN SUPERUSER PASSWORD '{}'",
        sql_password(ADMIN_PASSWORD)
    ));
    server.admin_sql(&format!(
        "CREATE ROLE {PLAIN_USER} LOGIN PASSWORD '{}'",
        sql_password(PLAIN_PASSWORD)
    ));
    server.admin_sql(&format!("CREATE ROLE {CERT_USER} LOGIN SUPERUSER"));
    // libpq's default database is the user's name: give the admin one.
    server.admin_sql(&format!("CREATE DATABASE {ADMIN}"));
    Ok(server)
}

struct Certificates {
    ca: String,
    other_ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn make_certificates() -> Result<Certificates, rcgen::Error> {
    let ca = |name: &str| -> Result<(String, Issuer<'static, KeyPair>), rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok((cert.pem(), Issuer::new(params, key)))
    };
    let (ca_pem, issuer) = ca("alkstore test CA")?;
    let (other_ca_pem, _) = ca("alkstore other CA")?;

    let mut server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.use_authority_key_identifier_extension = true;
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate()?;
    let server_cert = server.signed_by(&server_key, &issuer)?;

    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, CERT_USER);
    client.use_authority_key_identifier_extension = true;
    client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client_cert = client.signed_by(&client_key, &issuer)?;

    Ok(Certificates {
        ca: ca_pem,
        other_ca: other_ca_pem,
        server_cert: server_cert.pem(),
        server_key: server_key.serialize_pem(),
        client_cert: client_cert.pem(),
        client_key: client_key.serialize_pem(),
    })
}
