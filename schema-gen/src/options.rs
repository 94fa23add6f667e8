//! [`Options`]: the bounds that [`bootstrap_with`](crate::bootstrap::bootstrap_with)
//! and [`verify_with`](crate::verify::verify_with) run under, and the
//! [`Layout`] they create and verify.

use std::time::Duration;

use schema_model::Layout;

/// How long bootstrap and verification may wait, and the layout they
/// create and verify.
///
/// ```
/// use std::time::Duration;
/// use schema_gen::Options;
///
/// let options = Options {
///     lock_timeout: Duration::from_millis(300),
///     ..Options::default()
/// };
/// assert_eq!(options.lock_timeout_setting(), "300ms");
/// assert_eq!(Options::default().lock_timeout_setting(), "5s");
/// // The read's own statement_timeout never fires before lock_timeout.
/// assert_eq!(options.statement_timeout_setting(), "10300ms");
///
/// // On a Citus coordinator: the family as a distributed schema.
/// let citus = Options {
///     layout: schema_gen::schema_model::Layout::CitusSchemaSharding,
///     ..Options::default()
/// };
/// assert!(citus.layout.is_citus());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The longest any one lock wait may last (`SET LOCAL lock_timeout`):
    /// the steady-state catalog read waits at most this long behind a
    /// session holding `ACCESS EXCLUSIVE` on an engine table, and the
    /// creating transaction at most this long for the bootstrap lock or a
    /// table lock. Then the call fails with
    /// [`ErrorKind::LockTimeout`](crate::ErrorKind::LockTimeout), naming the
    /// lock and, where the role may see it, the session holding it.
    ///
    /// PostgreSQL reads `0` as "no limit", so a zero (or anything below a
    /// millisecond) is taken as 1 ms, and anything above PostgreSQL's maximum
    /// (`i32::MAX` ms, about 24 days) as that maximum: the wait is always bounded.
    pub lock_timeout: Duration,
    /// Where the family lives ([`Layout::SingleServer`] by default). Under
    /// [`Layout::CitusSchemaSharding`], bootstrap refuses a server without
    /// Citus or a worker ([`ErrorKind::Layout`](crate::ErrorKind::Layout)),
    /// creates the family as a distributed schema in its one transaction,
    /// and refuses a family distributed otherwise as drift; verification
    /// reports that as differences.
    pub layout: Layout,
}

impl Default for Options {
    /// [`DEFAULT_LOCK_TIMEOUT`](crate::render::DEFAULT_LOCK_TIMEOUT), 5 s:
    /// the same bound the printed script sets.
    fn default() -> Self {
        Self {
            lock_timeout: crate::render::DEFAULT_LOCK_TIMEOUT,
            layout: Layout::SingleServer,
        }
    }
}

/// How much longer than `lock_timeout` a statement of bootstrap or
/// verification may run in all (`SET LOCAL statement_timeout`).
///
/// The role's own `statement_timeout` is replaced for these statements, in
/// both directions: a role's small one (say 1 ms) must not fail a catalog
/// read that takes a few milliseconds, and a role without one must not let a
/// stuck server hang the engine's open. The only legitimately long part of
/// these statements is a lock wait, which `lock_timeout` bounds; this
/// allowance on top is for the work itself (milliseconds on any sane catalog)
/// and keeps `statement_timeout` from ever firing before `lock_timeout`, so a
/// lock wait is always reported as one.
pub const STATEMENT_ALLOWANCE: Duration = Duration::from_secs(10);

/// PostgreSQL's largest `lock_timeout` / `statement_timeout`, in milliseconds.
const MAX_TIMEOUT_MS: u128 = i32::MAX as u128;

/// PostgreSQL's largest `lock_timeout`: 2147483647 ms, about 24.9 days.
/// [`Options::lock_timeout`] takes anything above as this; the CLI refuses it.
pub const MAX_LOCK_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

impl Options {
    /// `lock_timeout` as a PostgreSQL setting value (`5s`, `300ms`), clamped
    /// as [`Options::lock_timeout`] says.
    pub fn lock_timeout_setting(&self) -> String {
        setting(self.lock_timeout_ms())
    }

    /// The `statement_timeout` of each statement: `lock_timeout` plus
    /// [`STATEMENT_ALLOWANCE`], as a setting value.
    pub fn statement_timeout_setting(&self) -> String {
        setting((self.lock_timeout_ms() + STATEMENT_ALLOWANCE.as_millis()).min(MAX_TIMEOUT_MS))
    }

    /// The bound actually in force, after clamping.
    pub fn effective_lock_timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.lock_timeout_ms()).unwrap_or(u64::MAX))
    }

    fn lock_timeout_ms(&self) -> u128 {
        // Round up: 1.5 ms must not become 1 ms, and 0 must not become "no limit".
        let ms = self.lock_timeout.as_nanos().div_ceil(1_000_000);
        ms.clamp(1, MAX_TIMEOUT_MS)
    }
}

/// A duration in PostgreSQL's words, to the millisecond: `5s`, `300ms`.
pub(crate) fn duration_words(duration: Duration) -> String {
    setting(duration.as_millis())
}

/// Whole seconds as `Ns` (so the default reads `5s`, as the script has it),
/// anything else as `Nms`.
fn setting(ms: u128) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(lock_timeout: Duration) -> Options {
        Options {
            lock_timeout,
            ..Options::default()
        }
    }

    #[test]
    fn a_zero_or_tiny_bound_is_never_no_limit() {
        assert_eq!(with(Duration::ZERO).lock_timeout_setting(), "1ms");
        assert_eq!(with(Duration::from_nanos(1)).lock_timeout_setting(), "1ms");
        assert_eq!(
            with(Duration::from_micros(1500)).lock_timeout_setting(),
            "2ms"
        );
        assert_eq!(
            with(Duration::ZERO).effective_lock_timeout(),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn a_huge_bound_is_clamped_to_the_server_maximum() {
        let huge = with(Duration::from_secs(u64::MAX));
        assert_eq!(huge.lock_timeout_setting(), "2147483647ms");
        assert_eq!(huge.statement_timeout_setting(), "2147483647ms");
    }

    #[test]
    fn whole_seconds_read_as_seconds() {
        assert_eq!(with(Duration::from_secs(90)).lock_timeout_setting(), "90s");
        assert_eq!(
            with(Duration::from_secs(5)).statement_timeout_setting(),
            "15s"
        );
    }
}
