//! Every step takes at most the lock it declares: a watcher on a thread of
//! its own holds the step's table against every mode stronger than declared
//! and reads `pg_locks` while the step runs.

use super::*;

/// PostgreSQL's table lock modes, weakest first: a mode conflicts with a
/// held one by this table of PostgreSQL's, and a step that declares a level
/// may take any mode up to it.
const MODES: [&str; 8] = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
];

/// A mode's strength (1 for `ACCESS SHARE` to 8 for `ACCESS EXCLUSIVE`).
fn strength(mode: &str) -> usize {
    MODES
        .iter()
        .position(|m| *m == mode)
        .map_or(usize::MAX, |i| i + 1)
}

/// The strongest mode a declared level allows.
fn allowed(level: TableLock) -> usize {
    match level {
        TableLock::None => strength("AccessShareLock"),
        TableLock::RowExclusive => strength("RowExclusiveLock"),
        TableLock::ShareUpdateExclusive => strength("ShareUpdateExclusiveLock"),
        TableLock::AccessExclusive => strength("AccessExclusiveLock"),
    }
}

/// What the watcher holds on the step's table while the step runs: the
/// weakest mode that conflicts with every mode stronger than the step
/// declares, and with none it declares. A stronger request then waits
/// behind the watcher, which sees it waiting before it lets it through:
/// a stronger lock than declared is seen however brief the step.
fn held_against(level: TableLock) -> &'static str {
    match level {
        // ROW EXCLUSIVE conflicts with SHARE and up, not with SHARE UPDATE
        // EXCLUSIVE and below.
        TableLock::ShareUpdateExclusive => "ROW EXCLUSIVE",
        // ACCESS SHARE conflicts with ACCESS EXCLUSIVE only: the step waits,
        // visibly, and is let through.
        TableLock::AccessExclusive => "ACCESS SHARE",
        // SHARE UPDATE EXCLUSIVE conflicts with itself and up.
        TableLock::None | TableLock::RowExclusive => "SHARE UPDATE EXCLUSIVE",
    }
}

/// Whose a relation the upgrader locked is, for one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// The step's table: held to the step's level.
    Table,
    /// An index of the step's table: held to the step's level.
    TableIndex,
    /// The index the step builds or drops, while no engine statement can
    /// reach it (not yet committed, or already dead): any mode blocks no one.
    OwnUnreachable,
    /// A relation not yet committed (the step is creating it).
    Unborn,
    /// Another engine table or its index: at most `ACCESS SHARE`.
    Other,
}

/// One lock of the upgrader's seen while a step ran.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenLock {
    relation: String,
    mode: String,
    granted: bool,
    whose: Whose,
}

/// What the watcher saw of one step.
#[derive(Debug, Clone)]
struct StepWatch {
    step: Step,
    locks: Vec<SeenLock>,
    /// The upgrader was seen waiting behind the watcher's hold, for these
    /// modes on these relations (then let through).
    waited_for: Vec<SeenLock>,
}

enum ToWatcher {
    /// A step is about to run: hold its table, then say so.
    Step(Box<Step>, std::sync::mpsc::Sender<()>),
    /// The upgrade is over.
    Finish,
}

#[derive(Debug, Clone)]
struct Relation {
    name: String,
    table: Option<String>,
    live: bool,
}

