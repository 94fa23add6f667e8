//! `schema-gen check` and `apply` against a server that accepts only TLS
//! (`harness::tls`), and against the shared cluster, which has TLS off:
//! every `sslmode`, `sslrootcert`, client certificates, the `PG*` variables
//! and the password file, and the errors, none of which may print a
//! password.
//!
//! Plain `#[test]`s: the command line starts its own runtime. Library-level
//! connections run on a runtime of their own through `block_on`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use harness::cli::{Ran, run_in, runtime};
use harness::tls::{
    ADMIN, ADMIN_PASSWORD, CERT_USER, PLAIN_PASSWORD, PLAIN_USER, kv_quote, pgpass_escape,
    tls_server, url_encode, write_file,
};
use schema_gen::connect::{ConnectOptions, Environment, PasswordSource};

/// An environment with a home directory that holds nothing, so neither a
/// password file nor `~/.postgresql/` applies unless a test puts it there.
fn bare_env() -> Environment {
    Environment::new()
        .with_home(bare_env_home())
        .with_os_user("schema_gen_tests")
}

/// The empty home directory of [`bare_env`].
fn bare_env_home() -> PathBuf {
    let home = tls_server().scratch_dir().join("empty-home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{}: {e}", home.display()));
    home
}

/// A URL for `ADMIN` on the TLS server, its password percent-encoded.
fn admin_url(host: &str, query: &str) -> String {
    format!(
        "postgres://{ADMIN}:{}@{host}:{}/postgres?{query}",
        url_encode(ADMIN_PASSWORD),
        tls_server().port()
    )
}

/// Fragments of every test password: none may appear in any output.
fn assert_no_password(text: &str) {
    for fragment in [
        ADMIN_PASSWORD,
        "s3cr",
        "pa:ss",
        "\"dq\"",
        &url_encode(ADMIN_PASSWORD),
        PLAIN_PASSWORD,
        "@pw",
    ] {
        assert!(
            !text.contains(fragment),
            "a password leaked ({fragment:?}): {text}"
        );
    }
}

fn assert_failed(ran: &Ran, needle: &str) {
    assert_eq!(ran.code, ExitCode::from(2), "{ran:?}");
    assert_eq!(ran.stdout, "", "{ran:?}");
    assert_eq!(ran.stderr.lines().count(), 1, "{:?}", ran.stderr);
    assert!(
        ran.stderr.contains(needle),
        "{:?} lacks {needle:?}",
        ran.stderr
    );
    assert_no_password(&ran.stderr);
}

/// Applies a fresh schema over TLS and returns its name.
fn applied_schema(prefix: &str) -> String {
    let raw = harness::unique_schema(prefix);
    let url = admin_url("localhost", "sslmode=require");
    let applied = run_in(
        &["apply", "--database-url", &url, "--schema", &raw],
        &bare_env(),
    );
    assert_eq!(applied.code, ExitCode::SUCCESS, "{applied:?}");
    assert_no_password(&applied.stdout);
    raw
}

fn assert_matches(ran: &Ran, schema: &str) {
    assert_eq!(ran.code, ExitCode::SUCCESS, "{ran:?}");
    assert_eq!(
        ran.stdout,
        format!(
            "schema {schema} matches the model (version {})\n",
            schema_model::history::MODEL_VERSION
        )
    );
    assert_eq!(ran.stderr, "");
}

/// `check --database-url URL --schema SCHEMA` in a bare environment finds
/// the schema matching the model.
fn assert_check_matches(url: &str, schema: &str) {
    assert_matches(
        &run_in(
            &["check", "--database-url", url, "--schema", schema],
            &bare_env(),
        ),
        schema,
    );
}

#[test]
fn check_works_with_sslmode_require() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = applied_schema("tls_require");
    let url = admin_url("localhost", "sslmode=require");
    assert_check_matches(&url, &raw);
}

#[test]
fn check_works_with_verify_full_and_sslrootcert() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = applied_schema("tls_verify_full");
    let ca = tls_server().ca_file();
    for host in ["localhost", "127.0.0.1"] {
        let url = admin_url(
            host,
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                url_encode(&ca.display().to_string())
            ),
        );
        assert_check_matches(&url, &raw);
    }
}

