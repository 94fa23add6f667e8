//! The schema name is validated before any SQL is built: every accepted name
//! appears in the DDL exactly as given, every refused name yields an error
//! naming the rule it broke, and the two sets are exactly what DESIGN.md's
//! rules say (checked against an independent oracle).

use proptest::prelude::*;
use schema_gen::render::{bootstrap_statements, script};
use schema_model::{ReservedSchema, SchemaName, SchemaNameRule};

/// DESIGN.md's rules, written independently of the implementation.
fn oracle_accepts(name: &str) -> bool {
    harness::names::follows_identifier_syntax(name)
        && !name.starts_with("pg_")
        && name != "public"
        && name != "information_schema"
}

/// Every schema-qualified reference in the DDL names exactly `name`.
fn assert_ddl_uses_exactly(name: &str) {
    let schema = SchemaName::new(name).unwrap_or_else(|e| panic!("{name:?} refused: {e}"));
    assert_eq!(schema.as_str(), name);
    let quoted = format!("\"{name}\"");
    let statements = bootstrap_statements(&schema);
    assert_eq!(
        statements[0].sql,
        format!("CREATE SCHEMA IF NOT EXISTS {quoted}")
    );
    for statement in &statements[1..] {
        let qualified = format!("{quoted}.");
        let on_schema = format!("COMMENT ON SCHEMA {quoted} ");
        assert!(
            statement.sql.contains(&qualified) || statement.sql.starts_with(&on_schema),
            "{name:?}: statement does not reference the schema as given: {}",
            statement.sql
        );
    }
    // Every dotted name in the script (outside string literals) starts with the schema.
    let chains = qualified_names(&script(&schema));
    assert!(
        chains.len() > 50,
        "{name:?}: found only {} dotted names",
        chains.len()
    );
    for chain in chains {
        assert_eq!(
            chain[0], name,
            "{name:?}: unexpected qualifier in {chain:?}"
        );
    }
}

/// The dotted names (`"a"."b"` or `"a"."b"."c"`) of a script, skipping string literals.
fn qualified_names(sql: &str) -> Vec<Vec<String>> {
    let mut chains = Vec::new();
    let mut chain: Vec<String> = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                // Skip a literal; a doubled quote stays inside it.
                while let Some(c) = chars.next() {
                    if c == '\'' && chars.next_if_eq(&'\'').is_none() {
                        break;
                    }
                }
            }
            '"' => {
                let mut ident = String::new();
                while let Some(c) = chars.next() {
                    if c == '"' && chars.next_if_eq(&'"').is_none() {
                        break;
                    }
                    ident.push(c);
                }
                chain.push(ident);
                if chars.next_if_eq(&'.').is_none() {
                    if chain.len() > 1 {
                        chains.push(std::mem::take(&mut chain));
                    }
                    chain.clear();
                }
            }
            _ => {}
        }
    }
    chains
}

#[test]
fn tricky_names_are_accepted_or_refused_as_the_rules_say() {
    let sixty_three = format!("a{}", "0".repeat(62));
    let sixty_four = format!("a{}", "0".repeat(63));
    let cases: Vec<(&str, Option<SchemaNameRule>)> = vec![
        ("alkstore", None),
        ("_", None),
        ("select", None),
        ("a1_b2", None),
        (&sixty_three, None),
        (&sixty_four, Some(SchemaNameRule::TooLong { bytes: 64 })),
        ("", Some(SchemaNameRule::Empty)),
        (
            "Alkstore",
            Some(SchemaNameRule::BadFirstCharacter { found: 'A' }),
        ),
        (
            "alkStore",
            Some(SchemaNameRule::BadCharacter { found: 'S', at: 3 }),
        ),
        (
            "pg_x",
            Some(SchemaNameRule::Reserved(ReservedSchema::PgPrefix)),
        ),
        (
            "a\"b",
            Some(SchemaNameRule::BadCharacter { found: '"', at: 1 }),
        ),
        (
            "a';--",
            Some(SchemaNameRule::BadCharacter { found: '\'', at: 1 }),
        ),
        (
            "a;b",
            Some(SchemaNameRule::BadCharacter { found: ';', at: 1 }),
        ),
        (
            "a.b",
            Some(SchemaNameRule::BadCharacter { found: '.', at: 1 }),
        ),
        (
            "a$b",
            Some(SchemaNameRule::BadCharacter { found: '$', at: 1 }),
        ),
        (
            "a\\b",
            Some(SchemaNameRule::BadCharacter { found: '\\', at: 1 }),
        ),
        (
            "a\0b",
            Some(SchemaNameRule::BadCharacter { found: '\0', at: 1 }),
        ),
        (
            "\u{3b1}lk",
            Some(SchemaNameRule::BadFirstCharacter { found: '\u{3b1}' }),
        ),
        (
            "alk\u{17f}",
            Some(SchemaNameRule::BadCharacter {
                found: '\u{17f}',
                at: 3,
            }),
        ),
        (
            "public",
            Some(SchemaNameRule::Reserved(ReservedSchema::Owned)),
        ),
    ];
    for (name, expected) in cases {
        match (SchemaName::new(name), expected) {
            (Ok(_), None) => assert_ddl_uses_exactly(name),
            (Err(err), Some(rule)) => {
                assert_eq!(err.rule, rule, "{name:?}");
                assert!(err.to_string().contains("is refused"), "{err}");
            }
            (got, expected) => panic!("{name:?}: got {got:?}, expected {expected:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Names drawn mostly from the allowed alphabet, with the characters that
    /// break identifiers mixed in.
    #[test]
    fn accepted_names_reach_the_ddl_unchanged_and_refused_names_build_nothing(
        name in "(pg_)?[a-z_0-9A-Z\"';.$\\\\ \u{0}é-]{0,70}"
    ) {
        match SchemaName::new(&name) {
            Ok(_) => {
                prop_assert!(oracle_accepts(&name), "accepted {:?} against the rules", name);
                assert_ddl_uses_exactly(&name);
            }
            Err(err) => {
                prop_assert!(!oracle_accepts(&name), "refused {:?}: {}", name, err);
                prop_assert_eq!(err.name, name);
            }
        }
    }

    /// Valid-looking names of every length around the limit.
    #[test]
    fn the_length_limit_is_exactly_63_bytes(name in "[a-z_][a-z0-9_]{0,66}") {
        let accepted = SchemaName::new(&name).is_ok();
        prop_assert_eq!(accepted, oracle_accepts(&name));
        if name.len() > 63 {
            prop_assert!(!accepted);
        }
    }
}
