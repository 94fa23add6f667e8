//! Candidate claim paths on the product's schema: hand-written, labelled
//! alternatives to the product's claim path, measured beside it to find
//! where the time goes and what to ship. Every candidate's SQL is written
//! here and nowhere else (`plain_promote`, `plain_claim`, `narrow_claim`,
//! `literal_limit_claim`, `ack_in_claim`); a candidate that uses the
//! product's statements takes them from `product.rs`.
//!
//! The question most of them answered: the product's claim path spent
//! about half its time planning, because the server's plan cache built a
//! custom plan on every execution. A prepared statement gets a generic plan
//! (built once, reused) only when the generic plan's estimated cost is
//! below the average custom plan's plus a planning charge; `LIMIT $4`
//! (estimated as 10% of the rows) and the parameters in the predicates
//! (`run_at <= $2`: a third of the rows) made the generic estimate look far
//! worse than the custom ones, which know the values, so the cache replanned
//! for ever.
//! - *before: plain placeholders*: the statements as the product wrote them
//!   until it shipped the fix, kept to measure before and after in one run;
//! - *literal LIMIT*: the peers' way (pg-boss and graphile-worker write the
//!   batch size into the text): one statement text per batch size;
//! - *the product* (shipped, was the *hidden* candidate): every parameter
//!   the planner would estimate with sits in a scalar sub-select
//!   (`(SELECT CAST($3 AS text))`, `LIMIT (SELECT ...)`), which the planner
//!   never folds into a constant, custom plan or not: the custom plans know
//!   nothing the generic plan does not, their costs are equal, and the cache
//!   keeps the generic plan after its five custom ones, whatever the data;
//! - `plan_cache_mode = force_generic_plan` for the session (the reference,
//!   not shippable: it changes the plan of every statement the caller runs
//!   on that connection and is lost under transaction pooling), and the
//!   same as `SET LOCAL` inside `BEGIN ... COMMIT` around the path (it ends
//!   with the transaction);
//! - *unnamed*: the product's statements (and, before, the plain ones)
//!   sent unnamed (`query_typed`: Parse, Bind, Execute each time), as a
//!   session behind pgbouncer's transaction pooling must; the plan cache
//!   cannot help there at all: every execution is parsed and planned;
//! - *before: promote before every claim*: the claim path as the product
//!   sent it until `Session::claim` paced promote (the product now promotes
//!   on a queue's first claim of each unix second, and after a promote that
//!   filled its limit: `jobs::PromotePacer`, so most claims are one
//!   statement; this candidate was *promote once a second* until it
//!   measured better and shipped);
//! - index work and row width: without `jobs_claim_expiry_idx` (one index
//!   entry fewer per claim), `RETURNING id, payload, attempts`;
//! - *ack in the next claim*: a worker acks the jobs it finished in the
//!   statement that claims its next ones (`WITH acked AS (DELETE ...)
//!   UPDATE ...`): one statement, one round trip and one commit per step
//!   instead of two, as the floor's claim is its finish.
//!
//! Shapes that keep a generic plan must still plan well with the planner's
//! defaults: the claim's `id = ANY(ARRAY(...))` does (the pkey, one probe
//! per claimed id); the peers' `WITH next AS (...) UPDATE ... FROM next`
//! does not: with its limit hidden (estimated at 10% of the rows) its
//! generic plan is a merge join over the whole pkey (measured here: 1.4 to
//! 360 ms per claim at 1M jobs).

use schema_gen::statements::jobs::PromotePacer;
use schema_model::SchemaName;
use tokio_postgres::types::Type;

use crate::pool::{ClaimPath, Param, Stmt};
use crate::product;

