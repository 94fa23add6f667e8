//! libpq's `postgresql://` URI form, parsed as `conninfo_uri_parse` does.

use super::{Pair, ParseError, is_secret, store};

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
pub(super) fn parse_uri(rest: &str) -> Result<Vec<Pair>, ParseError> {
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
