//! The validated name of the ClickHouse database holding the analytics
//! tables: the shared name syntax ([`crate::name`]) plus the databases
//! ClickHouse owns.

use std::fmt;

use crate::name::{NameDialect, NameError, NameRule};

/// The database name used when none is configured.
pub const DEFAULT_DATABASE_NAME: &str = "relay_analytics";

/// Databases ClickHouse itself owns, refused in any letter case (ClickHouse
/// names are case-sensitive and it has both `INFORMATION_SCHEMA` and
/// `information_schema`).
pub const RESERVED_DATABASE_NAMES: &[&str] = &[
    "system",
    "default",
    "information_schema",
    "_temporary_and_external_tables",
];

/// The name of the ClickHouse database holding the analytics tables,
/// validated before any SQL is built.
///
/// The same syntax as [`SchemaName`](crate::SchemaName) (lowercase ASCII
/// letters, digits and `_`, starting with a letter or `_`, at most 63 bytes):
/// ClickHouse is case-sensitive, so one spelling per database keeps the
/// configured name and the stored name from drifting apart. Databases
/// ClickHouse owns ([`RESERVED_DATABASE_NAMES`], in any case) are refused.
///
/// ```
/// use schema_model::DatabaseName;
///
/// assert_eq!(DatabaseName::default().as_str(), "relay_analytics");
/// assert_eq!(DatabaseName::new("analytics_eu").unwrap().as_str(), "analytics_eu");
/// assert_eq!(
///     DatabaseName::new("INFORMATION_SCHEMA").unwrap_err().to_string(),
///     "database name \"INFORMATION_SCHEMA\" is refused: it is a database ClickHouse \
///      owns (system, default, information_schema, _temporary_and_external_tables, \
///      in any letter case); the analytics tables need a database of their own"
/// );
/// assert_eq!(
///     DatabaseName::new("relay-x").unwrap_err().to_string(),
///     "database name \"relay-x\" is refused: it contains '-' at byte 5; only lowercase \
///      ASCII letters, digits and '_' are allowed (ClickHouse names are case-sensitive)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatabaseName(String);

crate::name::validated_name!(DatabaseName, ReservedDatabase);

/// Why ClickHouse's dialect reserves a database name: ClickHouse owns it
/// ([`RESERVED_DATABASE_NAMES`], in any letter case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedDatabase;

impl fmt::Display for ReservedDatabase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "it is a database ClickHouse owns ({}, in any letter case); the analytics tables \
             need a database of their own",
            RESERVED_DATABASE_NAMES.join(", ")
        )
    }
}

impl NameDialect for ReservedDatabase {
    const NOUN: &'static str = "database name";
    const DEFAULT: &'static str = DEFAULT_DATABASE_NAME;
    const LENGTH_NOTE: &'static str = "";
    const CHARACTER_NOTE: &'static str = " (ClickHouse names are case-sensitive)";

    fn reserved(name: &str) -> Option<Self> {
        RESERVED_DATABASE_NAMES
            .iter()
            .any(|reserved| reserved.eq_ignore_ascii_case(name))
            .then_some(Self)
    }
}

/// Which naming rule a refused database name broke.
pub type DatabaseNameRule = NameRule<ReservedDatabase>;

/// A database name that broke one of [`DatabaseName`]'s rules.
pub type DatabaseNameError = NameError<ReservedDatabase>;

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str) -> Option<DatabaseNameRule> {
        DatabaseName::new(name).err().map(|e| e.rule)
    }

    /// Refuses `name` for `expected`, with a message that names it.
    fn assert_refused(name: &str, expected: DatabaseNameRule) {
        let err = DatabaseName::new(name).expect_err(name);
        assert_eq!(err.rule, expected, "{name:?}");
        assert!(
            err.to_string()
                .starts_with(&format!("database name {name:?} is refused: ")),
            "{err}"
        );
    }

    #[test]
    fn database_names_follow_the_schema_name_syntax() {
        assert_eq!(DatabaseName::default().as_str(), "relay_analytics");
        assert_eq!(rule("relay_analytics"), None);
        assert_eq!(rule("_x9"), None);
        assert_eq!(rule(&"a".repeat(63)), None);
        assert_eq!(
            rule("pg_ok_here"),
            None,
            "pg_ is PostgreSQL's prefix, not ClickHouse's"
        );
        assert_eq!(
            rule("public"),
            None,
            "public is PostgreSQL's, not ClickHouse's"
        );
        let cases = [
            ("", DatabaseNameRule::Empty),
            (&*"a".repeat(64), DatabaseNameRule::TooLong { bytes: 64 }),
            ("Relay", DatabaseNameRule::BadFirstCharacter { found: 'R' }),
            ("1relay", DatabaseNameRule::BadFirstCharacter { found: '1' }),
            (
                "relay-x",
                DatabaseNameRule::BadCharacter { found: '-', at: 5 },
            ),
            (
                "relay`x",
                DatabaseNameRule::BadCharacter { found: '`', at: 5 },
            ),
            (
                "relay.x",
                DatabaseNameRule::BadCharacter { found: '.', at: 5 },
            ),
            (
                "relayX",
                DatabaseNameRule::BadCharacter { found: 'X', at: 5 },
            ),
            (
                "relay_Analytics",
                DatabaseNameRule::BadCharacter { found: 'A', at: 6 },
            ),
            (
                "relay x",
                DatabaseNameRule::BadCharacter { found: ' ', at: 5 },
            ),
        ];
        for (name, expected) in cases {
            assert_refused(name, expected);
        }
        assert_eq!(
            DatabaseName::new(&"a".repeat(64)).unwrap_err().to_string(),
            format!(
                "database name {:?} is refused: it is 64 bytes long; at most 63 are allowed",
                "a".repeat(64)
            )
        );
        assert_eq!(
            DatabaseName::new("").unwrap_err().to_string(),
            "database name \"\" is refused: it is empty; give a name such as \"relay_analytics\""
        );
    }

    #[test]
    fn clickhouse_owned_databases_are_refused_in_any_case() {
        for name in [
            "system",
            "SYSTEM",
            "default",
            "Default",
            "information_schema",
            "INFORMATION_SCHEMA",
            "_temporary_and_external_tables",
        ] {
            assert_refused(name, DatabaseNameRule::Reserved(ReservedDatabase));
        }
        assert_eq!(RESERVED_DATABASE_NAMES.len(), 4);
        let err = DatabaseName::new("system").unwrap_err();
        assert!(err.to_string().contains("ClickHouse owns"), "{err}");
        assert_eq!("x".parse::<DatabaseName>().unwrap().as_str(), "x");
    }
}