/// A candidate claim path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cand {
    /// The product's statements on sessions with `SET plan_cache_mode =
    /// force_generic_plan`: what planning costs the claim path (the bound
    /// of what a generic plan saves; not shippable).
    SessionGeneric,
    /// The product's statements inside `BEGIN; SET LOCAL plan_cache_mode =
    /// force_generic_plan; ...; COMMIT`, all pipelined: a generic plan
    /// without a setting that outlives the claim.
    LocalGeneric,
    /// The product's promote, and its claim with the batch size written as
    /// a literal `LIMIT` (one statement text per batch size).
    LiteralLimit,
    /// Before: promote and claim as the product wrote them until it hid
    /// their estimated parameters (plain `$n`, `LIMIT $n`): the plan cache
    /// builds a custom plan on every call.
    Plain,
    /// Before: the product's statements, promote pipelined before every
    /// claim (as the product did until it paced promote).
    PromoteAlways,
    /// The product's promote, its claim returning only `id, payload,
    /// attempts`.
    Narrow,
    /// The product's statements on a copy of `jobs` without
    /// `jobs_claim_expiry_idx`.
    NoExpiryIndex,
    /// The product's statements sent unnamed (`query_typed`).
    Unnamed,
    /// [`Cand::Plain`] sent unnamed (before, behind a pooler).
    PlainUnnamed,
    /// [`Cand::PromoteAlways`] sent unnamed.
    PromoteAlwaysUnnamed,
    /// [`Cand::PromoteAlways`], the jobs a worker finished acked in the
    /// statement that claims its next ones.
    AckInClaim,
    /// The product's promote, and its claim updating the picked rows by
    /// `ctid` (a TID scan) instead of probing the primary key again.
    Ctid,
    /// [`Cand::Ctid`] on a copy of `jobs` without `jobs_claim_expiry_idx`:
    /// the least a claim can write that still takes the job out of the
    /// claim index (a reference: the lapsed-claim sweep reads that index).
    CtidNoExpiryIndex,
    /// The product's statements on a copy of `jobs` without its CHECK
    /// constraints: what PostgreSQL's checking them on every claim costs
    /// (a reference: they are the schema's guarantee on every row).
    NoChecks,
    /// The product's statements on a copy of `jobs` of its own with
    /// nothing changed: the control for the candidates on their own copy
    /// (the product's table is shared by the other candidates, so it has
    /// seen more claims).
    OwnCopy,
    /// The product's statements on a copy of `jobs` whose six
    /// single-column rules are domains instead of table CHECK constraints
    /// (checked only where a value is assigned: of them, the claim assigns
    /// `attempts`), the three multi-column rules left as they are.
    Domains,
    /// The product's statements on a copy of `jobs` whose nine CHECK
    /// constraints are one, calling a PL/pgSQL function of the whole row
    /// that raises a check violation carrying the broken rule's name (a
    /// small stored expression instead of 4.3 KB re-read on every claim).
    CheckFunction,
    /// `SELECT 1`: one round trip and nothing else.
    RoundTrip,
}

/// Every candidate of the claim comparison, in the report's order.
pub const CANDS: [Cand; 18] = [
    Cand::SessionGeneric,
    Cand::LocalGeneric,
    Cand::LiteralLimit,
    Cand::Plain,
    Cand::PromoteAlways,
    Cand::Narrow,
    Cand::NoExpiryIndex,
    Cand::Unnamed,
    Cand::PlainUnnamed,
    Cand::PromoteAlwaysUnnamed,
    Cand::AckInClaim,
    Cand::Ctid,
    Cand::CtidNoExpiryIndex,
    Cand::NoChecks,
    Cand::OwnCopy,
    Cand::Domains,
    Cand::CheckFunction,
    Cand::RoundTrip,
];

/// The candidates the loops, the burn-down and the held snapshot run beside
/// the product and the peers unless `ALKSTORE_BENCH_LOOP_CANDS` names others
/// (`none` for none): what would ship, on a direct connection and behind a
/// pooler.
pub const LOOP_CANDS: [Cand; 3] = [Cand::PromoteAlways, Cand::Plain, Cand::AckInClaim];

