//! What the benchmark watches beside the clients: lock waits read from
//! `pg_locks` (every 10 ms, each wait's `waitstart`, and whether the
//! upgrade's session is among the sessions blocking it), and the machine's
//! load average (every second), since the machine is shared.

use std::collections::HashMap;
use std::time::Duration;

use crate::engines::{Phase, Shared};

/// One lock wait, as long as it was seen.
#[derive(Debug, Clone)]
pub struct Wait {
    /// `application_name` of the waiting session (`upbench-old-3`, ...).
    pub who: String,
    pub mode: String,
    pub locktype: String,
    /// The waiting statement's first word (`DELETE`: an ack).
    pub query: String,
    /// The longest the wait was seen lasting (a lower bound of its length:
    /// sampled every 10 ms).
    pub seen_ms: f64,
    /// Whether the upgrade's session (or the strawman's) was among the
    /// sessions blocking it (`pg_blocking_pids`) when last seen.
    pub behind_upgrade: bool,
    /// Who blocked it when last seen: each blocking session's
    /// `application_name` (or `backend_type`, e.g. `autovacuum worker`) and
    /// the start of its statement.
    pub blockers: String,
    pub phase: Phase,
    /// When it started, in microseconds since the run's start (from the
    /// first sighting less the wait seen then).
    pub start_us: u64,
}

/// A stretch of time an autovacuum worker was seen working on the schema.
#[derive(Debug, Clone)]
pub struct Autovacuum {
    /// Its `query` (`autovacuum: VACUUM ANALYZE s.jobs`, ...).
    pub query: String,
    pub from_us: u64,
    pub to_us: u64,
}

/// What the sampler saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub waits: Vec<Wait>,
    pub autovacuums: Vec<Autovacuum>,
}

/// Samples `pg_locks` until `shared.stop`: every wait of a session whose
/// `application_name` starts with `upbench-`, keyed by session and wait
/// start (`upgrader` is the backend pid of the upgrading session); and the
/// autovacuum workers working on `schema`.
pub async fn lock_waits(shared: Shared, upgrader: i32, schema: String) -> Seen {
    let client = harness::connect().await;
    let sql = "SELECT l.pid, (extract(epoch FROM l.waitstart) * 1000000)::int8, \
                      a.application_name, l.mode, l.locktype, \
                      (extract(epoch FROM clock_timestamp() - l.waitstart) * 1000)::float8, \
                      $1::int4 = ANY(pg_blocking_pids(l.pid)), split_part(a.query, ' ', 1), \
                      (SELECT string_agg(coalesce(nullif(b.application_name, ''), b.backend_type) \
                                         || ': ' || left(b.query, 40), '; ') \
                       FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(l.pid))) \
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
               WHERE NOT l.granted AND l.waitstart IS NOT NULL \
                 AND a.application_name LIKE 'upbench-%'";
    let prepared = client
        .prepare(sql)
        .await
        .unwrap_or_else(|e| panic!("prepare the lock sampler: {}", harness::describe_error(&e)));
    let autovacuum = client
        .prepare(
            "SELECT query FROM pg_stat_activity \
             WHERE backend_type = 'autovacuum worker' AND query LIKE '%' || $1 || '%'",
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "prepare the autovacuum sampler: {}",
                harness::describe_error(&e)
            )
        });
    let mut waits: HashMap<(i32, i64), Wait> = HashMap::new();
    let mut autovacuums: Vec<Autovacuum> = Vec::new();
    while !shared.stopped() {
        let phase = shared.phase();
        if let Ok(rows) = client.query(&autovacuum, &[&schema]).await {
            let now = shared.now_us();
            for row in rows {
                let query: String = row.get(0);
                match autovacuums
                    .iter_mut()
                    .rev()
                    .find(|a| a.query == query && now.saturating_sub(a.to_us) < 200_000)
                {
                    Some(a) => a.to_us = now,
                    None => autovacuums.push(Autovacuum {
                        query,
                        from_us: now,
                        to_us: now,
                    }),
                }
            }
        }
        match client.query(&prepared, &[&upgrader]).await {
            Ok(rows) => {
                for row in rows {
                    let key = (row.get::<_, i32>(0), row.get::<_, i64>(1));
                    let seen_ms: f64 = row.get(5);
                    let behind: bool = row.get(6);
                    let entry = waits.entry(key).or_insert_with(|| Wait {
                        who: row.get(2),
                        mode: row.get(3),
                        locktype: row.get(4),
                        query: row.get(7),
                        blockers: row.get::<_, Option<String>>(8).unwrap_or_default(),
                        seen_ms,
                        behind_upgrade: behind,
                        phase,
                        start_us: shared.now_us().saturating_sub((seen_ms * 1000.0) as u64),
                    });
                    if seen_ms >= entry.seen_ms {
                        entry.seen_ms = seen_ms;
                        if let Some(b) = row.get::<_, Option<String>>(8) {
                            entry.blockers = b;
                        }
                    }
                    entry.behind_upgrade |= behind;
                }
            }
            Err(e) => eprintln!("lock sampler: {}", harness::describe_error(&e)),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Seen {
        waits: waits.into_values().collect(),
        autovacuums,
    }
}

/// The 1-minute load average, every second, until `shared.stop`.
pub async fn load(shared: Shared) -> Vec<f64> {
    let mut out = Vec::new();
    while !shared.stopped() {
        if let Some(l) = load_now() {
            out.push(l);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    out
}

/// The 1-minute load average now.
pub fn load_now() -> Option<f64> {
    harness::bench::load_1m()
}
