//! Issue 22, items 2 to 5: what another role or a careless DBA does to a
//! family that the shape alone does not show makes `check` exit non-zero
//! naming it, and `check` changes nothing (a fingerprint of the family,
//! owners, index flags, sequence positions and version rows included, is
//! the same before and after). Item 1's "same verdict whatever the path" on
//! a tampered family: a `CHECK` rebuilt on a `public` operator and a
//! default rebound to a `public` function read the same under
//! `search_path = public, pg_catalog` (set in the URL) as under the default.

use std::process::ExitCode;

use harness::cli::{Ran, run as cli, runtime};
use harness::exec;
use harness::fingerprint::fingerprint;
use schema_gen::bootstrap;
use schema_model::SchemaName;
use schema_model::history::MODEL_VERSION;
use tokio::runtime::Runtime;

/// Exit codes of `check` (README: check's states).
const DRIFT: u8 = 1;
const NEWER: u8 = 6;
const CONTRACT_PENDING: u8 = 4;

/// A bootstrapped family in the test database, as the superuser: its name.
fn family(rt: &Runtime, prefix: &str) -> SchemaName {
    let schema = harness::unique_schema_name(prefix);
    rt.block_on(async {
        let mut client = harness::connect().await;
        bootstrap(&mut client, &schema).await.unwrap();
    });
    schema
}

fn run_sql(rt: &Runtime, url: &str, sql: &str) {
    rt.block_on(async {
        let client = harness::connect_url(url).await;
        exec(&client, sql).await;
    });
}

fn fingerprint_of(rt: &Runtime, url: &str, schema: &SchemaName) -> String {
    rt.block_on(async {
        let client = harness::connect_url(url).await;
        fingerprint(&client, schema.as_str()).await
    })
}

/// `check` of `schema` on `url` (plus `extra`), asserting that it exits
/// `code`, that its report contains every one of `names`, and that the
/// family's fingerprint is the same afterwards.
fn assert_check(url: &str, schema: &SchemaName, extra: &[&str], code: u8, names: &[&str]) -> Ran {
    let rt = runtime();
    let before = fingerprint_of(&rt, url, schema);
    let mut args = vec!["check", "--database-url", url, "--schema", schema.as_str()];
    args.extend(extra);
    let ran = cli(&args);
    let said = format!("{}{}", ran.stdout, ran.stderr);
    println!("check {schema} {extra:?}: exit {code}\n{said}");
    assert_eq!(ran.code, ExitCode::from(code), "{said}");
    for name in names {
        assert!(said.contains(name), "the report must name {name:?}: {said}");
    }
    assert_eq!(
        fingerprint_of(&rt, url, schema),
        before,
        "check changed the family"
    );
    ran
}

#[test]
fn a_forged_newer_version_row_is_never_a_match_and_what_this_release_relies_on_is_still_checked() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let schema = family(&rt, "forged");
    let newer = MODEL_VERSION + 1;
    run_sql(
        &rt,
        &url,
        &format!(
            "INSERT INTO {schema}.schema_versions VALUES ({newer}, 'x', \
             extract(epoch FROM now())::bigint, extract(epoch FROM now())::bigint, NULL)"
        ),
    );
    let ran = assert_check(&url, &schema, &[], NEWER, &[&format!("version {newer}")]);
    assert!(!ran.stdout.contains("matches"), "{}", ran.stdout);
    // The row plus what it hid: each named, drift wins.
    run_sql(
        &rt,
        &url,
        &format!(
            "DROP INDEX {schema}.jobs_claim_idx;
             ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_claimed_job_is_ready;
             ALTER TABLE {schema}.jobs ALTER COLUMN ready DROP NOT NULL;"
        ),
    );
    assert_check(
        &url,
        &schema,
        &[],
        DRIFT,
        &["jobs_claim_idx", "jobs_claimed_job_is_ready", "ready"],
    );
}

