//! The notifier's rule, without I/O: at most one notification per queue per
//! interval, and never a wake-up left without one.
//!
//! The first wake-up of a queue is sent at once (the leading edge: an idle
//! worker hears of a lone job without delay). Wake-ups within `interval` of
//! the last notification of their queue are folded into one more, sent when
//! the interval ends (the trailing edge). Without the trailing notification
//! a job enqueued just after a worker's claim came back empty, and within
//! the interval, would wait for the worker's next poll. So a burst of
//! enqueues over `T` costs at most `T / interval + 1` notifications per
//! queue, and every wake-up is followed by a notification sent after it,
//! within `interval`.
//!
//! A leading notification may go inside its enqueue's transaction (it then
//! reaches the listeners at that commit, before the producer has its
//! answer), at most once per `inside` interval per queue: such a commit
//! holds PostgreSQL's database-wide notify lock through its flush, so
//! their number is what the enqueues pay for (BENCHMARKS.md, "Wake-ups").

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// What to do with one wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Notify now, inside the enqueue's transaction (only when the caller
    /// asked whether it may).
    Inside,
    /// Notify now (the caller sends it, or hands it to the notifier's task).
    Now,
    /// Folded into the trailing notification of the queue's interval.
    Later,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    /// When the queue's last notification was sent (or handed out).
    last: Instant,
    /// A wake-up came after it, within the interval.
    pending: bool,
    /// When a notification of the queue last went inside a transaction.
    inside: Option<Instant>,
}

/// Per queue: when it was last notified, and whether a trailing
/// notification is owed.
#[derive(Debug)]
pub(crate) struct Coalescer {
    interval: Duration,
    inside: Duration,
    queues: HashMap<String, Slot>,
}

impl Coalescer {
    /// Coalesces over `interval`; a leading notification inside its
    /// transaction at most once per `inside` per queue.
    pub(crate) fn new(interval: Duration, inside: Duration) -> Self {
        Self {
            interval,
            inside,
            queues: HashMap::new(),
        }
    }

    /// A wake-up of `queue` at `now`; `may_go_inside`: the caller can put
    /// the notification inside its enqueue's transaction.
    pub(crate) fn wake(&mut self, queue: &str, now: Instant, may_go_inside: bool) -> Decision {
        let (interval, inside_every) = (self.interval, self.inside);
        let slot = match self.queues.get_mut(queue) {
            Some(slot) if now < slot.last + interval => {
                slot.pending = true;
                return Decision::Later;
            }
            Some(slot) => slot,
            None => self.queues.entry(queue.to_owned()).or_insert(Slot {
                last: now,
                pending: false,
                inside: None,
            }),
        };
        slot.last = now;
        slot.pending = false;
        let inside_due = slot
            .inside
            .is_none_or(|at| at.checked_add(inside_every).is_some_and(|end| now >= end));
        if may_go_inside && inside_every != Duration::MAX && inside_due {
            slot.inside = Some(now);
            return Decision::Inside;
        }
        Decision::Now
    }

