//! Drift against a real server: each hand-made change to a bootstrapped
//! schema is reported by `verify` in words a DBA understands, and refused by
//! `bootstrap`, which changes nothing (the catalog dump before and after the
//! refused bootstrap is identical).
//!
//! Each case asserts the whole list of differences, so a comparison that
//! reports too much fails as surely as one that reports too little.

use harness::exec;
use schema_gen::render::{self, SCHEMA_DOC};
use schema_gen::{Difference, ErrorKind, Outcome, bootstrap, verify};
use schema_model::{SchemaName, TableModel as _};
use tokio_postgres::Client;

fn texts(differences: &[Difference]) -> Vec<String> {
    differences.iter().map(ToString::to_string).collect()
}

/// Bootstraps a fresh schema and applies `drift` to it (`{s}` is the
/// schema): the client, the schema's name as text and as a [`SchemaName`].
async fn drifted(prefix: &str, drift: &str) -> (Client, String, SchemaName) {
    let mut client = harness::connect().await;
    let raw = harness::unique_schema(prefix);
    let schema = SchemaName::new(&raw).unwrap();
    assert!(bootstrap(&mut client, &schema).await.unwrap().created());
    exec(&client, &drift.replace("{s}", &raw)).await;
    (client, raw, schema)
}

/// [`drifted`], then checks that verify reports exactly `expected` and that
/// bootstrap refuses with the same list (its foreign objects aside: those
/// are no reason to refuse, `tests/pg_foreign.rs`) and leaves the catalog
/// as it was.
async fn drift_case(prefix: &str, drift: &str, expected: &[&str]) {
    let (mut client, raw, schema) = drifted(prefix, drift).await;

    let expected: Vec<String> = expected.iter().map(|e| e.replace("{s}", &raw)).collect();
    let differences = verify(&client, &schema).await.unwrap();
    assert_eq!(texts(&differences), expected, "verify after: {drift}");
    assert!(differences.iter().any(Difference::is_drift));
    let (foreign, refused): (Vec<Difference>, Vec<Difference>) =
        differences.into_iter().partition(Difference::is_foreign);

    let before = harness::dump::dump_schema(&client, &raw).await;
    let err = bootstrap(&mut client, &schema)
        .await
        .expect_err("bootstrap must refuse a drifted schema");
    assert!(matches!(err.kind(), ErrorKind::Drift { .. }), "{err}");
    assert_eq!(err.differences(), refused.as_slice());
    let message = err.to_string();
    for line in texts(&refused) {
        assert!(message.contains(line.as_str()), "{message} lacks {line}");
    }
    for line in texts(&foreign) {
        assert!(!message.contains(line.as_str()), "{message} blames {line}");
    }
    assert!(message.contains("changed nothing"), "{message}");
    assert_eq!(
        harness::dump::dump_schema(&client, &raw).await,
        before,
        "a refused bootstrap changed the catalog"
    );
}

#[tokio::test]
async fn a_dropped_column_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_dropcol",
        "ALTER TABLE {s}.dead_jobs DROP COLUMN last_error",
        &["missing column dead_jobs.last_error"],
    )
    .await;
}

#[tokio::test]
async fn a_changed_type_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_type",
        "ALTER TABLE {s}.jobs ALTER COLUMN priority TYPE bigint",
        &["jobs.priority: type is bigint, model says integer"],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_not_null_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_null",
        "ALTER TABLE {s}.jobs ALTER COLUMN queue DROP NOT NULL",
        &["jobs.queue: accepts NULL, model says NOT NULL"],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_index_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_noidx",
        "DROP INDEX {s}.jobs_claim_idx",
        &[
            "missing index jobs_claim_idx on jobs (model says `USING btree (queue, priority DESC, \
             run_at, id) WHERE ((claimed_at IS NULL) AND ready)`)",
        ],
    )
    .await;
}

