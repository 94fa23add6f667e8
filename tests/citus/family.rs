//! The family under `Layout::CitusSchemaSharding`: created distributed by
//! `apply`, checked (over TLS too, in one round trip), a wrongly distributed
//! family caught, the nodes the layout refuses, the printed script.

use std::process::ExitCode;

use harness::citus::cluster;
use harness::engine::engine_schema;
use harness::{exec, rows};
use schema_gen::connect::{ConnectOptions, Environment, SslMode};
use schema_gen::render::quote_literal;
use schema_gen::{ErrorKind, Options, bootstrap_with};
use schema_model::Layout;

use super::{citus_options, citus_schema};

#[test]
fn apply_creates_the_family_distributed_and_check_passes() {
    if harness::skip_db_tests() {
        return;
    }
    let url = cluster().coordinator_url();
    let schema = harness::unique_schema("citus_apply");
    let args = |command: &'static str| {
        vec![
            command,
            "--layout",
            "citus",
            "--database-url",
            url.as_str(),
            "--schema",
            schema.as_str(),
        ]
    };
    let applied = harness::cli::run(&args("apply"));
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    assert!(
        applied
            .stdout
            .starts_with(&format!("created schema {schema}")),
        "{}",
        applied.stdout
    );
    let checked = harness::cli::run(&args("check"));
    assert_eq!(
        checked.code,
        ExitCode::SUCCESS,
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    assert!(
        checked.stdout.contains("matches the model"),
        "{}",
        checked.stdout
    );
    let again = harness::cli::run(&args("apply"));
    assert_eq!(again.code, ExitCode::SUCCESS, "{}", again.stderr);
    assert!(again.stdout.contains("already current"), "{}", again.stdout);

    // What Citus says: one distributed schema, every table a single-shard
    // table of its colocation group, the version row on the shard only.
    harness::cli::runtime().block_on(async {
        let client = cluster().connect_coordinator().await;
        let placed = rows(
            &client,
            &format!(
                "SELECT p.logicalrelid::text, p.partmethod::text, p.repmodel::text, \
                        p.colocationid = ds.colocationid \
                 FROM pg_dist_schema ds JOIN pg_class c ON c.relnamespace = ds.schemaid \
                 JOIN pg_dist_partition p ON p.logicalrelid = c.oid \
                 WHERE ds.schemaid = {}::regnamespace ORDER BY 1",
                quote_literal(&schema)
            ),
        )
        .await;
        let tables: Vec<String> = placed.iter().map(|r| r.get(0)).collect();
        assert_eq!(tables.len(), 8, "{tables:?}");
        for row in &placed {
            let table: String = row.get(0);
            assert_eq!(row.get::<_, String>(1), "n", "{table}");
            assert_eq!(row.get::<_, String>(2), "s", "{table}");
            assert!(row.get::<_, bool>(3), "{table} is in the schema's group");
        }
        let versions = rows(
            &client,
            &format!("SELECT version FROM \"{schema}\".schema_versions"),
        )
        .await;
        assert_eq!(versions.len(), 1);
        // The coordinator's local copy was truncated: nothing left on disk
        // (Citus reads the shard; the local heap is what the truncate emptied).
        let local = rows(
            &client,
            &format!(
                "SELECT pg_relation_size({})",
                quote_literal(&format!("{schema}.schema_versions"))
            ),
        )
        .await;
        assert_eq!(local[0].get::<_, i64>(0), 0, "local data left behind");
    });
}