    /// The queues whose trailing notification is due at `now`, marked sent;
    /// forgets the queues with nothing owed whose interval has passed.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<String> {
        let (interval, inside) = (self.interval, self.inside);
        let mut due = Vec::new();
        self.queues.retain(|queue, slot| {
            if now < slot.last + interval {
                return true;
            }
            if slot.pending {
                slot.last = now;
                slot.pending = false;
                due.push(queue.clone());
                return true;
            }
            // Kept while its inside interval runs: it decides the next.
            slot.inside
                .and_then(|at| at.checked_add(inside))
                .is_some_and(|end| now < end)
        });
        due
    }

    /// Every queue owed a trailing notification, marked sent: what a
    /// closing notifier sends before it stops.
    pub(crate) fn drain(&mut self) -> Vec<String> {
        let due: Vec<String> = self
            .queues
            .iter()
            .filter(|(_, slot)| slot.pending)
            .map(|(queue, _)| queue.clone())
            .collect();
        self.queues.clear();
        due
    }

    /// A notification of `queue` that could not be sent: owed again, at the
    /// end of an interval from `now`.
    pub(crate) fn failed(&mut self, queue: &str, now: Instant) {
        let slot = self.queues.entry(queue.to_owned()).or_insert(Slot {
            last: now,
            pending: true,
            inside: None,
        });
        slot.last = now;
        slot.pending = true;
    }

    /// How many queues are owed a trailing notification.
    pub(crate) fn owed(&self) -> usize {
        self.queues.values().filter(|slot| slot.pending).count()
    }

    /// When the earliest trailing notification is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queues
            .values()
            .filter(|slot| slot.pending)
            .map(|slot| slot.last + self.interval)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_millis(10);

    #[test]
    fn the_first_wake_up_is_sent_at_once_and_the_rest_trail_once() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = Coalescer::new(INTERVAL, INTERVAL);
        assert_eq!(c.wake("a", at(0), false), Decision::Now);
        assert_eq!(c.next_due(), None, "nothing owed after a leading send");
        assert_eq!(c.wake("a", at(1), false), Decision::Later);
        assert_eq!(c.wake("a", at(9), false), Decision::Later);
        // Another queue has its own interval.
        assert_eq!(c.wake("b", at(2), false), Decision::Now);
        assert_eq!(c.next_due(), Some(at(10)));
        assert!(c.due(at(9)).is_empty());
        assert_eq!(c.due(at(10)), ["a"]);
        assert_eq!(c.next_due(), None);
        // Within the interval of the trailing send: folded again.
        assert_eq!(c.wake("a", at(15), false), Decision::Later);
        assert_eq!(c.next_due(), Some(at(20)));
        assert_eq!(c.due(at(20)), ["a"]);
        // A quiet interval later: at once again, and the idle slot is gone.
        assert!(c.due(at(31)).is_empty());
        assert!(c.queues.is_empty());
        assert_eq!(c.wake("a", at(40), false), Decision::Now);
    }

    /// A burst of wake-ups costs at most one notification per interval, plus
    /// the leading one, and the last wake-up is always followed by one.
    #[test]
    fn a_burst_costs_one_notification_per_interval() {
        let start = Instant::now();
        let mut c = Coalescer::new(INTERVAL, INTERVAL);
        let mut sent = 0;
        // 1,000 wake-ups, one every 0.1 ms: 100 ms.
        for n in 0..1_000u64 {
            let now = start + Duration::from_micros(100 * n);
            sent += c.due(now).len();
            if c.wake("q", now, false) == Decision::Now {
                sent += 1;
            }
        }
        let last = start + Duration::from_micros(100 * 999);
        let trailing = c
            .next_due()
            .unwrap_or_else(|| panic!("the last wake-up is owed"));
        assert!(trailing > last && trailing <= last + INTERVAL);
        sent += c.due(trailing).len();
        assert!((10..=11).contains(&sent), "{sent} notifications");
    }

    #[test]
    fn a_drain_hands_out_every_owed_queue() {
        let start = Instant::now();
        let mut c = Coalescer::new(INTERVAL, INTERVAL);
        assert_eq!(c.wake("a", start, false), Decision::Now);
        assert_eq!(c.wake("b", start, false), Decision::Now);
        assert_eq!(c.wake("a", start, false), Decision::Later);
        assert_eq!(c.drain(), ["a"]);
        assert_eq!(c.owed(), 0);
    }

    #[test]
    fn a_failed_notification_is_owed_again() {
        let start = Instant::now();
        let mut c = Coalescer::new(INTERVAL, INTERVAL);
        assert_eq!(c.wake("a", start, false), Decision::Now);
        c.failed("a", start + Duration::from_millis(1));
        assert_eq!(c.next_due(), Some(start + Duration::from_millis(11)));
        assert_eq!(c.due(start + Duration::from_millis(11)), ["a"]);
    }

    /// The leading notification goes inside its transaction at most once per
    /// `inside` per queue; the other leading ones are sent at once outside.
    #[test]
    fn a_leading_notification_goes_inside_at_most_once_per_inside_interval() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = Coalescer::new(INTERVAL, Duration::from_millis(30));
        assert_eq!(c.wake("a", at(0), true), Decision::Inside);
        assert_eq!(
            c.wake("b", at(1), true),
            Decision::Inside,
            "its own interval"
        );
        assert_eq!(c.wake("a", at(5), true), Decision::Later);
        assert_eq!(c.due(at(10)), ["a"]);
        // Leading again, but within 30 ms of the inside one: outside.
        assert_eq!(c.wake("a", at(21), true), Decision::Now);
        assert_eq!(c.wake("a", at(31), true), Decision::Inside);
        // Quiet past the coalescing interval, the slot is kept while its
        // inside interval runs, and decides the next wake-up.
        assert!(c.due(at(45)).is_empty());
        assert_eq!(c.wake("a", at(46), true), Decision::Now);
        // A caller that cannot put it inside does not use the turn.
        assert_eq!(c.wake("a", at(60), false), Decision::Now);
        assert_eq!(c.wake("a", at(70), true), Decision::Inside);
    }

    /// A burst: at most one inside notification per inside interval.
    #[test]
    fn a_burst_puts_one_notification_inside_per_inside_interval() {
        let start = Instant::now();
        let mut c = Coalescer::new(INTERVAL, Duration::from_millis(20));
        let (mut inside, mut sent) = (0, 0);
        for n in 0..1_000u64 {
            let now = start + Duration::from_micros(100 * n);
            // The notifier's task runs late, as on a busy machine: the
            // enqueues take the leading edge of most intervals.
            if n % 50 == 49 {
                sent += c.due(now).len();
            }
            match c.wake("q", now, true) {
                Decision::Inside => inside += 1,
                Decision::Now => sent += 1,
                Decision::Later => {}
            }
        }
        assert!((5..=6).contains(&inside), "{inside} inside");
        assert!(inside + sent <= 21, "{inside} inside, {sent} outside");
    }
}
