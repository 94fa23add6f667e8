//! Issue 22, item 6: `schema-gen grants` prints a script after which the
//! runtime role, a plain login role, opens the family and runs every
//! statement of the layout, and is refused everything else (DDL, writes to
//! `schema_versions`, `TRUNCATE`, the identity sequences); `check
//! --runtime-role` passes then, and names each gap a DBA leaves or makes
//! afterwards (a revoked grant, a published table without replica
//! identity) without changing anything.

use std::process::ExitCode;

use harness::cli::{Ran, run as cli, runtime};
use harness::exec;
use harness::fingerprint::fingerprint;
use schema_gen::statements::registry;
use schema_gen::{Outcome, bootstrap};
use schema_model::{Layout, SchemaName};

/// A database of its own with a non-superuser owner that applied the
/// family, and a runtime and a maintenance role that may only log in.
struct Setup {
    admin_url: String,
    owner_url: String,
    runtime_url: String,
    owner: String,
    runtime: String,
    maintenance: String,
    schema: SchemaName,
}

fn setup(prefix: &str) -> Setup {
    let rt = runtime();
    let database = harness::unique_name(prefix);
    let admin_url = rt.block_on(harness::create_database(&database));
    let owner = harness::unique_name("owner");
    let runtime = harness::unique_name("app");
    let maintenance = harness::unique_name("vacuum");
    rt.block_on(async {
        let admin = harness::connect_url(&admin_url).await;
        exec(
            &admin,
            &format!(
                "CREATE ROLE {owner} LOGIN; CREATE ROLE {runtime} LOGIN;
                 CREATE ROLE {maintenance} LOGIN;
                 GRANT CREATE ON DATABASE {database} TO {owner};"
            ),
        )
        .await;
    });
    let owner_url = harness::url_for(&owner, None, Some(&database));
    let schema = SchemaName::new("alk").unwrap();
    let applied = cli(&["apply", "--database-url", &owner_url, "--schema", "alk"]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    Setup {
        runtime_url: harness::url_for(&runtime, None, Some(&database)),
        admin_url,
        owner_url,
        owner,
        runtime,
        maintenance,
        schema,
    }
}

impl Setup {
    /// `schema-gen grants` for both roles, run by the owner with psql.
    fn grant(&self) -> String {
        let printed = cli(&[
            "grants",
            "--runtime-role",
            &self.runtime,
            "--maintenance-role",
            &self.maintenance,
            "--schema",
            self.schema.as_str(),
        ]);
        assert_eq!(printed.code, ExitCode::SUCCESS, "{}", printed.stderr);
        let ran = harness::psql_script(&self.owner_url, &printed.stdout);
        assert!(
            ran.status.success(),
            "{}{}",
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        );
        String::from_utf8_lossy(&ran.stderr).into_owned()
    }

    /// `check --runtime-role` (and `--maintenance-role`: the owner's name
    /// when `None`, the only role that may vacuum before PostgreSQL 17) by
    /// the owner; the family's fingerprint is the same afterwards.
    fn check(&self, maintenance: Option<&str>) -> Ran {
        let rt = runtime();
        let print = || {
            rt.block_on(async {
                let client = harness::connect_url(&self.admin_url).await;
                fingerprint(&client, self.schema.as_str()).await
            })
        };
        let before = print();
        let ran = cli(&[
            "check",
            "--database-url",
            &self.owner_url,
            "--schema",
            self.schema.as_str(),
            "--runtime-role",
            &self.runtime,
            "--maintenance-role",
            maintenance.unwrap_or(&self.owner),
        ]);
        println!("{}{}", ran.stdout, ran.stderr);
        assert_eq!(print(), before, "check changed the family");
        ran
    }
}

#[test]
fn after_the_grants_script_the_runtime_role_runs_every_statement_and_nothing_else() {
    if harness::skip_db_tests() {
        return;
    }
    let setup = setup("grants");
    // Before the script the role is a gap check names.
    let ungranted = setup.check(None);
    assert_eq!(ungranted.code, ExitCode::from(1), "{}", ungranted.stdout);
    assert!(
        ungranted.stdout.contains(&setup.runtime),
        "{}",
        ungranted.stdout
    );
    let warned = setup.grant();
    let checked = setup.check(None);
    assert_eq!(checked.code, ExitCode::SUCCESS, "{}", checked.stdout);
    // Running the script again changes nothing.
    setup.grant();
    let rt = runtime();
    let schema = &setup.schema;
    rt.block_on(async {
        let mut app = harness::connect_url(&setup.runtime_url).await;
        let opened = bootstrap(&mut app, schema).await.unwrap();
        assert!(matches!(opened, Outcome::AlreadyCurrent { .. }), "{opened}");
        harness::shadow::seed(&harness::connect_url(&setup.admin_url).await, schema).await;
        for entry in registry(Layout::SingleServer) {
            harness::shadow::run_sample(&app, &entry.statement(schema)).await;
        }
        let refused = [
            format!("CREATE TABLE {schema}.squat (x integer)"),
            format!("ALTER TABLE {schema}.jobs ADD COLUMN squat integer"),
            format!("DROP INDEX {schema}.jobs_claim_idx"),
            format!("CREATE INDEX ON {schema}.jobs (queue)"),
            format!("DROP TABLE {schema}.locks"),
            format!("TRUNCATE {schema}.jobs"),
            format!("INSERT INTO {schema}.schema_versions VALUES (99, 'x', 0, 0, NULL)"),
            format!("UPDATE {schema}.schema_versions SET release = 'x'"),
            format!("DELETE FROM {schema}.schema_versions"),
            format!("ALTER TABLE {schema}.locks ALTER COLUMN fence RESTART WITH 1"),
            format!("SELECT pg_catalog.setval('{schema}.locks_fence_seq', 1)"),
            format!("CREATE TRIGGER squat BEFORE INSERT ON {schema}.jobs FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()"),
        ];
        for sql in &refused {
            let err = app
                .batch_execute(sql)
                .await
                .expect_err(&format!("{} was allowed: {sql}", setup.runtime));
            assert_eq!(
                err.code(),
                Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
                "{sql}: {}",
                harness::describe_error(&err)
            );
        }
    });
    // PostgreSQL 15 has no MAINTAIN: the script says so rather than
    // granting ownership, and check names the maintenance role's gap.
    assert!(warned.contains("before 17"), "{warned}");
    let vacuum = setup.check(Some(&setup.maintenance));
    assert_eq!(vacuum.code, ExitCode::from(1), "{}", vacuum.stdout);
    let gap = format!("{} may not vacuum jobs", setup.maintenance);
    assert!(vacuum.stdout.contains(&gap), "{}", vacuum.stdout);
}

#[test]
fn check_names_a_revoked_grant_and_a_published_table_without_replica_identity() {
    if harness::skip_db_tests() {
        return;
    }
    let setup = setup("grantgaps");
    setup.grant();
    let rt = runtime();
    let schema = &setup.schema;
    rt.block_on(async {
        let owner = harness::connect_url(&setup.owner_url).await;
        exec(
            &owner,
            &format!("REVOKE UPDATE ON {schema}.jobs FROM {}", setup.runtime),
        )
        .await;
    });
    let revoked = setup.check(None);
    assert_eq!(revoked.code, ExitCode::from(1), "{}", revoked.stdout);
    for name in [&setup.runtime, "jobs", "UPDATE", "GRANT"] {
        assert!(revoked.stdout.contains(name), "{name}: {}", revoked.stdout);
    }
    setup.grant();
    rt.block_on(async {
        let admin = harness::connect_url(&setup.admin_url).await;
        exec(
            &admin,
            &format!(
                "ALTER TABLE {schema}.jobs REPLICA IDENTITY NOTHING;
                 CREATE PUBLICATION alk_jobs FOR TABLE {schema}.jobs;"
            ),
        )
        .await;
    });
    let published = setup.check(None);
    assert_eq!(published.code, ExitCode::from(1), "{}", published.stdout);
    for name in ["jobs", "alk_jobs", "REPLICA IDENTITY"] {
        assert!(
            published.stdout.contains(name),
            "{name}: {}",
            published.stdout
        );
    }
}