/// The done-criterion: `schema-gen check` reaches a Citus node with
/// libpq's default `sslmode` (`prefer`). `CREATE EXTENSION citus` turned TLS
/// on with a self-signed X.509 version 1 certificate; a role that
/// `pg_hba.conf` refuses in clear text proves the check came over TLS, and
/// `pg_stat_ssl` says so for a session the product's connect opened the
/// same way. Where the chain is verified (`verify-full`, no CA to trust it)
/// the connection is refused with a message that says why.
#[test]
fn check_reaches_the_coordinator_over_tls_with_the_default_sslmode() {
    if harness::skip_db_tests() {
        return;
    }
    let cluster = cluster();
    let rt = harness::cli::runtime();
    let schema = harness::unique_schema("citus_tls");
    let role = harness::unique_name("citus_tls_only");
    let (cert, hba) = rt.block_on(async {
        let client = cluster.connect_coordinator().await;
        let setting = |name: &'static str| {
            let client = &client;
            async move { rows(client, &format!("SHOW {name}")).await[0].get::<_, String>(0) }
        };
        assert_eq!(setting("ssl").await, "on", "Citus turns TLS on");
        let data = std::path::PathBuf::from(setting("data_directory").await);
        let cert = data.join(setting("ssl_cert_file").await);
        let hba = std::path::PathBuf::from(setting("hba_file").await);
        // A superuser that may only come in over TLS (the line goes first,
        // before the harness's `trust` for 127.0.0.1).
        exec(&client, &format!("CREATE ROLE \"{role}\" LOGIN SUPERUSER")).await;
        let old = std::fs::read_to_string(&hba)
            .unwrap_or_else(|e| panic!("reading {}: {e}", hba.display()));
        std::fs::write(
            &hba,
            format!("hostnossl all \"{role}\" 127.0.0.1/32 reject\n{old}"),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", hba.display()));
        exec(&client, "SELECT pg_reload_conf()").await;
        (cert, hba)
    });
    let text = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| panic!("running openssl x509 on {}: {e}", cert.display()));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Version: 1 (0x0)"),
        "{} is not X.509 version 1:\n{text}",
        cert.display()
    );

    let port = cluster.coordinator;
    let url = |more: &str| format!("host=127.0.0.1 port={port} user={role} dbname=postgres {more}");
    let check = |url: &str| {
        harness::cli::run(&[
            "check",
            "--layout",
            "citus",
            "--database-url",
            url,
            "--schema",
            schema.as_str(),
        ])
    };
    let applied = harness::cli::run(&[
        "apply",
        "--layout",
        "citus",
        "--database-url",
        &url("sslmode=require"),
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);

    // The guard fires: in clear text the role is refused (the reload is
    // asynchronous, so wait for it to take).
    let began = std::time::Instant::now();
    let clear = loop {
        let clear = check(&url("sslmode=disable"));
        if clear.code != ExitCode::SUCCESS || began.elapsed() > std::time::Duration::from_secs(10) {
            break clear;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        clear.code,
        ExitCode::from(2),
        "{}{}",
        clear.stdout,
        clear.stderr
    );
    assert!(
        clear.stderr.contains("no encryption") || clear.stderr.contains("pg_hba.conf"),
        "{}",
        clear.stderr
    );

    // No sslmode at all: libpq's default, prefer.
    let checked = check(&url(""));
    assert_eq!(
        checked.code,
        ExitCode::SUCCESS,
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    assert!(
        checked.stdout.contains("matches the model"),
        "{}",
        checked.stdout
    );

    // The product's connect, the same settings: the session is encrypted.
    rt.block_on(async {
        let options = ConnectOptions::resolve(&url(""), &Environment::new())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.ssl_mode(), SslMode::Prefer);
        let client = options.connect().await.unwrap_or_else(|e| panic!("{e}"));
        let ssl = rows(
            &client,
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        )
        .await;
        assert!(ssl[0].get::<_, bool>(0), "the session is not encrypted");
        eprintln!("default sslmode: {:?}", ssl[0].get::<_, Option<String>>(1));
    });

    // Verifying the chain: nothing trusts a self-signed version 1
    // certificate, and the message says so and what to do.
    for more in [
        "sslmode=verify-full".to_owned(),
        format!("sslmode=verify-full sslrootcert={}", cert.display()),
    ] {
        let refused = check(&url(&more));
        assert_eq!(
            refused.code,
            ExitCode::from(2),
            "{more}: {}",
            refused.stdout
        );
        assert!(
            refused.stdout.is_empty()
                && refused
                    .stderr
                    .contains("the server's certificate is X.509 version 1")
                && refused.stderr.contains("re-issue it as version 3"),
            "{more}: {}",
            refused.stderr
        );
    }

    // Put pg_hba.conf back for the tests after this one.
    let now = std::fs::read_to_string(&hba).unwrap_or_else(|e| panic!("{e}"));
    let first = format!("hostnossl all \"{role}\" 127.0.0.1/32 reject\n");
    std::fs::write(&hba, now.replacen(&first, "", 1)).unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        exec(
            &cluster.connect_coordinator().await,
            "SELECT pg_reload_conf()",
        )
        .await;
    });
}

