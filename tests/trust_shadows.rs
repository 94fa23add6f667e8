//! Issue 22, item 1: for every function, operator, aggregate and type the
//! product's SQL resolves (derived from the server's own parse of that SQL,
//! never a hand-written list), a shadow in `public` and in a schema earlier
//! on the path logs `current_user` when called; `check`, `apply`,
//! `upgrade`, `bootstrap`, the grants audit and every hot-path statement
//! run as a superuser and as a non-superuser with `CREATE` on `public`,
//! under the default path and under hostile ones, and the log stays empty.
//! Controls prove the shadows would be called: the catalog read without
//! its pinned path, and the statements with their qualifications removed.
//!
//! `cargo test -p alkstore-schema-tests --test trust_shadows -- --nocapture`
//! prints the derived list and how each object is pinned.

use std::collections::BTreeMap;
use std::process::ExitCode;

use harness::cli::{run as cli, runtime};
use harness::exec;
use harness::shadow::{self, Resolved};
use schema_gen::catalog;
use schema_gen::error::LockTarget;
use schema_gen::grants::audit::{Roles, question};
use schema_gen::statements::{Statement, maintenance, registry};
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_gen::versions::sql::batch_statement;
use schema_gen::{Outcome, bootstrap};
use schema_model::history::{MODEL_VERSION, versions};
use schema_model::{Layout, SchemaName};
use tokio_postgres::Client;

/// The paths the product is run under: the default, `public` ahead of
/// `pg_catalog`, and a schema of the attacker's ahead of both.
fn paths(early: &str) -> [Option<String>; 3] {
    [
        None,
        Some("public,pg_catalog".to_owned()),
        Some(format!("{early},public,pg_catalog")),
    ]
}

/// `url` with the session's search path set at login (as a role or
/// database setting, or `options` in the URL, would).
fn with_path(url: &str, path: &Option<String>) -> String {
    match path {
        None => url.to_owned(),
        Some(path) => format!("{url} options='-csearch_path={path}'"),
    }
}

/// Every statement the engines of either layout run, by name.
fn all_statements(schema: &SchemaName) -> BTreeMap<&'static str, Statement> {
    let mut out = BTreeMap::new();
    for layout in [Layout::SingleServer, Layout::CitusSchemaSharding] {
        for entry in registry(layout) {
            out.entry(entry.name())
                .or_insert_with(|| entry.statement(schema));
        }
    }
    out
}

/// The qualified types of a statement's placeholders (a function's
/// signature under a hostile path must not name a shadowed type).
fn param_types(statement: &Statement) -> Vec<String> {
    statement
        .param_types()
        .iter()
        .map(|t| format!("pg_catalog.{}", t.name()))
        .collect()
}

/// The SQL the product runs on its own pinned sessions, other than the
/// hot-path statements: the catalog read and the questions asked with it,
/// the version records, the bootstrap lock, the upgrades' backfills.
fn pinned_sql(schema: &SchemaName, role: &str) -> Vec<(String, String, Vec<String>, &'static str)> {
    let mut out = vec![
        (
            "catalog".to_owned(),
            catalog::statement(schema),
            vec![],
            "text",
        ),
        (
            "grants_audit".to_owned(),
            question(
                schema,
                &Roles {
                    runtime: role.to_owned(),
                    maintenance: None,
                },
            ),
            vec![],
            "text",
        ),
        (
            "live_sessions".to_owned(),
            catalog::sessions_statement(),
            vec![],
            "text",
        ),
        (
            "bootstrap_lock".to_owned(),
            schema_gen::render::advisory_lock_statement(schema),
            vec![],
            "void",
        ),
        (
            "record_created".to_owned(),
            schema_gen::render::record::created(schema),
            vec![],
            "void",
        ),
        (
            "record_started".to_owned(),
            schema_gen::render::record::started(schema, MODEL_VERSION + 1, "x"),
            vec![],
            "void",
        ),
        (
            "record_expanded".to_owned(),
            schema_gen::render::record::expanded(schema, MODEL_VERSION),
            vec![],
            "void",
        ),
    ];
    for target in [
        LockTarget::SchemaRelations {
            schema: schema.clone(),
        },
        LockTarget::Advisory {
            schema: schema.clone(),
            key: 1,
        },
    ] {
        out.push((
            "lock_holders".to_owned(),
            catalog::holders_statement(&target),
            vec![],
            "text",
        ));
    }
    for version in versions() {
        let hints = &version.hints;
        for backfill in hints.backfills.iter().chain(&hints.contract_backfills) {
            let batch = batch_statement(schema, backfill);
            out.push((
                format!("backfill_v{}", version.number),
                batch.sql.clone(),
                vec!["pg_catalog.int8".to_owned(); batch.placeholders],
                "void",
            ));
            out.push((
                format!("backfill_bounds_v{}", version.number),
                batch.bounds_sql(),
                vec![],
                "void",
            ));
        }
    }
    out
}

