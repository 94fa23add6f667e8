//! The one place SQL is produced: the ordered bootstrap statements for a
//! schema name, rendered with sea-query's `PostgresQueryBuilder`.
//!
//! `bootstrap` runs these statements, `schema-gen sql` prints them and the
//! snapshots record them; all three call [`bootstrap_statements`].
//!
//! ```
//! use schema_gen::render::bootstrap_statements;
//! use schema_model::SchemaName;
//!
//! let statements = bootstrap_statements(&SchemaName::new("tenant_a").unwrap());
//! assert_eq!(statements[0].sql, r#"CREATE SCHEMA IF NOT EXISTS "tenant_a""#);
//! assert!(statements.iter().any(|s| s.sql == concat!(
//!     r#"CREATE INDEX IF NOT EXISTS "jobs_claim_idx" ON "tenant_a"."jobs" "#,
//!     r#"("queue", "priority" DESC, "run_at", "id") WHERE "claimed_at" IS NULL AND "ready""#,
//! )));
//! ```

pub mod record;
mod table;

use serde::Serialize;

use schema_model::history::fingerprint;
use schema_model::{Layout, SchemaName, SchemaVersions, TableModel, visit_engine_family};

use crate::options::Bounds;
use crate::options::Options;

use table::Renderer;
pub use table::{create_index, create_indexes, create_table};

/// What a bootstrap statement creates or documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatementKind {
    /// `CREATE SCHEMA IF NOT EXISTS`.
    CreateSchema,
    /// `CREATE TABLE IF NOT EXISTS`.
    CreateTable,
    /// `CREATE INDEX IF NOT EXISTS`.
    CreateIndex,
    /// `COMMENT ON SCHEMA | TABLE | COLUMN`.
    Comment,
    /// The `INSERT` that records the model's version in a new
    /// `schema_versions` table.
    RecordVersion,
    /// A call that places the family under its [`Layout`]
    /// (`citus_schema_distribute`, ...): last, after every table exists.
    Distribute,
}

/// One statement of the bootstrap, without its terminating `;`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Statement {
    /// What it does.
    pub kind: StatementKind,
    /// The object it is about (`jobs`, `jobs.queue`, `jobs_claim_idx`, ...).
    pub object: String,
    /// The SQL, one clause per line for tables.
    pub sql: String,
}

/// The bootstrap statements for `schema` on a single server, in the order
/// they must run: the schema, then per table its `CREATE TABLE`, its indexes
/// and its comments, then the version record
/// ([`bootstrap_statements_for`] under [`Layout::SingleServer`]).
pub fn bootstrap_statements(schema: &SchemaName) -> Vec<Statement> {
    bootstrap_statements_for(schema, Layout::SingleServer)
}

/// The bootstrap statements for `schema` under `layout`: those of
/// [`bootstrap_statements`], then [`layout_statements`].
///
/// ```
/// use schema_gen::render::{StatementKind, bootstrap_statements, bootstrap_statements_for};
/// use schema_model::{Layout, SchemaName};
///
/// let schema = SchemaName::new("tenant_a").unwrap();
/// let single = bootstrap_statements(&schema);
/// let citus = bootstrap_statements_for(&schema, Layout::CitusSchemaSharding);
/// assert_eq!(citus[..single.len()], single[..]);
/// let added: Vec<&str> = citus[single.len()..].iter().map(|s| s.sql.as_str()).collect();
/// assert_eq!(added, [
///     "SELECT citus_schema_distribute('\"tenant_a\"')",
///     "SELECT truncate_local_data_after_distributing_table('\"tenant_a\".\"schema_versions\"')",
/// ]);
/// assert!(citus[single.len()..].iter().all(|s| s.kind == StatementKind::Distribute));
/// ```
pub fn bootstrap_statements_for(schema: &SchemaName, layout: Layout) -> Vec<Statement> {
    let mut statements = family_statements(schema);
    statements.extend(layout_statements(schema, layout));
    statements
}

/// The statements that place the family of `schema` under `layout`, to run
/// after every table exists (and the version is recorded), in the same
/// transaction: nothing on a single server; under
/// [`Layout::CitusSchemaSharding`], `citus_schema_distribute` of the schema
/// (every table becomes a single-shard table of the schema's colocation
/// group, its rows copied to the shard), then
/// `truncate_local_data_after_distributing_table` of `schema_versions`, the
/// one table that held a row (Citus leaves the copied rows on the
/// coordinator's disk otherwise).
pub fn layout_statements(schema: &SchemaName, layout: Layout) -> Vec<Statement> {
    match layout {
        Layout::SingleServer => Vec::new(),
        Layout::CitusSchemaSharding => {
            let versions = SchemaVersions::table_name();
            vec![
                Statement {
                    kind: StatementKind::Distribute,
                    object: schema.to_string(),
                    sql: format!(
                        "SELECT citus_schema_distribute({})",
                        quote_literal(&quote_ident(schema.as_str()))
                    ),
                },
                Statement {
                    kind: StatementKind::Distribute,
                    object: versions.clone(),
                    sql: format!(
                        "SELECT truncate_local_data_after_distributing_table({})",
                        quote_literal(&format!(
                            "{}.{}",
                            quote_ident(schema.as_str()),
                            quote_ident(&versions)
                        ))
                    ),
                },
            ]
        }
    }
}

