//! ClickHouse quoting: identifiers in backticks, strings in single quotes,
//! and identifiers as ClickHouse's own formatter prints them.
//!
//! Written here because no maintained crate offers it: sea-query has no
//! ClickHouse backend (its MySQL builder doubles backticks and escapes with
//! MySQL's table, e.g. `\Z` for `\x1a`, which ClickHouse reads as `Z`), and
//! the official `clickhouse` client keeps its escaping private
//! (`pub(crate)` in its `sql` module, reachable only by binding into a
//! client's query), besides pulling an HTTP client into a renderer. The
//! escapes are the ones ClickHouse's formatter writes, so a quoted name
//! here is spelled exactly as `SHOW CREATE TABLE` and `system.tables` spell
//! it. `tests/clickhouse_model.rs` checks every function here against the
//! real engine.

/// Plain words that ClickHouse's formatter still backquotes, in any letter
/// case, because they would read as syntax where an identifier stands.
/// Measured on ClickHouse 26.5 over some 130 keywords (`order`, `key`,
/// `where`, ... stay bare); the real-engine test pins the list.
const QUOTED_WORDS: &[&str] = &[
    "all", "distinct", "from", "null", "select", "table", "values",
];

/// `text` between `quote`s with ClickHouse's escapes: a backslash before `\`
/// and before the quote character, and `\b \f \n \r \t \0` for those
/// control characters; every other character as it is.
fn escaped(text: &str, quote: char) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '\u{8}' => out.push_str(r"\b"),
            '\u{c}' => out.push_str(r"\f"),
            '\n' => out.push_str(r"\n"),
            '\r' => out.push_str(r"\r"),
            '\t' => out.push_str(r"\t"),
            '\0' => out.push_str(r"\0"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Quotes an identifier with backticks, with ClickHouse's escapes (a
/// backslash before `\` and `` ` ``, `\n`-style escapes for control characters).
///
/// ```
/// use schema_gen::clickhouse::quote_ident;
///
/// assert_eq!(quote_ident("ts"), "`ts`");
/// assert_eq!(quote_ident("we`ird\\x"), r"`we\`ird\\x`");
/// ```
pub fn quote_ident(name: &str) -> String {
    escaped(name, '`')
}

/// Quotes a string literal with single quotes, with ClickHouse's escapes
/// (a backslash before `\` and `'`, `\n`-style escapes for control characters).
///
/// ```
/// use schema_gen::clickhouse::quote_string;
///
/// assert_eq!(quote_string("the record's ts"), r"'the record\'s ts'");
/// assert_eq!(quote_string("two\nlines"), r"'two\nlines'");
/// ```
pub fn quote_string(text: &str) -> String {
    escaped(text, '\'')
}

/// An identifier as ClickHouse's own formatter prints it in
/// `system.tables` and `SHOW CREATE TABLE`: bare when it is a plain word
/// (ASCII letters, digits and `_`, not starting with a digit) other than
/// one of the few it quotes anyway, [`quote_ident`]ed otherwise.
///
/// ```
/// use schema_gen::clickhouse::engine_ident;
///
/// assert_eq!(engine_ident("ts"), "ts");
/// assert_eq!(engine_ident("order"), "order");
/// assert_eq!(engine_ident("Select"), "`Select`");
/// assert_eq!(engine_ident("weird col"), "`weird col`");
/// ```
pub fn engine_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !QUOTED_WORDS
            .iter()
            .any(|word| word.eq_ignore_ascii_case(name));
    if plain {
        name.to_owned()
    } else {
        quote_ident(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_identifiers_are_bare_only_when_plain() {
        assert_eq!(engine_ident("ts"), "ts");
        assert_eq!(engine_ident("order"), "order");
        assert_eq!(engine_ident("_a1"), "_a1");
        assert_eq!(engine_ident("NULL"), "`NULL`");
        assert_eq!(engine_ident("weird col"), "`weird col`");
        assert_eq!(engine_ident("9x"), "`9x`");
        assert_eq!(engine_ident("\u{e9}"), "`\u{e9}`");
        assert_eq!(engine_ident(""), "``");
    }

    #[test]
    fn control_characters_and_quotes_are_escaped_others_kept() {
        assert_eq!(
            quote_ident("a\\b`c'd\"e\tf\ng\rh\0i\u{8}j\u{c}k\u{b}l\u{e9}"),
            "`a\\\\b\\`c'd\"e\\tf\\ng\\rh\\0i\\bj\\fk\u{b}l\u{e9}`"
        );
        assert_eq!(quote_string("it's `x`"), "'it\\'s `x`'");
    }
}
