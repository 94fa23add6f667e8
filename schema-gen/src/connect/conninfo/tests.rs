//! The parser against libpq's rules.

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