#[tokio::test]
async fn an_index_recreated_with_another_definition_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // The right name, the wrong order: `IF NOT EXISTS` would skip it silently.
    drift_case(
        "drift_idxdef",
        "DROP INDEX {s}.jobs_claim_idx;
         CREATE INDEX jobs_claim_idx ON {s}.jobs (queue, priority, run_at, id)
             WHERE claimed_at IS NULL;",
        &[
            "index jobs_claim_idx: is `USING btree (queue, priority, run_at, id) WHERE \
             (claimed_at IS NULL)`, model says `USING btree (queue, priority DESC, run_at, id) \
             WHERE ((claimed_at IS NULL) AND ready)`",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_dropped_check_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_check",
        "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempts_not_negative",
        &[
            "missing CHECK constraint jobs_attempts_not_negative on jobs (model says `CHECK \
             ((attempts >= 0))`)",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_weakened_or_unvalidated_check_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_checkdef",
        "ALTER TABLE {s}.jobs DROP CONSTRAINT jobs_attempts_not_negative,
             ADD CONSTRAINT jobs_attempts_not_negative CHECK (attempts >= -1);
         ALTER TABLE {s}.locks DROP CONSTRAINT locks_owner_not_empty,
             ADD CONSTRAINT locks_owner_not_empty CHECK (owner <> '') NOT VALID;",
        &[
            "constraint jobs_attempts_not_negative: is `CHECK ((attempts >= '-1'::integer))`, \
             model says `CHECK ((attempts >= 0))`",
            "constraint locks_owner_not_empty: is `CHECK ((owner <> ''::text)) NOT VALID`, \
             model says `CHECK ((owner <> ''::text))`",
        ],
    )
    .await;
}

#[tokio::test]
async fn defaults_identity_and_extras_are_reported_and_the_drift_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_misc",
        "ALTER TABLE {s}.jobs ALTER COLUMN attempts SET DEFAULT 0;
         ALTER TABLE {s}.stream_events ALTER COLUMN id SET GENERATED BY DEFAULT;
         ALTER TABLE {s}.locks ADD COLUMN note text;
         CREATE INDEX locks_owner_idx ON {s}.locks (owner);
         ALTER TABLE {s}.stream_offsets SET UNLOGGED;
         CREATE TABLE {s}.mine (x int);",
        &[
            "jobs.attempts: has DEFAULT 0, model says no default",
            "stream_events.id: has GENERATED BY DEFAULT AS IDENTITY, model says GENERATED \
             ALWAYS AS IDENTITY",
            "stream_offsets: is an unlogged table, model says a permanent table",
            "extra column locks.note (text)",
            "extra index locks_owner_idx on locks: `USING btree (owner)`",
            "extra table mine (not in the model)",
        ],
    )
    .await;
}

#[tokio::test]
async fn drift_plus_a_missing_table_creates_nothing() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_partial",
        "DROP TABLE {s}.locks; ALTER TABLE {s}.jobs DROP COLUMN last_error;",
        &["missing column jobs.last_error", "missing table locks"],
    )
    .await;
}

