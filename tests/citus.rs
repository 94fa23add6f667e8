//! The engine family on a real Citus cluster (a coordinator and two workers
//! started by `harness::citus`): smoke tests of the cluster itself and of a
//! model table distributed on it, then the family under
//! `Layout::CitusSchemaSharding`: created distributed by `apply`, checked,
//! a wrongly distributed family caught, every hot path one task, the
//! maintenance statements at work, commit-order reads and fences that hold,
//! the nodes the layout refuses, `check` over TLS with the default
//! `sslmode`, and the schema moved to the other worker.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::ExitCode;

use harness::citus::{CITUS_VERSION, citus_installed, cluster, expected_version, task_counts};
use harness::engine::{engine_schema, run, until_horizon_passes};
use harness::{describe_error, exec, rows};
use schema_gen::connect::{ConnectOptions, Environment, SslMode};
use schema_gen::render::quote_literal;
use schema_gen::statements::{
    FromRow, Session, Statement, all_for, consumed_events, dead_jobs, jobs, locks, schedules,
    streams,
};
use schema_gen::{ErrorKind, Options, bootstrap_with};
use schema_model::{
    ConsumedEvent, ConsumerOffset, Job, Layout, Lock, Schedule, SchemaName, StreamEvent,
};
use tokio_postgres::Client;

#[tokio::test]
async fn the_cluster_is_a_coordinator_and_two_active_workers() {
    if harness::skip_db_tests() {
        return;
    }
    let cluster = cluster();
    eprintln!("Citus cluster started in {:?}", cluster.startup);
    let coordinator = cluster.connect_coordinator().await;
    let version: String = rows(&coordinator, "SELECT citus_version()").await[0].get(0);
    assert!(
        version.starts_with(&format!("Citus {CITUS_VERSION} ")),
        "{version}"
    );
    let mut workers: Vec<i64> = rows(
        &coordinator,
        "SELECT node_port FROM citus_get_active_worker_nodes()",
    )
    .await
    .iter()
    .map(|row| row.get(0))
    .collect();
    workers.sort();
    let mut expected: Vec<i64> = cluster.workers.iter().map(|p| i64::from(*p)).collect();
    expected.sort();
    assert_eq!(workers, expected);

    let is_coordinator = "SELECT citus_is_coordinator()";
    assert!(rows(&coordinator, is_coordinator).await[0].get::<_, bool>(0));
    for index in 0..2 {
        let worker = cluster.connect_worker(index).await;
        assert!(
            !rows(&worker, is_coordinator).await[0].get::<_, bool>(0),
            "worker {index} says it is the coordinator"
        );
    }
}

#[tokio::test]
async fn the_model_locks_table_distributes_by_name_and_renew_and_release_route_to_one_shard() {
    if harness::skip_db_tests() {
        return;
    }
    let cluster = cluster();
    let coordinator = cluster.connect_coordinator().await;
    // The product's own DDL, as `schema-gen sql` prints it.
    let schema = engine_schema(&coordinator, "citus_smoke").await;
    let table = format!("\"{schema}\".locks");
    coordinator
        .batch_execute(&format!(
            "SELECT create_distributed_table({}, 'name', colocate_with => 'none')",
            quote_literal(&table)
        ))
        .await
        .unwrap_or_else(|e| panic!("distributing {table}: {}", describe_error(&e)));

    let partition = rows(
        &coordinator,
        &format!(
            "SELECT partmethod::text, column_to_column_name(logicalrelid, partkey), \
                    (SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid) \
             FROM pg_dist_partition p WHERE logicalrelid = {}::regclass",
            quote_literal(&table)
        ),
    )
    .await;
    assert_eq!(partition.len(), 1, "{table} is not in pg_dist_partition");
    assert_eq!(partition[0].get::<_, String>(0), "h", "hash distribution");
    assert_eq!(partition[0].get::<_, String>(1), "name");
    let shards: i64 = partition[0].get(2);
    assert!(shards > 1, "{table} has {shards} shards");

    for statement in [
        locks::renew(&schema, "ticker", "node-a", 7, 1_700_000_060, 1_700_000_020),
        locks::release(&schema, "ticker", "node-a", 7),
    ] {
        let (counts, plan) = task_counts(&coordinator, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must route to one shard:\n{plan}",
            statement.name()
        );
    }
    // A statement without the distribution key in it visits every shard:
    // the count above is the routing, not a constant.
    let fan_out = coordinator
        .query(&format!("EXPLAIN (COSTS OFF) SELECT * FROM {table}"), &[])
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN of a full scan: {}", describe_error(&e)));
    let plan: Vec<String> = fan_out.iter().map(|row| row.get(0)).collect();
    assert!(
        plan.iter()
            .any(|line| line.trim() == format!("Task Count: {shards}")),
        "{}",
        plan.join("\n")
    );
}