fn family_statements(schema: &SchemaName) -> Vec<Statement> {
    let mut renderer = Renderer {
        schema: schema.clone(),
        statements: vec![
            Statement {
                kind: StatementKind::CreateSchema,
                object: schema.to_string(),
                sql: format!(
                    "CREATE SCHEMA IF NOT EXISTS {}",
                    quote_ident(schema.as_str())
                ),
            },
            Statement {
                kind: StatementKind::Comment,
                object: schema.to_string(),
                sql: format!(
                    "COMMENT ON SCHEMA {} IS {}",
                    quote_ident(schema.as_str()),
                    quote_literal(SCHEMA_DOC)
                ),
            },
        ],
    };
    visit_engine_family(&mut renderer);
    // Last, right after the version table's own statements: a schema
    // created from scratch is at the model's version.
    renderer.statements.push(Statement {
        kind: StatementKind::RecordVersion,
        object: SchemaVersions::table_name(),
        sql: record::created(schema),
    });
    renderer.statements
}

/// The doc of the engine-owned schema itself.
pub const SCHEMA_DOC: &str =
    "alkstore engine-owned schema; created and verified by schema-gen from schema-model.";

/// What an advisory lock of the product serialises, per schema name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryLock {
    /// Bootstraps and printed scripts of one schema take turns
    /// (transaction-scoped).
    Bootstrap,
    /// One upgrade of a schema runs at a time (session-scoped).
    Upgrade,
}

impl AdvisoryLock {
    /// The prefix hashed before the schema name, so the two locks of one
    /// schema never share a key.
    fn prefix(self) -> &'static str {
        match self {
            Self::Bootstrap => "alkstore-schema bootstrap:",
            Self::Upgrade => "alkstore-schema upgrade:",
        }
    }

    /// The lock's key for `schema`: FNV-1a over the prefix and the name
    /// ([`fingerprint`], the one FNV of the workspace), so the printed
    /// script and the library take the same lock.
    ///
    /// ```
    /// use schema_gen::render::AdvisoryLock;
    /// use schema_model::SchemaName;
    ///
    /// let a = SchemaName::new("a").unwrap();
    /// assert_ne!(AdvisoryLock::Bootstrap.key(&a), AdvisoryLock::Upgrade.key(&a));
    /// assert_eq!(AdvisoryLock::Bootstrap.key(&a), AdvisoryLock::Bootstrap.key(&a));
    /// ```
    pub fn key(self, schema: &SchemaName) -> i64 {
        let hash = fingerprint(&format!("{}{}", self.prefix(), schema.as_str()));
        i64::from_ne_bytes(hash.to_ne_bytes())
    }
}

/// The key of the transaction-scoped advisory lock that serialises
/// bootstraps of one schema name ([`AdvisoryLock::Bootstrap`]).
///
/// ```
/// use schema_gen::render::advisory_lock_key;
/// use schema_model::SchemaName;
///
/// let a = advisory_lock_key(&SchemaName::new("a").unwrap());
/// assert_ne!(a, advisory_lock_key(&SchemaName::new("b").unwrap()));
/// assert_eq!(a, advisory_lock_key(&SchemaName::new("a").unwrap()));
/// ```
pub fn advisory_lock_key(schema: &SchemaName) -> i64 {
    AdvisoryLock::Bootstrap.key(schema)
}

/// The statement that takes the bootstrap's advisory lock; it must run first
/// inside the bootstrap transaction.
pub fn advisory_lock_statement(schema: &SchemaName) -> String {
    format!(
        "SELECT pg_advisory_xact_lock({})",
        advisory_lock_key(schema)
    )
}

/// The default bound of every lock wait ([`crate::options::DEFAULT_LOCK_TIMEOUT`]).
pub use crate::options::DEFAULT_LOCK_TIMEOUT;

/// The statement that bounds every lock wait of the printed script to
/// [`DEFAULT_LOCK_TIMEOUT`]; it must run first, before the advisory lock.
///
/// ```
/// assert_eq!(
///     schema_gen::render::lock_timeout_statement(),
///     "SET LOCAL lock_timeout = '5s'"
/// );
/// ```
pub fn lock_timeout_statement() -> String {
    Bounds::lock_only(DEFAULT_LOCK_TIMEOUT).set_local()
}

