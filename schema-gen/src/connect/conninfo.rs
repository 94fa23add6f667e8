//! libpq's connection strings: the `postgresql://` URI and the `key=value`
//! form, parsed the way libpq 15-17 parses them (`conninfo_parse` and
//! `conninfo_uri_parse` in `fe-connect.c`), into `(keyword, value)` pairs.
//!
//! Written here rather than taken from a crate: tokio-postgres's parser
//! refuses libpq's TLS and password-file keywords (`sslrootcert`, `passfile`,
//! `sslmode=verify-full`, ...) and names no key in its errors, and no
//! maintained crate parses both forms with libpq's rules (see the module docs
//! of [`super`]). `tests/pg_conninfo.rs` compares the outcome with psql's on
//! the same inputs.
//!
//! Errors never echo a password: a password's value, or text that an
//! unquoted space split off a password, is described, not quoted.

use std::fmt;

/// One libpq connection keyword and what schema-gen does with it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keyword {
    /// The keyword as libpq spells it.
    pub name: &'static str,
    /// The environment variable libpq reads for it, if any.
    pub env: Option<&'static str>,
    /// Whether schema-gen honours it.
    pub support: Support,
}

/// What schema-gen does with a libpq keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Support {
    /// Used, with libpq's meaning.
    Honoured,
    /// Accepted and without effect here; the text says why that is harmless.
    Ignored,
    /// Refused with this reason: honouring it is not possible with
    /// tokio-postgres and rustls, and ignoring it would weaken what the
    /// operator asked for.
    Refused(&'static str),
}

use Support::{Honoured, Ignored, Refused};

const fn kw(name: &'static str, env: Option<&'static str>, support: Support) -> Keyword {
    Keyword { name, env, support }
}

/// Every keyword libpq 17 knows (`PQconninfoOptions`), with its environment
/// variable.
pub(crate) const KEYWORDS: &[Keyword] = &[
    kw("service", Some("PGSERVICE"), Honoured),
    kw("user", Some("PGUSER"), Honoured),
    kw("password", Some("PGPASSWORD"), Honoured),
    kw("passfile", Some("PGPASSFILE"), Honoured),
    kw("channel_binding", Some("PGCHANNELBINDING"), Honoured),
    kw("connect_timeout", Some("PGCONNECT_TIMEOUT"), Honoured),
    kw("dbname", Some("PGDATABASE"), Honoured),
    kw("host", Some("PGHOST"), Honoured),
    kw("hostaddr", Some("PGHOSTADDR"), Honoured),
    kw("port", Some("PGPORT"), Honoured),
    kw("client_encoding", Some("PGCLIENTENCODING"), Honoured),
    kw("options", Some("PGOPTIONS"), Honoured),
    kw("application_name", Some("PGAPPNAME"), Honoured),
    kw("fallback_application_name", None, Honoured),
    kw("keepalives", None, Honoured),
    kw("keepalives_idle", None, Honoured),
    kw("keepalives_interval", None, Honoured),
    kw("keepalives_count", None, Honoured),
    kw("tcp_user_timeout", None, Honoured),
    kw("sslmode", Some("PGSSLMODE"), Honoured),
    kw("sslnegotiation", Some("PGSSLNEGOTIATION"), Honoured),
    // libpq 15 only asks OpenSSL for compression, which current OpenSSL
    // builds refuse; PostgreSQL 17 ignores the keyword altogether.
    kw("sslcompression", Some("PGSSLCOMPRESSION"), Ignored),
    kw("sslcert", Some("PGSSLCERT"), Honoured),
    kw("sslkey", Some("PGSSLKEY"), Honoured),
    kw("sslcertmode", Some("PGSSLCERTMODE"), Honoured),
    kw(
        "sslpassword",
        None,
        Refused(
            "encrypted client keys are not supported: decrypt the key (openssl pkey -in KEY -out \
         KEY.plain) and keep it mode 0600",
        ),
    ),
    kw("sslrootcert", Some("PGSSLROOTCERT"), Honoured),
    kw(
        "sslcrl",
        Some("PGSSLCRL"),
        Refused(
            "certificate revocation lists are not checked by schema-gen; ignoring the list would \
         accept a revoked certificate",
        ),
    ),
    kw(
        "sslcrldir",
        Some("PGSSLCRLDIR"),
        Refused(
            "certificate revocation lists are not checked by schema-gen; ignoring the list would \
         accept a revoked certificate",
        ),
    ),
    kw("sslsni", Some("PGSSLSNI"), Honoured),
    kw(
        "requirepeer",
        Some("PGREQUIREPEER"),
        Refused(
            "the peer check of Unix-domain sockets is not supported; connect over TCP, or drop \
         requirepeer",
        ),
    ),
    kw(
        "require_auth",
        Some("PGREQUIREAUTH"),
        Refused(
            "restricting the authentication method is not supported by the driver; use \
         channel_binding=require to insist on SCRAM over TLS",
        ),
    ),
    kw(
        "ssl_min_protocol_version",
        Some("PGSSLMINPROTOCOLVERSION"),
        Honoured,
    ),
    kw(
        "ssl_max_protocol_version",
        Some("PGSSLMAXPROTOCOLVERSION"),
        Honoured,
    ),
    kw("gssencmode", Some("PGGSSENCMODE"), Honoured),
    // Only used by GSSAPI authentication, which the driver does not offer:
    // a server that demands it refuses the login with its own message.
    kw("krbsrvname", Some("PGKRBSRVNAME"), Ignored),
    kw("gsslib", Some("PGGSSLIB"), Ignored),
    kw("gssdelegation", Some("PGGSSDELEGATION"), Ignored),
    kw(
        "replication",
        None,
        Refused(
            "replication connections are not what schema-gen needs: drop the replication keyword",
        ),
    ),
    kw(
        "target_session_attrs",
        Some("PGTARGETSESSIONATTRS"),
        Honoured,
    ),
    kw("load_balance_hosts", Some("PGLOADBALANCEHOSTS"), Honoured),
    // Obsolete since PostgreSQL 8; libpq itself ignores it.
    kw("authtype", Some("PGAUTHTYPE"), Ignored),
];