#[test]
fn version_rows_no_upgrade_wrote_are_refused_naming_the_rows() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let schema = family(&rt, "rows");
    run_sql(
        &rt,
        &url,
        &format!(
            "UPDATE {schema}.schema_versions SET expanded_at = NULL, contracted_at = started_at \
             WHERE version = {MODEL_VERSION}"
        ),
    );
    assert_check(
        &url,
        &schema,
        &[],
        DRIFT,
        &[
            &format!("version {MODEL_VERSION}"),
            "contracted but never expanded",
        ],
    );
}

#[test]
fn rows_of_a_contract_from_version_1_on_a_contracted_shape_no_longer_claim_version_1_is_served() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let schema = family(&rt, "contracted");
    // "Contracted to 1, expanded to 3" on version 3's contracted shape: the
    // rows of a contract from 1 whose steps are all done (version 3's own
    // contract removes nothing). Version-1 engines' inserts fail there, so
    // check must not say they are served (the issue found it did).
    run_sql(
        &rt,
        &url,
        &format!(
            "INSERT INTO {schema}.schema_versions
                 SELECT 1, 'x', started_at, started_at, started_at
                 FROM {schema}.schema_versions WHERE version = {MODEL_VERSION};
             UPDATE {schema}.schema_versions SET contracted_at = NULL
             WHERE version = {MODEL_VERSION}"
        ),
    );
    let ran = assert_check(
        &url,
        &schema,
        &[],
        CONTRACT_PENDING,
        &[
            "serves the engines of versions 2 to 3",
            "upgrade --contract",
        ],
    );
    assert!(!ran.stdout.contains("versions 1 "), "{}", ran.stdout);
}

#[test]
fn restarted_identities_are_drift_naming_the_promise_and_the_fix() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let fences = family(&rt, "fences");
    run_sql(
        &rt,
        &url,
        &format!(
            "INSERT INTO {fences}.locks (name, owner, expires_at)
                 SELECT 'lock' || g, 'owner', 4000000000 FROM generate_series(1, 50) g;
             ALTER TABLE {fences}.locks ALTER COLUMN fence RESTART WITH 1;"
        ),
    );
    assert_check(
        &url,
        &fences,
        &[],
        DRIFT,
        &["fences would go down", "ALTER SEQUENCE", "RESTART WITH 51"],
    );
    let offsets = family(&rt, "offsets");
    run_sql(
        &rt,
        &url,
        &format!(
            "INSERT INTO {offsets}.stream_events (stream, payload, created_at)
                 SELECT 's', '\\x00', 0 FROM generate_series(1, 100);
             INSERT INTO {offsets}.stream_offsets (stream, consumer, \"offset\")
                 VALUES ('s', 'c', 100);
             TRUNCATE {offsets}.stream_events RESTART IDENTITY;"
        ),
    );
    assert_check(
        &url,
        &offsets,
        &[],
        DRIFT,
        &["consumers would skip events", "RESTART WITH 101"],
    );
}

#[test]
fn a_not_ready_index_and_an_invalid_constraint_index_are_drift() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let not_ready = family(&rt, "notready");
    run_sql(
        &rt,
        &url,
        &format!(
            "UPDATE pg_catalog.pg_index SET indisready = false
             WHERE indexrelid = '{not_ready}.jobs_claim_idx'::regclass"
        ),
    );
    assert_check(&url, &not_ready, &[], DRIFT, &["jobs_claim_idx", "ready"]);
    let invalid = family(&rt, "invalidkey");
    run_sql(
        &rt,
        &url,
        &format!(
            "UPDATE pg_catalog.pg_index SET indisvalid = false
             WHERE indexrelid = '{invalid}.stream_offsets_pkey'::regclass"
        ),
    );
    assert_check(
        &url,
        &invalid,
        &[],
        DRIFT,
        &["stream_offsets_pkey", "valid"],
    );
    // A cancelled REINDEX CONCURRENTLY's leftover, named with its remedy.
    let leftover = family(&rt, "ccnew");
    run_sql(
        &rt,
        &url,
        &format!(
            "CREATE INDEX jobs_claim_idx_ccnew ON {leftover}.jobs (queue);
             UPDATE pg_catalog.pg_index SET indisvalid = false
             WHERE indexrelid = '{leftover}.jobs_claim_idx_ccnew'::regclass"
        ),
    );
    assert_check(
        &url,
        &leftover,
        &[],
        DRIFT,
        &["jobs_claim_idx_ccnew", "DROP INDEX CONCURRENTLY"],
    );
}

