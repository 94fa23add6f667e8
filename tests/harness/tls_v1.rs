//! A throwaway cluster that turns TLS on the way Citus does: with a
//! self-signed X.509 **version 1** certificate (no extensions, so no
//! subjectAltName and no basicConstraints) for `localhost`, an RSA key.
//! rcgen writes version 3 only, so the certificate comes from the `openssl`
//! CLI (`openssl x509 -req` without extensions writes version 1).
//!
//! `pg_hba.conf`: the socket for set-up, TLS over TCP with trust, clear text
//! over TCP refused, so every connection that gets in came over TLS.
//!
//! One cluster per test process, started on first use, stopped and removed
//! when the process exits (the watchdog of [`crate::pg`]).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::pg::{ClusterSetup, LocalCluster, start_cluster};

/// The server presenting a version 1 certificate.
pub struct Version1Server {
    cluster: LocalCluster,
    cert: PathBuf,
}

static SERVER: OnceLock<Result<Version1Server, String>> = OnceLock::new();

/// The version-1-certificate server of this test process, started on first
/// use.
///
/// # Panics
///
/// If it cannot be started; the message names the failing step.
pub fn version1_server() -> &'static Version1Server {
    match SERVER.get_or_init(start) {
        Ok(server) => server,
        Err(message) => panic!("no PostgreSQL server with a version 1 certificate: {message}"),
    }
}

impl Version1Server {
    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.cluster.port
    }

    /// The server's certificate (PEM), self-signed: as `sslrootcert` it is
    /// its own root.
    pub fn cert_file(&self) -> PathBuf {
        self.cert.clone()
    }

    /// The path of the psql binary that matches the server.
    pub fn psql_bin(&self) -> PathBuf {
        self.cluster.bindir.join("psql")
    }

    /// A directory for the test's own files.
    pub fn scratch_dir(&self) -> PathBuf {
        self.cluster.dir.join("client-files")
    }
}

fn openssl(args: &[&str], step: &str) -> Result<String, String> {
    let out = Command::new("openssl").args(args).output().map_err(|e| {
        format!("{step}: cannot run openssl ({e}); install it (apt-get install openssl)")
    })?;
    if !out.status.success() {
        return Err(format!(
            "{step}: openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn start() -> Result<Version1Server, String> {
    let work = std::env::temp_dir().join(format!("alkstore-v1-cert-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("creating {}: {e}", work.display()))?;
    let path = |name: &str| work.join(name).display().to_string();
    let made = (|| {
        openssl(
            &[
                "req",
                "-new",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=localhost",
                "-keyout",
                &path("server.key"),
                "-out",
                &path("server.csr"),
            ],
            "making the server's key and request",
        )?;
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "30",
                "-in",
                &path("server.csr"),
                "-signkey",
                &path("server.key"),
                "-out",
                &path("server.pem"),
            ],
            "self-signing the version 1 certificate",
        )?;
        let text = openssl(
            &["x509", "-noout", "-text", "-in", &path("server.pem")],
            "reading the certificate back",
        )?;
        if !text.contains("Version: 1 (0x0)") {
            return Err(format!(
                "openssl x509 -req wrote another version than 1:\n{text}"
            ));
        }
        let read =
            |name: &str| std::fs::read(work.join(name)).map_err(|e| format!("reading {name}: {e}"));
        Ok((read("server.pem")?, read("server.key")?))
    })();
    let _ = std::fs::remove_dir_all(&work);
    let (cert, key) = made?;

    let cluster = start_cluster(&ClusterSetup {
        settings: "ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n"
            .to_owned(),
        hba: Some(
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostnossl all all 127.0.0.1/32 reject\n"
                .to_owned(),
        ),
        files: vec![
            ("server.pem".to_owned(), cert.clone()),
            ("server.key".to_owned(), key),
        ],
        ..ClusterSetup::default()
    })?;
    let files = cluster.dir.join("client-files");
    std::fs::create_dir(&files).map_err(|e| format!("creating {}: {e}", files.display()))?;
    let cert_file = files.join("server.pem");
    std::fs::write(&cert_file, cert)
        .map_err(|e| format!("writing {}: {e}", cert_file.display()))?;
    Ok(Version1Server {
        cluster,
        cert: cert_file,
    })
}