impl Cand {
    pub fn label(self) -> &'static str {
        match self {
            Cand::SessionGeneric => "ref: SET plan_cache_mode = force_generic_plan (session)",
            Cand::LocalGeneric => "cand: BEGIN; SET LOCAL plan_cache_mode ...; COMMIT",
            Cand::LiteralLimit => "cand: claim with a literal LIMIT",
            Cand::Plain => "before: plain placeholders (custom plan every call)",
            Cand::PromoteAlways => "before: promote before every claim",
            Cand::Narrow => "cand: RETURNING id, payload, attempts",
            Cand::NoExpiryIndex => "cand: no jobs_claim_expiry_idx",
            Cand::Unnamed => "product, unnamed (behind a pooler)",
            Cand::PlainUnnamed => "before: plain placeholders, unnamed",
            Cand::PromoteAlwaysUnnamed => "before: unnamed, promote before every claim",
            Cand::AckInClaim => "cand: ack in the next claim",
            Cand::Ctid => "cand: claim updates by ctid",
            Cand::CtidNoExpiryIndex => "ref: by ctid, no jobs_claim_expiry_idx (the sweep's index)",
            Cand::NoChecks => "ref: no CHECK constraints on jobs",
            Cand::OwnCopy => "ref: the product on a copy of its own (control)",
            Cand::Domains => "cand: single-column rules as domains",
            Cand::CheckFunction => "cand: the nine rules in one PL/pgSQL check",
            Cand::RoundTrip => "ref: SELECT 1 (one round trip)",
        }
    }

    /// The name `ALKSTORE_BENCH_LOOP_CANDS` takes.
    pub fn slug(self) -> &'static str {
        match self {
            Cand::SessionGeneric => "session-generic",
            Cand::LocalGeneric => "local-generic",
            Cand::LiteralLimit => "literal-limit",
            Cand::Plain => "plain",
            Cand::PromoteAlways => "promote-always",
            Cand::Narrow => "narrow",
            Cand::NoExpiryIndex => "no-expiry-index",
            Cand::Unnamed => "unnamed",
            Cand::PlainUnnamed => "plain-unnamed",
            Cand::PromoteAlwaysUnnamed => "promote-always-unnamed",
            Cand::AckInClaim => "ack-in-claim",
            Cand::Ctid => "ctid",
            Cand::CtidNoExpiryIndex => "ctid-no-expiry-index",
            Cand::NoChecks => "no-checks",
            Cand::OwnCopy => "own-copy",
            Cand::Domains => "domains",
            Cand::CheckFunction => "check-function",
            Cand::RoundTrip => "round-trip",
        }
    }

    pub fn from_slug(slug: &str) -> Option<Cand> {
        CANDS.into_iter().find(|c| c.slug() == slug)
    }

    /// What a session of this candidate runs first.
    pub fn session_setup(self) -> &'static str {
        match self {
            Cand::SessionGeneric => "SET plan_cache_mode = force_generic_plan",
            _ => "",
        }
    }

    /// Whether its sessions send every statement unnamed.
    pub fn unnamed(self) -> bool {
        matches!(
            self,
            Cand::Unnamed | Cand::PlainUnnamed | Cand::PromoteAlwaysUnnamed
        )
    }

    /// The product index this candidate's copy of `jobs` goes without.
    pub fn dropped_index(self) -> Option<&'static str> {
        match self {
            Cand::NoExpiryIndex | Cand::CtidNoExpiryIndex => Some("jobs_claim_expiry_idx"),
            _ => None,
        }
    }

    /// Whether this candidate's copy of `jobs` goes without its CHECK
    /// constraints ([`Cand::CheckFunction`] then adds its one).
    pub fn drops_checks(self) -> bool {
        matches!(self, Cand::NoChecks | Cand::CheckFunction)
    }

    /// Whether this candidate's copy of `jobs` has its single-column rules
    /// as domains.
    pub fn domains(self) -> bool {
        self == Cand::Domains
    }

    /// Whether it claims from a copy of `jobs` of its own (it changes the
    /// DDL) instead of the product's table.
    pub fn own_table(self) -> bool {
        self.dropped_index().is_some()
            || self.drops_checks()
            || self.domains()
            || self == Cand::OwnCopy
    }

    /// Whether its sessions promote as the product's session does (its
    /// [`PromotePacer`](schema_gen::statements::jobs::PromotePacer)): every
    /// candidate but the `before` rows, which promote before every claim.
    pub fn paced(self) -> bool {
        !matches!(
            self,
            Cand::Plain | Cand::PlainUnnamed | Cand::PromoteAlways | Cand::PromoteAlwaysUnnamed
        )
    }

    /// Whether the path claims anything (`SELECT 1` does not).
    pub fn claims(self) -> bool {
        self != Cand::RoundTrip
    }

    /// Whether a worker acks its finished jobs in its next claim
    /// ([`Cand::path_acking`]) instead of a statement of their own.
    pub fn acks_in_claim(self) -> bool {
        self == Cand::AckInClaim
    }

    /// One claim of up to `limit` jobs that first acks `acks` (id,
    /// attempts), in one statement ([`Cand::AckInClaim`]).
    #[allow(clippy::too_many_arguments)]
    pub fn path_acking(
        self,
        schema: &SchemaName,
        queue: &str,
        now: i64,
        worker: &str,
        limit: i64,
        promote: bool,
        acks: &[(i64, i32)],
    ) -> ClaimPath {
        assert!(
            self.acks_in_claim(),
            "{self:?} acks in a statement of its own"
        );
        let mut path = self.path(schema, queue, now, worker, limit, promote);
        let mut params = claim_params(worker, now, queue, Some(limit));
        params.push((
            Param::Ints(acks.iter().map(|a| a.0).collect()),
            Type::INT8_ARRAY,
        ));
        params.push((
            Param::Ints(acks.iter().map(|a| i64::from(a.1)).collect()),
            Type::INT4_ARRAY,
        ));
        path.stmts[path.claim] = Stmt::typed(ack_in_claim(schema.as_str()), params);
        path
    }

    /// One claim of up to `limit` jobs; `promote`: whether promote goes
    /// first (see [`PromoteClock`]).
    pub fn path(
        self,
        schema: &SchemaName,
        queue: &str,
        now: i64,
        worker: &str,
        limit: i64,
        promote: bool,
    ) -> ClaimPath {
        let s = schema.as_str();
        let promote_limit = limit.saturating_mul(i64::from(product::PROMOTE_PER_CLAIMED));
        let plain = || {
            let mut stmts = Vec::new();
            if promote {
                stmts.push(Stmt::typed(
                    plain_promote(s),
                    vec![
                        (Param::Text(queue.to_owned()), Type::TEXT),
                        (Param::Int(now), Type::INT8),
                        (Param::Int(promote_limit), Type::INT8),
                    ],
                ));
            }
            stmts.push(Stmt::typed(
                plain_claim(s),
                claim_params(worker, now, queue, Some(limit)),
            ));
            ClaimPath::last(stmts)
        };
        let product_path = || {
            let mut stmts = Vec::new();
            if promote {
                stmts.push(product::promote(schema, queue, now, limit));
            }
            stmts.push(product::claim(schema, queue, now, worker, limit));
            stmts
        };
        match self {
            Cand::SessionGeneric
            | Cand::Unnamed
            | Cand::PromoteAlways
            | Cand::NoExpiryIndex
            | Cand::NoChecks
            | Cand::OwnCopy
            | Cand::Domains
            | Cand::CheckFunction
            | Cand::PromoteAlwaysUnnamed => ClaimPath::last(product_path()),
            Cand::LocalGeneric => {
                let mut stmts = vec![
                    Stmt::Utility("BEGIN"),
                    Stmt::Utility("SET LOCAL plan_cache_mode = force_generic_plan"),
                ];
                stmts.extend(product_path());
                let claim = stmts.len() - 1;
                stmts.push(Stmt::Utility("COMMIT"));
                ClaimPath { stmts, claim }
            }
            Cand::LiteralLimit => {
                let mut stmts = product_path();
                stmts.pop();
                stmts.push(Stmt::typed(
                    literal_limit_claim(s, limit),
                    claim_params(worker, now, queue, None),
                ));
                ClaimPath::last(stmts)
            }
            Cand::Plain | Cand::PlainUnnamed => plain(),
            // Nothing to ack: the versus part's claims.
            Cand::AckInClaim => {
                let mut path = ClaimPath::last(product_path());
                let mut params = claim_params(worker, now, queue, Some(limit));
                params.push((Param::Ints(Vec::new()), Type::INT8_ARRAY));
                params.push((Param::Ints(Vec::new()), Type::INT4_ARRAY));
                path.stmts[path.claim] = Stmt::typed(ack_in_claim(s), params);
                path
            }
            Cand::Narrow => {
                let mut path = ClaimPath::last(product_path());
                path.stmts[path.claim] = Stmt::typed(
                    narrow_claim(s),
                    claim_params(worker, now, queue, Some(limit)),
                );
                path
            }
            Cand::Ctid | Cand::CtidNoExpiryIndex => {
                let mut path = ClaimPath::last(product_path());
                path.stmts[path.claim] =
                    Stmt::typed(ctid_claim(s), claim_params(worker, now, queue, Some(limit)));
                path
            }
            Cand::RoundTrip => ClaimPath::last(vec![Stmt::new("SELECT 1 AS id", Vec::new())]),
        }
    }
}