/// The schema's relations by oid: name, the table of an index, and whether
/// an index is live (engine statements open it).
async fn relations(watcher: &Client, schema: &str) -> BTreeMap<u32, Relation> {
    watcher
        .query(
            "SELECT c.oid, c.relname::text, t.relname::text, COALESCE(x.indislive, true)
             FROM pg_class c
             LEFT JOIN pg_index x ON x.indexrelid = c.oid
             LEFT JOIN pg_class t ON t.oid = x.indrelid
             WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
        .iter()
        .map(|r| {
            (
                r.get::<_, u32>(0),
                Relation {
                    name: r.get(1),
                    table: r.get(2),
                    live: r.get(3),
                },
            )
        })
        .collect()
}

/// Takes the hold for `step`: its table in [`held_against`] its level, every
/// other engine table in `SHARE UPDATE EXCLUSIVE` (a step takes nothing
/// stronger than `ACCESS SHARE` there). `NOWAIT`, so the hold never queues
/// ahead of the step; `false` when a lock is not free right now.
async fn hold(blocker: &Client, schema: &str, step: &Step) -> bool {
    let tables: Vec<String> = blocker
        .query(
            "SELECT relname::text FROM pg_class
             WHERE relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
               AND relkind = 'r' AND relname <> 'schema_versions'",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    let quoted = |t: &str| format!("\"{schema}\".\"{t}\"");
    let mut sql = String::from("BEGIN;");
    let others: Vec<String> = tables
        .iter()
        .filter(|t| **t != step.table)
        .map(|t| quoted(t))
        .collect();
    if !others.is_empty() {
        sql.push_str(&format!(
            " LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;",
            others.join(", ")
        ));
    }
    if tables.contains(&step.table) {
        sql.push_str(&format!(
            " LOCK TABLE {} IN {} MODE NOWAIT;",
            quoted(&step.table),
            held_against(step.lock())
        ));
    }
    if blocker.batch_execute(&sql).await.is_ok() {
        return true;
    }
    let _ = blocker.batch_execute("ROLLBACK").await;
    false
}

/// The watcher: on its own thread and runtime, beside the upgrade. Before
/// each step runs it takes the step's hold (the step waits for the
/// handshake); while the step runs it reads `pg_locks` for the upgrader,
/// and lets the upgrader through whenever it waits behind the hold, taking
/// the hold again as soon as it is free.
fn watch(
    schema: SchemaName,
    upgrader: i32,
    commands: std::sync::mpsc::Receiver<ToWatcher>,
) -> Vec<StepWatch> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("the watcher's runtime: {e}"));
    runtime.block_on(async move {
        let schema = schema.as_str();
        let watcher = harness::connect().await;
        let blocker = harness::connect().await;
        exec(&blocker, "SET lock_timeout = '30s'").await;
        let blocker_pid = harness::upgrade::backend_pid(&blocker).await;
        let mut watches: Vec<StepWatch> = Vec::new();
        let mut holding = false;
        loop {
            match commands.try_recv() {
                Ok(ToWatcher::Step(step, ack)) => {
                    if holding {
                        exec(&blocker, "COMMIT").await;
                    }
                    // The upgrader holds nothing between two steps: the
                    // hold is free but for an autovacuum, which yields.
                    let deadline = std::time::Instant::now() + Duration::from_secs(30);
                    while !hold(&blocker, schema, &step).await {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "the watcher could not take its hold before {}",
                            step.describe()
                        );
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    holding = true;
                    watches.push(StepWatch {
                        step: *step,
                        locks: Vec::new(),
                        waited_for: Vec::new(),
                    });
                    let _ = ack.send(());
                }
                Ok(ToWatcher::Finish) | Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            let Some(current) = watches.last_mut() else {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            };
            if !holding {
                holding = hold(&blocker, schema, &current.step).await;
            }
            // Before, the locks, after: an index the step builds is not
            // committed before a lock on it is seen; one it drops is dead
            // after.
            // Whether it waits behind the hold first, its locks next: a
            // request that waits behind the hold stays in pg_locks until the
            // hold goes, so the locks read next show it.
            let behind_us: bool = watcher
                .query_one(
                    "SELECT $2 = ANY(pg_blocking_pids($1))",
                    &[&upgrader, &blocker_pid],
                )
                .await
                .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
                .get(0);
            let before = relations(&watcher, schema).await;
            let locks = watcher
                .query(
                    "SELECT l.relation, l.mode, l.granted FROM pg_locks l
                     WHERE l.pid = $1 AND l.locktype = 'relation'
                       AND l.database = (SELECT oid FROM pg_database
                                         WHERE datname = current_database())",
                    &[&upgrader],
                )
                .await
                .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)));
            let after = relations(&watcher, schema).await;
            let own_index = match &current.step.action {
                Action::CreateIndex { index, .. } | Action::DropIndex { index } => Some(index),
                _ => None,
            };
            let mut unknown = Vec::new();
            for row in &locks {
                let (oid, mode, granted): (u32, String, bool) =
                    (row.get(0), row.get(1), row.get(2));
                let Some(relation) = before.get(&oid).or_else(|| after.get(&oid)) else {
                    unknown.push((oid, mode, granted));
                    continue;
                };
                let table = relation.table.as_deref().unwrap_or(&relation.name);
                if table == "schema_versions" {
                    continue;
                }
                let whose = if relation.name == current.step.table {
                    Whose::Table
                } else if table == current.step.table {
                    let live =
                        |rels: &BTreeMap<u32, Relation>| rels.get(&oid).is_some_and(|r| r.live);
                    if own_index == Some(&relation.name) && !(live(&before) && live(&after)) {
                        Whose::OwnUnreachable
                    } else {
                        Whose::TableIndex
                    }
                } else {
                    Whose::Other
                };
                let seen = SeenLock {
                    relation: relation.name.clone(),
                    mode,
                    granted,
                    whose,
                };
                if behind_us && !seen.granted && !current.waited_for.contains(&seen) {
                    current.waited_for.push(seen.clone());
                }
                if !current.locks.contains(&seen) {
                    current.locks.push(seen);
                }
            }
            // A relation in no schema's catalog yet is one the step creates;
            // one in another schema (pg_catalog, pg_toast) is not watched.
            if !unknown.is_empty() {
                let oids: Vec<u32> = unknown.iter().map(|(o, _, _)| *o).collect();
                let visible: Vec<u32> = watcher
                    .query("SELECT oid FROM pg_class WHERE oid = ANY($1)", &[&oids])
                    .await
                    .unwrap_or_else(|e| panic!("{}", harness::describe_error(&e)))
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                for (oid, mode, granted) in unknown {
                    if visible.contains(&oid) {
                        continue;
                    }
                    let seen = SeenLock {
                        relation: format!("uncommitted relation {oid}"),
                        mode,
                        granted,
                        whose: Whose::Unborn,
                    };
                    if !current.locks.contains(&seen) {
                        current.locks.push(seen);
                    }
                }
            }
            if behind_us && holding {
                // Seen waiting behind the hold: let it through.
                if !locks.iter().any(|row| !row.get::<_, bool>(2)) {
                    // Waiting for the hold's transaction itself (an index
                    // build or drop waits for the older lockers of its table).
                    current.waited_for.push(SeenLock {
                        relation: "the watcher's transaction".into(),
                        mode: String::new(),
                        granted: false,
                        whose: Whose::Table,
                    });
                }
                exec(&blocker, "COMMIT").await;
                holding = false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if holding {
            let _ = blocker.batch_execute("ROLLBACK").await;
        }
        watches
    })
}

