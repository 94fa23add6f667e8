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

use sea_query::{
    Alias, Check, ColumnDef, Condition, ConditionalStatement, Expr, ExprTrait, Index,
    IndexCreateStatement, IndexOrder, PostgresQueryBuilder, Table, TableCreateStatement,
};
use std::time::Duration;

use serde::Serialize;

use schema_model::{
    CheckRule, ColumnDefault, IndexPredicate, Layout, Order, SchemaName, SchemaVersions, SqlType,
    StorageParameter, TableModel, TableVisitor, visit_engine_family,
};

use crate::Options;

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
        sql: crate::upgrade::record::created(schema),
    });
    renderer.statements
}

/// The doc of the engine-owned schema itself.
pub const SCHEMA_DOC: &str =
    "alkstore engine-owned schema; created and verified by schema-gen from schema-model.";

/// The transaction-scoped advisory lock key that serialises bootstraps of one
/// schema name (FNV-1a over a fixed prefix and the name, so the printed
/// script and the library take the same lock).
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
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in "alkstore-schema bootstrap:"
        .bytes()
        .chain(schema.as_str().bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// The statement that takes the bootstrap's advisory lock; it must run first
/// inside the bootstrap transaction.
pub fn advisory_lock_statement(schema: &SchemaName) -> String {
    format!(
        "SELECT pg_advisory_xact_lock({})",
        advisory_lock_key(schema)
    )
}

/// The default bound of every lock wait: of the printed script, of the
/// creating transaction and of the steady-state catalog read
/// ([`Options::default`](crate::Options)).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

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
    format!(
        "SET LOCAL lock_timeout = '{}'",
        Options::default().lock_timeout_setting()
    )
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
    format!(
        "SET LOCAL lock_timeout = '{}'; SET LOCAL statement_timeout = '{}'",
        options.lock_timeout_setting(),
        options.statement_timeout_setting()
    )
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

struct Renderer {
    schema: SchemaName,
    statements: Vec<Statement>,
}

impl TableVisitor for Renderer {
    fn visit<T: TableModel>(&mut self) {
        let table = T::table_name();
        self.statements.push(Statement {
            kind: StatementKind::CreateTable,
            object: table.clone(),
            sql: one_clause_per_line(
                &create_table::<T>(&self.schema).to_string(PostgresQueryBuilder),
            ) + " USING "
                + TABLE_ACCESS_METHOD
                + &storage_clause::<T>(),
        });
        for (name, index) in create_indexes::<T>(&self.schema) {
            self.statements.push(Statement {
                kind: StatementKind::CreateIndex,
                object: name.to_owned(),
                sql: index.to_string(PostgresQueryBuilder),
            });
        }
        let qualified = format!(
            "{}.{}",
            quote_ident(self.schema.as_str()),
            quote_ident(&table)
        );
        self.statements.push(Statement {
            kind: StatementKind::Comment,
            object: table.clone(),
            sql: format!("COMMENT ON TABLE {qualified} IS {}", quote_literal(T::DOC)),
        });
        for (variant, column) in T::columns() {
            let name = variant.to_string();
            self.statements.push(Statement {
                kind: StatementKind::Comment,
                object: format!("{table}.{name}"),
                sql: format!(
                    "COMMENT ON COLUMN {qualified}.{} IS {}",
                    quote_ident(&name),
                    quote_literal(column.doc)
                ),
            });
        }
    }
}

fn table_ref<T: TableModel>(schema: &SchemaName) -> (Alias, T) {
    (Alias::new(schema.as_str()), T::TABLE)
}

/// ` WITH (name=value, ...)`, or nothing when the table declares no storage
/// parameters.
fn storage_clause<T: TableModel>() -> String {
    let parameters: Vec<String> = T::storage_parameters()
        .into_iter()
        .map(StorageParameter::reloption)
        .collect();
    if parameters.is_empty() {
        String::new()
    } else {
        format!(" WITH ({})", parameters.join(", "))
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement of one table, without its
/// access method and storage parameters (sea-query expresses neither `USING`
/// nor `WITH (...)` for PostgreSQL; the bootstrap statement appends them).
pub fn create_table<T: TableModel>(schema: &SchemaName) -> TableCreateStatement {
    let mut create = Table::create();
    create.table(table_ref::<T>(schema)).if_not_exists();
    for (variant, column) in T::columns() {
        let mut def = ColumnDef::new(variant);
        match column.sql_type {
            SqlType::BigInt => def.big_integer(),
            SqlType::Integer => def.integer(),
            SqlType::Text => def.text(),
            SqlType::Bytea => def.binary(),
            SqlType::Boolean => def.boolean(),
            SqlType::Xid8 => def.custom(Alias::new("xid8")),
        };
        if column.nullable {
            def.null();
        } else {
            def.not_null();
        }
        match column.default {
            None => {}
            Some(ColumnDefault::IdentityAlways) => {
                def.extra("GENERATED ALWAYS AS IDENTITY");
            }
            Some(ColumnDefault::CurrentTransactionId) => {
                def.default(Expr::cust("pg_current_xact_id()"));
            }
            Some(ColumnDefault::GeneratedSum(a, b)) => {
                def.generated(Expr::col(a).add(Expr::col(b)), true);
            }
        }
        create.col(&mut def);
    }
    let mut primary_key = Index::create();
    for column in T::primary_key() {
        primary_key.col(column);
    }
    create.primary_key(&mut primary_key);
    for check in T::checks() {
        create.check(Check::named(check.name, check_expr(&check.rule)));
    }
    create
}

fn check_expr<C: TableModel>(rule: &CheckRule<C>) -> Expr {
    match rule {
        CheckRule::NotEmpty(c) => Expr::col(*c).ne(""),
        CheckRule::AtLeast(c, n) => Expr::col(*c).gte(*n),
        CheckRule::Positive(c) => Expr::col(*c).gt(0),
        CheckRule::NullTogether(columns) => {
            let mut all_null = Condition::all();
            let mut all_set = Condition::all();
            for c in columns {
                all_null = all_null.add(Expr::col(*c).is_null());
                all_set = all_set.add(Expr::col(*c).is_not_null());
            }
            Condition::any().add(all_null).add(all_set).into()
        }
        CheckRule::SetOnlyIf { column, flag } => Condition::any()
            .add(Expr::col(*column).is_null())
            .add(Expr::col(*flag))
            .into(),
        CheckRule::NotBefore { later, earlier } => Expr::col(*later).gte(Expr::col(*earlier)),
    }
}

/// The conditions of a partial index, each added with `and_where`.
fn index_conditions<C: TableModel>(predicate: IndexPredicate<C>) -> Vec<Expr> {
    match predicate {
        IndexPredicate::IsNull(c) => vec![Expr::col(c).is_null()],
        IndexPredicate::IsNotNull(c) => vec![Expr::col(c).is_not_null()],
        IndexPredicate::IsTrue(c) => vec![Expr::col(c)],
        IndexPredicate::IsFalse(c) => vec![Expr::col(c).not()],
        IndexPredicate::All(conditions) => {
            conditions.into_iter().flat_map(index_conditions).collect()
        }
    }
}

/// The `CREATE INDEX IF NOT EXISTS` statements of one table, with their names.
pub fn create_indexes<T: TableModel>(
    schema: &SchemaName,
) -> Vec<(&'static str, IndexCreateStatement)> {
    T::indexes()
        .into_iter()
        .map(|index| {
            let mut create = Index::create();
            create
                .if_not_exists()
                .name(index.name)
                .table(table_ref::<T>(schema));
            for (column, order) in index.keys {
                match order {
                    Order::Asc => create.col(column),
                    Order::Desc => create.col((column, IndexOrder::Desc)),
                };
            }
            for condition in index.predicate.map(index_conditions).unwrap_or_default() {
                create.and_where(condition);
            }
            (index.name, create)
        })
        .collect()
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

/// Puts each column and constraint of a one-line `CREATE TABLE` on its own
/// line. Only whitespace outside quotes changes, so the statement means
/// exactly what sea-query rendered.
fn one_clause_per_line(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 256);
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), _) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '(') => {
                depth += 1;
                out.push(c);
                if depth == 1 {
                    out.push_str("\n    ");
                    skip_spaces(&mut chars);
                }
            }
            (None, ')') => {
                if depth == 1 {
                    while out.ends_with(' ') {
                        out.pop();
                    }
                    out.push('\n');
                }
                depth = depth.saturating_sub(1);
                out.push(c);
            }
            (None, ',') if depth == 1 => {
                out.push_str(",\n    ");
                skip_spaces(&mut chars);
            }
            _ => out.push(c),
        }
    }
    out
}

fn skip_spaces(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.next_if_eq(&' ').is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(sql: &str) -> String {
        sql.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn line_breaks_change_only_whitespace() {
        let schema = SchemaName::default();
        let raw = create_table::<schema_model::Jobs>(&schema).to_string(PostgresQueryBuilder);
        let pretty = one_clause_per_line(&raw);
        assert_eq!(
            words(&pretty).replace("( ", "(").replace(" )", ")"),
            words(&raw).replace("( ", "(").replace(" )", ")")
        );
        assert!(pretty.lines().count() > 10, "{pretty}");
    }

    #[test]
    fn quotes_inside_literals_do_not_break_lines() {
        let sql = r#"CREATE TABLE "t" ( "a" text, CONSTRAINT "c" CHECK ("a" <> ',(') )"#;
        assert_eq!(
            one_clause_per_line(sql),
            "CREATE TABLE \"t\" (\n    \"a\" text,\n    CONSTRAINT \"c\" CHECK (\"a\" <> ',(')\n)"
        );
    }
}
