//! The report: claim latency per phase with ratios, the upgrade's steps
//! with the claims that overlapped each, lock waits read from `pg_locks`,
//! the job ledger, and the machine's load; printed and written to
//! `target/bench-upgrade.md`. And the targets the run fails on.

use std::fmt::Write as _;
use std::time::Duration;

use schema_gen::upgrade::{Progress, TableLock, UpgradeOptions};

use crate::engines::{Kind, Phase, Sample};
use crate::{Part, Scale};

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Count, failed, p50, p99 and max (ms) of `samples`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub count: usize,
    pub failed: usize,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn stats<'a>(samples: impl Iterator<Item = &'a Sample>) -> Stats {
    let mut failed = 0;
    let mut lat: Vec<u64> = samples
        .inspect(|s| failed += usize::from(s.failed))
        .map(|s| s.latency_us)
        .collect();
    if lat.is_empty() {
        return Stats::default();
    }
    lat.sort_unstable();
    let at = |q: f64| ms(lat[((lat.len() - 1) as f64 * q).round() as usize]);
    Stats {
        count: lat.len(),
        failed,
        p50: at(0.5),
        p99: at(0.99),
        max: ms(*lat.last().unwrap_or(&0)),
    }
}

/// The claims (or reads) of `phase`.
fn phase_stats(samples: &[Sample], phase: Phase) -> Stats {
    stats(
        samples
            .iter()
            .filter(|s| s.phase == phase && matches!(s.kind, Kind::Claim | Kind::Read)),
    )
}

/// The longest statement of `kind` started in `phase`, in ms.
fn longest(samples: &[Sample], phase: Phase, kind: Kind) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.phase == phase && s.kind == kind)
        .map(|s| ms(s.latency_us))
        .max_by(f64::total_cmp)
}

/// The longest sample overlapping `[from, to]`, of `kinds`.
fn longest_in(samples: &[Sample], span: (u64, u64), kinds: &[Kind]) -> Option<Sample> {
    overlapping(samples, span.0, span.1)
        .filter(|s| kinds.contains(&s.kind))
        .max_by_key(|s| s.latency_us)
        .copied()
}

/// The phase each phase is compared with.
fn baseline(phase: Phase) -> Phase {
    match phase {
        Phase::Before | Phase::Expand | Phase::Expanded => Phase::Before,
        Phase::NewBefore | Phase::Contract => Phase::NewBefore,
        Phase::NaiveBefore | Phase::Naive | Phase::NaiveAfter => Phase::NaiveBefore,
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".to_owned()
    }
}

/// One step of the upgrade, from its progress events.
#[derive(Debug, Clone)]
pub struct StepRow {
    pub words: String,
    pub lock: TableLock,
    pub start_us: u64,
    pub end_us: u64,
    pub elapsed_ms: u64,
    pub retries: u32,
    pub batches: u32,
    pub rows: u64,
    pub skipped: bool,
    pub backfill: bool,
}

pub fn steps(events: &[(u64, Progress)]) -> Vec<StepRow> {
    let mut out: Vec<StepRow> = Vec::new();
    for (at, event) in events {
        match event {
            Progress::StepStarted { step, .. } => out.push(StepRow {
                words: format!("v{} {:?}: {}", step.version, step.phase, step.describe()),
                lock: step.lock(),
                start_us: *at,
                end_us: *at,
                elapsed_ms: 0,
                retries: 0,
                batches: 0,
                rows: 0,
                skipped: false,
                backfill: matches!(step.action, schema_gen::upgrade::Action::Backfill { .. }),
            }),
            Progress::StepSkipped { step } => out.push(StepRow {
                words: format!("v{} {:?}: {}", step.version, step.phase, step.describe()),
                lock: step.lock(),
                start_us: *at,
                end_us: *at,
                elapsed_ms: 0,
                retries: 0,
                batches: 0,
                rows: 0,
                skipped: true,
                backfill: false,
            }),
            Progress::StepDone { elapsed_ms, .. } => {
                if let Some(last) = out.last_mut() {
                    last.end_us = *at;
                    last.elapsed_ms = *elapsed_ms;
                }
            }
            Progress::LockRetry { .. } => {
                if let Some(last) = out.last_mut() {
                    last.retries += 1;
                }
            }
            Progress::Batch { rows, .. } => {
                if let Some(last) = out.last_mut() {
                    last.batches += 1;
                    last.rows += rows;
                }
            }
            // Waits that queue no one, the vacuum after a backfill, and
            // events added later: part of the step's elapsed time.
            _ => {}
        }
    }
    out
}

