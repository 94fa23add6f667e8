//! With nothing set: the default socket and the OS user, as psql finds
//! them; and the certificates accepted where nothing is verified.

use std::process::Command;

use harness::tls::tls_server;
use schema_gen::connect::{ConnectOptions, Environment, LIBPQ_SOCKET_DIRS};

use super::{Case, QUERY, home, os_user, via_psql, via_psql_at, via_schema_gen};

/// psql's compiled-in socket directory, from its error when no server
/// listens on `port`: `connection to server on socket "DIR/.s.PGSQL.PORT"
/// failed`.
fn psql_default_socket_dir(port: u16) -> String {
    let out = Command::new(tls_server().psql_bin())
        .env_clear()
        .env("HOME", home("psql-default"))
        .env("PGPORT", port.to_string())
        .args(["-X", "-w", "-Atc", "SELECT 1"])
        .output()
        .unwrap_or_else(|e| panic!("running psql: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = format!("/.s.PGSQL.{port}\"");
    let dir = stderr
        .find(&tail)
        .and_then(|end| Some(&stderr[stderr[..end].rfind('"')? + 1..end]));
    match (out.status.success(), dir) {
        (false, Some(dir)) => dir.to_owned(),
        _ => panic!("psql did not name the socket it tried on port {port}: {stderr}"),
    }
}

#[test]
fn with_nothing_set_both_connect_to_the_default_socket_as_the_os_user() {
    if harness::skip_db_tests() {
        return;
    }
    // Where psql goes by default is compiled into its libpq; schema-gen
    // tries the same directories (Debian's first, then upstream's /tmp).
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"));
    let psql_dir = psql_default_socket_dir(unused);
    assert!(
        LIBPQ_SOCKET_DIRS.contains(&psql_dir.as_str()),
        "psql's default socket directory {psql_dir} is not among {LIBPQ_SOCKET_DIRS:?}"
    );

    // A server listening only on a socket, on port 5432, in a directory of
    // its own: schema-gen's "default" is pointed there; psql, whose default
    // cannot be moved, is given only that directory (PGHOST), so port, user
    // and database are libpq's defaults on both sides.
    let cluster = harness::start_cluster(&harness::ClusterSetup {
        socket_only_port: Some(5432),
        ..harness::ClusterSetup::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let os_user = os_user();
    if os_user != "postgres" {
        let user = format!("\"{}\"", os_user.replace('"', "\"\""));
        let out = cluster
            .psql_over_socket()
            .args(["-c", &format!("CREATE ROLE {user} LOGIN")])
            .args(["-c", &format!("CREATE DATABASE {user} OWNER {user}")])
            .output()
            .unwrap_or_else(|e| panic!("psql: {e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let empty = home("defaults");
    let socket_dir = cluster.dir.display().to_string();
    let default_env = |vars: &[(&str, &str)]| {
        let mut env = Environment::new()
            .with_home(&empty)
            .with_os_user(&os_user)
            .with_default_socket_dir(&cluster.dir);
        for (k, v) in vars {
            env = env.with_var(k, v);
        }
        env
    };
    let case = |name, vars: Vec<(&'static str, String)>| Case {
        name,
        conninfo: String::new(),
        vars,
        home: empty.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let via_defaults = |env: &Environment| -> String {
        let Ok(options) = ConnectOptions::resolve("", env) else {
            return "refused".to_owned();
        };
        runtime.block_on(async {
            let Ok(client) = options.connect().await else {
                return "refused".to_owned();
            };
            let row = client
                .query_one(QUERY, &[])
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let port: Option<i32> = row.get(2);
            let ssl: Option<bool> = row.get(3);
            format!(
                "{}|{}|{}|{}",
                row.get::<_, String>(0),
                row.get::<_, String>(1),
                port.map(|p| p.to_string()).unwrap_or_default(),
                if ssl == Some(true) { "t" } else { "f" }
            )
        })
    };

    let psql = via_psql(&case("defaults", vec![("PGHOST", socket_dir.clone())]));
    let ours = via_defaults(&default_env(&[]));
    assert_eq!(psql, format!("{os_user}|{os_user}||f"), "psql");
    assert_eq!(ours, psql, "schema-gen with nothing set");
    // The port is 5432 by default: another one finds no socket, on both sides.
    let psql = via_psql(&case(
        "other port",
        vec![
            ("PGHOST", socket_dir.clone()),
            ("PGPORT", "5433".to_owned()),
        ],
    ));
    let ours = via_defaults(&default_env(&[("PGPORT", "5433")]));
    assert_eq!((psql.as_str(), ours.as_str()), ("refused", "refused"));

    // And the command line: `schema-gen check` with nothing set connects
    // there and reports the (missing) schema, exit 1, not a refusal.
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = schema_gen::cli::run_in(
        ["schema-gen", "check", "--schema", "defaults_probe"],
        &default_env(&[]),
        &mut stdout,
        &mut stderr,
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
    );
    assert_eq!(code, std::process::ExitCode::from(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("schema defaults_probe differs from the model (1 difference):"),
        "{stdout}{stderr}"
    );
}

/// A server presenting a self-signed X.509 version 1 certificate, as Citus
/// does: where libpq verifies nothing (`allow`, `prefer`, `require` without
/// a root file) schema-gen connects over TLS as psql does. Where the chain
/// is verified, psql (OpenSSL) takes the self-signed version 1 certificate
/// as its own root and schema-gen (webpki) refuses it, on purpose, with a
/// message that says why and what to do.
#[test]
fn a_version_1_certificate_is_accepted_where_nothing_is_verified() {
    if harness::skip_db_tests() {
        return;
    }
    let server = harness::tls_v1::version1_server();
    let port = server.port();
    let cert = server.cert_file().display().to_string();
    let home = server.scratch_dir().join("home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let conninfo =
        |more: &str| format!("host=localhost port={port} user=postgres dbname=postgres {more}");
    let tls = format!("postgres|postgres|{port}|t");
    // (sslmode and root, psql's outcome, schema-gen's)
    let cases: Vec<(String, &str, &str)> = vec![
        ("sslmode=prefer".to_owned(), &tls, &tls),
        (String::new(), &tls, &tls),
        ("sslmode=require".to_owned(), &tls, &tls),
        ("sslmode=allow".to_owned(), &tls, &tls),
        ("sslmode=disable".to_owned(), "refused", "refused"),
        // The deliberate difference: a version 1 certificate is never verified.
        (
            format!("sslmode=require sslrootcert={cert}"),
            &tls,
            "refused",
        ),
        (
            format!("sslmode=verify-ca sslrootcert={cert}"),
            &tls,
            "refused",
        ),
        (
            format!("sslmode=verify-full sslrootcert={cert}"),
            &tls,
            "refused",
        ),
    ];
    let mut table = String::from("| settings | psql | schema-gen |\n|---|---|---|\n");
    let mut wrong = Vec::new();
    for (settings, want_psql, want_ours) in &cases {
        let case = Case {
            name: "version 1 certificate",
            conninfo: conninfo(settings),
            vars: vec![],
            home: home.clone(),
        };
        let (psql, ours) = (
            via_psql_at(&case, &server.psql_bin()),
            via_schema_gen(&case, "osuser"),
        );
        table.push_str(&format!("| {settings} | `{psql}` | `{ours}` |\n"));
        if (psql.as_str(), ours.as_str()) != (*want_psql, *want_ours) {
            wrong.push(settings.clone());
        }
    }
    eprintln!("{table}");
    assert!(
        wrong.is_empty(),
        "unexpected outcomes for {wrong:?}:\n{table}"
    );

    // Where it is refused, the error says why and what to do.
    let env = Environment::new().with_home(&home).with_os_user("osuser");
    let options = ConnectOptions::resolve(
        &conninfo(&format!("sslmode=verify-ca sslrootcert={cert}")),
        &env,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let err = runtime
        .block_on(options.connect())
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the server's certificate is X.509 version 1")
            && err.contains("re-issue it as version 3"),
        "{err}"
    );
}
