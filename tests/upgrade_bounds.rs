//! The dry run prints the bounds the executor runs: the script of
//! `schema-gen upgrade --dry-run` and the statements `upgrade` sends (seen
//! on the wire by the counting proxy) are read the way PostgreSQL reads
//! them, and every statement that changes something runs under the same
//! `lock_timeout` and `statement_timeout` in both, for the expand and the
//! contract of a version-1 database with rows to backfill.

use harness::history::create_version;
use harness::wire::CountingProxy;
use harness::{exec, rows};
use schema_gen::upgrade::{self, Progress, UpgradeOptions};
use schema_model::SchemaName;

/// A statement that changes something, and the bounds it ran under.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bounded {
    statement: String,
    lock_timeout: Option<String>,
    statement_timeout: Option<String>,
}

/// Follows `SET`, `SET LOCAL`, `RESET`, `BEGIN` and `COMMIT` through
/// `texts` (each a simple query, a Parse message's text, or a psql script)
/// the way the server applies them, and lists each statement that changes
/// something with the bounds in force when it ran.
fn bounded_work<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<Bounded> {
    let mut session: [Option<String>; 2] = [None, None];
    let mut local: [Option<String>; 2] = [None, None];
    let mut in_block = false;
    let mut out = Vec::new();
    for text in texts {
        for statement in statements(text) {
            let upper = statement.to_uppercase();
            let setting = |name: &str| -> Option<usize> {
                ["lock_timeout", "statement_timeout"]
                    .iter()
                    .position(|s| *s == name)
            };
            let words: Vec<&str> = statement.split_whitespace().collect();
            match words.as_slice() {
                ["BEGIN"] => in_block = true,
                ["COMMIT"] | ["ROLLBACK"] => {
                    in_block = false;
                    local = [None, None];
                }
                ["SET", "LOCAL", name, "=", value] => {
                    if let Some(at) = setting(name) {
                        local[at] = Some(value.trim_matches('\'').to_owned());
                    }
                }
                ["SET", name, "=", value] => {
                    if let Some(at) = setting(name) {
                        session[at] = Some(value.trim_matches('\'').to_owned());
                    }
                }
                ["RESET", name] => {
                    if let Some(at) = setting(name) {
                        session[at] = None;
                    }
                }
                _ if [
                    "ALTER", "CREATE", "DROP", "COMMENT", "UPDATE", "VACUUM", "INSERT",
                ]
                .iter()
                .any(|verb| upper.starts_with(verb)) =>
                {
                    out.push(Bounded {
                        statement: statement.clone(),
                        lock_timeout: local[0].clone().or_else(|| session[0].clone()),
                        statement_timeout: local[1].clone().or_else(|| session[1].clone()),
                    });
                }
                // A backfill's batch statement, prepared by the script.
                _ if upper.starts_with("PREPARE ") => {
                    if let Some(at) = statement.find(" AS ") {
                        out.push(Bounded {
                            statement: statement[at + 4..].to_owned(),
                            lock_timeout: local[0].clone().or_else(|| session[0].clone()),
                            statement_timeout: local[1].clone().or_else(|| session[1].clone()),
                        });
                    }
                }
                _ => {}
            }
        }
        // A simple query outside a block is its own implicit transaction.
        if !in_block {
            local = [None, None];
        }
    }
    out
}

