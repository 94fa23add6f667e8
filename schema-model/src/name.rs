//! The rules every name the generator accepts from a user follows, written
//! once for both dialects: the syntax ([`NameRule`]'s syntax variants and
//! their messages) and the order the rules are checked in. A dialect adds
//! only its own reserved names and the words its messages need
//! ([`NameDialect`]): PostgreSQL's schema names in
//! [`schema_name`](crate::schema_name), ClickHouse's database names in
//! [`analytics::database_name`](crate::analytics::database_name).
//!
//! The syntax: lowercase ASCII letters, digits and `_`, starting with a
//! letter or `_`, 1 to 63 bytes. PostgreSQL truncates longer identifiers
//! silently and folds unquoted upper case; ClickHouse is case-sensitive. One
//! spelling per name, short enough for both, keeps the configured name and
//! the stored name from drifting apart.
//!
//! ```
//! use schema_model::{DatabaseName, DatabaseNameRule, NameRule, SchemaName, SchemaNameRule};
//!
//! // One rule, one message shape, in both dialects.
//! let schema = SchemaName::new("alk-store").unwrap_err();
//! let database = DatabaseName::new("relay-analytics").unwrap_err();
//! assert_eq!(schema.rule, SchemaNameRule::BadCharacter { found: '-', at: 3 });
//! assert_eq!(database.rule, DatabaseNameRule::BadCharacter { found: '-', at: 5 });
//! assert!(matches!(schema.rule, NameRule::BadCharacter { .. }));
//! ```

use std::fmt::{self, Debug, Display};

/// The longest name accepted: PostgreSQL stores identifiers up to
/// `NAMEDATALEN - 1` bytes without truncation, and both dialects share it.
pub const MAX_NAME_BYTES: usize = 63;

/// Which rule a refused name broke: one of the syntax rules every dialect
/// shares, or `R`, the dialect's reason for reserving the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRule<R> {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_BYTES`].
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
    /// The dialect reserves the name; `R` says why.
    Reserved(R),
}

/// What a dialect adds to the shared syntax: its reserved names and the
/// words its messages need. Implemented by the dialect's reason type, the
/// `R` of [`NameRule<R>`].
pub trait NameDialect: Debug + Clone + PartialEq + Eq + Display {
    /// What the name names, as the messages say it (`"schema name"`).
    const NOUN: &'static str;
    /// The name used when none is configured; the empty-name message suggests it.
    const DEFAULT: &'static str;
    /// Appended to the too-long message: why the limit matters here, or `""`.
    const LENGTH_NOTE: &'static str;
    /// Appended to the bad-character message: why case matters here, or `""`.
    const CHARACTER_NOTE: &'static str;

    /// Why the dialect reserves `name`, if it does. Checked before the
    /// syntax: a reserved name is the clearer reason even when its spelling
    /// breaks a syntax rule too (`SYSTEM`, `pg_X`).
    fn reserved(name: &str) -> Option<Self>;
}

impl<R: NameDialect> Display for NameRule<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "it is empty; give a name such as {:?}", R::DEFAULT),
            Self::TooLong { bytes } => write!(
                f,
                "it is {bytes} bytes long; at most {MAX_NAME_BYTES} are allowed{}",
                R::LENGTH_NOTE
            ),
            Self::BadFirstCharacter { found } => write!(
                f,
                "it starts with {found:?}; it must start with a lowercase ASCII letter or '_'"
            ),
            Self::BadCharacter { found, at } => write!(
                f,
                "it contains {found:?} at byte {at}; only lowercase ASCII letters, digits and \
                 '_' are allowed{}",
                R::CHARACTER_NOTE
            ),
            Self::Reserved(reason) => Display::fmt(reason, f),
        }
    }
}

/// A name that broke one of its dialect's rules: `"<noun> <name> is refused:
/// <rule>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError<R> {
    /// The name as given.
    pub name: String,
    /// The first rule it broke.
    pub rule: NameRule<R>,
}

impl<R: NameDialect> Display for NameError<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?} is refused: {}", R::NOUN, self.name, self.rule)
    }
}

impl<R: NameDialect> std::error::Error for NameError<R> {}

/// Checks `name` against the dialect's reserved names, then the shared
/// syntax, and returns the first rule it breaks.
pub fn check_name<R: NameDialect>(name: &str) -> Result<(), NameError<R>> {
    match first_broken_rule(name) {
        None => Ok(()),
        Some(rule) => Err(NameError {
            name: name.to_owned(),
            rule,
        }),
    }
}