#[test]
fn a_family_object_owned_by_another_role_is_drift_and_apply_does_not_complete_its_family() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let squatter = harness::unique_name("squatter");
    let schema = family(&rt, "owners");
    run_sql(
        &rt,
        &url,
        &format!(
            "CREATE ROLE {squatter};
             ALTER TABLE {schema}.locks OWNER TO {squatter};"
        ),
    );
    assert_check(&url, &schema, &[], DRIFT, &["locks", &squatter]);
    // The squatter's own family: apply fills in nothing.
    run_sql(&rt, &url, &format!("DROP TABLE {schema}.jobs"));
    let before = fingerprint_of(&rt, &url, &schema);
    let applied = cli(&["apply", "--database-url", &url, "--schema", schema.as_str()]);
    assert_ne!(applied.code, ExitCode::SUCCESS, "{}", applied.stdout);
    assert!(applied.stderr.contains(&squatter), "{}", applied.stderr);
    assert_eq!(fingerprint_of(&rt, &url, &schema), before);
    // A schema another role owns: reported with what that role can do.
    let owned = family(&rt, "schemaowner");
    run_sql(
        &rt,
        &url,
        &format!("ALTER SCHEMA {owned} OWNER TO {squatter}"),
    );
    let ran = assert_check(&url, &owned, &[], 0, &[&squatter]);
    assert!(ran.stdout.contains("drop"), "{}", ran.stdout);
}

#[test]
fn the_verdict_on_a_tampered_and_an_untampered_family_does_not_depend_on_the_search_path() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let database = harness::unique_name("pathverdict");
    let url = rt.block_on(harness::create_database(&database));
    let tampered = SchemaName::new("tampered").unwrap();
    let untouched = SchemaName::new("untouched").unwrap();
    rt.block_on(async {
        let mut client = harness::connect_url(&url).await;
        for schema in [&tampered, &untouched] {
            bootstrap(&mut client, schema).await.unwrap();
        }
        // What the issue found accepted: attempts = -5 through a `public`
        // >= that always says yes, every tx_id 1.
        exec(
            &client,
            "CREATE FUNCTION public.yes(integer, integer) RETURNS boolean
                 LANGUAGE sql IMMUTABLE RETURN true;
             CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer,
                                        FUNCTION = public.yes);
             CREATE FUNCTION public.pg_current_xact_id() RETURNS xid8
                 LANGUAGE sql RETURN '1'::xid8;
             ALTER TABLE tampered.jobs DROP CONSTRAINT jobs_attempts_not_negative,
                 ADD CONSTRAINT jobs_attempts_not_negative
                     CHECK (attempts OPERATOR(public.>=) 0);
             ALTER TABLE tampered.stream_events
                 ALTER COLUMN tx_id SET DEFAULT public.pg_current_xact_id();",
        )
        .await;
    });
    let hostile = format!("{url} options='-csearch_path=public,pg_catalog'");
    for (schema, code, names) in [
        (
            &tampered,
            DRIFT,
            &["jobs_attempts_not_negative", "tx_id"][..],
        ),
        (&untouched, 0, &["matches"][..]),
    ] {
        let default = assert_check(&url, schema, &[], code, names);
        let under_public = assert_check(&hostile, schema, &[], code, names);
        assert_eq!(default.stdout, under_public.stdout);
    }
}