#[tokio::test]
async fn comment_drift_is_reported_not_refused_and_the_script_refreshes_it() {
    if harness::skip_db_tests() {
        return;
    }
    let (mut client, raw, schema) = drifted(
        "drift_doc",
        "COMMENT ON COLUMN {s}.jobs.queue IS 'old words';
         COMMENT ON SCHEMA {s} IS NULL;",
    )
    .await;
    let expected = [
        format!("comment on schema {raw}: missing, model says {SCHEMA_DOC:?}"),
        format!(
            "comment on column jobs.queue: is \"old words\", model says {:?}",
            schema_model::Jobs::Queue
                .column()
                .map(|c| c.doc)
                .unwrap_or_default()
        ),
    ];
    let differences = verify(&client, &schema).await.unwrap();
    assert_eq!(texts(&differences), expected);
    assert!(differences.iter().all(Difference::is_comment));

    // Documentation only: bootstrap is current, says so, and writes nothing.
    let before = harness::dump::dump_schema(&client, &raw).await;
    let outcome = bootstrap(&mut client, &schema).await.unwrap();
    let Outcome::AlreadyCurrent { stale_comments, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(stale_comments, &differences);
    assert!(
        outcome.to_string().contains("2 comments differ"),
        "{outcome}"
    );
    assert_eq!(harness::dump::dump_schema(&client, &raw).await, before);

    // Re-running the printed script refreshes the comments.
    let out = harness::psql()
        .args(["-c", &render::script(&schema)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(verify(&client, &schema).await.unwrap(), vec![]);
}

#[tokio::test]
async fn a_rule_that_swallows_inserts_is_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // The case: every insert into the dedup ledger became nothing.
    drift_case(
        "drift_rule",
        "CREATE RULE swallow AS ON INSERT TO {s}.consumed_events DO INSTEAD NOTHING",
        &[
            "extra rule swallow on consumed_events: `CREATE RULE swallow AS ON INSERT TO \
           {s}.consumed_events DO INSTEAD NOTHING`",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_trigger_and_its_function_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // The case: a trigger rewrote the payload on insert.
    drift_case(
        "drift_trigger",
        "CREATE FUNCTION {s}.scrub() RETURNS trigger LANGUAGE plpgsql
             AS $$ BEGIN NEW.payload := '\\x00'; RETURN NEW; END $$;
         CREATE TRIGGER scrub BEFORE INSERT ON {s}.stream_events
             FOR EACH ROW EXECUTE FUNCTION {s}.scrub();
         CREATE TRIGGER quiet AFTER DELETE ON {s}.locks
             FOR EACH STATEMENT EXECUTE FUNCTION {s}.scrub();
         ALTER TABLE {s}.locks DISABLE TRIGGER quiet;",
        &[
            "extra trigger scrub on stream_events: `CREATE TRIGGER scrub BEFORE INSERT ON \
             {s}.stream_events FOR EACH ROW EXECUTE FUNCTION {s}.scrub()`",
            "extra trigger quiet on locks (disabled): `CREATE TRIGGER quiet AFTER DELETE ON \
             {s}.locks FOR EACH STATEMENT EXECUTE FUNCTION {s}.scrub()`",
            "extra function {s}.scrub() (not in the model)",
        ],
    )
    .await;
}

#[tokio::test]
async fn row_level_security_and_policies_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_rls",
        "ALTER TABLE {s}.locks ENABLE ROW LEVEL SECURITY;
         ALTER TABLE {s}.stream_events ENABLE ROW LEVEL SECURITY,
             FORCE ROW LEVEL SECURITY;
         CREATE POLICY mine ON {s}.stream_events FOR SELECT TO public
             USING (stream = current_user);",
        &[
            "stream_events: row-level security is enabled and forced, model says disabled (with \
             it, a role sees and changes only the rows a policy allows, none without a policy)",
            "extra policy mine on stream_events: `AS PERMISSIVE FOR SELECT TO public USING \
             ((stream = CURRENT_USER))`",
            "locks: row-level security is enabled, model says disabled (with it, a role sees and \
             changes only the rows a policy allows, none without a policy)",
        ],
    )
    .await;
}

#[tokio::test]
async fn identity_sequence_options_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // The cases: offsets counting backwards, fences cycling 1, 2, 3, 1.
    drift_case(
        "drift_identity",
        "ALTER TABLE {s}.stream_events ALTER COLUMN id SET INCREMENT BY -1 SET MINVALUE -100
             SET START WITH 5;
         ALTER TABLE {s}.locks ALTER COLUMN fence SET MAXVALUE 3 SET CYCLE SET CACHE 20;
         ALTER SEQUENCE {s}.locks_fence_seq AS integer;
         ALTER SEQUENCE {s}.locks_fence_seq SET UNLOGGED;",
        &[
            "stream_events.id: identity sequence has START WITH 5, model says START WITH 1",
            "stream_events.id: identity sequence has INCREMENT BY -1, model says INCREMENT BY 1",
            "stream_events.id: identity sequence has MINVALUE -100, model says MINVALUE 1",
            "locks.fence: identity sequence has AS integer, model says AS bigint",
            "locks.fence: identity sequence has MAXVALUE 3, model says MAXVALUE \
             9223372036854775807",
            "locks.fence: identity sequence has CACHE 20, model says CACHE 1",
            "locks.fence: identity sequence has CYCLE, model says NO CYCLE",
            "locks.fence: identity sequence has UNLOGGED, model says LOGGED",
        ],
    )
    .await;
}

#[tokio::test]
async fn every_relation_kind_in_the_schema_is_reported() {
    if harness::skip_db_tests() {
        return;
    }
    let wrapper = harness::unique_name("drift_fdw");
    drift_case(
        "drift_kinds",
        &format!(
            "CREATE VIEW {{s}}.lock_owners AS SELECT owner FROM {{s}}.locks;
             CREATE MATERIALIZED VIEW {{s}}.lock_count AS SELECT count(*) FROM {{s}}.locks;
             CREATE SEQUENCE {{s}}.spare_seq;
             CREATE TABLE {{s}}.by_stream (stream text) PARTITION BY LIST (stream);
             CREATE FOREIGN DATA WRAPPER {wrapper};
             CREATE SERVER {wrapper}_server FOREIGN DATA WRAPPER {wrapper};
             CREATE FOREIGN TABLE {{s}}.remote (x int) SERVER {wrapper}_server;
             -- A model table replaced by a partitioned one of the same shape.
             CREATE TABLE {{s}}.ledger (LIKE {{s}}.consumed_events INCLUDING ALL)
                 PARTITION BY LIST (consumer);
             DROP TABLE {{s}}.consumed_events;
             ALTER TABLE {{s}}.ledger RENAME TO consumed_events;
             ALTER TABLE {{s}}.consumed_events RENAME CONSTRAINT ledger_pkey
                 TO consumed_events_pkey;
             COMMENT ON TABLE {{s}}.consumed_events IS {};",
            render::quote_literal(schema_model::ConsumedEvents::DOC)
        ),
        &[
            "consumed_events: is a partitioned table, model says a permanent table",
            "extra partitioned table by_stream (not in the model)",
            "extra materialized view lock_count (not in the model)",
            "extra view lock_owners (not in the model)",
            "extra foreign table remote (not in the model)",
            "extra sequence spare_seq (not in the model)",
        ],
    )
    .await;
}

#[tokio::test]
async fn functions_procedures_and_types_in_the_schema_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_objects",
        "CREATE FUNCTION {s}.now() RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint';
         CREATE PROCEDURE {s}.sweep(n int) LANGUAGE sql AS 'SELECT 1';
         CREATE TYPE {s}.mood AS ENUM ('calm');
         CREATE DOMAIN {s}.positive AS bigint CHECK (VALUE > 0);
         CREATE TYPE {s}.span AS RANGE (subtype = bigint);",
        &[
            "extra function {s}.now() (not in the model)",
            // PostgreSQL's own words (pg_describe_object) call a procedure a function.
            "extra function {s}.sweep(integer) (not in the model)",
            "extra type {s}.mood (not in the model)",
            "extra type {s}.positive (not in the model)",
            // One object, not three: its constructors and multirange are its parts.
            "extra type {s}.span (not in the model)",
        ],
    )
    .await;
}

