//! libpq's connection strings: the `postgresql://` URI and the `key=value`
//! form, parsed the way libpq 15-17 parses them (`conninfo_parse` and
//! `conninfo_uri_parse` in `fe-connect.c`), into `(keyword, value)` pairs.
//!
//! Written here rather than taken from a crate: tokio-postgres's parser
//! refuses libpq's TLS and password-file keywords (`sslrootcert`, `passfile`,
//! `sslmode=verify-full`, ...) and names no key in its errors, and no
//! maintained crate parses both forms with libpq's rules (see the module docs
//! of [`super`]). `tests/pg_conninfo/` compares the outcome with psql's on
//! the same inputs.
//!
//! Errors never echo a password: a password's value, or text that an
//! unquoted space split off a password, is described, not quoted.

mod keywords;
#[cfg(test)]
mod tests;
mod uri;

use std::fmt;

use keywords::suggest;
pub(crate) use keywords::{KEYWORDS, Support, is_secret, keyword};
use uri::parse_uri;

/// Why a connection string was refused. Each variant names the offending key
/// or part; none carries a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// A `key=value` string has a word without `=` after it.
    MissingEquals {
        /// The word, or a description when it may be part of a password.
        word: String,
    },
    /// A quoted value has no closing quote.
    UnterminatedQuote {
        /// The key whose value is unterminated.
        key: String,
    },
    /// A keyword libpq does not know.
    UnknownKey {
        /// The keyword as written.
        key: String,
        /// The known keyword it most resembles, if any.
        suggestion: Option<&'static str>,
        /// Whether it came from a URI query (`?key=value`).
        in_uri_query: bool,
    },
    /// A malformed part of a `postgresql://` URI.
    Uri {
        /// What is wrong, naming the part.
        message: String,
    },
    /// More than one `@` before the host: the user name or password holds an
    /// unencoded `@`.
    AtInUserInfo,
    /// Text split off a password by an unquoted space.
    SplitPassword,
    /// Something that looks like a URL with a wrong scheme (`postgresql:/`,
    /// `postgis://`): not quoted, since it may hold a password.
    NotAUrl,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingEquals { word } => write!(
                f,
                "`{word}` is not a key=value pair (quote values that contain spaces: \
                 key='a value')"
            ),
            Self::UnterminatedQuote { key } => {
                write!(f, "the quoted value of `{key}` has no closing quote (')")
            }
            Self::UnknownKey {
                key,
                suggestion,
                in_uri_query,
            } => {
                let place = if *in_uri_query {
                    "URI query parameter"
                } else {
                    "connection parameter"
                };
                write!(f, "unknown {place} `{key}`")?;
                if let Some(known) = suggestion {
                    write!(f, " (did you mean `{known}`?)")?;
                }
                Ok(())
            }
            Self::Uri { message } => f.write_str(message),
            Self::AtInUserInfo => f.write_str(
                "the URL has more than one '@' before the host: a user name or password that \
                 contains '@' must write it as %40 (postgres://user:p%40ss@host/db)",
            ),
            Self::NotAUrl => f.write_str(
                "it looks like a URL but does not start with postgresql:// or postgres:// \
                 (it is not shown: it may hold a password)",
            ),
            Self::SplitPassword => f.write_str(
                "the value of `password` contains an unquoted space: quote it (password='...') \
                 or use a URL with the space written as %20",
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// One parsed `keyword=value` pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pair {
    pub key: &'static str,
    pub value: String,
}

/// Parses a connection string: a `postgresql://` / `postgres://` URI, or
/// libpq's `key=value` form. Later pairs override earlier ones, as in libpq.
pub(crate) fn parse(text: &str) -> Result<Vec<Pair>, ParseError> {
    let is_url = text.starts_with("postgresql://") || text.starts_with("postgres://");
    if looks_like_a_url(text) && !is_url {
        return Err(ParseError::NotAUrl);
    }
    if let Some(rest) = text
        .strip_prefix("postgresql://")
        .or_else(|| text.strip_prefix("postgres://"))
    {
        parse_uri(rest)
    } else {
        parse_key_values(text)
    }
}

/// Whether the first word of `text` holds `://`, `:/` or `@`, which no
/// keyword does: a URL, maybe with a password, whatever its scheme.
fn looks_like_a_url(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or("");
    let first = first.split('=').next().unwrap_or("");
    first.contains(":/") || first.contains('@')
}

/// Whether libpq would read `text` as a connection string rather than as a
/// bare database name (`recognized_connection_string`).
pub(crate) fn is_connection_string(text: &str) -> bool {
    text.starts_with("postgresql://") || text.starts_with("postgres://") || text.contains('=')
}

/// Looks a keyword up, applying libpq's aliases (`requiressl`, and `ssl=true`
/// in URIs).
fn store(
    pairs: &mut Vec<Pair>,
    key: &str,
    value: String,
    in_uri_query: bool,
) -> Result<(), ParseError> {
    let (key, value) = match key {
        // libpq: requiressl=1 means sslmode=require, anything else prefer.
        "requiressl" => (
            "sslmode",
            if value.starts_with('1') {
                "require".to_owned()
            } else {
                "prefer".to_owned()
            },
        ),
        // libpq: JDBC's ssl=true, in URI queries only.
        "ssl" if in_uri_query && value == "true" => ("sslmode", "require".to_owned()),
        other => (other, value),
    };
    match keyword(key) {
        Some(known) => {
            pairs.push(Pair {
                key: known.name,
                value,
            });
            Ok(())
        }
        None => Err(ParseError::UnknownKey {
            key: key.to_owned(),
            suggestion: suggest(key),
            in_uri_query,
        }),
    }
}

/// libpq's `conninfo_parse`: `key = value` pairs separated by whitespace;
/// values may be single-quoted; a backslash escapes the next character.
fn parse_key_values(text: &str) -> Result<Vec<Pair>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut pairs = Vec::new();
    let mut i = 0;
    // Set after a password value: a following stray word may be its tail.
    let mut after_password = false;
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i >= chars.len() {
            break;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '=' {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i >= chars.len() || chars[i] != '=' {
            if after_password {
                return Err(ParseError::SplitPassword);
            }
            return Err(ParseError::MissingEquals { word });
        }
        i += 1;
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < chars.len() && chars[i] == '\'' {
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        return Err(ParseError::UnterminatedQuote {
                            key: key_for_message(&word),
                        });
                    }
                    Some('\\') => {
                        i += 1;
                        if let Some(&c) = chars.get(i) {
                            value.push(c);
                            i += 1;
                        }
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while i < chars.len() && !chars[i].is_whitespace() {
                if chars[i] == '\\' {
                    i += 1;
                    if let Some(&c) = chars.get(i) {
                        value.push(c);
                    }
                } else {
                    value.push(chars[i]);
                }
                i += 1;
            }
        }
        if after_password
            && keyword(&word).is_none()
            && word != "requiressl"
            && suggest(&word).is_none()
        {
            // `password=my secret=x`: `secret` is the password's tail (a
            // near miss of a keyword is reported as the typo it is).
            return Err(ParseError::SplitPassword);
        }
        after_password = word == "password";
        store(&mut pairs, &word, value, false)?;
    }
    Ok(pairs)
}

/// A keyword for an error message: the word if libpq knows it, else a
/// description (an unknown word next to a quote may be anything).
fn key_for_message(word: &str) -> String {
    if keyword(word).is_some() {
        word.to_owned()
    } else {
        format!("the key {word:?}")
    }
}