#[test]
fn check_reads_the_catalog_and_the_roles_in_one_round_trip() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let schema = family(&rt, "trips");
    let proxy = rt.block_on(harness::wire::CountingProxy::start(&url));
    let through = proxy.url(&url);
    for extra in [&[][..], &["--runtime-role", "postgres"][..]] {
        proxy.reset();
        let mut args = vec![
            "check",
            "--database-url",
            &through,
            "--schema",
            schema.as_str(),
        ];
        args.extend(extra);
        let ran = cli(&args);
        assert!(ran.stderr.is_empty(), "{}", ran.stderr);
        let statements = proxy.statements();
        println!(
            "check {extra:?}: {} round trips, {} requests: {statements:#?}",
            proxy.round_trips(),
            proxy.requests()
        );
        // The connection's own setup aside, the verdict is one catalog
        // query: the version rows, the shape, the numbers, the flags, the
        // owners and (with --runtime-role) the role's privileges together.
        let catalog_reads = statements
            .iter()
            .filter(|s| s.contains("pg_catalog.pg_class"))
            .count();
        assert_eq!(catalog_reads, 1, "{statements:#?}");
        assert_eq!(proxy.round_trips(), 1, "{statements:#?}");
    }
}

/// Blocks of `table` and of its indexes read or hit so far, as the
/// cumulative statistics have them.
async fn blocks(client: &tokio_postgres::Client, schema: &SchemaName, table: &str) -> (i64, i64) {
    let row = client
        .query_one(
            "SELECT pg_stat_clear_snapshot()::text, (heap_blks_read + heap_blks_hit)::bigint,
                    (idx_blks_read + idx_blks_hit)::bigint
             FROM pg_statio_user_tables WHERE schemaname = $1 AND relname = $2",
            &[&schema.as_str(), &table],
        )
        .await
        .unwrap();
    (row.get(1), row.get(2))
}

#[test]
fn the_maxima_are_read_through_the_keys_not_by_scanning_the_tables() {
    if harness::skip_db_tests() {
        return;
    }
    let rt = runtime();
    let url = harness::database_url();
    let schema = family(&rt, "maxima");
    let before = rt.block_on(async {
        let client = harness::connect_url(&url).await;
        harness::shadow::seed(&client, &schema).await;
        // 200,000 jobs (copies of the samples'), about 6,000 heap pages.
        exec(
            &client,
            &format!(
                "DO $$ DECLARE cols text; BEGIN
                     SELECT string_agg(quote_ident(attname), ', ') INTO cols
                     FROM pg_attribute WHERE attrelid = '{schema}.jobs'::regclass
                       AND attnum > 0 AND NOT attisdropped AND attname <> 'id';
                     EXECUTE format('INSERT INTO {schema}.jobs (%s) SELECT %s FROM
                         (SELECT * FROM {schema}.jobs LIMIT 1) j, generate_series(1, 200000)',
                         cols, cols);
                 END $$;
                 SELECT pg_stat_force_next_flush();"
            ),
        )
        .await;
        let pages: i64 = client
            .query_one(
                &format!("SELECT pg_relation_size('{schema}.jobs') / 8192"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(pages > 2_000, "{pages} pages");
        // Let this session's own counts reach the shared statistics.
        std::thread::sleep(std::time::Duration::from_millis(1_500));
        blocks(&client, &schema, "jobs").await
    });
    let ran = cli(&["check", "--database-url", &url, "--schema", schema.as_str()]);
    assert_eq!(ran.code, ExitCode::SUCCESS, "{}{}", ran.stdout, ran.stderr);
    // The check's backend reports its counts when it exits.
    let after = rt.block_on(async {
        let client = harness::connect_url(&url).await;
        for _ in 0..50 {
            let now = blocks(&client, &schema, "jobs").await;
            if now.1 > before.1 {
                return now;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("check read no block of jobs' indexes: {before:?}");
    });
    let heap = after.0 - before.0;
    let index = after.1 - before.1;
    println!("check read {heap} heap and {index} index blocks of jobs");
    assert!(heap <= 10, "check read {heap} heap blocks of jobs");
    assert!(index <= 20, "check read {index} index blocks of jobs");
}