#[test]
fn a_server_without_citus_is_refused_with_the_install_step() {
    let why = citus_installed(Path::new("/nonexistent/postgresql/bin"))
        .expect_err("no citus.so under /nonexistent");
    assert!(why.contains("bash .ci/install-citus"), "{why}");
    assert!(
        why.contains("/nonexistent/postgresql/lib/citus.so"),
        "{why}"
    );
}

#[test]
fn another_citus_version_is_refused_with_the_install_step() {
    let why = expected_version("Citus 12.1.5 on x86_64-pc-linux-gnu, compiled by gcc")
        .expect_err("12.1.5 is not the version the tests expect");
    assert!(why.contains("Citus 12.1.5"), "{why}");
    assert!(why.contains("bash .ci/install-citus"), "{why}");
    // A version that merely starts with the expected digits is not it either.
    assert!(expected_version("Citus 13.2.20 on x86_64").is_err());
    assert!(expected_version(&format!("Citus {CITUS_VERSION} on x86_64")).is_ok());
}

// ---------------------------------------------------------------------------
// The family under Layout::CitusSchemaSharding

const NOW: i64 = 1_700_000_000;

fn citus_options() -> Options {
    Options {
        layout: Layout::CitusSchemaSharding,
        ..Options::default()
    }
}

/// A fresh engine schema created by the library's bootstrap under the Citus
/// layout, on the coordinator.
async fn citus_schema(prefix: &str) -> (Client, SchemaName) {
    let mut client = cluster().connect_coordinator().await;
    let schema = harness::unique_schema_name(prefix);
    bootstrap_with(&mut client, &schema, &citus_options())
        .await
        .unwrap_or_else(|e| panic!("bootstrap of {schema} under the citus layout: {e}"));
    (client, schema)
}

/// The port of the worker that holds the shards of `schema`, and its index.
async fn shard_worker(client: &Client, schema: &SchemaName) -> usize {
    let found = rows(
        client,
        &format!(
            "SELECT DISTINCT n.nodeport FROM pg_dist_shard s \
             JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) \
             WHERE s.logicalrelid::text LIKE {}",
            quote_literal(&format!("{schema}.%"))
        ),
    )
    .await;
    assert_eq!(found.len(), 1, "{schema}'s shards are on one node");
    let port: i32 = found[0].get(0);
    cluster()
        .workers
        .iter()
        .position(|w| i32::from(*w) == port)
        .unwrap_or_else(|| panic!("{schema}'s shards are on port {port}, not on a worker"))
}

fn job(queue: &str) -> Job {
    let mut job = Job::default();
    job.queue = queue.into();
    job.payload = b"p".to_vec();
    job.priority = 0;
    job.run_at = NOW - 10;
    job.expires_at = None;
    job.enqueued_at = NOW - 20;
    job.opts.visibility_timeout_s = 30;
    job.opts.max_attempts = 3;
    job.opts.backoff_base_s = 1;
    job.opts.dead_letter_retention_s = 60;
    job
}

fn event(stream: &str, key: &str) -> StreamEvent {
    let mut event = StreamEvent::default();
    event.stream = stream.into();
    event.key = Some(key.into());
    event.payload = key.as_bytes().to_vec();
    event.created_at = NOW;
    event
}