#[test]
fn check_catches_a_wrongly_distributed_family_and_apply_refuses_it() {
    if harness::skip_db_tests() {
        return;
    }
    let url = cluster().coordinator_url();
    let rt = harness::cli::runtime();
    // The single-server DDL on the coordinator: plain tables, then three
    // distributed by hand the way the layout does not (a single-shard
    // table too, but in a group of its own, not the schema's).
    let schema = rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        let schema = engine_schema(&client, "citus_wrong").await;
        exec(
            &client,
            &format!(
                "SELECT create_distributed_table('\"{schema}\".locks', 'name', colocate_with => 'none'); \
                 SELECT create_reference_table('\"{schema}\".schedules'); \
                 SELECT create_distributed_table('\"{schema}\".dead_jobs', NULL, colocate_with => 'none')"
            ),
        )
        .await;
        schema
    });
    let name = schema.to_string();
    let args = |command: &'static str| {
        vec![
            command,
            "--layout",
            "citus",
            "--database-url",
            url.as_str(),
            "--schema",
            name.as_str(),
        ]
    };
    let checked = harness::cli::run(&args("check"));
    assert_eq!(
        checked.code,
        ExitCode::from(1),
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    for expected in [
        format!("schema {schema} is not a distributed schema, layout citus says it is one"),
        "locks is a hash-distributed table on column name".to_owned(),
        "schedules is a reference table".to_owned(),
        "dead_jobs is a single-shard table (colocation group".to_owned(),
        "jobs is a local table (not distributed)".to_owned(),
    ] {
        assert!(
            checked.stdout.contains(&expected),
            "no `{expected}` in:\n{}",
            checked.stdout
        );
    }
    // The same database under the single-server layout: the shapes match,
    // Citus catalogs are not read.
    let single = harness::cli::run(&[
        "check",
        "--database-url",
        url.as_str(),
        "--schema",
        name.as_str(),
    ]);
    assert_eq!(
        single.code,
        ExitCode::SUCCESS,
        "{}{}",
        single.stdout,
        single.stderr
    );

    // apply refuses it as drift and changes nothing.
    let applied = harness::cli::run(&args("apply"));
    assert_eq!(
        applied.code,
        ExitCode::from(1),
        "{}{}",
        applied.stdout,
        applied.stderr
    );
    assert!(
        applied.stderr.contains("apply refused and changed nothing"),
        "{}",
        applied.stderr
    );
    rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        let distributed = rows(
            &client,
            &format!(
                "SELECT count(*) FROM pg_dist_schema WHERE schemaid = '\"{schema}\"'::regnamespace"
            ),
        )
        .await;
        assert_eq!(
            distributed[0].get::<_, i64>(0),
            0,
            "apply distributed the schema"
        );
    });
}

