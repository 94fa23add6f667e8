//! The typed runner against a real server: the engine example program
//! (`schema-gen/examples/engine.rs`, compiled in here as it is) runs end to
//! end; a session prepares each statement once per connection; the claim
//! path is one round trip and needs no transaction; a statement error
//! carries the statement's name and the server's message, SQLSTATE, detail
//! and hint; a returned row that does not decode, or a row count a
//! statement does not promise, is an error naming the statement; a
//! session's transaction commits and rolls back.

use std::sync::Arc;
use std::time::Duration;

use harness::engine::{engine_schema, job};
use harness::exec;
use harness::wire::CountingProxy;
use schema_gen::statements::{
    self, ConsumerOffset, Session, StatementErrorKind, StreamEvent, jobs, streams,
};
use schema_model::SchemaName;
use tokio_postgres::error::SqlState;

/// The example program, exactly as `cargo run --example engine` builds it
/// (its `main` is not called here).
#[allow(dead_code)]
#[path = "../schema-gen/examples/engine.rs"]
mod engine;

const NOW: i64 = 1_700_000_000;

/// The program's whole flow on a fresh schema, through the wire proxy: what
/// it reports is what the statements promise, every statement was prepared
/// once on its connection, and the state it leaves behind is the one a
/// second worker then finds.
#[tokio::test]
async fn the_engine_example_runs_as_written() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    let proxy = CountingProxy::start(&url).await;
    let schema = harness::unique_schema_name("engine_example");
    let client = proxy.connect(&url).await;
    proxy.reset();

    let report = engine::run(client, schema.clone(), NOW)
        .await
        .unwrap_or_else(|e| panic!("the example failed: {e}"));

    // Enqueue returned three new ids.
    assert_eq!(report.enqueued.len(), 3);
    assert!(
        report.enqueued.windows(2).all(|w| w[0] < w[1]),
        "{report:?}"
    );
    // Promote made the one scheduled job ready; the claim, pipelined behind
    // it, took all three.
    assert_eq!(report.promoted, 1);
    let mut claimed: Vec<i64> = report.claimed.iter().map(|j| j.id).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, report.enqueued);
    for job in &report.claimed {
        assert_eq!(job.worker_id.as_deref(), Some("worker-1"));
        assert_eq!(job.attempts, 1);
        assert_eq!(job.claimed_at, Some(NOW + 5));
        assert_eq!(job.queue, "mail");
    }
    assert_eq!((report.acked, report.retried), (1, 1));

    // Each statement's text went over the wire once: prepared once, then
    // run with values only.
    let parsed = proxy.statements();
    for statement in statements::all(&schema) {
        let times = parsed.iter().filter(|s| *s == statement.sql()).count();
        assert_eq!(times, 1, "{} was parsed {times} times", statement.name());
    }

    // What it left: the acked job is gone, the retried one backs off until
    // NOW + 5 + 10 with its error, the third is still claimed.
    let other = Session::new(harness::connect().await, schema);
    let poll = |now| {
        let other = &other;
        async move {
            other
                .run_pipelined(
                    &jobs::Promote {
                        queue: "mail",
                        now,
                        limit: 10,
                    },
                    &jobs::Claim {
                        queue: "mail",
                        worker_id: "worker-2",
                        now,
                        limit: 10,
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    assert_eq!(poll(NOW + 14).await, (0, vec![]));
    let (promoted, again) = poll(NOW + 15).await;
    assert_eq!(promoted, 1);
    let [retried] = again.as_slice() else {
        panic!("{again:?}")
    };
    assert_eq!(retried.id, report.claimed[1].id);
    assert_eq!(
        retried.last_error.as_deref(),
        Some("smtp: connection timed out")
    );
    assert_eq!(retried.attempts, 2);
}

/// The claim path's two statements are sent before either answer comes
/// back. Proven without timing: another session holds a lock that blocks
/// promote inside the server, and both statements' `Sync`s reach the wire
/// while promote still waits. Once the lock goes, the claim (which ran
/// after promote committed, in no transaction) takes the job promote made
/// ready.
#[tokio::test]
async fn the_claim_path_is_one_round_trip_without_a_transaction() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "claim_trip").await;
    let proxy = CountingProxy::start(&url).await;
    let session = Session::new(proxy.connect(&url).await, schema.clone());
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Not due yet at NOW: only promote makes it claimable at NOW + 60.
    let id = session
        .run(&jobs::Enqueue {
            job: &job("trip", NOW + 60, NOW),
            now: NOW,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid: i32 = session
        .client()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);

    // SHARE conflicts with the ROW EXCLUSIVE lock promote's UPDATE takes.
    let locker = harness::connect().await;
    exec(
        &locker,
        &format!("BEGIN; LOCK TABLE \"{schema}\".jobs IN SHARE MODE"),
    )
    .await;
    proxy.reset();
    let session = Arc::new(session);
    let running = Arc::clone(&session);
    let claim_path = tokio::spawn(async move {
        running
            .run_pipelined(
                &jobs::Promote {
                    queue: "trip",
                    now: NOW + 60,
                    limit: 100,
                },
                &jobs::Claim {
                    queue: "trip",
                    worker_id: "w",
                    now: NOW + 60,
                    limit: 10,
                },
            )
            .await
    });
    let mut waiting = false;
    for _ in 0..500 {
        let rows = harness::rows(
            &admin,
            &format!("SELECT COALESCE(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = {pid}"),
        )
        .await;
        waiting = rows.first().is_some_and(|row| row.get::<_, bool>(0));
        if waiting && proxy.requests() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(waiting, "promote never waited for the lock");
    assert!(
        !claim_path.is_finished(),
        "the claim path ran past the lock"
    );
    assert_eq!(
        (proxy.requests(), proxy.round_trips()),
        (2, 1),
        "promote's and claim's Syncs were not both sent while promote waited: {:#?}",
        proxy.statements()
    );
    exec(&locker, "COMMIT").await;
    let (promoted, claimed) = claim_path
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(promoted, 1);
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    // Nothing but the two statements' values went over the wire: two
    // requests, one round trip.
    assert_eq!((proxy.requests(), proxy.round_trips()), (2, 1));
    assert!(proxy.statements().is_empty(), "{:#?}", proxy.statements());
}

/// When the first statement of a pipeline fails, the second still ran (it
/// was already sent), and the error is the first one's, named, with its
/// SQLSTATE. Promote fails on its lock timeout; an append to a stream
/// (another table, not locked) goes through.
#[tokio::test]
async fn a_failed_first_statement_of_a_pipeline_is_reported_and_the_second_still_ran() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "pipe_fail").await;
    let client = harness::connect().await;
    exec(&client, "SET lock_timeout = '50ms'").await;
    let session = Session::new(client, schema.clone());
    let locker = harness::connect().await;
    exec(
        &locker,
        &format!("BEGIN; LOCK TABLE \"{schema}\".jobs IN SHARE MODE"),
    )
    .await;
    let event = {
        let mut event = StreamEvent::default();
        event.stream = "s".into();
        event.payload = vec![1];
        event.created_at = NOW;
        event
    };
    let err = session
        .run_pipelined(
            &jobs::Promote {
                queue: "q",
                now: NOW,
                limit: 1,
            },
            &streams::Append { event: &event },
        )
        .await
        .expect_err("promote waited past its lock timeout");
    exec(&locker, "ROLLBACK").await;
    assert_eq!(err.statement(), "promote", "{err}");
    assert_eq!(err.code(), Some(&SqlState::LOCK_NOT_AVAILABLE), "{err}");
    let read = session
        .run(&streams::Read {
            stream: "s",
            offset: 0,
            limit: 10,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.len(), 1, "the append behind the failed promote ran");
}

/// A statement the server refuses displays the statement's name, the
/// server's message, SQLSTATE and hint (here: the claim against a schema
/// whose `ready` column was renamed), or its detail (here: a kill whose id
/// is already in `dead_jobs`), never `db error`.
#[tokio::test]
async fn a_statement_error_shows_the_statement_and_the_servers_words() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "stmt_errors").await;
    let session = Session::new(harness::connect().await, schema.clone());

    let claimed = session
        .run_pipelined(
            &jobs::Enqueue {
                job: &job("q", NOW, NOW),
                now: NOW,
            },
            &jobs::Claim {
                queue: "q",
                worker_id: "w",
                now: NOW,
                limit: 1,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .1;
    let [claimed] = claimed.as_slice() else {
        panic!("{claimed:?}")
    };
    exec(
        &admin,
        &format!(
            "INSERT INTO \"{schema}\".dead_jobs (id, queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, attempts, died_at) \
             VALUES ({}, 'q', '', 0, 0, 0, 1, 1, 1, 1, 1, 0)",
            claimed.id
        ),
    )
    .await;
    let err = session
        .run(&jobs::Kill {
            id: claimed.id,
            worker_id: "w",
            attempts: claimed.attempts,
            last_error: None,
            now: NOW,
        })
        .await
        .expect_err("the dead job's id is taken");
    assert_eq!(
        err.to_string(),
        format!(
            "statement kill failed: ERROR: duplicate key value violates unique constraint \
             \"dead_jobs_pkey\" (SQLSTATE 23505); DETAIL: Key (id)=({}) already exists.",
            claimed.id
        )
    );
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION));
    assert_eq!(
        err.db_error().and_then(|db| db.constraint()),
        Some("dead_jobs_pkey")
    );

    // A fresh session prepares the claim against the changed table.
    exec(
        &admin,
        &format!("ALTER TABLE \"{schema}\".jobs RENAME COLUMN ready TO ready2"),
    )
    .await;
    let fresh = Session::new(harness::connect().await, schema);
    let err = fresh
        .run(&jobs::Claim {
            queue: "q",
            worker_id: "w",
            now: NOW,
            limit: 1,
        })
        .await
        .expect_err("there is no ready column");
    // (The hint's tail names each reference to jobs the statement makes,
    // in words that vary between server versions.)
    let shown = err.to_string();
    assert!(
        shown.starts_with(
            "statement claim failed: ERROR: column \"ready\" does not exist (SQLSTATE 42703); \
             HINT: Perhaps you meant to reference the column \"jobs.ready2\""
        ),
        "{shown}"
    );
    match err.kind() {
        StatementErrorKind::Server {
            severity,
            code,
            message,
            detail,
            hint,
            ..
        } => {
            assert_eq!(severity, "ERROR");
            assert_eq!(code, &SqlState::UNDEFINED_COLUMN);
            assert_eq!(message, "column \"ready\" does not exist");
            assert_eq!(detail, &None);
            assert!(hint.as_deref().is_some_and(|h| h.contains("ready2")));
        }
        other => panic!("{other:?}"),
    }
    // The driver's error is the source, with the server's whole report.
    let source = std::error::Error::source(&err).unwrap_or_else(|| panic!("no source"));
    assert!(
        source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.as_db_error())
            .is_some()
    );
}