/// A password file holding `password` for `ADMIN` on the TLS server.
fn password_file(path: &Path, mode: u32) -> PathBuf {
    let contents = format!(
        "# hosts the tests do not use come first\nelsewhere:*:*:*:wrong\n\
         localhost:{}:*:{ADMIN}:{}\n",
        tls_server().port(),
        pgpass_escape(ADMIN_PASSWORD)
    );
    write_file(path, &contents, mode);
    path.to_owned()
}

fn pg_env(env: Environment) -> Environment {
    env.with_var("PGHOST", "localhost")
        .with_var("PGPORT", &tls_server().port().to_string())
        .with_var("PGUSER", ADMIN)
        .with_var("PGDATABASE", "postgres")
        .with_var("PGSSLMODE", "verify-full")
        .with_var(
            "PGSSLROOTCERT",
            &tls_server().ca_file().display().to_string(),
        )
}

#[test]
fn check_works_with_nothing_but_pg_variables_and_a_password_file() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = applied_schema("tls_pgenv");
    let scratch = tls_server().scratch_dir();

    // PGPASSFILE names the file.
    let file = password_file(&scratch.join("pgpass-named"), 0o600);
    let env = pg_env(bare_env()).with_var("PGPASSFILE", &file.display().to_string());
    assert_matches(&run_in(&["check", "--schema", &raw], &env), &raw);

    // ~/.pgpass, found through the home directory.
    let home = scratch.join("home-with-pgpass");
    std::fs::create_dir_all(&home).unwrap();
    password_file(&home.join(".pgpass"), 0o600);
    let env = pg_env(
        Environment::new()
            .with_home(&home)
            .with_os_user("nobody_here"),
    );
    assert_matches(&run_in(&["check", "--schema", &raw], &env), &raw);
    let options = ConnectOptions::resolve("", &env).unwrap();
    assert_eq!(
        options.password_sources(),
        vec![Some(&PasswordSource::File {
            path: home.join(".pgpass"),
            line: 3
        })]
    );

    // An empty DATABASE_URL does not hide the PG* variables.
    let env = pg_env(Environment::new().with_home(&home)).with_var("DATABASE_URL", "");
    assert_matches(&run_in(&["check", "--schema", &raw], &env), &raw);
}

#[test]
fn a_password_file_others_can_read_is_ignored_and_the_error_says_so() {
    if harness::skip_db_tests() {
        return;
    }
    let home = tls_server().scratch_dir().join("home-with-open-pgpass");
    std::fs::create_dir_all(&home).unwrap();
    password_file(&home.join(".pgpass"), 0o640);
    let env = pg_env(Environment::new().with_home(&home));
    let ran = run_in(&["check", "--schema", "alkstore"], &env);
    assert_eq!(ran.code, ExitCode::from(2), "{ran:?}");
    // Said once: the failed login's line carries the warning.
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "the error, once: {lines:?}");
    assert!(
        lines[0].contains("the server asks for a password and none was given"),
        "{lines:?}"
    );
    assert_eq!(
        ran.stderr.matches("group or world access").count(),
        1,
        "{lines:?}"
    );
    assert!(lines[0].contains("chmod 0600"), "{lines:?}");
    assert_no_password(&ran.stderr);

    // A login that needs no password (trust over the socket) still warns,
    // once, and goes on.
    let env = Environment::new()
        .with_home(&home)
        .with_var("PGHOST", &tls_server().socket_dir().display().to_string())
        .with_var("PGPORT", &tls_server().port().to_string())
        .with_var("PGUSER", ADMIN)
        .with_var("PGDATABASE", "postgres");
    let ran = run_in(&["check", "--schema", "pgpass_warned"], &env);
    assert_eq!(ran.code, ExitCode::from(1), "{ran:?}");
    assert!(
        ran.stdout.contains("missing schema pgpass_warned"),
        "{ran:?}"
    );
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "the warning, once: {lines:?}");
    assert!(
        lines[0].starts_with("schema-gen: warning: the password file")
            && lines[0].contains("group or world access"),
        "{lines:?}"
    );
}

