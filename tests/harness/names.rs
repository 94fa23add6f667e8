//! An oracle of the identifier syntax `SchemaName` and `DatabaseName` share,
//! written independently of `schema_model` so the property tests compare the
//! implementation with the rules as DESIGN.md states them.

/// Lowercase ASCII letters, digits and `_`, starting with a letter or `_`,
/// 1 to 63 bytes.
pub fn follows_identifier_syntax(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
}