#[tokio::test]
async fn unique_foreign_key_and_exclusion_constraints_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    drift_case(
        "drift_constraints",
        "ALTER TABLE {s}.locks ADD CONSTRAINT locks_owner_key UNIQUE (owner);
         ALTER TABLE {s}.locks ADD CONSTRAINT locks_one_per_owner
             EXCLUDE USING btree (owner WITH =);
         ALTER TABLE {s}.stream_offsets ADD CONSTRAINT stream_offsets_event_fkey
             FOREIGN KEY (\"offset\") REFERENCES {s}.stream_events (id);
         ALTER TABLE {s}.locks DROP CONSTRAINT locks_pkey,
             ADD CONSTRAINT locks_pkey PRIMARY KEY (name) INCLUDE (owner);",
        &[
            "extra constraint stream_offsets_event_fkey on stream_offsets: `FOREIGN KEY \
             (\"offset\") REFERENCES {s}.stream_events(id)`",
            "constraint locks_pkey: is `PRIMARY KEY (name) INCLUDE (owner)`, model says \
             `PRIMARY KEY (name)`",
            // Their indexes are theirs, not extra indexes.
            "extra constraint locks_one_per_owner on locks: `EXCLUDE USING btree (owner WITH =)`",
            "extra constraint locks_owner_key on locks: `UNIQUE (owner)`",
        ],
    )
    .await;
}