async fn count(client: &Client, statement: &Statement) -> u64 {
    client
        .execute(statement.sql(), &statement.args())
        .await
        .unwrap_or_else(|e| panic!("{}: {}", statement.name(), describe_error(&e)))
}

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

/// Every row of every table of `schema`, as one digest per table (in table
/// order): what a move must keep.
async fn contents(client: &Client, schema: &SchemaName) -> Vec<(String, i64, String)> {
    let mut all = Vec::new();
    for table in [
        "consumed_events",
        "dead_jobs",
        "jobs",
        "locks",
        "schedules",
        "schema_versions",
        "stream_events",
        "stream_offsets",
    ] {
        let row = &rows(
            client,
            &format!(
                "SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') \
                 FROM \"{schema}\".{table} t"
            ),
        )
        .await[0];
        all.push((table.to_owned(), row.get(0), row.get(1)));
    }
    all
}

/// Calls `sql` on the coordinator and returns its error, if any.
async fn call(client: &Client, sql: &str) -> Result<(), String> {
    client
        .batch_execute(sql)
        .await
        .map_err(|e| describe_error(&e))
}

/// Resharding under schema sharding is moving the schema's shard group to
/// another node. The identity columns of `jobs`, `stream_events` and
/// `locks` do not stand in the way: `citus_schema_move` with
/// `shard_transfer_mode => 'block_writes'` moves a populated schema to the
/// other worker keeping every row, the hot paths are then one task on the
/// new node, ids and fences go on from where they were, and `check` still
/// passes; `citus_move_shard_placement` of one table moves the whole group
/// back. The default mode (`auto`) and `force_logical` need
/// `wal_level = logical`, which the harness (like a default server) does
/// not have, and say so. `citus_schema_undistribute` is what the identity
/// columns refuse, changing nothing.
#[test]
fn the_schema_moves_to_the_other_worker_with_every_row_and_undistribute_is_refused() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = harness::cli::runtime();
    let (schema, from) = rt.block_on(async {
        let (client, schema) = citus_schema("citus_move").await;
        let mut last_id = 0;
        for _ in 0..20 {
            let row = &run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await[0];
            last_id = row.get::<_, i64>(0);
        }
        let claimed = run(&client, &jobs::claim(&schema, "mail", "w", NOW, 5)).await;
        assert_eq!(claimed.len(), 5);
        for i in 0..20 {
            run(
                &client,
                &streams::append(&schema, &event("s", &format!("k{i}"))),
            )
            .await;
        }
        run(
            &client,
            &locks::acquire_free(&schema, "ticker", "node-a", NOW + 30),
        )
        .await;
        let before = contents(&client, &schema).await;
        let from = shard_worker(&client, &schema).await;
        let to = 1 - from;
        let (from_port, to_port) = (cluster().workers[from], cluster().workers[to]);
        let literal = quote_literal(schema.as_str());
        assert_eq!(
            rows(&client, "SHOW wal_level").await[0].get::<_, String>(0),
            "replica"
        );
        for mode in ["", ", shard_transfer_mode => 'force_logical'"] {
            let err = call(
                &client,
                &format!("SELECT citus_schema_move({literal}, '127.0.0.1', {to_port}{mode})"),
            )
            .await
            .expect_err("a logical move without wal_level = logical");
            assert!(
                err.contains("logical decoding requires wal_level >= logical"),
                "{mode}: {err}"
            );
            assert_eq!(shard_worker(&client, &schema).await, from, "{mode}");
        }
        call(
            &client,
            &format!(
                "SELECT citus_schema_move({literal}, '127.0.0.1', {to_port}, \
                 shard_transfer_mode => 'block_writes')"
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("citus_schema_move with block_writes: {e}"));
        assert_eq!(shard_worker(&client, &schema).await, to);
        assert_eq!(
            contents(&client, &schema).await,
            before,
            "rows lost or changed"
        );

        // The hot paths: one task, on the new node.
        let claimed =
            Job::from_row(&run(&client, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
                .unwrap_or_else(|e| panic!("{e}"));
        // (A plan names the node of each task it could explain; the
        // row-moving CTEs' plans say `Could not get remote plan`.)
        let node = format!("Node: host=127.0.0.1 port={to_port} ");
        let mut named = Vec::new();
        for statement in hot_paths(&schema, &claimed) {
            let (counts, plan) = task_counts(&client, &statement).await;
            assert_eq!(counts, [1], "{}:\n{plan}", statement.name());
            let nodes: Vec<&str> = plan.lines().filter(|l| l.contains("Node: ")).collect();
            assert!(
                nodes.iter().all(|l| l.contains(&node)),
                "{} not on {to_port}:\n{plan}",
                statement.name()
            );
            if !nodes.is_empty() {
                named.push(statement.name());
            }
        }
        assert!(
            named.contains(&"claim") && named.contains(&"enqueue"),
            "{named:?}"
        );
        // Identity values are drawn on the coordinator: they go on, no
        // collision with the moved rows.
        let next: i64 = run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await[0].get(0);
        // (Not last_id + 1: Citus draws one for EXPLAIN of the enqueue above.)
        assert!(next > last_id, "id {next} after {last_id}");
        run(&client, &locks::clear_lapsed(&schema, "ticker", NOW + 31)).await;
        let taken = run(
            &client,
            &locks::acquire_free(&schema, "ticker", "node-b", NOW + 90),
        )
        .await;
        let fence = Lock::from_row(&taken[0])
            .unwrap_or_else(|e| panic!("{e}"))
            .fence;
        assert!(fence > 1, "fence {fence} after a move");

        // One table's placement moves the whole colocated group back, once
        // the moved-away copies are cleaned up.
        call(&client, "CALL citus_cleanup_orphaned_resources()")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let shard: i64 = rows(
            &client,
            &format!(
                "SELECT shardid FROM pg_dist_shard WHERE logicalrelid = {}::regclass",
                quote_literal(&format!("{schema}.jobs"))
            ),
        )
        .await[0]
            .get(0);
        call(
            &client,
            &format!(
                "SELECT citus_move_shard_placement({shard}, '127.0.0.1', {to_port}, \
                 '127.0.0.1', {from_port}, shard_transfer_mode => 'block_writes')"
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("citus_move_shard_placement: {e}"));
        assert_eq!(shard_worker(&client, &schema).await, from);
        (schema, from)
    });
    let checked = harness::cli::run(&[
        "check",
        "--layout",
        "citus",
        "--database-url",
        &cluster().coordinator_url(),
        "--schema",
        schema.as_str(),
    ]);
    assert_eq!(
        checked.code,
        ExitCode::SUCCESS,
        "{}{}",
        checked.stdout,
        checked.stderr
    );

    // Undistributing is what the identity columns refuse; nothing changes.
    rt.block_on(async {
        let client = cluster().connect_coordinator().await;
        let before = contents(&client, &schema).await;
        let err = call(
            &client,
            &format!(
                "SELECT citus_schema_undistribute({})",
                quote_literal(schema.as_str())
            ),
        )
        .await
        .expect_err("undistributing a schema with identity columns");
        assert!(
            err.contains("cannot complete operation on a table with identity column"),
            "{err}"
        );
        assert_eq!(shard_worker(&client, &schema).await, from);
        assert_eq!(contents(&client, &schema).await, before);
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

/// Every hot-path statement for the Citus layout, with values that find
/// rows.
fn hot_paths(schema: &SchemaName, claimed: &Job) -> Vec<Statement> {
    let worker = claimed.worker_id.as_deref().unwrap_or("w");
    vec![
        jobs::enqueue(schema, &job("mail"), NOW),
        jobs::promote(schema, "mail", NOW, 10),
        jobs::claim(schema, "mail", "w", NOW, 10),
        jobs::ack(schema, claimed.id, worker, claimed.attempts),
        jobs::ack_many(schema, worker, &[(claimed.id, claimed.attempts)]),
        jobs::retry(
            schema,
            claimed.id,
            worker,
            claimed.attempts,
            NOW + 5,
            Some("e"),
            NOW,
        ),
        jobs::kill(schema, claimed.id, worker, claimed.attempts, Some("e"), NOW),
        streams::append(schema, &event("s", "k")),
        streams::read(schema, "s", 0, 10),
        streams::read_in_commit_order_below(schema, "s", 0, 10, 1_000_000),
        streams::checkpoint(schema, &ConsumerOffset::new("s", "c", 1)),
        streams::read_checkpoint(schema, "s", "c"),
        consumed_events::claim(schema, &ConsumedEvent::new("c", "e1", NOW)),
        locks::clear_lapsed(schema, "ticker", NOW),
        locks::acquire_free(schema, "ticker", "node-a", NOW + 30),
        locks::renew(schema, "ticker", "node-a", 1, NOW + 60, NOW),
        locks::release(schema, "ticker", "node-a", 1),
    ]
}

#[tokio::test]
async fn every_hot_path_is_one_task_on_the_schemas_node() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_routes").await;
    run(&client, &jobs::enqueue(&schema, &job("mail"), NOW)).await;
    let claimed = Job::from_row(&run(&client, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
        .unwrap_or_else(|e| panic!("{e}"));
    run(&client, &streams::append(&schema, &event("s", "k"))).await;
    for statement in hot_paths(&schema, &claimed) {
        let (counts, plan) = task_counts(&client, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must be one task:\n{plan}",
            statement.name()
        );
        assert!(
            plan.contains("Custom Scan (Citus Adaptive)")
                || plan.contains("Custom Scan (Citus Router)"),
            "{}: not planned by Citus:\n{plan}",
            statement.name()
        );
    }
    // The batch enqueue is an INSERT ... SELECT from its arrays, which
    // Citus runs by pulling the rows to the coordinator and copying them to
    // the schema's one shard: not one task, still one node, and it works.
    let batch = jobs::enqueue_many(&schema, &[job("mail"), job("mail")], NOW);
    let (counts, plan) = task_counts(&client, &batch).await;
    assert!(
        counts.is_empty() && plan.contains("INSERT/SELECT method: pull to coordinator"),
        "enqueue_many:\n{plan}"
    );
    assert_eq!(run(&client, &batch).await.len(), 2, "enqueue_many");
    // The horizon reads no table: it runs on the coordinator, no task.
    let (counts, plan) = task_counts(&client, &streams::commit_horizon(&schema)).await;
    assert!(counts.is_empty() && !plan.contains("Citus"), "{plan}");
    // The maintenance statements, which name no queue or stream: under
    // schema sharding they too are one task (every row of the schema is
    // on its node).
    for statement in [
        jobs::reap(&schema, NOW, 10),
        jobs::reap_exhausted(&schema, NOW, 10),
        jobs::expire(&schema, NOW, 10),
        dead_jobs::sweep(&schema, NOW, 10),
        locks::sweep(&schema, NOW, 10),
        schedules::due(&schema, NOW, 10),
    ] {
        let (counts, plan) = task_counts(&client, &statement).await;
        assert_eq!(
            counts,
            [1],
            "{} must be one task:\n{plan}",
            statement.name()
        );
    }
    // And every statement the engine runs on this layout, as `schema-gen
    // statements --layout citus` lists it: none is left out.
    for statement in all_for(&schema, Layout::CitusSchemaSharding) {
        let (counts, plan) = task_counts(&client, &statement).await;
        match statement.name() {
            "enqueue_many" => assert!(counts.is_empty(), "{plan}"),
            "commit_horizon" | "wake" => assert!(counts.is_empty(), "{plan}"),
            name => assert_eq!(counts, [1], "{name} must be one task:\n{plan}"),
        }
    }
}

#[tokio::test]
async fn the_maintenance_statements_do_their_work_on_the_cluster() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_maint").await;
    // One job of each kind: a claim that lapsed with attempts left, one that
    // lapsed on its last attempt, one that expired.
    let mut one_attempt = job("last");
    one_attempt.opts.max_attempts = 1;
    let expiring = {
        let mut job = job("exp");
        job.expires_at = Some(NOW - 1);
        job
    };
    for (queue, job) in [("q", job("q")), ("last", one_attempt), ("exp", expiring)] {
        run(&client, &jobs::enqueue(&schema, &job, NOW)).await;
        if queue != "exp" {
            assert_eq!(
                run(&client, &jobs::claim(&schema, queue, "w", NOW, 1))
                    .await
                    .len(),
                1
            );
        }
    }
    let later = NOW + 31;
    assert_eq!(
        count(&client, &jobs::reap(&schema, later, 10)).await,
        1,
        "reap"
    );
    assert_eq!(
        count(&client, &jobs::reap_exhausted(&schema, later, 10)).await,
        1,
        "reap_exhausted"
    );
    assert_eq!(
        count(&client, &jobs::expire(&schema, later, 10)).await,
        1,
        "expire"
    );
    let dead = rows(
        &client,
        &format!("SELECT count(*) FROM \"{schema}\".dead_jobs"),
    )
    .await;
    assert_eq!(dead[0].get::<_, i64>(0), 2, "two jobs moved to dead_jobs");
    // Their retention (60 s) lapses.
    assert_eq!(
        count(&client, &dead_jobs::sweep(&schema, later + 61, 10)).await,
        2,
        "dead-letter sweep"
    );
    // A lock that lapsed.
    assert!(
        run(&client, &locks::acquire_free(&schema, "l", "o", NOW + 1))
            .await
            .len()
            == 1
    );
    assert_eq!(
        count(&client, &locks::sweep(&schema, NOW + 2, 10)).await,
        1,
        "lock sweep"
    );
    // A due schedule, locked for the tick's transaction.
    let schedule = {
        let mut schedule = Schedule::default();
        schedule.name = "tick".into();
        schedule.spec = "@every 60s".into();
        schedule.every_s = 60;
        schedule.queue = "q".into();
        schedule.payload = b"t".to_vec();
        schedule.opts.priority = 0;
        schedule.opts.max_attempts = 1;
        schedule.opts.visibility_timeout_s = 30;
        schedule.opts.backoff_base_s = 1;
        schedule.opts.dead_letter_retention_s = 60;
        schedule.opts.expires_s = None;
        schedule.next_fire_at = NOW;
        schedule.last_fired_at = None;
        schedule.enabled = true;
        schedule
    };
    run(&client, &schedules::register(&schema, &schedule)).await;
    exec(&client, "BEGIN").await;
    assert_eq!(
        run(&client, &schedules::due(&schema, NOW, 10)).await.len(),
        1,
        "due"
    );
    exec(&client, "COMMIT").await;
}

/// Makes `ahead`'s transaction counter at least `by` ids past `behind`'s,
/// by committing empty transactions that draw an id.
async fn counter_ahead(ahead: &Client, behind: &Client, by: i64) {
    let next = async |client: &Client| -> i64 {
        rows(client, "SELECT pg_current_xact_id()::text::bigint").await[0].get(0)
    };
    let gap = next(behind).await + by - next(ahead).await;
    if gap > 0 {
        exec(
            ahead,
            &format!("DO $$ BEGIN FOR i IN 1..{gap} LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$"),
        )
        .await;
    }
}

/// The gap-free read on the Citus layout, as an engine runs it: the
/// horizon from the coordinator, then the read below it.
async fn read_in_commit_order(session: &Session<Client>, stream: &str, offset: i64) -> Vec<i64> {
    let horizon = session
        .run(&streams::CommitHorizon)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    session
        .run(&streams::ReadInCommitOrderBelow {
            stream,
            offset,
            limit: 100,
            horizon,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|e| e.id)
        .collect()
}

/// The single-server reader on the cluster, for contrast.
async fn single_server_read(client: &Client, schema: &SchemaName, stream: &str) -> Vec<i64> {
    run(
        client,
        &streams::read_in_commit_order(schema, stream, 0, 100),
    )
    .await
    .iter()
    .map(|row| {
        StreamEvent::from_row(row)
            .unwrap_or_else(|e| panic!("{e}"))
            .id
    })
    .collect()
}

/// Interleaving: an append stays open while a later one commits. The
/// reader must deliver neither until the first commits, then both, in
/// commit order of their transactions (the first one's first), and never
/// skip the first once it has checkpointed.
async fn open_append_then_later_append(schema: &SchemaName, stream: &str, worker_ahead: bool) {
    let cluster = cluster();
    let reader = Session::with_layout(
        cluster.connect_coordinator().await,
        schema.clone(),
        Layout::CitusSchemaSharding,
    );
    let first = cluster.connect_coordinator().await;
    let second = cluster.connect_coordinator().await;
    let contrast = cluster.connect_coordinator().await;

    exec(&first, "BEGIN").await;
    let early: i64 = run(&first, &streams::append(schema, &event(stream, "early"))).await[0].get(0);
    let late: i64 = run(&second, &streams::append(schema, &event(stream, "late"))).await[0].get(0);
    assert!(early < late);
    let while_open = read_in_commit_order(&reader, stream, 0).await;
    assert_eq!(
        while_open,
        Vec::<i64>::new(),
        "delivered while an earlier append was open"
    );
    if worker_ahead {
        // The single-server reader compares the coordinator's tx_id with
        // the worker's horizon: it delivers the later event now, and would
        // never deliver the earlier one after that checkpoint.
        assert_eq!(single_server_read(&contrast, schema, stream).await, [late]);
    }
    exec(&first, "COMMIT").await;
    let both = until_horizon_passes(
        async || read_in_commit_order(&reader, stream, 0).await,
        |ids| ids.len() == 2,
    )
    .await;
    assert_eq!(
        both,
        [early, late],
        "commit order of the appending transactions"
    );
    assert_eq!(
        read_in_commit_order(&reader, stream, late).await,
        Vec::<i64>::new()
    );
    if !worker_ahead {
        // The coordinator is ahead: the worker's horizon stays below every
        // tx_id, so the single-server reader delivers nothing at all.
        assert_eq!(
            single_server_read(&contrast, schema, stream).await,
            Vec::<i64>::new()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_order_reads_never_skip_or_stall_with_the_counters_either_way_round() {
    if harness::skip_db_tests() {
        return;
    }
    let (coordinator, schema) = citus_schema("citus_order").await;
    let worker = cluster()
        .connect_worker(shard_worker(&coordinator, &schema).await)
        .await;
    counter_ahead(&worker, &coordinator, 2_000).await;
    open_append_then_later_append(&schema, "worker_ahead", true).await;
    counter_ahead(&coordinator, &worker, 2_000).await;
    open_append_then_later_append(&schema, "coordinator_ahead", false).await;
}

#[tokio::test]
async fn fences_only_grow_per_name_and_the_single_server_acquire_is_refused() {
    if harness::skip_db_tests() {
        return;
    }
    let (client, schema) = citus_schema("citus_fence").await;
    // Why the two-statement acquire: Citus refuses the single-server one.
    let refused = client
        .query(
            locks::acquire(&schema, "x", "o", NOW + 30, NOW).sql(),
            &locks::acquire(&schema, "x", "o", NOW + 30, NOW).args(),
        )
        .await
        .expect_err("Citus refuses fence = DEFAULT in DO UPDATE SET");
    assert!(
        describe_error(&refused).contains("must be marked IMMUTABLE"),
        "{}",
        describe_error(&refused)
    );

    // A Citus session prepares its layout's statements: the two-statement
    // acquire, never the refused one.
    let session = Session::with_layout(client, schema.clone(), Layout::CitusSchemaSharding);
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let texts = |layout| -> BTreeSet<String> {
        all_for(&schema, layout)
            .iter()
            .map(|s| s.sql().to_owned())
            .collect()
    };
    let every_layout: BTreeSet<String> = Layout::ALL.into_iter().flat_map(texts).collect();
    let prepared: BTreeSet<String> = session
        .client()
        .query("SELECT statement FROM pg_prepared_statements", &[])
        .await
        .unwrap_or_else(|e| panic!("{}", describe_error(&e)))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .filter(|sql| every_layout.contains(sql))
        .collect();
    assert_eq!(
        prepared,
        texts(Layout::CitusSchemaSharding),
        "prepare_all on a Citus session"
    );
    assert!(!prepared.contains(locks::acquire(&schema, "x", "o", 0, 0).sql()));
    let acquire = async |owner: &str, now: i64| -> Option<Lock> {
        let (_, lock) = session
            .run_pipelined(
                &locks::ClearLapsed {
                    name: "ticker",
                    now,
                },
                &locks::AcquireFree {
                    name: "ticker",
                    owner,
                    expires_at: now + 10,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        lock
    };
    let first = acquire("a", NOW)
        .await
        .unwrap_or_else(|| panic!("a free lock is taken"));
    assert_eq!(acquire("b", NOW + 5).await, None, "held");
    assert_eq!(acquire("a", NOW + 5).await, None, "held, by the owner too");
    // Lapsed: taken over with a higher fence; the old holder cannot renew.
    let second = acquire("b", NOW + 10)
        .await
        .unwrap_or_else(|| panic!("a lapsed lock is taken"));
    assert!(second.fence > first.fence, "{second:?} after {first:?}");
    let renewed = session
        .run(&locks::Renew {
            name: "ticker",
            owner: "a",
            fence: first.fence,
            expires_at: NOW + 30,
            now: NOW + 11,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(renewed, None, "the stale holder renewed");
    // Released, taken again: higher still.
    let released = session
        .run(&locks::Release {
            name: "ticker",
            owner: "b",
            fence: second.fence,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(released.map(|l| l.fence), Some(second.fence));
    let third = acquire("a", NOW + 12)
        .await
        .unwrap_or_else(|| panic!("a released lock is taken"));
    assert!(third.fence > second.fence, "{third:?} after {second:?}");
    // Fences come from the coordinator's sequence, not a worker's
    // (which starts at 2^48 + 1).
    assert!(third.fence < 1 << 48, "{third:?}");
}

/// What Citus sends to the worker for each statement, seen through
/// `citus.log_remote_commands`: the row-moving statements (a CTE over two
/// shards of the schema's node) are committed in two phases, every other
/// write in one. A two-phase commit ends on the worker after the
/// coordinator's own commit, which is why the README keeps appends out of
/// such transactions (the gap-free reader's horizon could pass first).
#[tokio::test]
async fn the_row_moving_statements_commit_in_two_phases_and_an_append_in_one() {
    if harness::skip_db_tests() {
        return;
    }
    let (setup, schema) = citus_schema("citus_2pc").await;
    run(&setup, &jobs::enqueue(&schema, &job("mail"), NOW)).await;
    let claimed = Job::from_row(&run(&setup, &jobs::claim(&schema, "mail", "w", NOW, 1)).await[0])
        .unwrap_or_else(|e| panic!("{e}"));
    let (client, notices) =
        harness::pg::connect_url_with_notices(&cluster().coordinator_url()).await;
    exec(&client, "SET citus.log_remote_commands = on").await;
    let two_phase = async |statement: &Statement| -> bool {
        notices.take();
        count(&client, statement).await;
        let sent: Vec<String> = notices
            .take()
            .into_iter()
            .map(|n| n.message().to_owned())
            .collect();
        assert!(
            sent.iter().any(|m| m.starts_with("issuing ")),
            "{}: nothing logged, the test proves nothing: {sent:?}",
            statement.name()
        );
        sent.iter().any(|m| m.contains("PREPARE TRANSACTION"))
    };
    for statement in [
        jobs::kill(&schema, claimed.id, "w", claimed.attempts, Some("e"), NOW),
        jobs::reap_exhausted(&schema, NOW, 10),
        jobs::expire(&schema, NOW, 10),
    ] {
        assert!(
            two_phase(&statement).await,
            "{} in one phase",
            statement.name()
        );
    }
    for statement in [
        streams::append(&schema, &event("s", "k")),
        jobs::enqueue(&schema, &job("mail"), NOW),
        jobs::claim(&schema, "mail", "w", NOW, 1),
        locks::acquire_free(&schema, "l", "o", NOW + 10),
        jobs::reap(&schema, NOW, 10),
    ] {
        assert!(
            !two_phase(&statement).await,
            "{} in two phases",
            statement.name()
        );
    }
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
