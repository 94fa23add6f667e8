//! `check`'s answer for a deploy gate: one [`State`] with its exit code,
//! the worst of everything found, and the policy on foreign objects
//! ([`ForeignPolicy`]) that decides whether they fail it.
//!
//! | exit | state | meaning |
//! |---|---|---|
//! | 0 | `matches` | the schema is this release's version, as the model has it (comments that differ and allowed foreign objects aside) |
//! | 1 | `drift` | something differs that only a person can fix (or a schema or table is missing: `apply` creates it) |
//! | 2 | `error` | the question could not be answered (connection, privilege, lock, usage) |
//! | 3 | `needs_upgrade` | an older known version, or an upgrade under way: `schema-gen upgrade` |
//! | 4 | `contract_pending` | serves this release; `schema-gen upgrade --contract` once older engines are gone |
//! | 5 | `foreign_objects` | nothing else but objects the model does not own, which the policy does not allow |
//! | 6 | `newer_version` | a version newer than this release's |
//!
//! When several apply the worst wins, in this order: 2, 1, 6, 3, 4, 5, 0.

use serde::Serialize;

use crate::difference::Difference;
use crate::error::ErrorKind;

/// What `check` concludes, one word for a deploy gate; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// At this release's version, as the model has it: exit 0.
    Matches,
    /// Something differs that a person must look at: exit 1.
    Drift,
    /// The question could not be answered: exit 2.
    Error,
    /// An older version, or an upgrade under way: exit 3.
    NeedsUpgrade,
    /// Expanded to this release's version, its contract pending: exit 4.
    ContractPending,
    /// Only objects the model does not own, not allowed by the policy: exit 5.
    ForeignObjects,
    /// A newer version than this release knows: exit 6.
    NewerVersion,
}

impl State {
    /// Every state, by exit code.
    pub const ALL: [State; 7] = [
        State::Matches,
        State::Drift,
        State::Error,
        State::NeedsUpgrade,
        State::ContractPending,
        State::ForeignObjects,
        State::NewerVersion,
    ];

    /// The process exit code of `schema-gen check` in this state.
    pub const fn exit_code(self) -> u8 {
        match self {
            Self::Matches => 0,
            Self::Drift => 1,
            Self::Error => 2,
            Self::NeedsUpgrade => 3,
            Self::ContractPending => 4,
            Self::ForeignObjects => 5,
            Self::NewerVersion => 6,
        }
    }

    /// Its name, as the JSON `state` carries it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Matches => "matches",
            Self::Drift => "drift",
            Self::Error => "error",
            Self::NeedsUpgrade => "needs_upgrade",
            Self::ContractPending => "contract_pending",
            Self::ForeignObjects => "foreign_objects",
            Self::NewerVersion => "newer_version",
        }
    }

    /// How bad it is: the worst of several wins (2, 1, 6, 3, 4, 5, 0).
    const fn rank(self) -> u8 {
        match self {
            Self::Matches => 0,
            Self::ForeignObjects => 1,
            Self::ContractPending => 2,
            Self::NeedsUpgrade => 3,
            Self::NewerVersion => 4,
            Self::Drift => 5,
            Self::Error => 6,
        }
    }

    /// The worse of the two.
    ///
    /// ```
    /// use schema_gen::check::State;
    ///
    /// assert_eq!(State::ForeignObjects.worst(State::NeedsUpgrade), State::NeedsUpgrade);
    /// assert_eq!(State::NewerVersion.worst(State::Drift), State::Drift);
    /// ```
    pub fn worst(self, other: Self) -> Self {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    /// The state a command's failure puts the database in, so that `apply`
    /// and `upgrade` exit with the code `check` would give: drift 1, an
    /// older version or an upgrade to finish 3, a contract to run first 4,
    /// a newer version 6, anything else 2.
    pub fn of_error(kind: &ErrorKind) -> Self {
        match kind {
            ErrorKind::Drift { .. } => Self::Drift,
            ErrorKind::OlderVersion { .. }
            | ErrorKind::UpgradeInProgress { .. }
            | ErrorKind::NotExpanded { .. } => Self::NeedsUpgrade,
            ErrorKind::ContractFirst { .. } => Self::ContractPending,
            ErrorKind::NewerVersion { .. } => Self::NewerVersion,
            _ => Self::Error,
        }
    }
}