/// The statements that bound the current transaction (an explicit one, or
/// the implicit one of a multi-statement simple query): every lock wait to
/// `options.lock_timeout`, every statement to that plus
/// [`STATEMENT_ALLOWANCE`](crate::options::STATEMENT_ALLOWANCE), whatever
/// the role's own settings say. `SET LOCAL`, so nothing outlives the transaction.
///
/// ```
/// use std::time::Duration;
/// use schema_gen::{Options, render::bounds_statement};
///
/// let options = Options { lock_timeout: Duration::from_millis(250), ..Options::default() };
/// assert_eq!(
///     bounds_statement(&options),
///     "SET LOCAL lock_timeout = '250ms'; SET LOCAL statement_timeout = '10250ms'"
/// );
/// ```
pub fn bounds_statement(options: &Options) -> String {
    options.bounds().set_local()
}

/// The table access method every engine table is created with, spelled out
/// in each `CREATE TABLE` (`USING heap`) so a database whose
/// `default_table_access_method` says otherwise still gets the tables the
/// hot paths were designed for (HOT updates, fillfactor, visibility map), and
/// verified, so a table moved with `ALTER TABLE ... SET ACCESS METHOD` is drift.
pub const TABLE_ACCESS_METHOD: &str = "heap";

/// The whole bootstrap as a psql-runnable script: one transaction, the
/// advisory lock, a bounded `lock_timeout`, then [`bootstrap_statements`],
/// each terminated by `;` ([`script_for`] under [`Layout::SingleServer`]).
pub fn script(schema: &SchemaName) -> String {
    script_for(schema, Layout::SingleServer)
}

/// [`script`] under `layout`: the statements of
/// [`bootstrap_statements_for`]. Under [`Layout::CitusSchemaSharding`] it
/// runs on the coordinator, once: on a schema already distributed, the
/// version record would run on a distributed table, which Citus 13.2.2
/// deparses wrongly (a syntax error on the worker; nothing is changed).
pub fn script_for(schema: &SchemaName, layout: Layout) -> String {
    let header = match layout {
        Layout::SingleServer => {
            "-- Idempotent: re-running it creates nothing that already exists.\n"
        }
        Layout::CitusSchemaSharding => {
            "-- Layout citus (schema-based sharding): run it once, on the Citus coordinator;\n\
             -- it creates the family and makes the schema a distributed schema.\n"
        }
    };
    let mut out = format!(
        "-- alkstore engine schema {}: generated by schema-gen from schema-model; do not edit.\n\
         -- Apply with: psql -v ON_ERROR_STOP=1 -f <this file>\n\
         {header}\n\
         BEGIN;\n\n\
         {};\n\n\
         -- Serialise concurrent bootstraps of this schema name.\n\
         {};\n\n",
        quote_ident(schema.as_str()),
        lock_timeout_statement(),
        advisory_lock_statement(schema),
    );
    for statement in bootstrap_statements_for(schema, layout) {
        out.push_str(&statement.sql);
        out.push_str(";\n\n");
    }
    out.push_str("COMMIT;\n");
    out
}

/// `VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE FALSE)` of a table of
/// `schema`: the engine's maintenance step
/// ([`jobs::vacuum`](crate::statements::jobs::vacuum), whose docs give the
/// reasons) and the vacuum after an upgrade's backfill. sea-query has no
/// `VACUUM` builder, so the text is written here, the names quoted by
/// [`quote_ident`].
pub fn vacuum_statement(schema: &SchemaName, table: &str) -> String {
    format!(
        "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE FALSE) {}.{}",
        quote_ident(schema.as_str()),
        quote_ident(table)
    )
}

/// Quotes an identifier for PostgreSQL (always quoted, `"` doubled), with
/// `postgres-protocol`'s port of libpq's `PQescapeIdentifier`.
///
/// ```
/// assert_eq!(schema_gen::render::quote_ident("a\"b"), r#""a""b""#);
/// ```
pub fn quote_ident(name: &str) -> String {
    postgres_protocol::escape::escape_identifier(name)
}

/// Quotes a string literal for PostgreSQL whatever `standard_conforming_strings`
/// says, with `postgres-protocol`'s port of libpq's `PQescapeLiteral`: `'` is
/// doubled, and a string holding a backslash uses the `E''` form (preceded by
/// a space, as libpq does, so it can never fuse with a preceding identifier).
///
/// ```
/// use schema_gen::render::quote_literal;
///
/// assert_eq!(quote_literal("it's"), "'it''s'");
/// assert_eq!(quote_literal(r"a\b"), r" E'a\\b'");
/// ```
pub fn quote_literal(text: &str) -> String {
    postgres_protocol::escape::escape_literal(text)
}