#[test]
fn verify_full_refuses_a_host_name_the_certificate_does_not_carry() {
    if harness::skip_db_tests() {
        return;
    }
    let ca = url_encode(&tls_server().ca_file().display().to_string());
    // The name is only the certificate check's: hostaddr says where to connect.
    let url = admin_url(
        "db.example.invalid",
        &format!("hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={ca}"),
    );
    let ran = run_in(&["check", "--database-url", &url], &bare_env());
    assert_failed(
        &ran,
        "does not name the host db.example.invalid (127.0.0.1)",
    );
    assert!(ran.stderr.contains("sslmode=verify-full"), "{}", ran.stderr);

    // verify-ca checks the chain only, so the same name passes.
    let raw = applied_schema("tls_verify_ca");
    let url = admin_url(
        "db.example.invalid",
        &format!("hostaddr=127.0.0.1&sslmode=verify-ca&sslrootcert={ca}"),
    );
    assert_check_matches(&url, &raw);
}

#[test]
fn verification_refuses_a_certificate_from_another_ca() {
    if harness::skip_db_tests() {
        return;
    }
    let other = url_encode(&tls_server().other_ca_file().display().to_string());
    for mode in ["verify-ca", "verify-full", "require"] {
        // libpq: a root certificate file makes even `require` check the chain.
        let url = admin_url("localhost", &format!("sslmode={mode}&sslrootcert={other}"));
        let ran = run_in(&["check", "--database-url", &url], &bare_env());
        assert_failed(
            &ran,
            "the server's certificate is not signed by the roots in sslrootcert",
        );
    }
    // ~/.postgresql/root.crt is the default root file, as in libpq.
    let home = tls_server().scratch_dir().join("home-with-other-root");
    std::fs::create_dir_all(home.join(".postgresql")).unwrap();
    std::fs::copy(
        tls_server().other_ca_file(),
        home.join(".postgresql/root.crt"),
    )
    .unwrap();
    let env = Environment::new().with_home(&home);
    let ran = run_in(
        &[
            "check",
            "--database-url",
            &admin_url("localhost", "sslmode=require"),
        ],
        &env,
    );
    assert_failed(&ran, "root.crt");
}

/// Connects through the library and returns the one value `sql` selects.
fn query_value<T: tokio_postgres::types::FromSqlOwned>(options: &ConnectOptions, sql: &str) -> T {
    runtime().block_on(async {
        let client = options.connect().await.unwrap_or_else(|e| panic!("{e}"));
        client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get::<_, T>(0)
    })
}

