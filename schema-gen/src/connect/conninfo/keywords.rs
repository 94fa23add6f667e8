//! Every keyword libpq knows, what schema-gen does with each, and the
//! nearest keyword to a misspelt one.

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

/// The known keyword closest to `key` by edit distance, if close enough to
/// be a typo (at most 2 edits, and fewer than half the letters).
pub(super) fn suggest(key: &str) -> Option<&'static str> {
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