/// A connection that is gone is a driver error naming the statement.
#[tokio::test]
async fn a_lost_connection_names_the_statement() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "stmt_lost").await;
    let session = Session::new(harness::connect().await, schema);
    session
        .prepare_all()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pid: i32 = session
        .client()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .get(0);
    exec(&admin, &format!("SELECT pg_terminate_backend({pid})")).await;
    let mut err = None;
    // The server's goodbye may arrive after the first request was sent.
    for _ in 0..100 {
        match session
            .run(&jobs::Ack {
                id: 1,
                worker_id: "w",
                attempts: 1,
            })
            .await
        {
            Err(e) if session.client().is_closed() => {
                err = Some(e);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    let err = err.unwrap_or_else(|| panic!("the terminated connection still answered"));
    assert_eq!(err.statement(), "ack");
    let shown = err.to_string();
    assert!(shown.starts_with("statement ack failed: "), "{shown}");
    assert!(!shown.contains("db error"), "{shown}");
    match err.kind() {
        StatementErrorKind::Driver { .. } => {
            assert_eq!(shown, "statement ack failed: connection closed")
        }
        StatementErrorKind::Server { severity, code, .. } => {
            assert_eq!(
                (severity.as_str(), code),
                ("FATAL", &SqlState::ADMIN_SHUTDOWN)
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A returned row that does not decode is an error naming the statement
/// and the column; a statement returning another number of rows than it
/// promises (one for an enqueue, at most one for a checkpoint read) is an
/// error saying so. The schema is bent to make each happen.
#[tokio::test]
async fn rows_that_break_a_statements_promise_are_errors_naming_it() {
    if harness::skip_db_tests() {
        return;
    }
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "stmt_rows").await;
    let session = Session::new(harness::connect().await, schema.clone());

    // created_at as integer: stream_read's rows no longer decode.
    exec(
        &admin,
        &format!(
            "ALTER TABLE \"{schema}\".stream_events ALTER COLUMN created_at TYPE integer; \
             INSERT INTO \"{schema}\".stream_events (stream, payload, created_at) VALUES ('s', '', 1)"
        ),
    )
    .await;
    let err = session
        .run(&streams::Read {
            stream: "s",
            offset: 0,
            limit: 10,
        })
        .await
        .expect_err("created_at is no bigint");
    assert!(
        matches!(err.kind(), StatementErrorKind::Row(row) if row.column() == "created_at"),
        "{err:?}"
    );
    let shown = err.to_string();
    assert!(
        shown.starts_with(
            "statement stream_read failed: cannot read column stream_events.created_at from the row: "
        ) && shown.contains("int4"),
        "{shown}"
    );

    // A trigger that drops every insert: enqueue returns no row.
    exec(
        &admin,
        &format!(
            "CREATE FUNCTION \"{schema}\".drop_row() RETURNS trigger LANGUAGE plpgsql \
             AS $$ BEGIN RETURN NULL; END $$; \
             CREATE TRIGGER drop_row BEFORE INSERT ON \"{schema}\".jobs \
             FOR EACH ROW EXECUTE FUNCTION \"{schema}\".drop_row()"
        ),
    )
    .await;
    let err = session
        .run(&jobs::Enqueue {
            job: &job("q", NOW, NOW),
            now: NOW,
        })
        .await
        .expect_err("the insert was dropped");
    assert_eq!(
        err.to_string(),
        "statement enqueue failed: returned 0 rows where it returns exactly one row"
    );

    // Two checkpoints for one consumer (its key dropped): at most one expected.
    exec(
        &admin,
        &format!(
            "ALTER TABLE \"{schema}\".stream_offsets DROP CONSTRAINT stream_offsets_pkey; \
             INSERT INTO \"{schema}\".stream_offsets (stream, consumer, \"offset\") \
             VALUES ('s', 'c', 1), ('s', 'c', 2)"
        ),
    )
    .await;
    let err = session
        .run(&streams::ReadCheckpoint {
            stream: "s",
            consumer: "c",
        })
        .await
        .expect_err("two checkpoints");
    assert_eq!(
        err.to_string(),
        "statement checkpoint_read failed: returned 2 rows where it returns at most one row"
    );
}

/// A session's transaction runs its calls on the same connection with the
/// statements prepared so far: a rollback forgets its writes, a commit
/// keeps them, and nothing is prepared twice. VACUUM (which refuses a
/// transaction) runs through the session outside one.
#[tokio::test]
async fn a_session_transaction_commits_or_rolls_back_with_the_prepared_statements() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    let admin = harness::connect().await;
    let schema = engine_schema(&admin, "stmt_tx").await;
    let proxy = CountingProxy::start(&url).await;
    let mut session = Session::new(proxy.connect(&url).await, schema.clone());
    let offset = |offset| ConsumerOffset::new("s", "c", offset);
    let read = async |session: &Session| {
        session
            .run(&streams::ReadCheckpoint {
                stream: "s",
                consumer: "c",
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let moved = session
        .run(&streams::Checkpoint { offset: &offset(1) })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(moved, 1);

    let tx = session
        .transaction()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let moved = tx
        .run(&streams::Checkpoint { offset: &offset(5) })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(moved, 1);
    tx.rollback().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&session).await, Some(offset(1)));

    let tx = session
        .transaction()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    tx.run(&streams::Checkpoint { offset: &offset(7) })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Not yet visible to another connection.
    let elsewhere = Session::new(harness::connect().await, schema.clone());
    assert_eq!(read(&elsewhere).await, Some(offset(1)));
    tx.commit().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&elsewhere).await, Some(offset(7)));
    assert_eq!(read(&session).await, Some(offset(7)));

    let checkpoint = statements::streams::checkpoint(&schema, &offset(0));
    let parsed = proxy.statements();
    assert_eq!(
        parsed.iter().filter(|s| *s == checkpoint.sql()).count(),
        1,
        "the checkpoint was prepared more than once: {parsed:#?}"
    );

    session
        .run(&jobs::Vacuum)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A session for another schema name than its connection's tables is
/// refused at the first statement, naming it: the text names the schema.
#[tokio::test]
async fn a_session_on_a_schema_that_does_not_exist_names_the_statement() {
    if harness::skip_db_tests() {
        return;
    }
    let session = Session::new(
        harness::connect().await,
        SchemaName::new("no_such_engine_schema").unwrap_or_else(|e| panic!("{e}")),
    );
    let err = session
        .prepare_all()
        .await
        .expect_err("nothing to prepare against");
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE), "{err}");
    assert!(
        err.to_string()
            .contains("relation \"no_such_engine_schema."),
        "{err}"
    );
}
