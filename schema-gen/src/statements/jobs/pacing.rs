//! When the claim path promotes: once per queue and unix second, and again
//! after a promote that filled its limit ([`PromotePacer`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Jobs one promote makes ready at most, per job the claim may take: well
/// above the claim's batch, so promotion keeps ahead of claiming.
pub const PROMOTE_PER_CLAIMED: u32 = 10;

/// Decides whether a claim promotes first: a queue's not-ready jobs become
/// due only when the clock reaches their `run_at`, a whole unix second, so
/// one promote per queue and second (of the claim's `now`) finds every job
/// that second made due; later claims in that second claim at once, one
/// statement instead of two. Two cases promote again within the second: a
/// promote that made `limit` jobs ready (more may be due), and one that
/// failed (it records nothing). A job that an enqueuer with a clock behind
/// the claimer's wrote not-ready with `run_at` at or before the claimer's
/// `now` waits for the next second's promote (at most a second).
///
/// Pure bookkeeping, no I/O; shared by the sessions of one
/// [`Sessions`](crate::statements::Sessions), whose
/// [`Session::claim`](crate::statements::Session::claim) consults it.
///
/// ```
/// use schema_gen::statements::jobs::PromotePacer;
///
/// let pacer = PromotePacer::default();
/// assert!(pacer.promote_first("mail", 100)); // the second's first claim
/// pacer.promoted("mail", 100, 3, 10);
/// assert!(!pacer.promote_first("mail", 100)); // same second: claim only
/// assert!(pacer.promote_first("sms", 100)); // another queue
/// assert!(pacer.promote_first("mail", 101)); // the next second
/// pacer.promoted("mail", 101, 10, 10); // full: more may be due
/// assert!(pacer.promote_first("mail", 101));
/// // A session whose clock is behind does not move a queue's second back.
/// pacer.promoted("mail", 105, 1, 10);
/// pacer.promoted("mail", 104, 1, 10);
/// assert!(!pacer.promote_first("mail", 105));
/// ```
#[derive(Debug, Default)]
pub struct PromotePacer {
    /// Per queue, the `now` of its last promote that left nothing due.
    done: Mutex<HashMap<String, i64>>,
}

impl PromotePacer {
    /// Whether the claim of `queue` at the unix second `now` promotes
    /// first: not if a promote of `queue` at `now` or later already left
    /// nothing due.
    pub fn promote_first(&self, queue: &str, now: i64) -> bool {
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        done.get(queue).is_none_or(|last| *last < now)
    }

    /// Records a promote of `queue` at `now` that made `promoted` of at most
    /// `limit` jobs ready: with fewer than `limit`, nothing due is left for
    /// this second; with `limit`, the next claim promotes again.
    pub fn promoted(&self, queue: &str, now: i64, promoted: u64, limit: u32) {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        if promoted < u64::from(limit) {
            let last = done.entry(queue.to_owned()).or_insert(now);
            *last = (*last).max(now);
        } else {
            done.remove(queue);
        }
    }
}
