//! The product's claim path beside the floor, the peers and the claim-path
//! candidates, in one run: one claim of one job at 1 and 8 clients,
//! `synchronous_commit` off and on, every cell of a (size, mix) group
//! measured in interleaved rounds, with buffers, executor and planning time
//! and the plan cache's choices from EXPLAIN.
//!
//! The systems are `systems.rs`'s, the candidates `candidates.rs`'s.

use std::sync::Arc;
use std::time::Instant;

use tokio_postgres::Client;

use crate::candidates::PromoteClock;
use crate::designs::{self, FUTURE_AHEAD, Mix, NORMAL};
use crate::explain::{Explainer, Work};
use crate::latency::{Recorder, ms};
use crate::peers::Peers;
use crate::pool::{self, Commit, Conn, Limit, Worker, db_error};
use crate::report::{Report, Table};
use crate::systems::{Kind, System, label_of, open_for};
use crate::{Scale, count, exec, progress, ratio, times, unix_now};

// ---------------------------------------------------------------------------
// Claims beside the peers

struct ClaimWorker {
    conn: Conn,
    system: Arc<System>,
    worker: String,
    latency: Recorder,
    promote: PromoteClock,
}

impl ClaimWorker {
    async fn new(system: &Arc<System>, commit: Commit, worker: String) -> Self {
        Self {
            conn: open_for(system, commit).await,
            system: system.clone(),
            worker,
            latency: Recorder::new(),
            promote: PromoteClock::new(system.paced()),
        }
    }
}

impl Worker for ClaimWorker {
    async fn step(&mut self) -> Result<u64, String> {
        let now = unix_now();
        let path = self
            .system
            .claim(now, &self.worker, 1, self.promote.due(now));
        self.conn
            .prepare_all(&path.stmts)
            .await
            .map_err(|e| db_error("prepare claim", &e))?;
        let started = Instant::now();
        let rows = self
            .conn
            .pipeline(&path.stmts)
            .await
            .map_err(|e| db_error("claim", &e))?;
        self.latency.record(started.elapsed());
        // `SELECT 1` returns a row but claims nothing.
        Ok(match &*self.system {
            System::Cand(c, _) if !c.claims() => 0,
            _ => path.claimed(&rows).len() as u64,
        })
    }
}

/// One cell of the claim table: a system, a commit setting, a client count.
struct Cell {
    system: usize,
    commit: Commit,
    clients: usize,
    latency: Recorder,
    steps: u64,
    empty: u64,
}

pub struct VsClaim {
    pub label: String,
    pub kind: Kind,
    pub mix: Mix,
    pub size: u64,
    pub work: Work,
    /// (commit, clients) -> latency, steps, steps that found nothing.
    pub cells: Vec<(Commit, usize, Recorder, u64, u64)>,
}

impl VsClaim {
    pub fn p50(&self, commit: Commit, clients: usize) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.0 == commit && c.1 == clients)
            .and_then(|c| c.2.p50_ms())
    }

    pub fn p99(&self, commit: Commit, clients: usize) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.0 == commit && c.1 == clients)
            .and_then(|c| c.2.p99_ms())
    }
}

/// The systems of the claim comparison: the product, the floor, the peers
/// (when installed), then the candidates.
pub fn claim_kinds(with_peers: bool, scale: &Scale) -> Vec<Kind> {
    let mut kinds = vec![Kind::Product, Kind::Floor];
    if with_peers {
        kinds.extend([Kind::PgBoss, Kind::Graphile]);
    }
    kinds.extend(scale.cands.iter().map(|&c| Kind::Cand(c)));
    kinds
}

/// The claim comparison at every size of `scale.vs_sizes`, on the normal
/// and the hostile mix.
pub async fn run_claims(admin: &mut Client, scale: &Scale, peers: Option<&Peers>) -> Vec<VsClaim> {
    let mut out = Vec::new();
    for &size in &scale.vs_sizes {
        for mix in [NORMAL, FUTURE_AHEAD] {
            out.extend(claim_group(admin, scale, peers, size, mix).await);
        }
    }
    out
}