/// Connects through the library and reports whether the session is on TLS.
fn session_uses_tls(conninfo: &str) -> bool {
    let options = ConnectOptions::resolve(conninfo, &bare_env())
        .unwrap_or_else(|e| panic!("{conninfo}: {e}"));
    query_value(
        &options,
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
}

#[test]
fn prefer_uses_tls_when_the_server_offers_it() {
    if harness::skip_db_tests() {
        return;
    }
    let base = format!(
        "host=localhost port={} user={PLAIN_USER} dbname=postgres password='{}'",
        tls_server().port(),
        PLAIN_PASSWORD
    );
    // This role may log in without TLS, so TLS under prefer is a choice.
    assert!(!session_uses_tls(&format!("{base} sslmode=disable")));
    assert!(!session_uses_tls(&format!("{base} sslmode=allow")));
    assert!(session_uses_tls(&format!("{base} sslmode=prefer")));
    assert!(session_uses_tls(&base), "prefer is the default");
    assert!(session_uses_tls(&format!("{base} sslmode=require")));
    // The shared cluster has TLS off: prefer goes on in clear text.
    assert!(!session_uses_tls(&harness::database_url()));
}

#[test]
fn require_against_a_server_without_tls_is_a_clear_error() {
    if harness::skip_db_tests() {
        return;
    }
    for mode in ["require", "verify-full"] {
        let url = format!(
            "{} sslmode={mode} password={}",
            harness::database_url(),
            kv_quote(ADMIN_PASSWORD)
        );
        let ran = run_in(&["check", "--database-url", &url], &bare_env());
        assert_failed(
            &ran,
            &format!("sslmode={mode} demands TLS and this server does not offer it"),
        );
    }
}

#[test]
fn a_wrong_password_says_where_it_came_from_and_not_what_it_was() {
    if harness::skip_db_tests() {
        return;
    }
    let url = format!(
        "postgres://{ADMIN}:{}@localhost:{}/postgres?sslmode=require",
        url_encode(&format!("{ADMIN_PASSWORD}x")),
        tls_server().port()
    );
    let ran = run_in(&["check", "--database-url", &url], &bare_env());
    assert_failed(&ran, "password authentication failed for user \"alk_tls\"");
    assert!(
        ran.stderr
            .contains("the password came from the connection string"),
        "{}",
        ran.stderr
    );

    let env = pg_env(bare_env()).with_var("PGPASSWORD", "s3cr@t wrong");
    let ran = run_in(&["check"], &env);
    assert_failed(&ran, "the password came from PGPASSWORD");
    assert!(!ran.stderr.contains("wrong"), "{}", ran.stderr);
}

#[test]
fn a_client_certificate_logs_in_where_the_server_wants_one() {
    if harness::skip_db_tests() {
        return;
    }
    let server = tls_server();
    let base = format!(
        "host=localhost port={} user={CERT_USER} dbname=postgres sslmode=verify-full \
         sslrootcert='{}'",
        server.port(),
        server.ca_file().display()
    );
    let raw = applied_schema("tls_client_cert");
    let with_cert = format!(
        "{base} sslcert='{}' sslkey='{}'",
        server.client_cert_file().display(),
        server.client_key_file().display()
    );
    assert_check_matches(&with_cert, &raw);
    let ran = run_in(&["check", "--database-url", &base], &bare_env());
    assert_failed(&ran, "certificate");

    // A key that others may read is refused before connecting, as libpq does.
    let open_key = server.scratch_dir().join("open-client.key");
    std::fs::copy(server.client_key_file(), &open_key).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let ran = run_in(
        &[
            "check",
            "--database-url",
            &format!(
                "{base} sslcert='{}' sslkey='{}'",
                server.client_cert_file().display(),
                open_key.display()
            ),
        ],
        &bare_env(),
    );
    assert_failed(&ran, "the private key has group or world access");
}

#[test]
fn channel_binding_require_is_met_over_tls() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = applied_schema("tls_channel_binding");
    let url = admin_url("localhost", "sslmode=require&channel_binding=require");
    assert_check_matches(&url, &raw);
}

#[test]
fn the_first_reachable_host_of_several_is_used() {
    if harness::skip_db_tests() {
        return;
    }
    let raw = applied_schema("tls_multi_host");
    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let url = format!(
        "postgres://{ADMIN}:{}@127.0.0.1:{unused},localhost:{}/postgres?sslmode=require",
        url_encode(ADMIN_PASSWORD),
        tls_server().port()
    );
    assert_check_matches(&url, &raw);
    // When none answers, each host's failure is listed.
    let url = format!(
        "postgres://{ADMIN}:{}@127.0.0.1:{unused},localhost:{unused}/postgres?sslmode=require",
        url_encode(ADMIN_PASSWORD)
    );
    let ran = run_in(&["check", "--database-url", &url], &bare_env());
    assert_failed(
        &ran,
        "cannot connect to PostgreSQL at any of 2 hosts: 127.0.0.1:",
    );
}

#[test]
fn application_name_falls_back_unless_the_string_or_pgappname_sets_it() {
    if harness::skip_db_tests() {
        return;
    }
    let name_of = |conninfo: &str, env: &Environment| -> String {
        let mut options = ConnectOptions::resolve(conninfo, env).unwrap_or_else(|e| panic!("{e}"));
        options.fallback_application_name("schema-gen");
        query_value(&options, "SELECT current_setting('application_name')")
    };
    let url = harness::database_url();
    assert_eq!(name_of(&url, &bare_env()), "schema-gen");
    assert_eq!(
        name_of(&url, &bare_env().with_var("PGAPPNAME", "deploy")),
        "deploy"
    );
    assert_eq!(
        name_of(
            &format!("{url} application_name=ci"),
            &bare_env().with_var("PGAPPNAME", "deploy")
        ),
        "ci"
    );
}

