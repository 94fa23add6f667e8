//! [`Options`]: the bounds that [`bootstrap_with`](crate::bootstrap::bootstrap_with)
//! and [`verify_with`](crate::check::verify_with) run under, and the
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
    /// [`ErrorKind::LockTimeout`](crate::error::ErrorKind::LockTimeout), naming the
    /// lock and, where the role may see it, the session holding it.
    ///
    /// PostgreSQL reads `0` as "no limit", so a zero (or anything below a
    /// millisecond) is taken as 1 ms, and anything above PostgreSQL's maximum
    /// (`i32::MAX` ms, about 24 days) as that maximum: the wait is always bounded.
    pub lock_timeout: Duration,
    /// Where the family lives ([`Layout::SingleServer`] by default). Under
    /// [`Layout::CitusSchemaSharding`], bootstrap refuses a server without
    /// Citus or a worker ([`ErrorKind::Layout`](crate::error::ErrorKind::Layout)),
    /// creates the family as a distributed schema in its one transaction,
    /// and refuses a family distributed otherwise as drift; verification
    /// reports that as differences.
    pub layout: Layout,
}

impl Default for Options {
    /// [`DEFAULT_LOCK_TIMEOUT`], 5 s:
    /// the same bound the printed script sets.
    fn default() -> Self {
        Self {
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            layout: Layout::SingleServer,
        }
    }
}

/// The default bound of every lock wait: of the printed script, of the
/// creating transaction and of the steady-state catalog read
/// ([`Options::default`]).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

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
        setting(clamped_ms(self.lock_timeout))
    }

    /// The `statement_timeout` of each statement: `lock_timeout` plus
    /// [`STATEMENT_ALLOWANCE`], as a setting value.
    pub fn statement_timeout_setting(&self) -> String {
        setting(clamped_ms(
            self.effective_lock_timeout() + STATEMENT_ALLOWANCE,
        ))
    }

    /// The bound actually in force, after clamping.
    pub fn effective_lock_timeout(&self) -> Duration {
        clamped(self.lock_timeout)
    }

    /// The bounds of every statement of bootstrap and verification: the
    /// lock bound, and the statement bound
    /// [`STATEMENT_ALLOWANCE`] above it.
    pub fn bounds(&self) -> Bounds {
        let lock = self.effective_lock_timeout();
        Bounds::new(lock, lock + STATEMENT_ALLOWANCE)
    }
}

/// A `lock_timeout` and a `statement_timeout` for the statements that
/// follow: the one place either setting is written as SQL. Each bound is
/// clamped to what PostgreSQL takes (at least 1 ms, since 0 means "no
/// limit"; at most [`MAX_LOCK_TIMEOUT`]), so no bound is ever lost or
/// refused by the server.
///
/// ```
/// use std::time::Duration;
/// use schema_gen::options::Bounds;
///
/// let bounds = Bounds::new(Duration::from_secs(1), Duration::from_secs(11));
/// assert_eq!(bounds.set_local(), "SET LOCAL lock_timeout = '1s'; SET LOCAL statement_timeout = '11s'");
/// assert_eq!(bounds.set_session(), "SET lock_timeout = '1s'; SET statement_timeout = '11s'");
/// assert_eq!(Bounds::RESET, "RESET lock_timeout; RESET statement_timeout");
/// assert_eq!(
///     Bounds::new(Duration::ZERO, Duration::from_secs(u64::MAX)).set_local(),
///     "SET LOCAL lock_timeout = '1ms'; SET LOCAL statement_timeout = '2147483647ms'"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The longest one lock wait may last (`lock_timeout`), if bounded here.
    pub lock: Option<Duration>,
    /// The longest one statement may run (`statement_timeout`), if bounded here.
    pub statement: Option<Duration>,
}

impl Bounds {
    /// Both bounds, each clamped.
    pub fn new(lock: Duration, statement: Duration) -> Self {
        Self {
            lock: Some(clamped(lock)),
            statement: Some(clamped(statement)),
        }
    }

    /// A lock bound only (the printed bootstrap script's).
    pub fn lock_only(lock: Duration) -> Self {
        Self {
            lock: Some(clamped(lock)),
            statement: None,
        }
    }

    /// A statement bound only (a question asked after a failure).
    pub fn statement_only(statement: Duration) -> Self {
        Self {
            lock: None,
            statement: Some(clamped(statement)),
        }
    }

    /// `RESET` of both settings, after [`Bounds::set_session`].
    pub const RESET: &'static str = "RESET lock_timeout; RESET statement_timeout";

    /// `SET LOCAL ...`: the bounds of the current transaction (an explicit
    /// one, or the implicit one of a multi-statement simple query), gone
    /// with it.
    pub fn set_local(&self) -> String {
        self.set("SET LOCAL")
    }

    /// `SET ...`: the bounds of the session, for statements that cannot run
    /// in a transaction block (`CONCURRENTLY`, `VACUUM`) or that run as many
    /// transactions; [`Bounds::RESET`] ends them.
    pub fn set_session(&self) -> String {
        self.set("SET")
    }

    /// `lock_timeout` in PostgreSQL's words (`1s`), if bounded here.
    pub fn lock_words(&self) -> Option<String> {
        self.lock.map(duration_words)
    }

    /// `statement_timeout` in PostgreSQL's words (`11s`), if bounded here.
    pub fn statement_words(&self) -> Option<String> {
        self.statement.map(duration_words)
    }

    fn set(&self, verb: &str) -> String {
        let lock = self
            .lock_words()
            .map(|words| format!("{verb} lock_timeout = '{words}'"));
        let statement = self
            .statement_words()
            .map(|words| format!("{verb} statement_timeout = '{words}'"));
        lock.into_iter()
            .chain(statement)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A duration as PostgreSQL takes it for a timeout: whole milliseconds,
/// rounded up (1.5 ms must not become 1 ms, and 0 must not become "no
/// limit"), at most [`MAX_LOCK_TIMEOUT`].
fn clamped_ms(duration: Duration) -> u128 {
    duration
        .as_nanos()
        .div_ceil(1_000_000)
        .clamp(1, MAX_TIMEOUT_MS)
}

fn clamped(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(clamped_ms(duration)).unwrap_or(u64::MAX))
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
