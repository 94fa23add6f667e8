//! The wake-up channel of a queue: the PostgreSQL `LISTEN`/`NOTIFY` channel
//! on which the workers of one engine schema's queue are told that work
//! arrived.
//!
//! A channel name is an identifier: PostgreSQL keeps at most 63 bytes of it
//! (`pg_notify` refuses a longer one, `LISTEN` truncates it silently), and
//! every schema of a database shares one channel namespace. Queue names are
//! arbitrary text. One rule maps every `(schema, queue)` pair to a channel,
//! deterministically, within 63 bytes, never truncating what tells two
//! queues apart:
//!
//! - **readable**: `<schema>:<queue>` when the queue is lowercase ASCII
//!   letters, digits and `_` (non-empty) and the whole fits in 63 bytes:
//!   `alkstore:mail`. A schema name holds no `:`, nor does such a queue, so
//!   the pair can be read back: two pairs never share a readable channel.
//! - **hashed**: otherwise `<prefix>#<hash>`: the prefix is the readable
//!   form with every other character made `_` (ASCII capitals lowercased)
//!   and cut to 46 bytes, for people reading `pg_listening_channels()`; the
//!   hash is 16 lowercase hex digits, the first 64 bits of SHA-256 over the
//!   schema name, a zero byte and the queue's UTF-8 bytes, and it alone
//!   tells queues apart (`Mail.EU` becomes `alkstore:mail_eu#` and 16
//!   digits). A readable channel never holds `#`, so the two forms never
//!   meet; two hashed channels meet only if their pairs' 64-bit hashes
//!   collide (with 10,000 queues on one database, about one chance in
//!   10^11).
//!
//! Why not always the hash: operators read channels in
//! `pg_listening_channels()` and `pg_stat_activity`, and almost every queue
//! name is plain. Why not refuse unusual queue names, as the schema name
//! does: the queue is a column value the engine already stores (`Mail`,
//! `mail.eu`, `ünïcode`), and a queue whose name has capitals must be woken
//! too (pgmq never notified one until 1.13.1). Why the schema is in the
//! channel: two engine schemas in one database must not wake each other.
//!
//! The name holds only lowercase ASCII letters, digits, `_`, `:` and `#`,
//! so it reads the same quoted (`LISTEN "alkstore:mail"`, how schema-gen
//! renders it, like every identifier) and as the text `pg_notify` takes.
//!
//! ```
//! use schema_model::{SchemaName, WakeChannel};
//!
//! let schema = SchemaName::default();
//! assert_eq!(WakeChannel::new(&schema, "mail").as_str(), "alkstore:mail");
//! let odd = WakeChannel::new(&schema, "Mail.EU");
//! assert!(odd.as_str().starts_with("alkstore:mail_eu#"), "{odd}");
//! assert_ne!(odd, WakeChannel::new(&schema, "mail.eu"));
//! assert!(WakeChannel::new(&schema, &"q".repeat(500)).as_str().len() <= 63);
//! ```

use std::fmt;

use sha2::{Digest, Sha256};

use crate::SchemaName;
use crate::name::MAX_NAME_BYTES;

/// Separates the schema from the queue in a channel name.
const SEPARATOR: char = ':';
/// Separates the readable prefix of a hashed channel from its hash.
const HASH_MARK: char = '#';
/// Hex digits of the hash in a hashed channel (64 bits).
const HASH_DIGITS: usize = 16;
/// The readable prefix of a hashed channel, at most.
const PREFIX_BYTES: usize = MAX_NAME_BYTES - 1 - HASH_DIGITS;

/// The `LISTEN`/`NOTIFY` channel of one queue of one engine schema (see the
/// [module docs](self) for the rule). At most 63 bytes, only lowercase
/// ASCII letters, digits, `_`, `:` and `#`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeChannel(String);

impl WakeChannel {
    /// The channel of `queue` in the engine schema `schema`. Every queue
    /// name has one, whatever its characters or length.
    pub fn new(schema: &SchemaName, queue: &str) -> Self {
        let readable = schema.as_str().len() + SEPARATOR.len_utf8() + queue.len();
        if is_plain(queue) && readable <= MAX_NAME_BYTES {
            return Self(format!("{schema}{SEPARATOR}{queue}"));
        }
        let mut prefix = format!("{schema}{SEPARATOR}");
        prefix.extend(queue.chars().map(readable_char));
        // Only ASCII was written: any byte is a character boundary.
        prefix.truncate(PREFIX_BYTES);
        Self(format!("{prefix}{HASH_MARK}{}", hash(schema, queue)))
    }

    /// The channel name, as `pg_notify` takes it and `LISTEN` (quoted)
    /// names it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the name is the hashed form (the queue name is not plain
    /// lowercase ASCII, or the pair is too long to be read back).
    pub fn is_hashed(&self) -> bool {
        self.0.contains(HASH_MARK)
    }
}

