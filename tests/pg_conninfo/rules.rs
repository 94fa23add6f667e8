//! The connection rules beside psql's: each case's connection string,
//! variables and home directory, connected by psql and by `schema-gen`.

use std::collections::BTreeMap;
use std::path::Path;

use harness::tls::{
    ADMIN, ADMIN_PASSWORD, CERT_USER, PLAIN_PASSWORD, PLAIN_USER, kv_quote, pgpass_escape,
    tls_server, url_encode, write_file,
};

use super::{Case, home, home_with_pgpass, os_user, via_psql, via_schema_gen};

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