/// Decides, claim by claim, whether a session pipelines promote first: the
/// product's [`PromotePacer`] (as `Session::claim` consults it) when paced,
/// else always.
pub struct PromoteClock {
    pacer: Option<PromotePacer>,
}

impl PromoteClock {
    pub fn new(paced: bool) -> Self {
        Self {
            pacer: paced.then(PromotePacer::default),
        }
    }

    /// Whether this claim, at the unix second `now`, promotes first. The
    /// benchmark reads no promote's row count, so a promote is taken to
    /// leave nothing due (true of every mix here: its jobs are due at
    /// enqueue, or not before the run ends).
    pub fn due(&mut self, now: i64) -> bool {
        let Some(pacer) = &self.pacer else {
            return true;
        };
        let due = pacer.promote_first(BENCH_QUEUE_KEY, now);
        if due {
            pacer.promoted(BENCH_QUEUE_KEY, now, 0, u32::MAX);
        }
        due
    }
}

/// Each session of the benchmark claims from one queue.
const BENCH_QUEUE_KEY: &str = "bench";

/// The whole job row, as the product's claim returns it.
const FULL_ROW: &str = "id, queue, payload, priority, run_at, expires_at, enqueued_at, \
     visibility_timeout_s, max_attempts, backoff_base_s, dead_letter_retention_s, attempts, \
     worker_id, claimed_at, claim_expires_at, last_error";