/// Removes every qualification the product writes: the statements as they
/// were before issue 22 (the control that the shadows would be called).
fn unqualified(sql: &str) -> String {
    let mut out = sql.to_owned();
    while let Some(at) = out.find("OPERATOR(pg_catalog.") {
        let end = out[at..].find(')').map_or(out.len(), |e| at + e);
        let operator = out[at + "OPERATOR(pg_catalog.".len()..end].to_owned();
        out.replace_range(at..=end, &operator);
    }
    out.replace("pg_catalog.", "")
}

/// What `client`'s session resolves in each statement, by name.
async fn resolve_statements(
    client: &Client,
    probe: &str,
    statements: &BTreeMap<&'static str, Statement>,
    prefix: &str,
    rewrite: fn(&str) -> String,
) -> BTreeMap<&'static str, Resolved> {
    let mut out = BTreeMap::new();
    for (name, statement) in statements {
        let resolved = shadow::resolved(
            client,
            probe,
            &format!("{prefix}_{name}"),
            &rewrite(statement.sql()),
            &param_types(statement),
            "void",
        )
        .await;
        out.insert(*name, resolved);
    }
    out
}

/// The OIDs of `resolved` outside `pg_catalog`.
async fn outside_pg_catalog(client: &Client, resolved: &Resolved) -> Vec<String> {
    shadow::describe(client, resolved)
        .await
        .into_iter()
        .filter(|(_, in_catalog)| !in_catalog)
        .map(|(object, _)| object.signature)
        .collect()
}

async fn connect(url: &str) -> Client {
    harness::connect_url(url).await
}