fn overlapping(samples: &[Sample], from: u64, to: u64) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |s| s.start_us <= to && s.end_us() >= from)
}

/// The upgrade's lock attempts that gave up (`Progress::LockRetry`) in
/// `span`: each queued every engine statement on the table for up to the
/// lock bound.
fn retries_in(part: &Part, span: (u64, u64)) -> String {
    if part.naive.is_some() {
        return "-".to_owned();
    }
    part.events
        .iter()
        .filter(|(at, e)| *at >= span.0 && *at <= span.1 && matches!(e, Progress::LockRetry { .. }))
        .count()
        .to_string()
}

/// A span's length in seconds.
fn secs(span: (u64, u64)) -> f64 {
    ms(span.1.saturating_sub(span.0)) / 1000.0
}

fn is_claimer(who: &str) -> bool {
    who.starts_with("upbench-old") || who.starts_with("upbench-new")
}

fn is_upgrader(who: &str) -> bool {
    who == "upbench-upgrade" || who == "upbench-naive"
}

/// The longest wait of a claim client that the upgrade's (or strawman's)
/// session blocked, in `[from, to]` (by the wait's start).
fn longest_claim_wait(part: &Part, from: u64, to: u64) -> Option<&crate::watch::Wait> {
    part.waits
        .iter()
        .filter(|w| {
            is_claimer(&w.who) && w.behind_upgrade && w.start_us >= from && w.start_us <= to
        })
        .max_by(|a, b| a.seen_ms.total_cmp(&b.seen_ms))
}

fn wait_words(w: Option<&crate::watch::Wait>) -> String {
    w.map_or_else(
        || "none seen".to_owned(),
        |w| {
            format!(
                "{:.0} ms ({}'s {} on a {} {}, behind: {})",
                w.seen_ms, w.who, w.query, w.locktype, w.mode, w.blockers
            )
        },
    )
}

fn load_words(load: &[f64]) -> String {
    if load.is_empty() {
        return "unknown".to_owned();
    }
    let mean = load.iter().sum::<f64>() / load.len() as f64;
    let max = load.iter().copied().fold(0.0, f64::max);
    let min = load.iter().copied().fold(f64::MAX, f64::min);
    format!("{mean:.1} mean ({min:.1} .. {max:.1})")
}

