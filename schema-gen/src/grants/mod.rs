//! Roles as data: the privileges a runtime role needs on the family, read
//! off the statements it runs, and the one a maintenance role needs for
//! the engine's vacuum; the psql script that grants exactly those
//! ([`script`]), and the question `check --runtime-role` asks to verify a
//! role has them and nothing more ([`audit`]).
//!
//! The runtime role opens the family (a bootstrap at steady state reads
//! the catalog and the version rows: `USAGE` on the schema, `SELECT` on
//! `schema_versions`) and runs every statement of its layout's registry.
//! What each statement needs comes from its own text, so a statement added
//! to the registry adds its privileges: `INSERT INTO t` needs `INSERT`,
//! `UPDATE t` and `DELETE FROM t` need `UPDATE` and `DELETE` and `SELECT`
//! (their `WHERE` reads columns), `FROM t` / `JOIN t` need `SELECT`, `FOR
//! UPDATE` needs `UPDATE` on what it locks, `ON CONFLICT ... DO UPDATE`
//! needs `UPDATE` and `SELECT`, `RETURNING` needs `SELECT`. Never granted:
//! any write to `schema_versions` (a role that can write its version rows
//! can make `check` trust a forged version), DDL (`CREATE` on the schema,
//! ownership), `TRUNCATE`, `REFERENCES`, `TRIGGER`, anything on the
//! identity sequences (`UPDATE` on one is `setval`: ids and fences backwards).

pub mod audit;
mod script;

use std::collections::BTreeMap;

use schema_model::{Layout, SchemaName, SchemaVersions, TableModel};
use serde::Serialize;

use crate::render::quote_ident;
use crate::statements::{maintenance, registry};

pub use script::script;

/// A table privilege.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Privilege {
    /// `SELECT`.
    Select,
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

impl Privilege {
    /// Every privilege the runtime role can be granted on a table.
    pub const ALL: [Privilege; 4] = [
        Privilege::Select,
        Privilege::Insert,
        Privilege::Update,
        Privilege::Delete,
    ];

    /// Its SQL keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Select => "SELECT",
            Self::Insert => "INSERT",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
        }
    }
}

/// What the runtime role needs on each table of the family: per table, per
/// privilege, the statements that need it (`open` for the bootstrap's read).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Matrix {
    /// Table name, then privilege, then the statements needing it.
    pub tables: BTreeMap<String, BTreeMap<Privilege, Vec<&'static str>>>,
    /// The tables the engine vacuums (its maintenance statements).
    pub vacuumed: Vec<String>,
}

impl Matrix {
    /// The privileges `table` needs (none for a table no statement uses).
    pub fn needs(&self, table: &str) -> Vec<Privilege> {
        self.tables
            .get(table)
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default()
    }

    fn add(&mut self, table: &str, privilege: Privilege, by: &'static str) {
        let users = self
            .tables
            .entry(table.to_owned())
            .or_default()
            .entry(privilege)
            .or_default();
        if !users.contains(&by) {
            users.push(by);
        }
    }
}

/// The name a bootstrap's steady-state read goes by in the matrix.
pub const OPEN: &str = "open";

/// What the runtime role of `layout` needs on `schema`'s family.
pub fn matrix(schema: &SchemaName, layout: Layout) -> Matrix {
    let mut matrix = Matrix::default();
    matrix.add(&SchemaVersions::table_name(), Privilege::Select, OPEN);
    for entry in registry(layout) {
        let statement = entry.statement(schema);
        for (table, privilege) in table_privileges(statement.sql(), schema) {
            matrix.add(&table, privilege, entry.name());
        }
    }
    for entry in maintenance() {
        let statement = entry.statement(schema);
        let prefix = format!("{}.", quote_ident(schema.as_str()));
        if let Some(at) = statement.sql().find(&prefix) {
            let table = statement.sql()[at + prefix.len()..].trim_matches('"');
            matrix.vacuumed.push(table.to_owned());
        }
    }
    matrix
}