#[test]
fn no_function_operator_or_type_another_role_creates_runs_inside_the_product() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let database = harness::unique_name("shadows");
    let admin_url = rt.block_on(harness::create_database(&database));
    let attacker = harness::unique_name("attacker");
    let engine = harness::unique_name("engine");
    let early = harness::unique_schema("early");
    let log = harness::unique_schema("shadowlog");
    let engine_url = harness::url_for(&engine, None, Some(&database));
    let attacker_url = harness::url_for(&attacker, None, Some(&database));
    let roles = [
        ("superuser", admin_url.clone()),
        ("engine", engine_url.clone()),
    ];
    let family = |role: &str| SchemaName::new(&format!("{database}_{role}")).unwrap();
    let upgraded =
        |role: &str, n: usize| SchemaName::new(&format!("{database}_{role}_up{n}")).unwrap();
    let probe = |role: &str| format!("{database}_{role}_probe");

    // Before any shadow: the roles, each role's family (bootstrapped, with
    // rows), a version-1 schema per run to upgrade, a probe schema each.
    let (mut derived, sources) = rt.block_on(async {
        let admin = connect(&admin_url).await;
        exec(
            &admin,
            &format!(
                "GRANT CREATE ON SCHEMA public TO PUBLIC;
                 CREATE ROLE {attacker} LOGIN; CREATE ROLE {engine} LOGIN;
                 GRANT CREATE ON DATABASE {database} TO {attacker}, {engine};"
            ),
        )
        .await;
        for (role, url) in &roles {
            let mut client = connect(url).await;
            let schema = family(role);
            bootstrap(&mut client, &schema).await.unwrap();
            harness::shadow::seed(&client, &schema).await;
            for n in 0..3 {
                harness::history::create_version(&client, &upgraded(role, n), 1).await;
            }
            exec(&client, &format!("CREATE SCHEMA {}", probe(role))).await;
        }

        // What the SQL resolves, asked of the server.
        let schema = family("superuser");
        let mut derived: BTreeMap<String, Resolved> = BTreeMap::new();
        let mut sources: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let statements = all_statements(&schema);
        let resolved = resolve_statements(&admin, &probe("superuser"), &statements, "list", |s| {
            s.to_owned()
        })
        .await;
        for (name, r) in resolved {
            derived.insert(format!("statement {name}"), r);
        }
        for (i, (name, sql, params, returns)) in
            pinned_sql(&schema, &engine).into_iter().enumerate()
        {
            let r = shadow::resolved(
                &admin,
                &probe("superuser"),
                &format!("pinned_{i}"),
                &sql,
                &params,
                returns,
            )
            .await;
            derived.insert(format!("pinned {name}"), r);
        }
        // The DDL's stored expressions, and those an upgrade leaves.
        derived.insert(
            "ddl".to_owned(),
            shadow::resolved_by_tables(&admin, schema.as_str()).await,
        );
        let mut quiet = |_: &Progress| {};
        let mut client = connect(&admin_url).await;
        let up = SchemaName::new(&format!("{database}_listed")).unwrap();
        harness::history::create_version(&client, &up, 1).await;
        upgrade::upgrade(&mut client, &up, &UpgradeOptions::default(), &mut quiet)
            .await
            .unwrap();
        derived.insert(
            "ddl upgraded".to_owned(),
            shadow::resolved_by_tables(&admin, up.as_str()).await,
        );
        for (source, r) in &derived {
            for oid in r.functions.iter().chain(&r.operators).chain(&r.types) {
                sources.entry(*oid).or_default().push(source.clone());
            }
        }
        (derived, sources)
    });
    let mut all = Resolved::default();
    for r in derived.values() {
        all.extend(r);
    }

    // The list, and how each is pinned; all of it in pg_catalog.
    let listed = rt.block_on(async {
        let admin = connect(&admin_url).await;
        shadow::describe(&admin, &all).await
    });
    println!(
        "what the product's SQL resolves ({} objects):",
        listed.len()
    );
    for (object, in_catalog) in &listed {
        let used: Vec<&String> = sources
            .get(&object.oid)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let qualified = used.iter().any(|s| s.starts_with("statement "));
        let pinned = used.iter().any(|s| !s.starts_with("statement "));
        let how = match (qualified, pinned) {
            (true, true) => "qualified in the statements; pinned search path elsewhere",
            (true, false) => "qualified in the statements",
            _ => "pinned search path (catalog read, DDL, upgrade)",
        };
        println!("  {:9} {:55} {how}", object.kind, object.signature);
        assert!(
            in_catalog,
            "{} resolves outside pg_catalog",
            object.signature
        );
    }
    assert!(
        listed
            .iter()
            .any(|(o, _)| o.signature == "pg_catalog.unnest(anyarray)"),
        "the derivation must see the catalog read's and enqueue_many's unnest"
    );

    // The attacker's shadows, in public and in a schema of its own.
    let shadows = rt.block_on(async {
        let attacker_client = connect(&attacker_url).await;
        exec(&attacker_client, &format!("CREATE SCHEMA {early}")).await;
        shadow::create_log(&attacker_client, &log).await;
        shadow::create_shadows(&attacker_client, &log, &["public", &early], &all).await
    });
    println!("{} shadows created; not shadowed:", shadows.created.len());
    for (object, why) in &shadows.skipped {
        println!("  {object}: {why}");
        // A VARIADIC "any" function has no plpgsql twin; the product may
        // call it only where its session's path is pinned (no statement).
        let used = listed
            .iter()
            .find(|(o, _)| o.signature == format!("pg_catalog.{object}"))
            .and_then(|(o, _)| sources.get(&o.oid))
            .unwrap_or_else(|| panic!("{object} could not be shadowed: {why}"));
        assert!(
            why.starts_with("variadic") && !used.iter().any(|s| s.starts_with("statement ")),
            "{object} could not be shadowed ({why}) and is used by {used:?}"
        );
    }
    assert!(
        shadows
            .created
            .iter()
            .any(|s| s == "public.unnest(pg_catalog.text[])"),
        "{:?}",
        shadows.created
    );
    assert!(
        shadows.created.iter().any(|s| s.starts_with("public.=(")),
        "{:?}",
        shadows.created
    );

    // Controls: without the pinned path and without the qualifications,
    // the same SQL calls the shadows.
    let hostile = Some(format!("{early},public,pg_catalog"));
    rt.block_on(async {
        let exposed = connect(&with_path(&admin_url, &hostile)).await;
        let admin = connect(&admin_url).await;
        let schema = family("superuser");
        exposed
            .simple_query(&catalog::statement(&schema))
            .await
            .unwrap();
        let called = shadow::calls(&admin, &log).await;
        assert!(
            !called.is_empty(),
            "the unpinned catalog read called no shadow"
        );
        exec(&admin, &format!("TRUNCATE {log}.calls")).await;
        let statements = all_statements(&schema);
        for (name, statement) in &statements {
            if !statement.sql().contains("pg_catalog.") {
                continue;
            }
            // Refused (a name no longer resolves to one object) or resolved
            // to a shadow: either way not what the product means.
            let bare = shadow::try_resolved(
                &exposed,
                &probe("superuser"),
                &format!("bare_{name}"),
                &unqualified(statement.sql()),
                &param_types(statement),
                "void",
            )
            .await;
            if let Ok(resolved) = bare {
                let outside = outside_pg_catalog(&admin, &resolved).await;
                assert!(
                    !outside.is_empty(),
                    "{name} without its qualifications resolves nothing shadowed"
                );
            }
        }
    });

    // The product, as each role, under each path: nothing is called.
    for (role, url) in &roles {
        for (n, path) in paths(&early).iter().enumerate() {
            let url = with_path(url, path);
            let schema = family(role);
            let what = format!(
                "{role} under {}",
                path.as_deref().unwrap_or("the default path")
            );
            let checked = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
            assert_eq!(
                checked.code,
                ExitCode::SUCCESS,
                "{what}: {}{}",
                checked.stdout,
                checked.stderr
            );
            assert_eq!(
                checked.stdout,
                format!("schema {schema} matches the model (version {MODEL_VERSION})\n"),
                "{what}"
            );
            let audited = cli(&[
                "check",
                "--database-url",
                &url,
                "--schema",
                schema.as_str(),
                "--runtime-role",
                &engine,
            ]);
            assert!(audited.stderr.is_empty(), "{what}: {}", audited.stderr);
            let applied = cli(&["apply", "--database-url", &url, "--schema", schema.as_str()]);
            assert_eq!(
                applied.code,
                ExitCode::SUCCESS,
                "{what}: {}",
                applied.stderr
            );
            rt.block_on(async {
                let mut client = connect(&url).await;
                let outcome = bootstrap(&mut client, &schema).await.unwrap();
                assert!(
                    matches!(outcome, Outcome::AlreadyCurrent { .. }),
                    "{what}: {outcome}"
                );
                let mut quiet = |_: &Progress| {};
                let old = upgraded(role, n);
                upgrade::upgrade(&mut client, &old, &UpgradeOptions::default(), &mut quiet)
                    .await
                    .unwrap();
                upgrade::contract(&mut client, &old, &UpgradeOptions::default(), &mut quiet)
                    .await
                    .unwrap();
                // Every statement, as this session parses it: resolved in
                // pg_catalog only; then run on rows (rolled back).
                // The test's own questions go on a session with the default
                // path, where no shadow of an identical signature wins.
                let admin = connect(&admin_url).await;
                let statements = all_statements(&schema);
                let prefix = format!("run{n}");
                let resolved =
                    resolve_statements(&client, &probe(role), &statements, &prefix, |s| {
                        s.to_owned()
                    })
                    .await;
                for (name, r) in &resolved {
                    let outside = outside_pg_catalog(&admin, r).await;
                    assert!(outside.is_empty(), "{what}: {name} resolves {outside:?}");
                }
                for entry in registry(Layout::SingleServer)
                    .chain(registry(Layout::CitusSchemaSharding))
                    .chain(maintenance())
                {
                    harness::shadow::run_sample(&client, &entry.statement(&schema)).await;
                }
                let called = shadow::calls(&admin, &log).await;
                assert!(called.is_empty(), "{what}: shadows were called: {called:?}");
            });
        }
    }
    derived.clear();
}
