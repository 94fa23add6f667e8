//! Issue 22, "no code of another role runs inside the product": a role with
//! `CREATE` on `public` (every database created before PostgreSQL 15 grants
//! it to everyone) shadows what the product's SQL calls, and neither a
//! superuser's `check` nor the engine's statements may run it.
//!
//! Each test works in a database of its own: the shadows live in `public`,
//! where they would reach every other test of the binary.

use std::process::ExitCode;

use harness::cli::{run as cli, runtime};
use harness::exec;
use schema_gen::statements::{Job, Session, jobs};

/// A database of its own, `public` open to every role as before
/// PostgreSQL 15, and a role `attacker` that may log in and nothing else.
struct Shared {
    url: String,
    database: String,
    attacker: String,
}

async fn shared_database(prefix: &str) -> Shared {
    let database = harness::unique_name(prefix);
    let url = harness::create_database(&database).await;
    let attacker = harness::unique_name("attacker");
    let admin = harness::connect_url(&url).await;
    exec(
        &admin,
        &format!(
            "GRANT CREATE ON SCHEMA public TO PUBLIC;
             CREATE ROLE {attacker} LOGIN;"
        ),
    )
    .await;
    Shared {
        url,
        database,
        attacker,
    }
}

/// The issue's reproduction: an exact-type `public.unnest(text[])`, which
/// PostgreSQL prefers to `pg_catalog.unnest(anyarray)` whatever the path
/// order, makes its owner superuser when a superuser calls it and rewrites
/// queue `mail` into `attacker` for anyone.
fn escalating_unnest(attacker: &str) -> String {
    format!(
        r#"CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $f$
        BEGIN
            IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
                EXECUTE 'ALTER ROLE {attacker} SUPERUSER';
            END IF;
            RETURN QUERY SELECT CASE WHEN x = 'mail' THEN 'attacker' ELSE x END
                         FROM pg_catalog.unnest($1) x;
        END $f$"#
    )
}

/// The family `schema` applied by a role of its own that may create in the
/// shared database (the engine's role): its URL.
fn applied_family(rt: &tokio::runtime::Runtime, shared: &Shared, schema: &str) -> String {
    let owner = harness::unique_name("engine");
    rt.block_on(async {
        let admin = harness::connect_url(&shared.url).await;
        exec(
            &admin,
            &format!(
                "CREATE ROLE {owner} LOGIN; GRANT CREATE ON DATABASE {} TO {owner};",
                shared.database
            ),
        )
        .await;
    });
    let engine_url = harness::url_for(&owner, None, Some(&shared.database));
    let applied = cli(&["apply", "--database-url", &engine_url, "--schema", schema]);
    assert_eq!(applied.code, ExitCode::SUCCESS, "{}", applied.stderr);
    engine_url
}

/// Runs `sql` as the attacker in the shared database.
fn as_attacker(rt: &tokio::runtime::Runtime, shared: &Shared, sql: &str) {
    rt.block_on(async {
        let attacker = harness::connect_url(&harness::url_for(
            &shared.attacker,
            None,
            Some(&shared.database),
        ))
        .await;
        exec(&attacker, sql).await;
    });
}

#[test]
fn a_shadowing_unnest_does_not_escalate_through_a_superusers_check() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let shared = rt.block_on(shared_database("escalation"));
    let schema = harness::unique_schema("trusted");
    applied_family(&rt, &shared, &schema);
    as_attacker(&rt, &shared, &escalating_unnest(&shared.attacker));

    // A DBA checks the family as superuser.
    let checked = cli(&["check", "--database-url", &shared.url, "--schema", &schema]);
    assert_eq!(
        checked.code,
        ExitCode::SUCCESS,
        "{}{}",
        checked.stdout,
        checked.stderr
    );
    let escalated: bool = rt.block_on(async {
        let admin = harness::connect_url(&shared.url).await;
        admin
            .query_one(
                "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1",
                &[&shared.attacker],
            )
            .await
            .unwrap()
            .get(0)
    });
    assert!(
        !escalated,
        "schema-gen check ran public.unnest(text[]) as superuser: {} is superuser now",
        shared.attacker
    );
}

#[test]
fn a_shadowing_unnest_does_not_rewrite_what_enqueue_many_stores() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let shared = rt.block_on(shared_database("rewrite"));
    let schema = harness::unique_schema_name("trusted");
    let engine_url = applied_family(&rt, &shared, schema.as_str());
    as_attacker(&rt, &shared, &escalating_unnest(&shared.attacker));

    // The engine enqueues a batch for queue `mail` with its default path.
    let stored: Vec<String> = rt.block_on(async {
        let client = harness::connect_url(&engine_url).await;
        let session = Session::new(client, schema.clone());
        let job = |payload: u8| {
            let mut job = Job::new("mail", vec![payload]);
            job.opts = harness::bench::queue_opts();
            job
        };
        let batch = [job(1), job(2)];
        session
            .run(&jobs::EnqueueMany {
                jobs: &batch,
                now: 1_700_000_000,
            })
            .await
            .unwrap();
        let client = session.into_client();
        client
            .query(&format!("SELECT queue FROM {schema}.jobs ORDER BY id"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    });
    assert_eq!(
        stored,
        ["mail", "mail"],
        "enqueue_many ran public.unnest(text[])"
    );
}