#[test]
fn the_tls_protocol_versions_follow_ssl_min_and_max_protocol_version() {
    if harness::skip_db_tests() {
        return;
    }
    let version_of = |extra: &str| -> String {
        let conninfo = format!(
            "host=localhost port={} user={ADMIN} dbname=postgres sslmode=require password={} {extra}",
            tls_server().port(),
            kv_quote(ADMIN_PASSWORD)
        );
        let options =
            ConnectOptions::resolve(&conninfo, &bare_env()).unwrap_or_else(|e| panic!("{e}"));
        query_value(
            &options,
            "SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
    };
    assert_eq!(version_of(""), "TLSv1.3");
    assert_eq!(version_of("ssl_max_protocol_version=TLSv1.2"), "TLSv1.2");
    assert_eq!(version_of("ssl_min_protocol_version=TLSv1.3"), "TLSv1.3");
}

/// The uid a key is given to for the cases of a non-root owner (`nobody` on
/// Debian; no account is needed to own a file).
const UNPRIVILEGED_UID: u32 = 65534;

/// libpq's rule for a client key: no access for group or others, except
/// group read on a key that root owns (a system-wide key shared through a
/// group). Each mode is tried on a key owned by root and on one owned by an
/// unprivileged uid; the tests run as root (as CI does), which may read
/// either, so only the rule decides.
#[test]
fn a_client_key_readable_by_its_group_is_accepted_only_when_root_owns_it() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if harness::skip_db_tests() {
        return;
    }
    let server = tls_server();
    let raw = applied_schema("tls_key_modes");
    let base = format!(
        "host=localhost port={} user={CERT_USER} dbname=postgres sslmode=verify-full \
         sslrootcert='{}' sslcert='{}'",
        server.port(),
        server.ca_file().display(),
        server.client_cert_file().display(),
    );
    let dir = server.scratch_dir().join("key-modes");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    // (owner, mode, accepted)
    let cases = [
        (0, 0o600, true),
        (0, 0o400, true),
        (0, 0o640, true),
        (0, 0o440, true),
        (0, 0o660, false),
        (0, 0o620, false),
        (0, 0o650, false),
        (0, 0o604, false),
        (0, 0o644, false),
        (UNPRIVILEGED_UID, 0o600, true),
        (UNPRIVILEGED_UID, 0o400, true),
        (UNPRIVILEGED_UID, 0o640, false),
        (UNPRIVILEGED_UID, 0o440, false),
        (UNPRIVILEGED_UID, 0o604, false),
    ];
    for (owner, mode, accepted) in cases {
        let key = dir.join(format!("client-{owner}-{mode:o}.key"));
        std::fs::copy(server.client_key_file(), &key)
            .unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        std::os::unix::fs::chown(&key, Some(owner), Some(0)).unwrap_or_else(|e| {
            panic!(
                "chown {owner} {}: {e}: this test runs as root, as CI does (.ci/run), to give \
                 keys to root and to another uid",
                key.display()
            )
        });
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        let meta = std::fs::metadata(&key).unwrap_or_else(|e| panic!("{}: {e}", key.display()));
        assert_eq!((meta.uid(), meta.mode() & 0o777), (owner, mode), "set-up");

        let url = format!("{base} sslkey='{}'", key.display());
        // libpq itself is the second opinion: psql takes the same key or not.
        let psql = std::process::Command::new(server.psql_bin())
            .env_clear()
            .env("HOME", bare_env_home())
            .args(["-X", "-w", "-At", "-c", "SELECT 1", "-d", &url])
            .output()
            .unwrap_or_else(|e| panic!("running psql: {e}"));
        assert_eq!(
            psql.status.success(),
            accepted,
            "psql (libpq) with a key of owner {owner}, mode {mode:o}: {}",
            String::from_utf8_lossy(&psql.stderr)
        );
        if !accepted {
            let said = String::from_utf8_lossy(&psql.stderr);
            assert!(said.contains("has group or world access"), "psql: {said}");
        }
        if accepted {
            assert_check_matches(&url, &raw);
        } else {
            let ran = run_in(&["check", "--database-url", &url], &bare_env());
            assert_failed(&ran, "the private key has group or world access");
        }
    }
}