/// The statements of `text`, split at `;` outside string literals (and at
/// psql's `\gexec`), comment lines left out, whitespace collapsed.
fn statements(text: &str) -> Vec<String> {
    let text: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\gexec", ";");
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            ';' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

async fn seed(client: &tokio_postgres::Client, schema: &SchemaName) {
    // Due and unclaimed (the expand's backfill makes it ready), and claimed
    // (the contract's backfill makes it ready): both backfills change rows,
    // so both vacuum.
    exec(
        client,
        &format!(
            "INSERT INTO \"{s}\".jobs (queue, payload, priority, run_at, enqueued_at, \
             visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, \
             attempts, worker_id, claimed_at, claim_expires_at) VALUES \
             ('mail', '\\x00', 0, 1, 1, 30, 3, 1, 60, 0, NULL, NULL, NULL), \
             ('mail', '\\x00', 0, 1, 1, 30, 3, 1, 60, 1, 'w', 2, 4000000000)",
            s = schema.as_str()
        ),
    )
    .await;
}

#[tokio::test]
async fn the_dry_run_prints_the_bounds_the_executor_runs() {
    if harness::skip_db_tests() {
        return;
    }
    let url = harness::database_url();
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_bounds");
    create_version(&client, &schema, 1).await;
    seed(&client, &schema).await;
    let options = UpgradeOptions::default();
    let proxy = CountingProxy::start(&url).await;
    let mut upgrader = proxy.connect(&url).await;
    let mut quiet = |_: &Progress| {};

    for contract in [false, true] {
        let printed = upgrade::dry_run(&client, &schema, &options, contract)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        proxy.reset();
        let ran = if contract {
            upgrade::contract(&mut upgrader, &schema, &options, &mut quiet).await
        } else {
            upgrade::upgrade(&mut upgrader, &schema, &options, &mut quiet).await
        };
        let outcome = ran.unwrap_or_else(|e| panic!("{e}"));
        let sent = proxy.statements();
        let executed = bounded_work(sent.iter().map(String::as_str));
        let scripted = bounded_work([printed.script.as_str()]);
        assert_eq!(
            executed, scripted,
            "contract: {contract}: what the executor ran (left) and the script printed (right)"
        );
        assert_eq!(
            outcome.steps_run,
            printed.steps.len(),
            "contract: {contract}"
        );

        // What the bounds are: a transaction that blocks the engine waits at
        // most the lock bound and runs at most 10 s longer, whatever the
        // script says elsewhere; a build CONCURRENTLY and a vacuum wait long;
        // each backfill batch waits the lock bound.
        let under = |prefix: &str| -> Vec<(Option<&str>, Option<&str>)> {
            executed
                .iter()
                .filter(|b| b.statement.starts_with(prefix))
                .map(|b| (b.lock_timeout.as_deref(), b.statement_timeout.as_deref()))
                .collect()
        };
        let brief = (Some("1s"), Some("11s"));
        let long = (Some("600s"), Some("3610s"));
        let alters: Vec<&Bounded> = executed
            .iter()
            .filter(|b| b.statement.starts_with("ALTER TABLE"))
            .collect();
        assert!(!alters.is_empty(), "{executed:#?}");
        for alter in alters {
            // Validation scans under SHARE UPDATE EXCLUSIVE: it may wait long.
            let expected = if alter.statement.contains(" VALIDATE CONSTRAINT ") {
                long
            } else {
                brief
            };
            let found = (
                alter.lock_timeout.as_deref(),
                alter.statement_timeout.as_deref(),
            );
            assert_eq!(found, expected, "{}", alter.statement);
        }
        assert!(under("INSERT INTO").iter().all(|b| *b == brief));
        assert!(under("VACUUM").iter().all(|b| *b == long));
        assert_eq!(under("VACUUM").len(), 1, "{executed:#?}");
        let backfill = format!("UPDATE \"{}\".\"jobs\"", schema.as_str());
        assert_eq!(under(&backfill), [(Some("1s"), Some("3600s"))]);
        if !contract {
            assert_eq!(under("CREATE INDEX CONCURRENTLY"), [long, long]);
        } else {
            assert_eq!(under("DROP INDEX CONCURRENTLY"), [long]);
        }
    }
    let left: i64 = rows(
        &client,
        &format!(
            "SELECT count(*) FROM \"{}\".jobs WHERE NOT ready",
            schema.as_str()
        ),
    )
    .await[0]
        .get(0);
    assert_eq!(left, 0);
}

#[test]
fn the_reading_follows_set_local_and_session_settings() {
    let work = bounded_work([
        "SET LOCAL lock_timeout = '1s'; SELECT 1",
        "ALTER TABLE t ADD COLUMN a int",
        "BEGIN; SET LOCAL lock_timeout = '2s'; SET LOCAL statement_timeout = '3s';\nCOMMENT ON TABLE t IS 'a; b';\nCOMMIT",
        "SET lock_timeout = '4s'; SET statement_timeout = '5s'",
        "CREATE INDEX CONCURRENTLY i ON t (a)",
        "RESET lock_timeout; RESET statement_timeout",
        "VACUUM t",
    ]);
    let seen: Vec<(&str, Option<&str>, Option<&str>)> = work
        .iter()
        .map(|b| {
            (
                b.statement.as_str(),
                b.lock_timeout.as_deref(),
                b.statement_timeout.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ALTER TABLE t ADD COLUMN a int", None, None),
            ("COMMENT ON TABLE t IS 'a; b'", Some("2s"), Some("3s")),
            (
                "CREATE INDEX CONCURRENTLY i ON t (a)",
                Some("4s"),
                Some("5s")
            ),
            ("VACUUM t", None, None),
        ]
    );
}
