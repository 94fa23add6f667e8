//! The validated name of the engine-owned PostgreSQL schema.

/// The longest identifier PostgreSQL stores without truncation (`NAMEDATALEN - 1`).
pub const MAX_SCHEMA_NAME_BYTES: usize = 63;

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
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaName(String);

/// Which naming rule a refused schema name broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaNameRule {
    /// The name is empty.
    Empty,
    /// The name is longer than 63 bytes; PostgreSQL would truncate it silently.
    TooLong {
        /// The name's length in bytes.
        bytes: usize,
    },
    /// The first character is not a lowercase letter or `_`.
    BadFirstCharacter {
        /// The offending character.
        found: char,
    },
    /// A character other than a lowercase ASCII letter, a digit or `_`.
    BadCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset in the name.
        at: usize,
    },
    /// The name starts with `pg_`, which PostgreSQL reserves for system schemas.
    ReservedPrefix,
    /// The name is a schema PostgreSQL or its consumers already own.
    ReservedName,
}

/// A schema name that broke one of [`SchemaName`]'s rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schema name {name:?} is refused: {}", describe_rule(.rule))]
pub struct SchemaNameError {
    /// The name as given.
    pub name: String,
    /// The first rule it broke.
    pub rule: SchemaNameRule,
}

fn describe_rule(rule: &SchemaNameRule) -> String {
    match rule {
        SchemaNameRule::Empty => "it is empty; give a name such as \"alkstore\"".to_owned(),
        SchemaNameRule::TooLong { bytes } => format!(
            "it is {bytes} bytes long; at most {MAX_SCHEMA_NAME_BYTES} are allowed \
             (PostgreSQL would truncate it silently)"
        ),
        SchemaNameRule::BadFirstCharacter { found } => {
            format!("it starts with {found:?}; it must start with a lowercase ASCII letter or '_'")
        }
        SchemaNameRule::BadCharacter { found, at } => format!(
            "it contains {found:?} at byte {at}; only lowercase ASCII letters, digits and '_' \
             are allowed"
        ),
        SchemaNameRule::ReservedPrefix => {
            "it starts with \"pg_\", which PostgreSQL reserves for system schemas".to_owned()
        }
        SchemaNameRule::ReservedName => {
            "it is a schema PostgreSQL or its consumers already own; the engine needs a \
             schema of its own"
                .to_owned()
        }
    }
}

impl SchemaName {
    /// Validates `name`, returning the first rule it breaks.
    pub fn new(name: &str) -> Result<Self, SchemaNameError> {
        match first_broken_rule(name) {
            None => Ok(Self(name.to_owned())),
            Some(rule) => Err(SchemaNameError {
                name: name.to_owned(),
                rule,
            }),
        }
    }

    /// The name, exactly as validated.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn first_broken_rule(name: &str) -> Option<SchemaNameRule> {
    if let Some(rule) = identifier_syntax_rule(name) {
        return Some(rule);
    }
    if name.starts_with("pg_") {
        return Some(SchemaNameRule::ReservedPrefix);
    }
    if matches!(name, "public" | "information_schema") {
        return Some(SchemaNameRule::ReservedName);
    }
    None
}

/// The syntax rules shared by every name the generator accepts from a user
/// (this schema name and [`DatabaseName`](crate::DatabaseName)): not empty, at
/// most 63 bytes, lowercase ASCII letters, digits and `_`, starting with a
/// letter or `_`. Returns only the syntax variants of [`SchemaNameRule`]; the
/// reserved names are each dialect's own.
pub(crate) fn identifier_syntax_rule(name: &str) -> Option<SchemaNameRule> {
    let Some(first) = name.chars().next() else {
        return Some(SchemaNameRule::Empty);
    };
    if name.len() > MAX_SCHEMA_NAME_BYTES {
        return Some(SchemaNameRule::TooLong { bytes: name.len() });
    }
    if !(first.is_ascii_lowercase() || first == '_') {
        return Some(SchemaNameRule::BadFirstCharacter { found: first });
    }
    if let Some((at, found)) = name
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
    {
        return Some(SchemaNameRule::BadCharacter { found, at });
    }
    None
}

/// The conversions every validated name shares: `Default` (the given
/// default), `Display`, `FromStr` (validating), `AsRef<str>` and sea-query's
/// `Iden` (so the name qualifies tables in rendered SQL).
macro_rules! validated_name_impls {
    ($name:ident, $error:ident, $default:expr) => {
        impl Default for $name {
            fn default() -> Self {
                Self($default.to_owned())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = $error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl sea_query::Iden for $name {
            fn unquoted(&self) -> &str {
                &self.0
            }
        }
    };
}
pub(crate) use validated_name_impls;

validated_name_impls!(SchemaName, SchemaNameError, DEFAULT_SCHEMA_NAME);

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
            ("pg_alk", SchemaNameRule::ReservedPrefix),
            ("public", SchemaNameRule::ReservedName),
            ("information_schema", SchemaNameRule::ReservedName),
        ];
        for (name, expected) in cases {
            assert_eq!(rule(name), Some(expected), "{name:?}");
        }
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
        assert!(err.to_string().contains("64 bytes long"), "{err}");
    }
}
