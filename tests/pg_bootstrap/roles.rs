//! Privileges and co-tenancy: a least-privilege role, a role without
//! `CREATE`, and the schemas of other tenants left untouched.

use harness::exec;
use schema_gen::render::{self};
use schema_gen::statements;
use schema_gen::{ErrorKind, Outcome, bootstrap, verify};
use schema_model::SchemaName;
use tokio_postgres::error::SqlState;

use super::{bootstrapped, consumer_dump, event, model_tables};

#[tokio::test]
async fn a_least_privilege_role_bootstraps_at_steady_state() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = harness::unique_schema_name("least");
    let role = harness::unique_name("runtime");

    // The DBA applies the printed script, then grants USAGE and DML only.
    let out = harness::psql()
        .args(["-c", &render::script(&schema)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exec(
        &admin,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role};"
        ),
    )
    .await;

    let mut runtime = harness::connect_url(&harness::url_for_role(&role)).await;
    let can: (bool, bool) = {
        let row = runtime
            .query_one(
                "SELECT has_database_privilege(current_database(), 'CREATE'),
                        has_schema_privilege($1, 'CREATE')",
                &[&schema.as_str()],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(can, (false, false), "the role must not be able to create");

    let outcome = bootstrap(&mut runtime, &schema).await.unwrap();
    assert!(!outcome.created(), "{outcome}");
    // Nothing differs; the role may not read the identity sequences, so
    // the promises about them are noted as not checked (documentation).
    let differences = verify(&runtime, &schema).await.unwrap();
    assert!(
        differences
            .iter()
            .all(|d| matches!(d, schema_gen::Difference::NumberUnverified { .. })),
        "{differences:?}"
    );

    // It can do the engine's work...
    exec(
        &runtime,
        &format!(
            "INSERT INTO {schema}.stream_events (stream, payload, created_at)
             VALUES ('s', '\\x00', 0)"
        ),
    )
    .await;
    // ...and could not have run the idempotent script (so this test can fail).
    let err = runtime
        .batch_execute(&render::script(&schema))
        .await
        .expect_err("the script needs CREATE and ownership");
    assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{err}");

    drop(runtime);
    exec(
        &admin,
        &format!("DROP SCHEMA {schema} CASCADE; DROP ROLE {role};"),
    )
    .await;
}

#[tokio::test]
async fn a_role_without_create_gets_an_error_that_names_the_missing_privilege() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("noprivdb");
    let role = harness::unique_name("nocreate");
    let db_admin = harness::connect_url(&harness::create_database(&db).await).await;
    exec(&db_admin, &format!("CREATE ROLE {role} LOGIN")).await;
    let mut client = harness::connect_url(&harness::url_for(&role, None, Some(&db))).await;
    let schema = harness::unique_schema_name("denied");

    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    match err.kind() {
        ErrorKind::Privilege {
            role: named,
            privilege,
            ..
        } => {
            assert_eq!(named, &role);
            assert_eq!(privilege, &format!("CREATE on database {db}"));
        }
        other => panic!("expected a privilege error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("role {role} lacks CREATE on database {db}")),
        "{text}"
    );
    assert!(text.contains("schema-gen sql --schema"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(
        harness::dump::dump_schema(&db_admin, schema.as_str()).await,
        format!("schema {schema}: does not exist\n")
    );

    // The schema exists (a DBA made it) but the role may not create in it.
    exec(
        &db_admin,
        &format!("CREATE SCHEMA {schema}; GRANT USAGE ON SCHEMA {schema} TO {role};"),
    )
    .await;
    let err = bootstrap(&mut client, &schema).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("role {role} lacks CREATE on schema {schema}")),
        "{err}"
    );
    assert_eq!(
        harness::dump::dump_schema(&db_admin, schema.as_str()).await,
        format!("schema {schema} -- (no comment)\n"),
        "a refused bootstrap left something behind"
    );
}

#[tokio::test]
async fn bootstrap_creates_missing_tables_of_an_existing_schema_and_touches_nothing_else() {
    if harness::skip_db_tests() {
        return;
    }
    let (mut client, schema) = bootstrapped("partial").await;
    exec(
        &client,
        &format!(
            "DROP TABLE {schema}.locks, {schema}.consumed_events;
             INSERT INTO {schema}.stream_events (stream, payload, created_at) VALUES ('s', '\\x00', 0);"
        ),
    )
    .await;
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Created {
            schema: schema.clone(),
            schema_created: false,
            tables_created: vec!["locks".into(), "consumed_events".into()],
            statements_run:
                render::bootstrap_statements(&schema)
                    .iter()
                    .filter(|s| s.object.starts_with("locks")
                        || s.object.starts_with("consumed_events"))
                    .count(),
            foreign: vec![],
        }
    );
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
    let events: i64 = client
        .query_one(&format!("SELECT count(*) FROM {schema}.stream_events"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(events, 1);

    // A schema a DBA created empty (owned by the bootstrapping role) is filled in.
    let empty = harness::unique_schema_name("prepared");
    exec(&client, &format!("CREATE SCHEMA {empty}")).await;
    match bootstrap(&mut client, &empty).await.unwrap() {
        Outcome::Created {
            schema_created,
            tables_created,
            ..
        } => {
            assert!(!schema_created);
            assert_eq!(tables_created, model_tables());
        }
        other => panic!("{other:?}"),
    }
    // Its comment was the DBA's (none) and stays so: reported, not rewritten.
    let differences: Vec<String> = verify(&client, &empty)
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        differences,
        [format!(
            "comment on schema {empty}: missing, model says {:?}",
            render::SCHEMA_DOC
        )]
    );
}

#[tokio::test]
async fn co_tenants_are_untouched_and_two_engine_schemas_stay_apart() {
    if harness::skip_db_tests() {
        return;
    }
    let db = harness::unique_name("cotenant");
    let url = harness::create_database(&db).await;
    let mut client = harness::connect_url(&url).await;
    exec(
        &client,
        "CREATE TABLE public.jobs (id int PRIMARY KEY, note text NOT NULL);
         INSERT INTO public.jobs VALUES (1, 'consumer row');
         CREATE TABLE public.locks (name text);
         CREATE SCHEMA analytics;
         CREATE TABLE analytics.jobs (run_id bigint, status text);
         CREATE INDEX jobs_claim_idx ON analytics.jobs (status);
         INSERT INTO analytics.jobs VALUES (7, 'ok');
         CREATE TABLE analytics.events (at bigint);",
    )
    .await;
    let before = consumer_dump(&client).await;

    let one = harness::unique_schema_name("tenant_one");
    let two = harness::unique_schema_name("tenant_two");
    assert!(bootstrap(&mut client, &one).await.unwrap().created());
    assert!(bootstrap(&mut client, &two).await.unwrap().created());
    assert_eq!(verify(&client, &one).await.unwrap(), vec![]);
    assert_eq!(verify(&client, &two).await.unwrap(), vec![]);

    // Pointed at the consumer's schema, bootstrap refuses and changes nothing.
    let analytics = SchemaName::new("analytics").unwrap();
    let err = bootstrap(&mut client, &analytics).await.unwrap_err();
    let listed: Vec<String> = err.differences().iter().map(ToString::to_string).collect();
    assert!(
        listed.contains(&"missing column jobs.id".to_owned()),
        "{listed:?}"
    );
    // The consumer's other table is foreign: not in the way, so not listed.
    assert!(
        err.differences().iter().all(|d| !d.is_foreign()),
        "{listed:?}"
    );
    assert_eq!(consumer_dump(&client).await, before);

    // The two engine schemas share nothing: rows and offsets are their own.
    let append = |schema: &SchemaName| statements::streams::append(schema, &event(b"\x00"));
    let (in_one, in_two) = (append(&one), append(&two));
    let a: i64 = client
        .query_one(in_one.sql(), &in_one.args())
        .await
        .unwrap()
        .get(0);
    let b: i64 = client
        .query_one(in_one.sql(), &in_one.args())
        .await
        .unwrap()
        .get(0);
    let c: i64 = client
        .query_one(in_two.sql(), &in_two.args())
        .await
        .unwrap()
        .get(0);
    assert_eq!((a, b, c), (1, 2, 1));
    let in_two: i64 = client
        .query_one(&format!("SELECT count(*) FROM {two}.stream_events"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_two, 1);
    assert_ne!(
        render::advisory_lock_key(&one),
        render::advisory_lock_key(&two)
    );
}