impl fmt::Display for WakeChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for WakeChannel {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl sea_query::Iden for WakeChannel {
    fn unquoted(&self) -> &str {
        &self.0
    }
}

/// Lowercase ASCII letters, digits and `_`, at least one.
fn is_plain(queue: &str) -> bool {
    !queue.is_empty()
        && queue
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn readable_char(c: char) -> char {
    match c {
        'a'..='z' | '0'..='9' | '_' => c,
        'A'..='Z' => c.to_ascii_lowercase(),
        _ => '_',
    }
}

/// The first 64 bits of SHA-256 over `schema`, a zero byte (which neither a
/// schema name nor the separator can hold) and `queue`, in lowercase hex.
fn hash(schema: &SchemaName, queue: &str) -> String {
    let digest = Sha256::new()
        .chain_update(schema.as_str())
        .chain_update([0u8])
        .chain_update(queue)
        .finalize();
    digest[..HASH_DIGITS / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn channel(schema: &str, queue: &str) -> String {
        let schema = SchemaName::new(schema).unwrap_or_else(|e| panic!("{e}"));
        WakeChannel::new(&schema, queue).0
    }

    #[test]
    fn plain_queues_are_readable() {
        assert_eq!(channel("alkstore", "mail"), "alkstore:mail");
        assert_eq!(channel("t_7", "q_1"), "t_7:q_1");
        // 8 + 1 + 54 = 63 bytes: still readable.
        let at_limit = "q".repeat(54);
        assert_eq!(
            channel("alkstore", &at_limit),
            format!("alkstore:{at_limit}")
        );
    }

    #[test]
    fn other_queues_are_hashed_within_the_limit() {
        let over = "q".repeat(55);
        for (schema, queue) in [
            ("alkstore", over.as_str()),
            ("alkstore", "Mail"),
            ("alkstore", "mail.eu"),
            ("alkstore", ""),
            ("alkstore", "caf\u{e9}"),
            ("alkstore", "a\"b"),
            ("alkstore", "a:b"),
            ("alkstore", "a#b"),
            (&"s".repeat(63), "mail"),
        ] {
            let name = channel(schema, queue);
            assert!(name.len() <= MAX_NAME_BYTES, "{name}: {} bytes", name.len());
            assert_eq!(name.matches(HASH_MARK).count(), 1, "{name}");
            let (_, digits) = name.split_once(HASH_MARK).unwrap_or_default();
            assert_eq!(digits.len(), HASH_DIGITS, "{name}");
        }
        assert!(channel("alkstore", "Mail.EU").starts_with("alkstore:mail_eu#"));
        assert!(channel("alkstore", "").starts_with("alkstore:#"));
    }

    /// The hash is SHA-256's: a published value pins it (so a change of the
    /// rule, which would split old and new engines onto two channels, fails
    /// here first). SHA-256("alkstore\0Mail") computed with coreutils'
    /// `printf 'alkstore\0Mail' | sha256sum`.
    #[test]
    fn the_hash_is_the_first_64_bits_of_sha_256() {
        assert_eq!(
            channel("alkstore", "Mail"),
            "alkstore:mail#9a5d4b23048a55d8"
        );
    }

    /// The characters that differ only in spelling, and the lengths around
    /// the limit, never share a channel.
    #[test]
    fn near_names_get_distinct_channels() {
        let long: Vec<String> = (54..=56).map(|n| "q".repeat(n)).collect();
        let names = [
            "mail", "Mail", "MAIL", "mail_", "mail.", "mail-", "mail ", "mail\0", "", "_",
        ]
        .into_iter()
        .chain(long.iter().map(String::as_str));
        let mut seen = std::collections::HashSet::new();
        for schema in ["alkstore", "alkstore2"] {
            for name in names.clone() {
                assert!(
                    seen.insert(channel(schema, name)),
                    "{schema} {name:?} shares a channel"
                );
            }
        }
    }

    fn schema_names() -> impl Strategy<Value = String> {
        "[a-z_][a-z0-9_]{0,62}".prop_filter("a valid schema name", |s| SchemaName::new(s).is_ok())
    }

    proptest! {
        #[test]
        fn every_pair_has_a_channel_within_63_bytes_of_the_allowed_characters(
            schema in schema_names(),
            queue in any::<String>(),
        ) {
            let name = channel(&schema, &queue);
            prop_assert!(name.len() <= MAX_NAME_BYTES);
            prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'_' | b':' | b'#')));
            prop_assert!(name.starts_with(&schema[..schema.len().min(PREFIX_BYTES)]));
            prop_assert_eq!(&name, &channel(&schema, &queue), "deterministic");
        }

        /// The readable form reads back to its pair, so two pairs that get
        /// readable channels never share one.
        #[test]
        fn a_readable_channel_names_its_pair(
            schema in schema_names(),
            queue in "[a-z0-9_]{1,62}",
        ) {
            let name = channel(&schema, &queue);
            if name.contains(HASH_MARK) {
                prop_assert!(schema.len() + 1 + queue.len() > MAX_NAME_BYTES);
            } else {
                prop_assert_eq!(name.split_once(SEPARATOR), Some((schema.as_str(), queue.as_str())));
            }
        }

        #[test]
        fn distinct_pairs_get_distinct_channels(
            a in (schema_names(), any::<String>()),
            b in (schema_names(), any::<String>()),
        ) {
            prop_assume!(a != b);
            prop_assert_ne!(channel(&a.0, &a.1), channel(&b.0, &b.1));
        }
    }
}
