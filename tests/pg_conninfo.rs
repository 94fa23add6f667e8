//! The connection rules written after libpq (`schema_gen::connect`: the
//! connection string, the `PG*` variables, the password file and its
//! permission rule, `sslmode`) compared with psql on the same inputs, on the
//! same machine: each case runs `psql -w -Atc QUERY` with exactly the case's
//! environment (and home directory), and connects through
//! `ConnectOptions::resolve` + `connect` with the same, then compares who,
//! where and whether over TLS, or that both refused.
//!
//! The servers: the TLS-only one of `harness::tls` and the shared cluster
//! (TLS off, trust). The table of outcomes is printed (`--nocapture`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use harness::tls::{
    ADMIN, ADMIN_PASSWORD, CERT_USER, PLAIN_PASSWORD, PLAIN_USER, kv_quote, pgpass_escape,
    tls_server, url_encode, write_file,
};
use schema_gen::connect::{ConnectOptions, Environment, LIBPQ_SOCKET_DIRS};

const QUERY: &str = "SELECT current_user, current_database(), inet_server_port(), \
                     (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid())";

/// One input: a connection string (maybe empty), variables, a home directory.
struct Case {
    name: &'static str,
    conninfo: String,
    vars: Vec<(&'static str, String)>,
    home: PathBuf,
}

/// `user|db|port|ssl` as psql -At prints it, or `refused`.
fn via_psql(case: &Case) -> String {
    via_psql_at(case, &tls_server().psql_bin())
}

/// [`via_psql`] with the psql binary at `psql`.
fn via_psql_at(case: &Case, psql: &Path) -> String {
    let mut cmd = Command::new(psql);
    cmd.env_clear()
        .env("HOME", &case.home)
        .envs(case.vars.iter().map(|(k, v)| (k, v)))
        .args(["-X", "-w", "-At", "-c", QUERY]);
    if !case.conninfo.is_empty() {
        cmd.args(["-d", &case.conninfo]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{}: running psql: {e}", case.name));
    if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    } else {
        "refused".to_owned()
    }
}

/// The same through schema-gen's connection rules.
fn via_schema_gen(case: &Case, os_user: &str) -> String {
    let mut env = Environment::new()
        .with_home(&case.home)
        .with_os_user(os_user);
    for (k, v) in &case.vars {
        env = env.with_var(k, v);
    }
    let Ok(options) = ConnectOptions::resolve(&case.conninfo, &env) else {
        return "refused".to_owned();
    };
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    runtime.block_on(async {
        let Ok(client) = options.connect().await else {
            return "refused".to_owned();
        };
        let row = client
            .query_one(QUERY, &[])
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let port: Option<i32> = row.get(2);
        let ssl: Option<bool> = row.get(3);
        format!(
            "{}|{}|{}|{}",
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            port.map(|p| p.to_string()).unwrap_or_default(),
            match ssl {
                Some(true) => "t",
                Some(false) => "f",
                None => "",
            }
        )
    })
}

fn os_user() -> String {
    let out = Command::new("id")
        .arg("-un")
        .output()
        .unwrap_or_else(|e| panic!("id -un: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn home(name: &str) -> PathBuf {
    let dir = tls_server().scratch_dir().join(format!("conninfo-{name}"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A home directory whose `~/.pgpass` holds `contents`, with mode `mode`.
fn home_with_pgpass(name: &str, contents: &str, mode: u32) -> PathBuf {
    let dir = home(name);
    write_file(&dir.join(".pgpass"), contents, mode);
    dir
}

#[test]
fn connection_rules_agree_with_psql() {
    if harness::skip_db_tests() {
        return;
    }
    let server = tls_server();
    let port = server.port().to_string();
    let ca = server.ca_file().display().to_string();
    let other_ca = server.other_ca_file().display().to_string();
    let pw = url_encode(ADMIN_PASSWORD);
    let shared = harness::database_url();

    let empty = home("empty");
    let with_pgpass = home_with_pgpass(
        "pgpass",
        &format!(
            "# first match wins\nnowhere:*:*:*:nope\nlocalhost:{port}:*:{ADMIN}:{}\n\
             127.0.0.1:*:postgres:{ADMIN}:{}\n127.0.0.1:*:{ADMIN}:{ADMIN}:{}\n\
             *:*:*:{PLAIN_USER}:{}\n",
            pgpass_escape(ADMIN_PASSWORD),
            pgpass_escape(ADMIN_PASSWORD),
            pgpass_escape(ADMIN_PASSWORD),
            pgpass_escape(PLAIN_PASSWORD)
        ),
        0o600,
    );
    let services = format!(
        "# a section the tests do not use\n[other]\nhost=nowhere.invalid\n\n[tls]\nhost=localhost\n\
         port={port}\nuser={ADMIN}\ndbname=postgres\nsslmode=verify-full\nsslrootcert={ca}\n"
    );
    write_file(&with_pgpass.join(".pg_service.conf"), &services, 0o644);
    let named_services = server.scratch_dir().join("conninfo-services.conf");
    write_file(&named_services, &services, 0o644);
    let open_pgpass = home_with_pgpass(
        "open-pgpass",
        &format!("*:*:*:*:{}\n", pgpass_escape(ADMIN_PASSWORD)),
        0o644,
    );
    let wrong_first = home_with_pgpass(
        "wrong-first",
        &format!(
            "*:*:*:{ADMIN}:wrong\n*:*:*:{ADMIN}:{}\n",
            pgpass_escape(ADMIN_PASSWORD)
        ),
        0o600,
    );
    let star_inside = home_with_pgpass(
        "star-inside",
        &format!(
            "local\\host:{}*:*:{ADMIN}:{}\n",
            &port[..port.len() - 1],
            pgpass_escape(ADMIN_PASSWORD)
        ),
        0o600,
    );
    let named_pgpass = server.scratch_dir().join("conninfo-named-pgpass");
    write_file(
        &named_pgpass,
        &format!(
            "localhost:{port}:postgres:{ADMIN}:{}\n",
            pgpass_escape(ADMIN_PASSWORD)
        ),
        0o600,
    );
    let root_crt = home("root-crt");
    std::fs::create_dir_all(root_crt.join(".postgresql")).unwrap();
    std::fs::copy(&ca, root_crt.join(".postgresql/root.crt")).unwrap();
    let other_root_crt = home("other-root-crt");
    std::fs::create_dir_all(other_root_crt.join(".postgresql")).unwrap();
    std::fs::copy(&other_ca, other_root_crt.join(".postgresql/root.crt")).unwrap();

    let pg = |host: &str| -> Vec<(&'static str, String)> {
        vec![
            ("PGHOST", host.to_owned()),
            ("PGPORT", port.clone()),
            ("PGUSER", ADMIN.to_owned()),
            ("PGDATABASE", "postgres".to_owned()),
        ]
    };
    let with = |mut vars: Vec<(&'static str, String)>, more: &[(&'static str, &str)]| {
        for (k, v) in more {
            vars.retain(|(key, _)| key != k);
            vars.push((k, (*v).to_owned()));
        }
        vars
    };
    let case = |name, conninfo: String, vars, home: &Path| Case {
        name,
        conninfo,
        vars,
        home: home.to_owned(),
    };
    let cases = vec![
        case(
            "URL, encoded password, require",
            format!("postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=require"),
            vec![],
            &empty,
        ),
        case(
            "URL, verify-full + sslrootcert",
            format!(
                "postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "URL, verify-full, IP host",
            format!(
                "postgres://{ADMIN}:{pw}@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "verify-full, name not in certificate",
            format!(
                "postgres://{ADMIN}:{pw}@db.example.invalid:{port}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "verify-ca, name not in certificate",
            format!(
                "postgres://{ADMIN}:{pw}@db.example.invalid:{port}/postgres?hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "verify-full, other CA",
            format!(
                "postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={other_ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "require + sslrootcert of other CA",
            format!(
                "postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=require&sslrootcert={other_ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "require, ~/.postgresql/root.crt trusted",
            format!("postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=require"),
            vec![],
            &root_crt,
        ),
        case(
            "require, ~/.postgresql/root.crt of other CA",
            format!("postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=require"),
            vec![],
            &other_root_crt,
        ),
        case(
            "verify-full, root from ~/.postgresql/root.crt",
            format!("postgres://{ADMIN}:{pw}@localhost:{port}/postgres?sslmode=verify-full"),
            vec![],
            &root_crt,
        ),
        case(
            "key/value, quoted password",
            format!(
                "host=localhost port={port} user={ADMIN} dbname=postgres sslmode=require password={}",
                kv_quote(ADMIN_PASSWORD)
            ),
            vec![],
            &empty,
        ),
        case(
            "PG* only + PGPASSWORD",
            String::new(),
            with(
                pg("localhost"),
                &[("PGPASSWORD", ADMIN_PASSWORD), ("PGSSLMODE", "require")],
            ),
            &empty,
        ),
        case(
            "PG* only + ~/.pgpass",
            String::new(),
            with(
                pg("localhost"),
                &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", &ca)],
            ),
            &with_pgpass,
        ),
        case(
            "PG* only + PGPASSFILE",
            String::new(),
            with(
                pg("localhost"),
                &[("PGPASSFILE", &named_pgpass.display().to_string())],
            ),
            &empty,
        ),
        case(
            "~/.pgpass mode 0644 is ignored",
            String::new(),
            pg("localhost"),
            &open_pgpass,
        ),
        case(
            "~/.pgpass first match wins (wrong)",
            String::new(),
            pg("localhost"),
            &wrong_first,
        ),
        case(
            "~/.pgpass: escape and * inside a field",
            String::new(),
            pg("localhost"),
            &star_inside,
        ),
        case(
            "~/.pgpass keyed by hostaddr",
            String::new(),
            with(pg(""), &[("PGHOSTADDR", "127.0.0.1")]),
            &with_pgpass,
        ),
        case(
            "~/.pgpass: db defaults to user",
            String::new(),
            with(pg("127.0.0.1"), &[("PGDATABASE", "")]),
            &with_pgpass,
        ),
        case(
            "URL wins over PGPORT, PGDATABASE",
            format!("postgres://{ADMIN}@localhost:{port}/postgres"),
            with(
                pg("localhost"),
                &[("PGPORT", "1"), ("PGDATABASE", "nonexistent")],
            ),
            &with_pgpass,
        ),
        case(
            "URL sslmode=disable wins over PGSSLMODE",
            format!("host=localhost port={port} user={PLAIN_USER} dbname=postgres sslmode=disable"),
            vec![("PGSSLMODE", "require".to_owned())],
            &with_pgpass,
        ),
        case(
            "prefer, plain allowed: TLS chosen",
            format!("host=localhost port={port} user={PLAIN_USER} dbname=postgres"),
            vec![],
            &with_pgpass,
        ),
        case(
            "allow, plain allowed: clear text",
            format!("host=localhost port={port} user={PLAIN_USER} dbname=postgres sslmode=allow"),
            vec![],
            &with_pgpass,
        ),
        case(
            "allow, TLS-only role",
            format!("host=localhost port={port} user={ADMIN} dbname=postgres sslmode=allow"),
            vec![],
            &with_pgpass,
        ),
        case(
            "disable, TLS-only role",
            format!("host=localhost port={port} user={ADMIN} dbname=postgres sslmode=disable"),
            vec![],
            &with_pgpass,
        ),
        case(
            "PGSSLMODE=disable, TLS-only role",
            String::new(),
            with(pg("localhost"), &[("PGSSLMODE", "disable")]),
            &with_pgpass,
        ),
        case(
            "socket directory, require ignored",
            format!(
                "host={} port={port} user=postgres dbname=postgres sslmode=require",
                server.socket_dir().display()
            ),
            vec![],
            &empty,
        ),
        case(
            "two hosts, first unreachable",
            format!(
                "host=127.0.0.1,localhost port=1,{port} user={ADMIN} dbname=postgres sslmode=require"
            ),
            vec![],
            &with_pgpass,
        ),
        case(
            "client certificate",
            format!(
                "host=localhost port={port} user={CERT_USER} dbname=postgres sslmode=verify-full sslrootcert={ca} sslcert={} sslkey={}",
                server.client_cert_file().display(),
                server.client_key_file().display()
            ),
            vec![],
            &empty,
        ),
        case(
            "no client certificate",
            format!(
                "host=localhost port={port} user={CERT_USER} dbname=postgres sslmode=verify-full sslrootcert={ca}"
            ),
            vec![],
            &empty,
        ),
        case(
            "channel_binding=require over TLS",
            format!(
                "host=localhost port={port} user={ADMIN} dbname=postgres channel_binding=require"
            ),
            vec![],
            &with_pgpass,
        ),
        case(
            "channel_binding=require, no TLS",
            format!(
                "host=localhost port={port} user={PLAIN_USER} dbname=postgres sslmode=disable channel_binding=require"
            ),
            vec![],
            &with_pgpass,
        ),
        case(
            "service=tls from ~/.pg_service.conf",
            "service=tls".to_owned(),
            vec![],
            &with_pgpass,
        ),
        case(
            "PGSERVICE + PGSERVICEFILE",
            String::new(),
            vec![
                ("PGSERVICE", "tls".to_owned()),
                ("PGSERVICEFILE", named_services.display().to_string()),
                ("PGPASSWORD", ADMIN_PASSWORD.to_owned()),
            ],
            &empty,
        ),
        case(
            "service wins over PGPORT",
            "service=tls".to_owned(),
            vec![("PGPORT", "1".to_owned())],
            &with_pgpass,
        ),
        case(
            "string wins over service",
            format!("service=tls user={PLAIN_USER}"),
            vec![],
            &with_pgpass,
        ),
        case(
            "unknown service",
            "service=nosuch".to_owned(),
            vec![],
            &with_pgpass,
        ),
        case(
            "misspelt key",
            format!("host=localhost port={port} user={ADMIN} sslmdoe=require"),
            vec![],
            &with_pgpass,
        ),
        case(
            "misspelt URI query key",
            format!("postgres://{ADMIN}@localhost:{port}/postgres?sslmdoe=require"),
            vec![],
            &with_pgpass,
        ),
        case(
            "invalid sslmode",
            format!("host=localhost port={port} user={ADMIN} sslmode=verify_full"),
            vec![],
            &with_pgpass,
        ),
        case(
            "shared cluster, prefer: clear text",
            shared.clone(),
            vec![],
            &empty,
        ),
        case(
            "shared cluster, require: refused",
            format!("{shared} sslmode=require"),
            vec![],
            &empty,
        ),
        case(
            "shared cluster, PGSSLMODE=require",
            shared.clone(),
            vec![("PGSSLMODE", "require".to_owned())],
            &empty,
        ),
        case(
            "unknown role (default user)",
            format!("host=localhost port={port} dbname=postgres"),
            vec![("PGPASSWORD", PLAIN_PASSWORD.to_owned())],
            &empty,
        ),
    ];

    let os_user = os_user();
    let mut table = String::from("| case | psql | schema-gen |\n|---|---|---|\n");
    let mut disagree = BTreeMap::new();
    let mut outcomes = Vec::new();
    for case in &cases {
        let (psql, ours) = (via_psql(case), via_schema_gen(case, &os_user));
        table.push_str(&format!("| {} | `{psql}` | `{ours}` |\n", case.name));
        if psql != ours {
            disagree.insert(case.name, (psql.clone(), ours));
        }
        outcomes.push(psql);
    }
    eprintln!("{table}");
    assert!(
        disagree.is_empty(),
        "schema-gen and psql disagree: {disagree:#?}\n{table}"
    );
    // The comparison must cover each outcome: over TLS, in clear text, refused.
    let count = |pred: &dyn Fn(&str) -> bool| outcomes.iter().filter(|o| pred(o)).count();
    assert!(count(&|o| o.ends_with("|t")) >= 10, "{table}");
    assert!(count(&|o| o.ends_with("|f")) >= 3, "{table}");
    assert!(count(&|o| o == "refused") >= 8, "{table}");
}

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