pub fn render(
    scale: &Scale,
    version: &str,
    load_before: Option<f64>,
    parts: &[Part],
    took: Duration,
) -> String {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let bound = UpgradeOptions::default().lock_timeout;
    let _ = writeln!(
        out,
        "# alkstore-schema upgrade benchmark ({} scale)\n\nPostgreSQL {version}; {} jobs in \
         version 1 (e63468a); {} claim clients; {:.1} s phases; {cores} cores, 1-minute load \
         average {} at the start; {:.0} s in all. `UpgradeOptions::default()`: lock bound {} ms, \
         batches of {} keys.\n",
        scale.name,
        scale.jobs,
        scale.clients,
        scale.phase.as_secs_f64(),
        load_before.map_or_else(|| "unknown".to_owned(), |l| format!("{l:.1}")),
        took.as_secs_f64(),
        bound.as_millis(),
        UpgradeOptions::default().batch_size,
    );

    // Claim latency per phase.
    let _ = writeln!(
        out,
        "## Claim latency per phase\n\nA version 1 claim is `BEGIN`, `claim` (one job), \
         `claim_mark`, `COMMIT` (4 round trips); this release's is `promote` + `claim` pipelined \
         (1 round trip). Ratios are against the part's steady phase before it (marked 1.0x).\n"
    );
    let _ = writeln!(
        out,
        "| part | phase | claims | failed | p50 | p99 | max | p50 / before | p99 / before | max / before | longest enqueue | longest ack |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for part in parts {
        for phase in Phase::ALL {
            let s = phase_stats(&part.logs.statements, phase);
            if s.count == 0 {
                continue;
            }
            let b = phase_stats(&part.logs.statements, baseline(phase));
            let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} ms | {:.2} ms | {:.1} ms | {} | {} | {} | {} | {} |",
                part.name,
                phase.label(),
                s.count,
                s.failed,
                s.p50,
                s.p99,
                s.max,
                ratio(s.p50, b.p50),
                ratio(s.p99, b.p99),
                ratio(s.max, b.max),
                opt(longest(&part.logs.statements, phase, Kind::Enqueue)),
                opt(longest(&part.logs.statements, phase, Kind::Ack)),
            );
        }
    }

    // Plain reads.
    let _ = writeln!(
        out,
        "\n## A plain read (version 1's `expired_claims`, every 50 ms, until version 1's loop stops: none beneath the contract)\n\n| part | phase | reads | failed | p50 | max |\n|---|---|---:|---:|---:|---:|"
    );
    for part in parts {
        for phase in Phase::ALL {
            let s = phase_stats(&part.logs.reads, phase);
            if s.count == 0 {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} ms | {:.1} ms |",
                part.name,
                phase.label(),
                s.count,
                s.failed,
                s.p50,
                s.max
            );
        }
    }

    // Headline: everything that overlapped each upgrade's span, whatever
    // phase it started in.
    let online = parts.iter().find(|p| p.name == "online");
    let naive = parts.iter().find(|p| p.name == "naive");
    let spans: Vec<(&str, Option<&Part>, (u64, u64))> = vec![
        (
            "online `upgrade` (expand)",
            online,
            online.map_or((0, 0), |p| p.expand_us),
        ),
        (
            "online `contract`",
            online,
            online.map_or((0, 0), |p| p.contract_us),
        ),
        (
            "strawman (one transaction)",
            naive,
            naive.map_or((0, 0), |p| p.expand_us),
        ),
    ];
    let _ = writeln!(
        out,
        "\n## The longest stall under each upgrade\n\nEvery claim, enqueue, ack and plain read \
         whose span overlapped the upgrade's, whatever phase it started in. Lock waits are read \
         from `pg_locks` every 10 ms (a lower bound), counting those the upgrading session was \
         among the blockers of (`pg_blocking_pids`).\n"
    );
    let _ = writeln!(
        out,
        "| | time | longest claim | longest loop statement | longest plain read | longest wait behind the upgrade (a loop client) | claims overlapping / failed | lock attempts given up |\n|---|---:|---:|---:|---:|---|---:|---:|"
    );
    let mut maxima = Vec::new();
    for (label, part, span) in &spans {
        let Some(p) = part else { continue };
        if span.1 <= span.0 {
            continue;
        }
        let all = &p.logs.statements;
        let claim = longest_in(all, *span, &[Kind::Claim]);
        let any = longest_in(all, *span, &[Kind::Claim, Kind::Enqueue, Kind::Ack]);
        let read = longest_in(&p.logs.reads, *span, &[Kind::Read]);
        let wait = longest_claim_wait(p, span.0, span.1);
        let claims = stats(overlapping(all, span.0, span.1).filter(|s| s.kind == Kind::Claim));
        maxima.push((*label, any.map_or(0.0, |s| ms(s.latency_us))));
        let f = |s: Option<Sample>| {
            s.map_or_else(|| "-".to_owned(), |s| format!("{:.1} ms", ms(s.latency_us)))
        };
        let any_words = any.map_or_else(
            || "-".to_owned(),
            |s| format!("{:.1} ms ({:?})", ms(s.latency_us), s.kind),
        );
        let time = match &p.naive {
            Some(r) => format!(
                "{:.1} s ({:.1} s holding ACCESS EXCLUSIVE)",
                r.total_ms / 1000.0,
                r.exclusive_ms / 1000.0
            ),
            None => format!("{:.1} s", ms(span.1 - span.0) / 1000.0),
        };
        let _ = writeln!(
            out,
            "| {label} | {time} | {} | {any_words} | {} | {} | {} / {} | {} |",
            f(claim),
            f(read),
            wait_words(wait),
            claims.count,
            claims.failed,
            retries_in(p, *span),
        );
    }
    if let (Some((_, online_max)), Some((_, naive_max))) = (
        maxima.iter().find(|(l, _)| l.contains("expand")),
        maxima.iter().find(|(l, _)| l.contains("strawman")),
    ) && *online_max > 0.0
    {
        let _ = writeln!(
            out,
            "\nThe strawman's longest stall of a loop statement is **{:.0}x** the online \
             expand's ({naive_max:.1} ms against {online_max:.1} ms).",
            naive_max / online_max,
        );
    }

    // Steps.
    if let Some(p) = online {
        let rows = steps(&p.events);
        let _ = writeln!(
            out,
            "\n## The online upgrade, step by step\n\n`elapsed` is the step's own \
             `Progress::StepDone::elapsed_ms`; the claims are the version 1 claims (expand) or \
             this release's (contract) whose span overlapped the step; the wait is the longest \
             `pg_locks` wait of a claim client that the upgrade's session blocked, started \
             during the step.\n"
        );
        let _ = writeln!(
            out,
            "| step | declared lock | at (s of the run) | elapsed | lock retries | claims | their p50 | longest claim | longest loop statement | longest wait behind it |\n|---|---|---|---:|---:|---:|---:|---:|---:|---|"
        );
        for row in &rows {
            if row.skipped {
                let _ = writeln!(
                    out,
                    "| {} | {:?} | {:.1} | skipped (already done) | | | | | | |",
                    row.words,
                    row.lock,
                    ms(row.start_us) / 1000.0
                );
                continue;
            }
            let s = stats(
                overlapping(&p.logs.statements, row.start_us, row.end_us)
                    .filter(|s| s.kind == Kind::Claim),
            );
            let any = longest_in(
                &p.logs.statements,
                (row.start_us, row.end_us),
                &[Kind::Claim, Kind::Enqueue, Kind::Ack],
            )
            .map_or_else(
                || "-".to_owned(),
                |s| format!("{:.1} ms ({:?})", ms(s.latency_us), s.kind),
            );
            let _ = writeln!(
                out,
                "| {} | {:?} | {:.1} .. {:.1} | {} ms | {} | {} | {:.2} ms | {:.1} ms | {any} | {} |",
                row.words,
                row.lock,
                ms(row.start_us) / 1000.0,
                ms(row.end_us) / 1000.0,
                row.elapsed_ms,
                row.retries,
                s.count,
                s.p50,
                s.max,
                wait_words(longest_claim_wait(p, row.start_us, row.end_us)),
            );
        }
        let in_steps: u64 = rows.iter().map(|r| r.elapsed_ms).sum();
        let _ = writeln!(
            out,
            "\n`upgrade` took {:.1} s in all and `contract` {:.1} s; {:.1} s of that was outside \
             the steps (catalog reads before each step, the version records, the final \
             verification).",
            secs(p.expand_us),
            secs(p.contract_us),
            (secs(p.expand_us) + secs(p.contract_us) - in_steps as f64 / 1000.0).max(0.0)
        );
        for row in rows.iter().filter(|r| r.backfill) {
            let secs = row.elapsed_ms as f64 / 1000.0;
            let _ = writeln!(
                out,
                "Backfill `{}`: {} rows in {} batches, {:.1} s: **{:.0} rows/s**.",
                row.words,
                row.rows,
                row.batches,
                secs,
                if secs > 0.0 {
                    row.rows as f64 / secs
                } else {
                    0.0
                }
            );
        }
        let up_waits: Vec<_> = p.waits.iter().filter(|w| is_upgrader(&w.who)).collect();
        let longest = up_waits
            .iter()
            .max_by(|a, b| a.seen_ms.total_cmp(&b.seen_ms));
        let _ = writeln!(
            out,
            "\nThe upgrade's own session waited for a lock {} times (sampled); the longest: {}.",
            up_waits.len(),
            wait_words(longest.copied())
        );
    }
    if let Some(r) = naive.and_then(|p| p.naive.as_ref()) {
        let _ = writeln!(
            out,
            "\n## The strawman's transaction (the benchmark's own SQL, `naive.rs`: not product \
             SQL)\n\n| statement | ms |\n|---|---:|"
        );
        for (what, t) in &r.statements {
            let _ = writeln!(out, "| {what} | {t:.1} |");
        }
    }

    // Ledger.
    let _ = writeln!(
        out,
        "\n## Jobs: lost or doubled\n\n| part | seeded | enqueued | acked | left | lost | claimed twice | acked twice | acked yet left | unknown | failed statements |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for p in parts {
        let l = &p.ledger;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.name,
            l.seeded,
            l.enqueued,
            l.acked,
            l.left,
            l.lost,
            l.claimed_twice,
            l.acked_twice,
            l.acked_but_left,
            l.unknown,
            p.logs.failures.len()
        );
    }
    for p in parts {
        if p.logs.failures.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "\nFailed statements, {} part (first 5 of {}):",
            p.name,
            p.logs.failures.len()
        );
        for (phase, msg) in p.logs.failures.iter().take(5) {
            let _ = writeln!(out, "- {}: {msg}", phase.label());
        }
        for phase in Phase::ALL {
            let n = p
                .logs
                .failures
                .iter()
                .filter(|(ph, _)| *ph == phase)
                .count();
            if n > 0 {
                let _ = writeln!(out, "- {n} during: {}", phase.label());
            }
        }
    }
    let _ = writeln!(out, "\n## `jobs` and autovacuum\n");
    for p in parts {
        for (when, state) in &p.table {
            let _ = writeln!(out, "- {}, {when}: {state}", p.name);
        }
        for a in &p.autovacuums {
            let _ = writeln!(
                out,
                "- {}: an autovacuum worker ran `{}` from {:.1} s to {:.1} s of the run",
                p.name,
                a.query,
                ms(a.from_us) / 1000.0,
                ms(a.to_us) / 1000.0
            );
        }
    }
    let _ = writeln!(out, "\n## Afterwards, and the machine\n");
    for p in parts {
        let _ = writeln!(
            out,
            "- {}: seeded in {:.1} s; `check` status after: {}; load average during the part: {}.",
            p.name,
            p.seed_secs,
            p.status,
            load_words(&p.load)
        );
    }
    out
}