#[tokio::test]
async fn indexes_are_compared_by_their_whole_definition() {
    if harness::skip_db_tests() {
        return;
    }
    // Same names, same key columns: only the part after them differs.
    drift_case(
        "drift_indexdef",
        "DROP INDEX {s}.stream_events_stream_id_idx;
         CREATE INDEX stream_events_stream_id_idx ON {s}.stream_events (stream COLLATE \"C\", id);
         DROP INDEX {s}.stream_events_commit_order_idx;
         CREATE INDEX stream_events_commit_order_idx
             ON {s}.stream_events (stream text_pattern_ops, tx_id, id);
         DROP INDEX {s}.locks_expiry_idx;
         CREATE INDEX locks_expiry_idx ON {s}.locks (expires_at) INCLUDE (owner);
         ALTER INDEX {s}.dead_jobs_purge_idx SET (fillfactor = 50);
         DROP INDEX {s}.schedules_due_idx;
         CREATE INDEX schedules_due_idx ON {s}.schedules (next_fire_at)
             WHERE enabled AND next_fire_at > 0;",
        &[
            "index dead_jobs_purge_idx: is `USING btree (purge_at) WITH (fillfactor='50')`, \
             model says `USING btree (purge_at)`",
            "index stream_events_stream_id_idx: is `USING btree (stream COLLATE \"C\", id)`, \
             model says `USING btree (stream, id)`",
            "index stream_events_commit_order_idx: is `USING btree (stream text_pattern_ops, \
             tx_id, id)`, model says `USING btree (stream, tx_id, id)`",
            "index schedules_due_idx: is `USING btree (next_fire_at) WHERE (enabled AND \
             (next_fire_at > 0))`, model says `USING btree (next_fire_at) WHERE enabled`",
            "index locks_expiry_idx: is `USING btree (expires_at) INCLUDE (owner)`, model says \
             `USING btree (expires_at)`",
        ],
    )
    .await;
}

#[tokio::test]
async fn collation_storage_parameters_and_access_method_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    let method = harness::unique_name("drift_am");
    drift_case(
        "drift_storage",
        &format!(
            "ALTER TABLE {{s}}.locks ALTER COLUMN owner TYPE text COLLATE \"C\";
             ALTER TABLE {{s}}.stream_events SET (fillfactor = 50,
                 toast.autovacuum_enabled = false);
             -- heap under another name: a table access method a stock server can make.
             CREATE ACCESS METHOD {method} TYPE TABLE HANDLER heap_tableam_handler;
             ALTER TABLE {{s}}.stream_offsets SET ACCESS METHOD {method};"
        ),
        &[
            "stream_events: storage parameters are (fillfactor=50, \
             toast.autovacuum_enabled=false), model says none",
            &format!("stream_offsets: table access method is {method}, model says heap"),
            "locks.owner: collation is \"C\", model says the type's default",
        ],
    )
    .await;
}

#[tokio::test]
async fn inheritance_and_partitioning_of_engine_tables_are_reported_and_refused() {
    if harness::skip_db_tests() {
        return;
    }
    // In a schema of their own: these are not engine objects, yet they change
    // what the engine's statements on its tables reach.
    let other = harness::unique_schema("drift_other");
    drift_case(
        "drift_inherit",
        &format!(
            "CREATE SCHEMA {other};
             CREATE TABLE {other}.more_locks () INHERITS ({{s}}.locks);
             CREATE TABLE {other}.base ();
             ALTER TABLE {{s}}.stream_offsets INHERIT {other}.base;
             CREATE TABLE {other}.ledgers (LIKE {{s}}.consumed_events)
                 PARTITION BY LIST (consumer);
             ALTER TABLE {other}.ledgers ATTACH PARTITION {{s}}.consumed_events
                 FOR VALUES IN ('billing');"
        ),
        &[
            &format!("stream_offsets: inherits from {other}.base, model says a table of its own"),
            &format!(
                "locks: {other}.more_locks inherits from it (or is its partition), so the \
                 engine's reads, updates and deletes of locks reach its rows too; model says no \
                 child"
            ),
            &format!(
                "consumed_events: is a partition of {other}.ledgers FOR VALUES IN ('billing'), \
                 model says a table of its own"
            ),
        ],
    )
    .await;
}