/// Which foreign objects `check` lets pass ([`State::ForeignObjects`]
/// otherwise): by name, as `--allow-foreign NAME` gives them. A name is an
/// index's or a relation's name, or `table.column` for a column
/// ([`Difference::foreign_name`]); `*` in a pattern stands for any run of
/// characters (`report_*`, `jobs.*`; `*` alone allows every foreign object).
/// The default allows none: a foreign object is reported and fails CI
/// until someone names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForeignPolicy {
    allowed: Vec<String>,
}

impl ForeignPolicy {
    /// A policy that allows the objects matching any of `patterns`.
    pub fn allowing<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            allowed: patterns.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `difference` is a foreign object this policy allows.
    ///
    /// ```
    /// use schema_gen::check::ForeignPolicy;
    /// use schema_gen::Difference;
    ///
    /// let index = Difference::ExtraIndex {
    ///     table: "jobs".into(),
    ///     index: "report_enqueued_idx".into(),
    ///     found: "USING btree (enqueued_at)".into(),
    ///     risk: None,
    ///     engine_columns: vec![],
    /// };
    /// assert!(ForeignPolicy::allowing(["report_*"]).allows(&index));
    /// assert!(!ForeignPolicy::allowing(["jobs_*"]).allows(&index));
    /// assert!(!ForeignPolicy::default().allows(&index));
    /// ```
    pub fn allows(&self, difference: &Difference) -> bool {
        difference.is_foreign()
            && difference
                .foreign_name()
                .is_some_and(|name| self.allowed.iter().any(|p| matches(p, &name)))
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters and everything else for itself. (Only `*`: a glob crate would
/// add character classes and escapes that object names do not need.)
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_names_are_the_agreed_ones_and_the_worst_wins() {
        let codes: Vec<(u8, &str)> = State::ALL
            .iter()
            .map(|s| (s.exit_code(), s.name()))
            .collect();
        assert_eq!(
            codes,
            [
                (0, "matches"),
                (1, "drift"),
                (2, "error"),
                (3, "needs_upgrade"),
                (4, "contract_pending"),
                (5, "foreign_objects"),
                (6, "newer_version"),
            ]
        );
        for state in State::ALL {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.name())
            );
        }
        // Worst first: 2, 1, 6, 3, 4, 5, 0.
        let order = [2u8, 1, 6, 3, 4, 5, 0];
        for (i, worse) in order.iter().enumerate() {
            for better in &order[i..] {
                let of = |code: &u8| State::ALL[usize::from(*code)];
                assert_eq!(of(worse).worst(of(better)), of(worse));
                assert_eq!(of(better).worst(of(worse)), of(worse));
            }
        }
    }

    /// The failures no shipped database reaches through the binary (a
    /// contract a later expand waits for needs a history of its own; an
    /// interrupted upgrade, a contract refused for older engines or for a
    /// pooler are tested for their messages elsewhere) exit with the code
    /// `check` gives the same database.
    #[test]
    fn failures_exit_with_the_state_they_leave_the_database_in() {
        let schema = schema_model::SchemaName::new("alkstore").unwrap();
        let cases = [
            (
                ErrorKind::ContractFirst {
                    schema: schema.clone(),
                    pending: 2,
                    next: 3,
                },
                State::ContractPending,
            ),
            (
                ErrorKind::UpgradeInProgress {
                    schema: schema.clone(),
                    version: 3,
                    done: 1,
                    of: 4,
                },
                State::NeedsUpgrade,
            ),
            (
                ErrorKind::NotExpanded {
                    schema: schema.clone(),
                    model: 3,
                    reason: "it is at version 1".into(),
                },
                State::NeedsUpgrade,
            ),
            (
                ErrorKind::OlderEngines {
                    schema: schema.clone(),
                    version: 2,
                    sessions: vec![],
                    breaks: vec![],
                    unseen: 1,
                },
                State::Error,
            ),
            (
                ErrorKind::Pooled {
                    schema,
                    server: "127.0.0.1:6432/app as app".into(),
                    evidence: "a notification never arrived".into(),
                },
                State::Error,
            ),
        ];
        for (kind, state) in cases {
            assert_eq!(State::of_error(&kind), state, "{kind}");
        }
    }

    #[test]
    fn patterns_match_names_with_stars() {
        for (pattern, name, expected) in [
            ("jobs_report_idx", "jobs_report_idx", true),
            ("jobs_report_idx", "jobs_report_idx2", false),
            ("jobs_report", "jobs_report_idx", false),
            ("*", "anything", true),
            ("report_*", "report_daily", true),
            ("report_*", "daily_report", false),
            ("*_report", "daily_report", true),
            ("jobs.*", "jobs.note", true),
            ("jobs.*", "locks.note", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} {name}");
        }
    }
}