/// The keyword named `name`, if libpq knows it.
pub(crate) fn keyword(name: &str) -> Option<&'static Keyword> {
    KEYWORDS.iter().find(|k| k.name == name)
}

/// Keywords whose values are secret: never quoted in an error.
pub(crate) fn is_secret(name: &str) -> bool {
    matches!(name, "password" | "sslpassword")
}

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

/// The known keyword closest to `key` by edit distance, if close enough to
/// be a typo (at most 2 edits, and fewer than half the letters).
fn suggest(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    KEYWORDS
        .iter()
        .map(|k| (edit_distance(&key, k.name), k.name))
        .filter(|(d, name)| *d <= 2 && *d * 2 < name.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// Damerau-Levenshtein distance (optimal string alignment) over bytes, so a
/// swapped pair of letters (`sslmdoe`) counts as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
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

/// libpq's `conninfo_uri_decode`: `%XX` escapes; `%00` and a `%` not followed
/// by two hex digits are errors. `what` names the part for the message.
fn decode(text: &str, what: &str) -> Result<String, ParseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| {
                std::str::from_utf8(h)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            });
            match hex {
                Some(0) => {
                    return Err(ParseError::Uri {
                        message: format!("{what} contains %00, which is not allowed"),
                    });
                }
                Some(byte) => {
                    out.push(byte);
                    i += 3;
                }
                None => {
                    return Err(ParseError::Uri {
                        message: format!(
                            "{what} has a '%' that is not followed by two hex digits: write a \
                             literal '%' as %25"
                        ),
                    });
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ParseError::Uri {
        message: format!("{what} does not decode to UTF-8"),
    })
}

/// libpq's `conninfo_uri_parse_options`, after the scheme:
/// `[user[:password]@][host][:port][,...][/dbname][?key=value&...]`.
fn parse_uri(rest: &str) -> Result<Vec<Pair>, ParseError> {
    let mut pairs = Vec::new();
    let mut p = rest;

    // User info: libpq looks for '@' before the first '/'.
    let userinfo_end = p.find(['@', '/']);
    if let Some(at) = userinfo_end.filter(|&at| p.as_bytes()[at] == b'@') {
        let userinfo = &p[..at];
        p = &p[at + 1..];
        // A second '@' before the path: libpq would take what follows the
        // first '@' as the host (the tail of the password).
        if p.split(['/', '?']).next().unwrap_or("").contains('@') {
            return Err(ParseError::AtInUserInfo);
        }
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        if !user.is_empty() {
            store(
                &mut pairs,
                "user",
                decode(user, "the user name in the URL")?,
                false,
            )?;
        }
        if let Some(password) = password.filter(|pw| !pw.is_empty()) {
            store(
                &mut pairs,
                "password",
                decode(password, "the password in the URL")?,
                false,
            )?;
        }
    }

    // Hosts and ports, comma-separated; IPv6 addresses in brackets.
    let mut hosts = String::new();
    let mut ports = String::new();
    let terminator: Option<char>;
    loop {
        let host;
        if let Some(after) = p.strip_prefix('[') {
            let Some(close) = after.find(']') else {
                return Err(ParseError::Uri {
                    message: "the URL has a '[' (an IPv6 host) without its closing ']'".to_owned(),
                });
            };
            if close == 0 {
                return Err(ParseError::Uri {
                    message: "the URL has an empty IPv6 host address ([])".to_owned(),
                });
            }
            host = &after[..close];
            p = &after[close + 1..];
            if let Some(c) = p
                .chars()
                .next()
                .filter(|c| !matches!(c, ':' | '/' | '?' | ','))
            {
                return Err(ParseError::Uri {
                    message: format!(
                        "unexpected '{c}' after the IPv6 host [{host}] in the URL (expected ':', \
                         '/', '?' or ',')"
                    ),
                });
            }
        } else {
            let end = p.find([':', '/', '?', ',']).unwrap_or(p.len());
            host = &p[..end];
            p = &p[end..];
        }
        hosts.push_str(host);
        let mut next = p.chars().next();
        if next == Some(':') {
            p = &p[1..];
            let end = p.find(['/', '?', ',']).unwrap_or(p.len());
            ports.push_str(&p[..end]);
            p = &p[end..];
            next = p.chars().next();
        }
        if next == Some(',') {
            p = &p[1..];
            hosts.push(',');
            ports.push(',');
            continue;
        }
        terminator = next;
        break;
    }
    if !hosts.is_empty() {
        store(
            &mut pairs,
            "host",
            decode(&hosts, "the host in the URL")?,
            false,
        )?;
    }
    if ports
        .split(',')
        .any(|port| !port.bytes().all(|b| b.is_ascii_digit()))
    {
        // Not quoted: with an unencoded '/' in the password, libpq reads the
        // password as the port.
        return Err(ParseError::Uri {
            message: "the port in the URL is not a number (a user name or password that \
                      contains '/', '?', ':' or ',' must percent-encode it, e.g. '/' as %2F)"
                .to_owned(),
        });
    }
    if !ports.is_empty() {
        store(
            &mut pairs,
            "port",
            decode(&ports, "the port in the URL")?,
            false,
        )?;
    }

    // The database name, after '/'.
    let mut query = None;
    match terminator {
        Some('/') => {
            let path = &p[1..];
            let (dbname, q) = match path.split_once('?') {
                Some((dbname, q)) => (dbname, Some(q)),
                None => (path, None),
            };
            // libpq: an empty dbname is not stored (so PGDATABASE still applies).
            if !dbname.is_empty() {
                store(
                    &mut pairs,
                    "dbname",
                    decode(dbname, "the database name in the URL")?,
                    false,
                )?;
            }
            query = q;
        }
        Some('?') => query = Some(&p[1..]),
        _ => {}
    }

    // Query parameters: key=value joined by '&'.
    if let Some(query) = query {
        let params: Vec<&str> = query.split('&').collect();
        for (n, param) in params.iter().enumerate() {
            // libpq stops at the end of the string: a trailing '&' (or an
            // empty query) ends the list, an empty pair inside it does not.
            if param.is_empty() && n + 1 == params.len() {
                break;
            }
            let Some((key, value)) = param.split_once('=') else {
                return Err(ParseError::Uri {
                    message: format!(
                        "the URI query parameter {:?} has no '=' (write key=value)",
                        param
                    ),
                });
            };
            let key = decode(key, "a URI query parameter name")?;
            if value.contains('=') {
                return Err(ParseError::Uri {
                    message: format!(
                        "the value of the URI query parameter `{key}` contains '=': write it as %3D"
                    ),
                });
            }
            let what = if is_secret(&key) {
                "the password in the URI query".to_owned()
            } else {
                format!("the value of the URI query parameter `{key}`")
            };
            let value = decode(value, &what)?;
            store(&mut pairs, &key, value, true)?;
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(&'static str, String)> {
        parse(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect()
    }

    fn p(key: &'static str, value: &str) -> (&'static str, String) {
        (key, value.to_owned())
    }

    #[test]
    fn key_values_with_quotes_escapes_and_spaces_around_equals() {
        assert_eq!(
            pairs(r"host = db port=5433 password='it\'s a b' user=a\ b dbname='x\'y'"),
            vec![
                p("host", "db"),
                p("port", "5433"),
                p("password", "it's a b"),
                p("user", "a b"),
                p("dbname", "x'y"),
            ]
        );
    }

    #[test]
    fn uri_with_everything() {
        assert_eq!(
            pairs(
                "postgresql://u%40x:p%40ss%20w@[::1]:5433,db2/app%2Fdb?sslmode=verify-full&ssl=true&application_name=a%20b"
            ),
            vec![
                p("user", "u@x"),
                p("password", "p@ss w"),
                p("host", "::1,db2"),
                p("port", "5433,"),
                p("dbname", "app/db"),
                p("sslmode", "verify-full"),
                p("sslmode", "require"),
                p("application_name", "a b"),
            ]
        );
    }

    #[test]
    fn uri_without_parts() {
        assert_eq!(pairs("postgres://"), vec![]);
        assert_eq!(pairs("postgres:///"), vec![]);
        assert_eq!(pairs("postgres://h"), vec![p("host", "h")]);
        assert_eq!(
            pairs("postgres://h?port=1"),
            vec![p("host", "h"), p("port", "1")]
        );
        assert_eq!(
            pairs("postgres://%2Fvar%2Frun%2Fpostgresql/db"),
            vec![p("host", "/var/run/postgresql"), p("dbname", "db")]
        );
        assert_eq!(pairs("postgres://u@"), vec![p("user", "u")]);
    }

    #[test]
    fn misspelt_keys_are_named_with_a_suggestion() {
        let err = parse("host=db sslmdoe=require").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown connection parameter `sslmdoe` (did you mean `sslmode`?)"
        );
        let err = parse("postgres://db/app?sslrootcrt=/ca.pem").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown URI query parameter `sslrootcrt` (did you mean `sslrootcert`?)"
        );
        let err = parse("host=db frobnicate=1").unwrap_err();
        assert_eq!(err.to_string(), "unknown connection parameter `frobnicate`");
    }

    #[test]
    fn a_password_with_an_at_sign_is_refused_without_showing_it() {
        let err = parse("postgres://app:s3cr@t@db.example.com/app").unwrap_err();
        assert_eq!(err, ParseError::AtInUserInfo);
        assert!(!err.to_string().contains("s3cr"), "{err}");
        assert!(!err.to_string().contains("t@db"), "{err}");
    }

    #[test]
    fn a_password_split_by_a_space_is_refused_without_showing_it() {
        for text in ["host=db password=my secret", "host=db password=my secret=x"] {
            let err = parse(text).unwrap_err();
            assert_eq!(err, ParseError::SplitPassword, "{text}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }

    #[test]
    fn a_bad_percent_escape_in_a_password_is_described_not_quoted() {
        let err = parse("postgres://u:ab%zzcd@db/app").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the password in the URL has a '%'"),
            "{err}"
        );
        assert!(!err.to_string().contains("zz"), "{err}");
    }

    #[test]
    fn malformed_parts_are_named() {
        assert_eq!(
            parse("host").unwrap_err().to_string(),
            "`host` is not a key=value pair (quote values that contain spaces: key='a value')"
        );
        assert_eq!(
            parse("host='db").unwrap_err().to_string(),
            "the quoted value of `host` has no closing quote (')"
        );
        assert!(
            parse("postgres://[::1/db")
                .unwrap_err()
                .to_string()
                .contains("']'")
        );
        assert!(
            parse("postgres://db/app?sslmode")
                .unwrap_err()
                .to_string()
                .contains("no '='")
        );
    }

    #[test]
    fn a_url_with_a_wrong_scheme_is_not_shown() {
        for text in [
            "postgresql:/app:s3cret@db/app",
            "postgresq://app:s3cret@db/app?sslmode=require",
            "app:s3cret@db",
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err, ParseError::NotAUrl, "{text}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn requiressl_is_an_alias_of_sslmode() {
        assert_eq!(pairs("requiressl=1"), vec![p("sslmode", "require")]);
        assert_eq!(pairs("requiressl=0"), vec![p("sslmode", "prefer")]);
    }

    #[test]
    fn what_counts_as_a_connection_string() {
        assert!(is_connection_string("postgres://db"));
        assert!(is_connection_string("host=db"));
        assert!(!is_connection_string("mydb"));
    }
}