/// The strongest lock each step holds or asks for, read from `pg_locks`
/// while it runs, is at most the one it declares: on its own table and that
/// table's indexes, the declared level; on the index it builds or drops,
/// anything while no engine statement can reach it (before the build
/// commits, after the drop has made it dead: `DROP INDEX CONCURRENTLY`
/// ends with a brief `ACCESS EXCLUSIVE` on the dead index); on every other
/// engine table, nothing beyond `ACCESS SHARE`.
///
/// The watcher runs beside the upgrade on a thread of its own. Before each
/// step runs (the progress callback waits for the handshake) it holds the
/// step's table in the weakest mode that conflicts with every mode stronger
/// than the declared one, and every other table in `SHARE UPDATE
/// EXCLUSIVE`: a stronger request waits behind the hold, so it is seen
/// however brief the step, before the watcher lets it through. An `ACCESS
/// EXCLUSIVE` step waits behind the hold (`ACCESS SHARE`) every time: each
/// is seen waiting.
///
/// Mutations this test catches (run by hand, then reverted): `CREATE INDEX`
/// without `CONCURRENTLY` (`ShareLock` on `jobs`, seen waiting), `DROP
/// INDEX` without `CONCURRENTLY` (`AccessExclusiveLock` on `jobs`).
#[tokio::test]
async fn each_step_takes_at_most_the_lock_it_declares() {
    if harness::skip_db_tests() {
        return;
    }
    let client = harness::connect().await;
    let schema = harness::unique_schema_name("up_locks");
    create_version(&client, &schema, 1).await;
    fill(&client, &schema, 1).await;

    let mut upgrader = harness::connect().await;
    let pid = harness::upgrade::backend_pid(&upgrader).await;
    let (to_watcher, commands) = std::sync::mpsc::channel::<ToWatcher>();
    let watcher = {
        let schema = schema.clone();
        std::thread::spawn(move || watch(schema, pid, commands))
    };
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut progress = {
        let to_watcher = to_watcher.clone();
        let started = started.clone();
        move |event: &Progress| {
            if let Progress::StepStarted { step, .. } = event {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (ack, acked) = std::sync::mpsc::channel();
                to_watcher
                    .send(ToWatcher::Step(Box::new(step.clone()), ack))
                    .unwrap_or_else(|e| panic!("the watcher is gone: {e}"));
                // Blocks this thread only: the watcher has its own, and the
                // upgrader is idle between two steps.
                acked
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|e| {
                        panic!(
                            "the watcher did not hold {} before it ran: {e}",
                            step.describe()
                        )
                    });
            }
        }
    };
    // An ACCESS EXCLUSIVE attempt waits up to 2 s behind the hold: the
    // watcher sees it and lets it through long before.
    let options = UpgradeOptions {
        lock_timeout: Duration::from_secs(2),
        lock_attempts: 20,
        batch_size: 200,
        wait_timeout: Duration::from_secs(30),
        ..bounded()
    };
    let expanded = within(
        RUN_LIMIT,
        "the watched upgrade",
        upgrade::upgrade(&mut upgrader, &schema, &options, &mut progress),
    )
    .await;
    let contracted = within(
        RUN_LIMIT,
        "the watched contract",
        upgrade::contract(&mut upgrader, &schema, &options, &mut progress),
    )
    .await;
    let _ = to_watcher.send(ToWatcher::Finish);
    let watches = watcher
        .join()
        .unwrap_or_else(|_| panic!("the watcher panicked"));
    expanded.unwrap_or_else(|e| panic!("{e}"));
    contracted.unwrap_or_else(|e| panic!("{e}"));

    assert_eq!(
        watches.len(),
        started.load(std::sync::atomic::Ordering::SeqCst),
        "every step that ran was held and watched"
    );
    let mut wrong = Vec::new();
    for watch in &watches {
        let declared = watch.step.lock();
        for seen in &watch.locks {
            let limit = match seen.whose {
                Whose::Table | Whose::TableIndex => allowed(declared),
                Whose::Other => allowed(TableLock::None),
                Whose::OwnUnreachable | Whose::Unborn => strength("AccessExclusiveLock"),
            };
            if strength(&seen.mode) > limit {
                wrong.push(format!(
                    "{}: took {} on {} ({:?}{}), declares {declared:?}",
                    watch.step.describe(),
                    seen.mode,
                    seen.relation,
                    seen.whose,
                    if seen.granted { "" } else { ", waiting" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let exclusive: Vec<&StepWatch> = watches
        .iter()
        .filter(|w| w.step.lock() == TableLock::AccessExclusive)
        .collect();
    assert!(exclusive.len() >= 3, "{watches:?}");
    for watch in exclusive {
        assert!(
            watch
                .waited_for
                .iter()
                .any(|s| s.whose == Whose::Table && s.mode == "AccessExclusiveLock"),
            "{} declares ACCESS EXCLUSIVE and was not seen waiting for it behind the hold: {:?}",
            watch.step.describe(),
            watch.waited_for
        );
    }
    assert_eq!(status(&client, &schema).await.state, VersionState::Current);
}