/// The privileges one statement's text needs, table by table (see the
/// module docs for the rules).
pub fn table_privileges(sql: &str, schema: &SchemaName) -> Vec<(String, Privilege)> {
    let prefix = format!("{}.", quote_ident(schema.as_str()));
    let locks = sql.contains(" FOR UPDATE") || sql.contains(" FOR NO KEY UPDATE");
    let upserts = sql.contains(" DO UPDATE ");
    let returns = sql.contains(" RETURNING ");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = sql[from..].find(&prefix) {
        let at = from + found;
        let rest = &sql[at + prefix.len()..];
        from = at + prefix.len();
        // The quoted table name after the schema.
        let Some(name) = rest
            .strip_prefix('"')
            .and_then(|r| r.find('"').map(|end| r[..end].replace("\"\"", "\"")))
        else {
            continue;
        };
        let before = sql[..at].trim_end();
        let mut add = |p: Privilege| {
            if !out.contains(&(name.clone(), p)) {
                out.push((name.clone(), p));
            }
        };
        if before.ends_with("INSERT INTO") {
            add(Privilege::Insert);
            if returns {
                add(Privilege::Select);
            }
            if upserts {
                add(Privilege::Update);
                add(Privilege::Select);
            }
        } else if before.ends_with("DELETE FROM") {
            add(Privilege::Delete);
            add(Privilege::Select);
        } else if before.ends_with("UPDATE") {
            add(Privilege::Update);
            add(Privilege::Select);
        } else if before.ends_with("FROM") || before.ends_with("JOIN") {
            add(Privilege::Select);
            if locks {
                add(Privilege::Update);
            }
        }
    }
    out
}

/// A role name for the scripts and questions: any name PostgreSQL takes
/// (quoted wherever it is written), but not `public` (every role).
///
/// # Errors
///
/// An empty name, one longer than 63 bytes (PostgreSQL would cut it), or
/// `public`.
pub fn role_name(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err("a role name must not be empty".to_owned());
    }
    if raw.len() > 63 {
        return Err(format!(
            "role name {raw:?} is {} bytes; PostgreSQL keeps 63 and would grant to another name",
            raw.len()
        ));
    }
    if raw.eq_ignore_ascii_case("public") {
        return Err(
            "role `public` is every role: name the engine's own role (GRANT ... TO PUBLIC is \
             the grant not to write)"
                .to_owned(),
        );
    }
    Ok(raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_is_read_off_the_statements() {
        let schema = SchemaName::new("alk").unwrap();
        let matrix = matrix(&schema, Layout::SingleServer);
        let needs =
            |t: &str| -> Vec<&str> { matrix.needs(t).iter().map(|p| p.keyword()).collect() };
        assert_eq!(needs("schema_versions"), ["SELECT"]);
        assert_eq!(needs("jobs"), ["SELECT", "INSERT", "UPDATE", "DELETE"]);
        // The sweep locks dead jobs FOR UPDATE before it deletes them.
        assert_eq!(needs("dead_jobs"), ["SELECT", "INSERT", "UPDATE", "DELETE"]);
        assert_eq!(needs("stream_events"), ["SELECT", "INSERT"]);
        assert_eq!(needs("stream_offsets"), ["SELECT", "INSERT", "UPDATE"]);
        assert_eq!(needs("consumed_events"), ["SELECT", "INSERT"]);
        assert_eq!(matrix.vacuumed, ["jobs"]);
        assert!(matrix.tables["jobs"][&Privilege::Insert].contains(&"enqueue"));
    }

    #[test]
    fn public_is_no_role_to_grant_to() {
        assert!(role_name("PUBLIC").is_err());
        assert!(role_name("").is_err());
        assert!(role_name(&"a".repeat(64)).is_err());
        assert_eq!(role_name("app-runtime").unwrap(), "app-runtime");
    }
}