/// What a worker needs of a claimed job: ack and retry name the claim by
/// `id` and `attempts`.
const NARROW_ROW: &str = "id, payload, attempts";

/// The claim's parameters: `$1` worker, `$2` now, `$3` queue, and `$4` the
/// limit unless it is written into the text.
fn claim_params(worker: &str, now: i64, queue: &str, limit: Option<i64>) -> Vec<(Param, Type)> {
    let mut params = vec![
        (Param::Text(worker.to_owned()), Type::TEXT),
        (Param::Int(now), Type::INT8),
        (Param::Text(queue.to_owned()), Type::TEXT),
    ];
    if let Some(limit) = limit {
        params.push((Param::Int(limit), Type::INT8));
    }
    params
}

/// Promote as the product wrote it before it hid its parameters (plain
/// placeholders, `LIMIT $3`). `$1` queue, `$2` now, `$3` limit.
pub fn plain_promote(schema: &str) -> String {
    format!(
        "UPDATE {schema}.jobs SET ready = TRUE WHERE id = ANY(ARRAY(\
         SELECT id FROM {schema}.jobs WHERE queue = $1 AND NOT ready AND run_at <= $2 \
         ORDER BY run_at LIMIT $3 FOR UPDATE SKIP LOCKED))"
    )
}

/// Claim as the product wrote it before it hid its parameters. `$1`
/// worker, `$2` now, `$3` queue, `$4` limit.
pub fn plain_claim(schema: &str) -> String {
    format!(
        "UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE id = ANY(ARRAY(SELECT id FROM {schema}.jobs \
         WHERE queue = $3 AND claimed_at IS NULL AND ready AND run_at <= $2 \
         ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)) \
         RETURNING {FULL_ROW}"
    )
}