async fn claim_group(
    admin: &mut Client,
    scale: &Scale,
    peers: Option<&Peers>,
    size: u64,
    mix: Mix,
) -> Vec<VsClaim> {
    let kinds = claim_kinds(peers.is_some(), scale);
    let mut systems: Vec<Arc<System>> = Vec::new();
    let now = unix_now();
    for &kind in &kinds {
        // Candidates that change no DDL claim from the product's table.
        let shared = matches!(kind, Kind::Cand(c) if !c.own_table());
        let system = if shared {
            let Kind::Cand(c) = kind else { unreachable!() };
            let System::Product(schema) = &*systems[0] else {
                unreachable!("the product comes first")
            };
            System::Cand(c, schema.clone())
        } else {
            progress(&format!(
                "versus: {} / {} / {} jobs: creating and seeding",
                kind.name(),
                mix.name,
                count(size)
            ));
            let system = kind.create(admin, peers).await;
            system.seed(admin, size, &mix, now).await;
            system
        };
        systems.push(Arc::new(system));
    }
    // The seeding's dirty pages flushed now, not by a checkpoint during the
    // measurement (with fsync on it stalls whoever is being measured).
    exec(admin, "CHECKPOINT").await;
    progress(&format!(
        "versus: {} / {} jobs: warming up and explaining",
        mix.name,
        count(size)
    ));
    let mut works = Vec::new();
    for system in &systems {
        let mut warm = vec![ClaimWorker::new(system, Commit::Off, "bench-warmup".to_owned()).await];
        warm = pool::run(
            warm,
            Limit {
                steps: scale.claim_warmup,
                time: scale.claim_time,
            },
        )
        .await
        .workers;
        drop(warm);
        let (setup, fresh) = match &**system {
            System::Cand(c, _) => (c.session_setup(), c.unnamed()),
            _ => ("", false),
        };
        let mut explainer = Explainer::open_with(setup).await;
        if fresh {
            explainer = explainer.fresh();
        }
        let s = system.clone();
        let work = explainer
            .median(
                // With its promote, as the first claim of each second runs it.
                || s.claim(unix_now(), "bench-explain", 1, true).stmts,
                scale.explain_warmup,
                scale.explain_runs,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        works.push(work);
    }
    let mut cells = Vec::new();
    for (index, kind) in kinds.iter().enumerate() {
        let commits: &[Commit] = if matches!(kind, Kind::Cand(_)) {
            &[Commit::Off]
        } else {
            &[Commit::Off, Commit::On]
        };
        for &commit in commits {
            for clients in [1, 8] {
                cells.push(Cell {
                    system: index,
                    commit,
                    clients,
                    latency: Recorder::new(),
                    steps: 0,
                    empty: 0,
                });
            }
        }
    }
    progress(&format!(
        "versus: {} / {} jobs: measuring {} cells in {} rounds",
        mix.name,
        count(size),
        cells.len(),
        scale.vs_rounds
    ));
    for _ in 0..scale.vs_rounds {
        for cell in &mut cells {
            let mut workers = Vec::new();
            for c in 0..cell.clients {
                workers.push(
                    ClaimWorker::new(
                        &systems[cell.system],
                        cell.commit,
                        format!("bench-worker-{c}"),
                    )
                    .await,
                );
            }
            let per_client = if cell.clients == 1 {
                scale.claims_one
            } else {
                scale.claims_eight
            };
            let run = pool::run(
                workers,
                Limit {
                    steps: per_client.div_ceil(scale.vs_rounds),
                    time: scale.vs_cell_time,
                },
            )
            .await;
            cell.steps += run.steps;
            cell.empty += run.empty_steps;
            for w in &run.workers {
                cell.latency.merge(&w.latency);
            }
        }
    }
    let mut out = Vec::new();
    for (index, (kind, system)) in kinds.iter().zip(&systems).enumerate() {
        out.push(VsClaim {
            label: label_of(system),
            kind: *kind,
            mix,
            size,
            work: works[index].clone(),
            cells: cells
                .iter()
                .filter(|c| c.system == index)
                .map(|c| (c.commit, c.clients, c.latency.clone(), c.steps, c.empty))
                .collect(),
        });
    }
    let mut dropped: Vec<String> = Vec::new();
    for system in &systems {
        let schema = system.schema();
        if !dropped.contains(&schema) {
            designs::drop_schema(admin, &format!("\"{schema}\"")).await;
            dropped.push(schema);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The report

fn find<'a>(claims: &'a [VsClaim], kind: Kind, mix: &Mix, size: u64) -> Option<&'a VsClaim> {
    claims
        .iter()
        .find(|c| c.kind == kind && c.mix.name == mix.name && c.size == size)
}

pub fn report_claims(report: &mut Report, claims: &[VsClaim], scale: &Scale) {
    report.heading("Claim beside the floor and the peers");
    report.para(&format!(
        "One claim of one job, each client on its own connection, statements prepared; the \
         product's claim path as `Session::claim` sends it (promote pipelined before the claim, \
         one round trip, on the first claim of each second; the claim alone otherwise), its \
         EXPLAIN with the promote. Every system on its own table of the same jobs, seeded alike; all cells of a \
         table group measured in {} interleaved rounds. `off`/`on`: the clients' \
         `synchronous_commit`. Buffers: EXPLAIN (ANALYZE, BUFFERS) of the prepared statements, \
         median of {} runs after {} that settle the plan cache; WAL records / FPI / bytes: that run's \
         `EXPLAIN (WAL)` counts (the row versions, locks and index entries the path wrote; \
         FPI: full-page images, a page's first change after a checkpoint, about 8 KiB each and \
         counted in the bytes; the commit record not); server ms: that run's `Execution Time` summed over the path's \
         statements (the executor only: no parse, round trip or commit); the candidates' \
         planning ms: that run's `Planning Time` (a prepared statement's plan cache lookup, \
         and its planning when the cache builds a custom plan); plans generic/custom: what \
         the server's plan cache built for each statement over the EXPLAIN session's warm-up \
         and measured runs (`pg_prepared_statements`; `fresh`: an unnamed statement, \
         planned every time).",
        scale.vs_rounds, scale.explain_runs, scale.explain_warmup
    ));
    let mut table = Table::new(&[
        "mix",
        "jobs>",
        "system",
        "buffers / claim>",
        "WAL records / FPI / bytes>",
        "server ms>",
        "plans generic/custom",
        "indexes",
        "1 client p50, off>",
        "p99>",
        "8 clients p50, off>",
        "p99>",
        "1 client p50, on>",
        "8 clients p50, on>",
        "alkstore / this, 1 / 8 clients, off>",
    ]);
    for c in claims.iter().filter(|c| !matches!(c.kind, Kind::Cand(_))) {
        let ours = find(claims, Kind::Product, &c.mix, c.size);
        let r1 = ratio(
            ours.and_then(|o| o.p50(Commit::Off, 1)),
            c.p50(Commit::Off, 1),
        );
        let r8 = ratio(
            ours.and_then(|o| o.p50(Commit::Off, 8)),
            c.p50(Commit::Off, 8),
        );
        table.row(vec![
            c.mix.name.to_owned(),
            count(c.size),
            c.label.clone(),
            c.work.buffers.to_string(),
            wal(&c.work),
            format!("{:.3}", c.work.exec_ms),
            plan_cache(&c.work),
            indexes(&c.work),
            ms(c.p50(Commit::Off, 1)),
            ms(c.p99(Commit::Off, 1)),
            ms(c.p50(Commit::Off, 8)),
            ms(c.p99(Commit::Off, 8)),
            ms(c.p50(Commit::On, 1)),
            ms(c.p50(Commit::On, 8)),
            if c.kind == Kind::Product {
                String::new()
            } else {
                format!("{} / {}", times(r1), times(r8))
            },
        ]);
    }
    report.table(&table);
    claim_verdicts(report, claims, scale);

    report.heading("Where the claim path's time goes: candidates on the product's schema");
    report.para(
        "Alternatives to the product's claim path, on the product's own schema and seeded \
         table (the candidates that change its DDL on their own copy): `before` rows are the \
         statements the product shipped until it hid its estimated parameters, `cand` rows \
         are not shipped, `ref` rows are references; their SQL is \
         `tests/bench_hot_paths/candidates.rs` (the rest use the product's statements). `synchronous_commit` off. The last \
         columns compare with the product's claim path in the same round (below 1.00x: the \
         candidate is faster).",
    );
    let mut table = Table::new(&[
        "mix",
        "jobs>",
        "claim path",
        "buffers / claim [per statement]>",
        "WAL records / FPI / bytes>",
        "server execution ms [per statement]>",
        "planning ms>",
        "plans generic/custom",
        "1 client p50>",
        "8 clients p50>",
        "p99>",
        "this / product, 1 client>",
        "8 clients>",
        "this / floor, 1 client>",
        "8 clients>",
    ]);
    for c in claims
        .iter()
        .filter(|c| matches!(c.kind, Kind::Cand(_) | Kind::Product))
    {
        let ours = find(claims, Kind::Product, &c.mix, c.size);
        let floor = find(claims, Kind::Floor, &c.mix, c.size);
        let vs = |o: Option<&VsClaim>, clients| {
            times(ratio(
                c.p50(Commit::Off, clients),
                o.and_then(|o| o.p50(Commit::Off, clients)),
            ))
        };
        table.row(vec![
            c.mix.name.to_owned(),
            count(c.size),
            c.label.clone(),
            format!("{} {:?}", c.work.buffers, c.work.steps),
            wal(&c.work),
            format!(
                "{:.3} [{}]",
                c.work.exec_ms,
                c.work
                    .exec_steps
                    .iter()
                    .map(|t| format!("{t:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!("{:.3}", c.work.plan_ms),
            plan_cache(&c.work),
            ms(c.p50(Commit::Off, 1)),
            ms(c.p50(Commit::Off, 8)),
            ms(c.p99(Commit::Off, 8)),
            vs(ours, 1),
            vs(ours, 8),
            vs(floor, 1),
            vs(floor, 8),
        ]);
    }
    report.table(&table);
}

/// `records / full-page images / bytes` of the WAL a path's statements
/// wrote.
fn wal(work: &Work) -> String {
    format!(
        "{} / {} / {}",
        work.wal_records, work.wal_fpi, work.wal_bytes
    )
}

/// The claim targets of issue 24 for the product and for each candidate
/// that would ship (`LOOP_CANDS`): at 1 and 8 clients, normal mix,
/// `synchronous_commit` off, at most 0.8x the faster peer's p50 and 2x the
/// floor's; on the hostile mix at least 10x ahead of every peer.
fn claim_verdicts(report: &mut Report, claims: &[VsClaim], scale: &Scale) {
    let mut ours_kinds = vec![Kind::Product];
    ours_kinds.extend(crate::candidates::LOOP_CANDS.map(Kind::Cand));
    for &size in &scale.vs_sizes {
        for &kind in &ours_kinds {
            let Some(ours) = find(claims, kind, &NORMAL, size) else {
                continue;
            };
            for clients in [1, 8] {
                let mine = ours.p50(Commit::Off, clients);
                let peer = [Kind::PgBoss, Kind::Graphile]
                    .iter()
                    .filter_map(|&k| find(claims, k, &NORMAL, size))
                    .filter_map(|p| Some((p.p50(Commit::Off, clients)?, p.label.clone())))
                    .min_by(|a, b| a.0.total_cmp(&b.0));
                if let Some((best, label)) = peer {
                    let r = ratio(mine, Some(best));
                    report.verdict(
                        format!(
                            "{}: claim p50 <= 0.8x the faster peer's ({}, {}, {clients} \
                             client(s), off)",
                            ours.label,
                            count(size),
                            NORMAL.name
                        ),
                        format!("{} vs {} ({label}): {}", ms(mine), ms(Some(best)), times(r)),
                        r.is_some_and(|r| r <= 0.8),
                    );
                }
                if let Some(floor) = find(claims, Kind::Floor, &NORMAL, size) {
                    let theirs = floor.p50(Commit::Off, clients);
                    let r = ratio(mine, theirs);
                    report.verdict(
                        format!(
                            "{}: claim p50 <= 2x the floor's ({}, {}, {clients} client(s), off)",
                            ours.label,
                            count(size),
                            NORMAL.name
                        ),
                        format!("{} vs {}: {}", ms(mine), ms(theirs), times(r)),
                        r.is_some_and(|r| r <= 2.0),
                    );
                }
            }
            let Some(hostile) = find(claims, kind, &FUTURE_AHEAD, size) else {
                continue;
            };
            for peer in [Kind::PgBoss, Kind::Graphile] {
                let Some(them) = find(claims, peer, &FUTURE_AHEAD, size) else {
                    continue;
                };
                for clients in [1, 8] {
                    let r = ratio(
                        them.p50(Commit::Off, clients),
                        hostile.p50(Commit::Off, clients),
                    );
                    report.verdict(
                        format!(
                            "{}: {} / this >= 10 ({}, {}, {clients} client(s), off)",
                            hostile.label,
                            them.label,
                            count(size),
                            FUTURE_AHEAD.name
                        ),
                        times(r),
                        r.is_some_and(|r| r >= 10.0),
                    );
                }
            }
        }
    }
}

/// The plan cache's plans per statement, `generic/custom`, or `fresh`.
fn plan_cache(work: &Work) -> String {
    if work.plan_cache.is_empty() {
        return "fresh".to_owned();
    }
    work.plan_cache
        .iter()
        .map(|(g, c)| format!("{g}/{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn indexes(work: &Work) -> String {
    if work.sorts.is_empty() {
        work.indexes.join(", ")
    } else {
        format!(
            "{} **+ {}**",
            work.indexes.join(", "),
            work.sorts.join(", ")
        )
    }
}
