//! The validated name of the engine-owned PostgreSQL schema: the shared
//! name syntax ([`crate::name`]) plus the schemas PostgreSQL reserves.

use std::fmt;

use crate::name::{NameDialect, NameError, NameRule};

pub use crate::name::MAX_NAME_BYTES as MAX_SCHEMA_NAME_BYTES;

/// The schema name used when none is configured.
pub const DEFAULT_SCHEMA_NAME: &str = "alkstore";

/// The name of the engine-owned schema, validated before any SQL is built.
///
/// Accepted: lowercase ASCII letters, digits and `_`, starting with a letter or
/// `_`, at most 63 bytes, not starting with `pg_`, and not one of the schemas
/// PostgreSQL or consumers already own (`public`, `information_schema`).
/// PostgreSQL silently truncates longer identifiers and folds unquoted upper case,
/// so either would let the configured name and the stored name drift apart.
///
/// ```
/// use schema_model::SchemaName;
///
/// assert_eq!(SchemaName::default().as_str(), "alkstore");
/// assert_eq!(SchemaName::new("tenant_7").unwrap().as_str(), "tenant_7");
/// let refused = SchemaName::new("alkStore").unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "schema name \"alkStore\" is refused: it contains 'S' at byte 3; \
///      only lowercase ASCII letters, digits and '_' are allowed"
/// );
/// assert_eq!(
///     SchemaName::new("pg_alk").unwrap_err().to_string(),
///     "schema name \"pg_alk\" is refused: it starts with \"pg_\", which PostgreSQL \
///      reserves for system schemas"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaName(String);

crate::name::validated_name!(SchemaName, ReservedSchema);

/// Why PostgreSQL's dialect reserves a schema name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservedSchema {
    /// The name starts with `pg_`, which PostgreSQL reserves for system schemas.
    PgPrefix,
    /// The name is a schema PostgreSQL or its consumers already own
    /// (`public`, `information_schema`).
    Owned,
}

impl fmt::Display for ReservedSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::PgPrefix => {
                "it starts with \"pg_\", which PostgreSQL reserves for system schemas"
            }
            Self::Owned => {
                "it is a schema PostgreSQL or its consumers already own; the engine needs a \
                 schema of its own"
            }
        })
    }
}

impl NameDialect for ReservedSchema {
    const NOUN: &'static str = "schema name";
    const DEFAULT: &'static str = DEFAULT_SCHEMA_NAME;
    const LENGTH_NOTE: &'static str = " (PostgreSQL would truncate it silently)";
    const CHARACTER_NOTE: &'static str = "";

    fn reserved(name: &str) -> Option<Self> {
        if name.starts_with("pg_") {
            Some(Self::PgPrefix)
        } else if matches!(name, "public" | "information_schema") {
            Some(Self::Owned)
        } else {
            None
        }
    }
}

/// Which naming rule a refused schema name broke.
pub type SchemaNameRule = NameRule<ReservedSchema>;

/// A schema name that broke one of [`SchemaName`]'s rules.
pub type SchemaNameError = NameError<ReservedSchema>;

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str) -> Option<SchemaNameRule> {
        SchemaName::new(name).err().map(|e| e.rule)
    }

    #[test]
    fn tricky_names_are_judged_by_the_right_rule() {
        let at_limit = format!("a{}", "b".repeat(62));
        let over_limit = format!("a{}", "b".repeat(63));
        assert_eq!(rule(&at_limit), None, "63 bytes is allowed");
        assert_eq!(
            rule(&over_limit),
            Some(SchemaNameRule::TooLong { bytes: 64 })
        );
        assert_eq!(rule(""), Some(SchemaNameRule::Empty));
        assert_eq!(rule("_x"), None);
        assert_eq!(
            rule("select"),
            None,
            "keywords are quoted, so they are fine"
        );
        let cases = [
            ("Alk", SchemaNameRule::BadFirstCharacter { found: 'A' }),
            ("9lives", SchemaNameRule::BadFirstCharacter { found: '9' }),
            ("alK", SchemaNameRule::BadCharacter { found: 'K', at: 2 }),
            ("a\"b", SchemaNameRule::BadCharacter { found: '"', at: 1 }),
            ("a;drop", SchemaNameRule::BadCharacter { found: ';', at: 1 }),
            ("a.b", SchemaNameRule::BadCharacter { found: '.', at: 1 }),
            ("a$", SchemaNameRule::BadCharacter { found: '$', at: 1 }),
            ("a\\b", SchemaNameRule::BadCharacter { found: '\\', at: 1 }),
            ("a\0", SchemaNameRule::BadCharacter { found: '\0', at: 1 }),
            ("a-b", SchemaNameRule::BadCharacter { found: '-', at: 1 }),
            ("a b", SchemaNameRule::BadCharacter { found: ' ', at: 1 }),
            (
                "caf\u{e9}",
                SchemaNameRule::BadCharacter {
                    found: '\u{e9}',
                    at: 3,
                },
            ),
            (
                "\u{e9}t\u{e9}",
                SchemaNameRule::BadFirstCharacter { found: '\u{e9}' },
            ),
            ("pg_alk", SchemaNameRule::Reserved(ReservedSchema::PgPrefix)),
            ("public", SchemaNameRule::Reserved(ReservedSchema::Owned)),
            (
                "information_schema",
                SchemaNameRule::Reserved(ReservedSchema::Owned),
            ),
            // Reserved and malformed: the reservation is reported.
            ("pg_X", SchemaNameRule::Reserved(ReservedSchema::PgPrefix)),
        ];
        for (name, expected) in cases {
            assert_eq!(rule(name), Some(expected), "{name:?}");
        }
        // PostgreSQL's reservations are case-sensitive: these break the case rule instead.
        assert_eq!(
            rule("PUBLIC"),
            Some(SchemaNameRule::BadFirstCharacter { found: 'P' })
        );
        assert_eq!(
            rule("Pg_alk"),
            Some(SchemaNameRule::BadFirstCharacter { found: 'P' })
        );
    }

    #[test]
    fn a_multibyte_name_is_measured_in_bytes() {
        // 32 two-byte characters: 64 bytes, so the length rule fires before the character rule.
        let name = "\u{e9}".repeat(32);
        assert_eq!(rule(&name), Some(SchemaNameRule::TooLong { bytes: 64 }));
    }

    #[test]
    fn errors_name_the_rule_in_words() {
        let err = SchemaName::new("pg_catalog").unwrap_err();
        assert!(
            err.to_string().contains("reserves for system schemas"),
            "{err}"
        );
        let err = SchemaName::new(&"a".repeat(64)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "schema name {:?} is refused: it is 64 bytes long; at most 63 are allowed \
                 (PostgreSQL would truncate it silently)",
                "a".repeat(64)
            )
        );
        assert_eq!(
            SchemaName::new("").unwrap_err().to_string(),
            "schema name \"\" is refused: it is empty; give a name such as \"alkstore\""
        );
        assert_eq!(
            SchemaName::new("public").unwrap_err().to_string(),
            "schema name \"public\" is refused: it is a schema PostgreSQL or its consumers \
             already own; the engine needs a schema of its own"
        );
        assert_eq!("x".parse::<SchemaName>().unwrap().as_str(), "x");
    }
}