fn first_broken_rule<R: NameDialect>(name: &str) -> Option<NameRule<R>> {
    if let Some(reason) = R::reserved(name) {
        return Some(NameRule::Reserved(reason));
    }
    let Some(first) = name.chars().next() else {
        return Some(NameRule::Empty);
    };
    if name.len() > MAX_NAME_BYTES {
        return Some(NameRule::TooLong { bytes: name.len() });
    }
    if !(first.is_ascii_lowercase() || first == '_') {
        return Some(NameRule::BadFirstCharacter { found: first });
    }
    name.char_indices()
        .find(|&(_, c)| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .map(|(at, found)| NameRule::BadCharacter { found, at })
}

/// The conversions every validated name shares: `new` (through
/// [`check_name`]), `as_str`, `Default` (the dialect's default), `Display`,
/// `FromStr` (validating), `AsRef<str>` and sea-query's `Iden` (so the name
/// qualifies tables in rendered SQL).
macro_rules! validated_name {
    ($name:ident, $reason:ty) => {
        impl $name {
            /// Validates `name`, returning the first rule it breaks.
            pub fn new(name: &str) -> Result<Self, $crate::name::NameError<$reason>> {
                $crate::name::check_name::<$reason>(name).map(|()| Self(name.to_owned()))
            }

            /// The name, exactly as validated.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self(<$reason as $crate::name::NameDialect>::DEFAULT.to_owned())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::name::NameError<$reason>;

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
pub(crate) use validated_name;

#[cfg(test)]
mod tests {
    use super::*;

    /// A dialect that reserves `taken` (and `TAKEN`), for the shared machinery alone.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Taken;

    impl Display for Taken {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("it is taken")
        }
    }

    impl NameDialect for Taken {
        const NOUN: &'static str = "test name";
        const DEFAULT: &'static str = "free";
        const LENGTH_NOTE: &'static str = " (length note)";
        const CHARACTER_NOTE: &'static str = " (character note)";

        fn reserved(name: &str) -> Option<Self> {
            name.eq_ignore_ascii_case("taken").then_some(Taken)
        }
    }

    fn refused(name: &str) -> String {
        match check_name::<Taken>(name) {
            Ok(()) => panic!("{name:?} accepted"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn each_rule_has_its_message_with_the_dialects_words() {
        assert_eq!(
            refused(""),
            "test name \"\" is refused: it is empty; give a name such as \"free\""
        );
        assert_eq!(
            refused(&"a".repeat(64)),
            format!(
                "test name {:?} is refused: it is 64 bytes long; at most 63 are allowed \
                 (length note)",
                "a".repeat(64)
            )
        );
        assert_eq!(
            refused("9a"),
            "test name \"9a\" is refused: it starts with '9'; it must start with a lowercase \
             ASCII letter or '_'"
        );
        assert_eq!(
            refused("aB"),
            "test name \"aB\" is refused: it contains 'B' at byte 1; only lowercase ASCII \
             letters, digits and '_' are allowed (character note)"
        );
        assert_eq!(
            refused("taken"),
            "test name \"taken\" is refused: it is taken"
        );
        assert!(check_name::<Taken>("free_9").is_ok());
    }

    #[test]
    fn the_reserved_names_are_checked_before_the_syntax() {
        // TAKEN breaks the first-character rule too; the reservation is the clearer reason.
        assert_eq!(
            check_name::<Taken>("TAKEN").map_err(|e| e.rule),
            Err(NameRule::Reserved(Taken))
        );
    }

    #[test]
    fn the_rules_are_checked_in_order_and_length_in_bytes() {
        let rule = |name: &str| check_name::<Taken>(name).err().map(|e| e.rule);
        assert_eq!(rule(&"a".repeat(63)), None);
        // Too long and a bad character: the length is reported.
        assert_eq!(
            rule(&format!("{}-", "a".repeat(63))),
            Some(NameRule::TooLong { bytes: 64 })
        );
        // 32 two-byte characters are 64 bytes.
        assert_eq!(
            rule(&"\u{e9}".repeat(32)),
            Some(NameRule::TooLong { bytes: 64 })
        );
        assert_eq!(rule("A-"), Some(NameRule::BadFirstCharacter { found: 'A' }));
        assert_eq!(
            rule("caf\u{e9}"),
            Some(NameRule::BadCharacter {
                found: '\u{e9}',
                at: 3
            })
        );
    }
}