pub fn finish(text: &str) {
    println!("\n{text}");
    let path = harness::paths::cargo_target_dir().join("bench-upgrade.md");
    match std::fs::write(&path, text) {
        Ok(()) => eprintln!("report written to {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// The online part's targets the run fails on: no failed statement, no job
/// lost or doubled, no claim waiting longer than the lock bound.
pub fn problems(parts: &[Part]) -> Vec<String> {
    let bound = UpgradeOptions::default().lock_timeout.as_secs_f64() * 1000.0;
    // A statement queued behind the upgrade's lock request waits up to the
    // bound, then runs itself.
    let allowed = bound * 1.25;
    let mut out = Vec::new();
    let Some(p) = parts.iter().find(|p| p.name == "online") else {
        return out;
    };
    if let Some((phase, msg)) = p.logs.failures.first() {
        out.push(format!(
            "{} statements failed; the first, {}: {msg}",
            p.logs.failures.len(),
            phase.label()
        ));
    }
    if !p.ledger.clean() {
        out.push(format!("jobs lost or doubled: {:?}", p.ledger));
    }
    for (what, span) in [("`upgrade`", p.expand_us), ("`contract`", p.contract_us)] {
        if let Some(s) = longest_in(
            &p.logs.statements,
            span,
            &[Kind::Claim, Kind::Enqueue, Kind::Ack],
        ) && ms(s.latency_us) > allowed
        {
            out.push(format!(
                "a loop statement ({:?}) took {:.0} ms during {what}, longer than the lock bound \
                 ({bound:.0} ms) and a quarter",
                s.kind,
                ms(s.latency_us)
            ));
        }
    }
    if let Some(w) = longest_claim_wait(p, 0, u64::MAX)
        && w.seen_ms > allowed
    {
        out.push(format!(
            "a claim waited {:.0} ms behind the upgrade's session ({} {} {}), longer than the \
             lock bound ({bound:.0} ms) and a quarter",
            w.seen_ms, w.who, w.locktype, w.mode
        ));
    }
    out
}