/// The product's claim (`jobs::claim`, parameters hidden as it hides them)
/// returning only what a worker needs. `$1` worker, `$2` now, `$3` queue,
/// `$4` limit.
pub fn narrow_claim(schema: &str) -> String {
    format!(
        "UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE id = ANY(ARRAY(SELECT id FROM {schema}.jobs \
         WHERE queue = (SELECT CAST($3 AS text)) AND claimed_at IS NULL AND ready \
         AND run_at <= (SELECT CAST($2 AS bigint)) ORDER BY priority DESC, run_at, id \
         LIMIT (SELECT CAST($4 AS bigint)) FOR UPDATE SKIP LOCKED)) RETURNING {NARROW_ROW}"
    )
}

/// The product's claim (parameters hidden as it hides them) updating the
/// rows its pick locked by `ctid`: a TID scan instead of a second probe of
/// `jobs_pkey`. The pick holds each row's lock, so its `ctid` stays the
/// row's until the update; a row whose newer version the statement's
/// snapshot cannot see is left unclaimed (claims fewer, never a wrong one).
/// `$1` worker, `$2` now, `$3` queue, `$4` limit.
pub fn ctid_claim(schema: &str) -> String {
    format!(
        "UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE ctid = ANY(ARRAY(SELECT ctid FROM {schema}.jobs \
         WHERE queue = (SELECT CAST($3 AS text)) AND claimed_at IS NULL AND ready \
         AND run_at <= (SELECT CAST($2 AS bigint)) ORDER BY priority DESC, run_at, id \
         LIMIT (SELECT CAST($4 AS bigint)) FOR UPDATE SKIP LOCKED)) RETURNING {FULL_ROW}"
    )
}

/// The product's claim with `limit` written into the text, the other
/// parameters as the product binds them. `$1` worker, `$2` now, `$3` queue.
pub fn literal_limit_claim(schema: &str, limit: i64) -> String {
    format!(
        "UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE id = ANY(ARRAY(SELECT id FROM {schema}.jobs \
         WHERE queue = $3 AND claimed_at IS NULL AND ready AND run_at <= $2 \
         ORDER BY priority DESC, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED)) \
         RETURNING {FULL_ROW}"
    )
}

/// The product's claim (parameters hidden as it hides them) that first
/// deletes the jobs this worker acks (`ack_many`'s
/// predicate: the ids, this worker, the attempts they were claimed at), in
/// one statement: one round trip and one commit for a step's finish and its
/// next claim. The count of acked jobs rides on every claimed row (`acked`);
/// a follow-up that ships it must also return the count when nothing is
/// claimed (e.g. a one-row `LEFT JOIN`). `$1` worker, `$2` now, `$3`
/// queue, `$4` limit, `$5` acked ids, `$6` their attempts.
///
/// The claim's limit reads the deletion's count, so the deletion runs to
/// its end before the claim locks anything. In the first version the
/// deletion ran last, and two workers deadlocked (twice in one full run):
/// a claim's `FOR UPDATE SKIP LOCKED` that meets an entry of a job another
/// worker claimed a moment ago (its snapshot still saw the row unclaimed)
/// follows the update chain, locks the newest version and only then finds
/// it no longer claimable: the row is skipped but stays locked until the
/// statement's end; each worker's deletion then waited for the other's
/// stray lock on the job it was acking.
pub fn ack_in_claim(schema: &str) -> String {
    format!(
        "WITH acked AS (DELETE FROM {schema}.jobs \
         WHERE id = ANY(ARRAY(SELECT unnest(CAST($5 AS bigint[])))) AND worker_id = $1 \
         AND (id, attempts) IN (SELECT unnest(CAST($5 AS bigint[])), \
         unnest(CAST($6 AS integer[]))) RETURNING id) \
         UPDATE {schema}.jobs SET worker_id = $1, claimed_at = $2, \
         claim_expires_at = $2 + visibility_timeout_s, attempts = attempts + 1 \
         WHERE id = ANY(ARRAY(SELECT id FROM {schema}.jobs \
         WHERE queue = (SELECT CAST($3 AS text)) AND claimed_at IS NULL AND ready \
         AND run_at <= (SELECT CAST($2 AS bigint)) ORDER BY priority DESC, run_at, id \
         LIMIT (SELECT CAST($4 AS bigint) + 0 * count(*) FROM acked) \
         FOR UPDATE SKIP LOCKED)) RETURNING {FULL_ROW}, (SELECT count(*) FROM acked) AS acked"
    )
}