#[tokio::test]
async fn a_worker_and_a_server_without_citus_are_refused_and_nothing_changes() {
    if harness::skip_db_tests() {
        return;
    }
    let schema = harness::unique_schema_name("citus_refused");
    // A worker: the engine connected to it is refused at open (bootstrap).
    let mut worker = cluster().connect_worker(0).await;
    let err = bootstrap_with(&mut worker, &schema, &citus_options())
        .await
        .expect_err("a worker is refused");
    assert!(matches!(err.kind(), ErrorKind::Layout { .. }), "{err}");
    assert!(
        err.to_string().contains("is a worker, not the coordinator"),
        "{err}"
    );
    let verify = schema_gen::verify_with(&worker, &schema, &citus_options()).await;
    assert!(matches!(
        verify.map_err(|e| e.into_kind()),
        Err(ErrorKind::Layout { .. })
    ));
    // A plain PostgreSQL server (the suite's single server).
    let mut plain = harness::connect().await;
    let err = bootstrap_with(&mut plain, &schema, &citus_options())
        .await
        .expect_err("a server without citus is refused");
    assert!(
        err.to_string().contains("has no `citus` extension"),
        "{err}"
    );
    for client in [&worker, &plain] {
        let found = rows(
            client,
            &format!(
                "SELECT count(*) FROM pg_namespace WHERE nspname = {}",
                quote_literal(schema.as_str())
            ),
        )
        .await;
        assert_eq!(
            found[0].get::<_, i64>(0),
            0,
            "the refused bootstrap created the schema"
        );
    }
    // The single-server layout on the plain server still works.
    bootstrap_with(&mut plain, &schema, &Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The printed Citus script runs once: on a schema it already distributed,
/// its version record runs on a distributed table, which Citus 13.2.2
/// deparses wrongly; the transaction fails and changes nothing (as the
/// README and `render::script_for` say). The first run is what `psql`
/// users get: the family, distributed.
#[test]
fn the_printed_citus_script_creates_the_family_once_and_a_rerun_changes_nothing() {
    if harness::skip_db_tests() {
        return;
    }
    let url = cluster().coordinator_url();
    let schema = harness::unique_schema_name("citus_script");
    let script = schema_gen::render::script_for(&schema, Layout::CitusSchemaSharding);
    let first = harness::pg::psql_script(&url, &script);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let name = schema.to_string();
    let check = harness::cli::run(&[
        "check",
        "--layout",
        "citus",
        "--database-url",
        url.as_str(),
        "--schema",
        name.as_str(),
    ]);
    assert_eq!(
        check.code,
        ExitCode::SUCCESS,
        "{}{}",
        check.stdout,
        check.stderr
    );
    let again = harness::pg::psql_script(&url, &script);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "the re-run succeeded: {stderr}");
    assert!(
        stderr.contains("syntax error at or near \"NOT\""),
        "{stderr}"
    );
    let check = harness::cli::run(&[
        "check",
        "--layout",
        "citus",
        "--database-url",
        url.as_str(),
        "--schema",
        name.as_str(),
    ]);
    assert_eq!(
        check.code,
        ExitCode::SUCCESS,
        "{}{}",
        check.stdout,
        check.stderr
    );
}

/// `check` asks everything in one round trip under either layout: the
/// catalog, and under `--layout citus` the node and the family's
/// distribution in the same simple query (it took 13 round trips before:
/// each Citus question its own bounded transaction of four). A steady-state
/// open under the Citus layout is one round trip too, and a server without
/// Citus is refused after that one.
#[tokio::test]
async fn check_is_one_round_trip_under_either_layout() {
    if harness::skip_db_tests() {
        return;
    }
    let (_, schema) = citus_schema("citus_trips").await;
    let url = cluster().coordinator_url();
    let proxy = harness::wire::CountingProxy::start(&url).await;
    let mut client = proxy.connect(&url).await;
    for options in [citus_options(), Options::default()] {
        proxy.reset();
        let status = schema_gen::check::status(&client, &schema, &options)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            status.passes(),
            "{}: {:?}",
            status.message,
            status.differences
        );
        assert_eq!(
            proxy.round_trips(),
            1,
            "{:?}: {:#?}",
            options.layout,
            proxy.statements()
        );
    }
    proxy.reset();
    let outcome = bootstrap_with(&mut client, &schema, &citus_options())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!outcome.created(), "{outcome}");
    assert_eq!(proxy.round_trips(), 1, "{:#?}", proxy.statements());

    let plain_url = harness::database_url();
    let plain_proxy = harness::wire::CountingProxy::start(&plain_url).await;
    let plain = plain_proxy.connect(&plain_url).await;
    plain_proxy.reset();
    let err = schema_gen::check::status(&plain, &schema, &citus_options())
        .await
        .expect_err("a server without citus is refused");
    assert!(matches!(err.kind(), ErrorKind::Layout { .. }), "{err}");
    assert_eq!(plain_proxy.round_trips(), 1);
}
