//! The live catalog of one schema, read in one round trip.
//!
//! [`read`] sends one simple query ([`batch`]): the bounds of
//! [`render::bounds_statement`] (`SET LOCAL lock_timeout`, `SET LOCAL
//! statement_timeout`) followed by one `SELECT` ([`statement`]) that builds a
//! JSON document of everything in the schema from `pg_catalog`, and decodes
//! it. The statements of one simple query run as one implicit transaction,
//! so the `SET LOCAL`s bound the `SELECT` and end with it: one round trip, no
//! `BEGIN`/`COMMIT`, nothing left behind on the session, and an error ends
//! the implicit transaction too (an explicit `BEGIN` whose batch fails would
//! leave the session in an aborted transaction, which costs a `ROLLBACK`
//! round trip and which pgbouncer's statement pooling answers by dropping
//! the connection).
//!
//! What the document holds, per relation of the schema (tables, views,
//! materialized views, foreign and partitioned tables, sequences): kind,
//! persistence, access method, storage parameters (`reloptions`, and the
//! TOAST table's as `toast.name=value`), row-level security, inheritance
//! parents and children, columns (type, nullability, default, identity,
//! generation, collation), every index by its whole `pg_get_indexdef`, every
//! constraint, non-internal triggers, rules, policies, comments; for a
//! sequence its options and the column that owns it; and every other object
//! in the schema (functions, procedures, types, operators, collations, ...). Definitions come from
//! PostgreSQL's own deparsers (`format_type`, `pg_get_expr`,
//! `pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_triggerdef`,
//! `pg_get_ruledef`), the same strings [`schema_model::description`] writes,
//! so comparing is comparing strings.
//!
//! The statement only reads `pg_catalog`, which every role may read: it works
//! for a runtime role that has nothing but `USAGE` on the schema and DML on
//! its tables, and for a role that cannot even see the schema. The deparsers
//! take `ACCESS SHARE` on each table for the length of the statement (what
//! every `SELECT` takes), which conflicts only with `ACCESS EXCLUSIVE` (`ALTER
//! TABLE`, `DROP`, `TRUNCATE`, `VACUUM FULL`, `LOCK TABLE`): that wait is the
//! one `lock_timeout` bounds.

use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::SchemaName;

use crate::Options;
use crate::error::{Context, Error, ErrorKind, LockHolder, LockTarget, Step, classify};
use crate::render::{self, quote_literal};

/// The catalog `SELECT`; `{schema}` stands for the schema name as a literal.
///
/// Relations are everything in `pg_class` but indexes (reported with their
/// table), composite types (reported as types) and TOAST tables. Indexes
/// that back a primary key, unique or exclusion constraint are reported as
/// that constraint (whose definition includes `INCLUDE`, `WITH` and the
/// index's tablespace), the others by their whole `pg_get_indexdef`.
/// `NOT NULL` constraints (PostgreSQL 18 lists them in `pg_constraint`) are
/// reported through each column's `not_null`, constraint triggers as
/// triggers. Other objects are found through their dependency on the
/// schema (`pg_depend`), which every object kind records.
const STATEMENT: &str = r#"
WITH ns AS (
    SELECT n.oid, obj_description(n.oid, 'pg_namespace') AS comment
    FROM pg_catalog.pg_namespace n
    WHERE n.nspname = {schema}
)
SELECT json_build_object(
    'role', current_user,
    'database', current_database(),
    'schema', (SELECT json_build_object('comment', ns.comment) FROM ns),
    'relations', COALESCE((
        SELECT json_agg(json_build_object(
            'name', c.relname,
            'kind', c.relkind::text,
            'persistence', c.relpersistence::text,
            'access_method', am.amname,
            'options', COALESCE(c.reloptions, '{}'::text[]) || COALESCE((
                SELECT array_agg('toast.' || o ORDER BY o)
                FROM pg_catalog.pg_class toast, unnest(toast.reloptions) o
                WHERE toast.oid = c.reltoastrelid
            ), '{}'::text[]),
            'row_security', c.relrowsecurity,
            'force_row_security', c.relforcerowsecurity,
            'comment', obj_description(c.oid, 'pg_class'),
            'parents', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', format('%I.%I', pn.nspname, p.relname),
                    'partition_bound', pg_catalog.pg_get_expr(c.relpartbound, c.oid)
                ) ORDER BY i.inhseqno)
                FROM pg_catalog.pg_inherits i
                JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
                JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
                WHERE i.inhrelid = c.oid
            ), '[]'::json),
            'children', COALESCE((
                SELECT json_agg(format('%I.%I', kn.nspname, k.relname)
                                ORDER BY kn.nspname, k.relname)
                FROM pg_catalog.pg_inherits i
                JOIN pg_catalog.pg_class k ON k.oid = i.inhrelid
                JOIN pg_catalog.pg_namespace kn ON kn.oid = k.relnamespace
                WHERE i.inhparent = c.oid
            ), '[]'::json),
            'sequence', CASE WHEN c.relkind = 'S' THEN (
                SELECT json_build_object(
                    'type', pg_catalog.format_type(s.seqtypid, NULL),
                    'start', s.seqstart,
                    'increment', s.seqincrement,
                    'min', s.seqmin,
                    'max', s.seqmax,
                    'cache', s.seqcache,
                    'cycle', s.seqcycle,
                    'persistence', c.relpersistence::text,
                    'owner', (
                        SELECT json_build_object(
                            'table', r.relname,
                            'column', a.attname,
                            'identity', d.deptype = 'i')
                        FROM pg_catalog.pg_depend d
                        JOIN pg_catalog.pg_class r ON r.oid = d.refobjid
                        JOIN pg_catalog.pg_attribute a
                            ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                        WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                          AND d.refclassid = 'pg_catalog.pg_class'::regclass
                          AND d.deptype IN ('a', 'i') AND r.relnamespace = c.relnamespace
                        LIMIT 1))
                FROM pg_catalog.pg_sequence s
                WHERE s.seqrelid = c.oid
            ) END,
            -- A sequence's own columns (last_value, ...) are not a shape.
            'columns', CASE WHEN c.relkind <> 'S' THEN COALESCE((
                SELECT json_agg(json_build_object(
                    'name', a.attname,
                    'type', pg_catalog.format_type(a.atttypid, a.atttypmod),
                    'not_null', a.attnotnull,
                    'identity', a.attidentity::text,
                    'generated', a.attgenerated::text,
                    'expression', pg_catalog.pg_get_expr(d.adbin, d.adrelid),
                    'collation', CASE WHEN a.attcollation <> (
                        SELECT t.typcollation FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid
                    ) THEN a.attcollation::regcollation::text END,
                    'comment', pg_catalog.col_description(c.oid, a.attnum)
                ) ORDER BY a.attnum)
                FROM pg_catalog.pg_attribute a
                LEFT JOIN pg_catalog.pg_attrdef d
                    ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
            ), '[]'::json) ELSE '[]'::json END,
            'indexes', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', i.relname,
                    'definition', pg_catalog.pg_get_indexdef(x.indexrelid),
                    'valid', x.indisvalid
                ) ORDER BY i.relname)
                FROM pg_catalog.pg_index x
                JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
                WHERE x.indrelid = c.oid
                  AND NOT EXISTS (
                      SELECT 1 FROM pg_catalog.pg_constraint k
                      WHERE k.conrelid = c.oid AND k.conindid = x.indexrelid
                        AND k.contype IN ('p', 'u', 'x'))
            ), '[]'::json),
            'constraints', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', k.conname,
                    'type', k.contype::text,
                    'definition', pg_catalog.pg_get_constraintdef(k.oid)
                ) ORDER BY k.conname)
                FROM pg_catalog.pg_constraint k
                WHERE k.conrelid = c.oid AND k.contype NOT IN ('n', 't')
            ), '[]'::json),
            'triggers', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', tg.tgname,
                    'definition', pg_catalog.pg_get_triggerdef(tg.oid),
                    'enabled', tg.tgenabled::text
                ) ORDER BY tg.tgname)
                FROM pg_catalog.pg_trigger tg
                WHERE tg.tgrelid = c.oid AND NOT tg.tgisinternal
            ), '[]'::json),
            'rules', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', ru.rulename,
                    'definition', pg_catalog.pg_get_ruledef(ru.oid)
                ) ORDER BY ru.rulename)
                FROM pg_catalog.pg_rewrite ru
                WHERE ru.ev_class = c.oid AND ru.rulename <> '_RETURN'
            ), '[]'::json),
            'policies', COALESCE((
                SELECT json_agg(json_build_object(
                    'name', po.polname,
                    'command', po.polcmd::text,
                    'permissive', po.polpermissive,
                    'roles', (
                        SELECT json_agg(CASE WHEN role_oid = 0 THEN 'public'
                                             ELSE pg_catalog.pg_get_userbyid(role_oid)::text END
                                        ORDER BY 1)
                        FROM unnest(po.polroles) role_oid),
                    'using', pg_catalog.pg_get_expr(po.polqual, po.polrelid),
                    'check', pg_catalog.pg_get_expr(po.polwithcheck, po.polrelid)
                ) ORDER BY po.polname)
                FROM pg_catalog.pg_policy po
                WHERE po.polrelid = c.oid
            ), '[]'::json)
        ) ORDER BY c.relname)
        FROM pg_catalog.pg_class c
        JOIN ns ON c.relnamespace = ns.oid
        LEFT JOIN pg_catalog.pg_am am ON am.oid = c.relam
        WHERE c.relkind NOT IN ('i', 'I', 'c', 't')
    ), '[]'::json),
    'versions', {versions},
    'objects', COALESCE((
        -- Everything else that lives in the schema records a dependency on
        -- it; parts of another object (a range type's constructors, an
        -- extension's members) are reported as that object.
        SELECT json_agg(pg_catalog.pg_describe_object(d.classid, d.objid, 0) ORDER BY 1)
        FROM pg_catalog.pg_depend d
        JOIN ns ON d.refobjid = ns.oid
        WHERE d.refclassid = 'pg_catalog.pg_namespace'::regclass
          AND d.classid <> 'pg_catalog.pg_class'::regclass
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend part
                          WHERE part.classid = d.classid AND part.objid = d.objid
                            AND part.deptype IN ('i', 'e'))
    ), '[]'::json)
)::text
"#;

/// The catalog `SELECT` for `schema`, the name inlined as a literal (it is a
/// validated [`SchemaName`], quoted with [`render::quote_literal`]), so it can
/// travel in a simple query next to the `SET LOCAL`s that bound it.
pub fn statement(schema: &SchemaName) -> String {
    STATEMENT
        .replace("{versions}", &versions_expression())
        .replace("{schema}", &quote_literal(schema.as_str()))
}

/// The rows of the schema's `schema_versions` table, as a JSON value of the
/// catalog document: `{"readable", "rows"}`, or null without the table.
///
/// The table may not exist (a schema of a release before version 3, or no
/// schema), and a plain `SELECT` of a missing table fails when it is
/// parsed, so the rows are read through `query_to_xml` (dynamic SQL that
/// runs only when the table is there) and decoded, typed, by `XMLTABLE`:
/// still one statement, one round trip. The query runs only when the role
/// may read the table and the table has every column the model declares
/// (otherwise `rows` is null, and verification reports the table's drift).
fn versions_expression() -> String {
    use schema_model::{SchemaVersions, TableModel};
    use sea_query::IdenStatic;

    let columns = SchemaVersions::columns();
    let names: Vec<&str> = columns.iter().map(|(c, _)| c.as_str()).collect();
    // The model's identifiers are plain lowercase words, safe as XML
    // element names and inside these literals.
    let decoded: Vec<String> = columns
        .iter()
        .map(|(c, column)| {
            format!(
                "{} {} PATH '{}'",
                c.as_str(),
                column.sql_type.pg_name(),
                c.as_str()
            )
        })
        .collect();
    let fields: Vec<String> = names.iter().map(|n| format!("'{n}', x.{n}")).collect();
    let listed: Vec<String> = names.iter().map(|n| quote_literal(n)).collect();
    let selected: Vec<String> = names.iter().map(|n| render::quote_ident(n)).collect();
    format!(
        "(SELECT json_build_object(
        'readable', pg_catalog.has_table_privilege(c.oid, 'SELECT'),
        'rows', CASE WHEN pg_catalog.has_table_privilege(c.oid, 'SELECT')
                      AND (SELECT count(*) FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = c.oid AND NOT a.attisdropped
                             AND a.attname IN ({listed})) = {count}
            THEN COALESCE((
                SELECT json_agg(json_build_object({fields}) ORDER BY x.{first})
                FROM XMLTABLE('/table/row' PASSING pg_catalog.query_to_xml(
                         format('SELECT {selected} FROM %I.%I', n.nspname, c.relname),
                         false, false, '')
                     COLUMNS {decoded}) x
            ), '[]'::json) END)
     FROM pg_catalog.pg_class c
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = {{schema}} AND c.relname = {table} AND c.relkind = 'r')",
        listed = listed.join(", "),
        count = names.len(),
        fields = fields.join(", "),
        first = names[0],
        selected = selected.join(", "),
        decoded = decoded.join(", "),
        table = quote_literal(&SchemaVersions::table_name()),
    )
}

/// The one simple query the steady-state read sends: the bounds of
/// `options`, then [`statement`].
///
/// ```
/// use schema_gen::{Options, catalog};
/// use schema_model::SchemaName;
///
/// let batch = catalog::batch(&SchemaName::new("alk").unwrap(), &Options::default());
/// assert!(batch.starts_with(
///     "SET LOCAL lock_timeout = '5s'; SET LOCAL statement_timeout = '15s';\n"
/// ));
/// assert!(batch.contains("WHERE n.nspname = 'alk'"));
/// ```
pub fn batch(schema: &SchemaName, options: &Options) -> String {
    format!(
        "{};\n{}",
        render::bounds_statement(options),
        statement(schema).trim_start()
    )
}

/// One schema's catalog as PostgreSQL reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveCatalog {
    /// `current_user` of the session that read it.
    pub role: String,
    /// `current_database()`.
    pub database: String,
    /// The schema, or `None` when it does not exist.
    pub schema: Option<LiveSchema>,
    /// The schema's relations, by name (empty when the schema does not exist).
    pub relations: Vec<LiveRelation>,
    /// Every other object in the schema (functions, procedures, types,
    /// operators, collations, extensions, ...), as `pg_describe_object`
    /// words it: `function alk.f(integer)`.
    #[serde(default)]
    pub objects: Vec<String>,
    /// The schema's `schema_versions` table as the role could read it,
    /// `None` when the schema has no such table.
    #[serde(default)]
    pub versions: Option<LiveVersions>,
}

/// The `schema_versions` table of a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVersions {
    /// Whether the role may `SELECT` from it.
    pub readable: bool,
    /// Its rows, oldest version first; `None` when the role may not read
    /// them, or the table lacks a column the model declares.
    pub rows: Option<Vec<schema_model::SchemaVersionRecord>>,
}

/// The schema itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSchema {
    /// `COMMENT ON SCHEMA`, if any.
    pub comment: Option<String>,
}

/// A table (or view, sequence, ...) of the schema.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveRelation {
    /// Its name.
    pub name: String,
    /// `pg_class.relkind`: `r` table, `p` partitioned table, `v` view,
    /// `m` materialized view, `f` foreign table, `S` sequence.
    pub kind: String,
    /// `pg_class.relpersistence`: `p` permanent, `u` unlogged, `t` temporary.
    pub persistence: String,
    /// The table access method (`heap`), `None` for relations without one.
    pub access_method: Option<String>,
    /// `pg_class.reloptions` (`fillfactor=70`), then the TOAST table's, each
    /// prefixed `toast.`, as `ALTER TABLE ... SET (toast.name=value)` writes them.
    pub options: Vec<String>,
    /// `relrowsecurity`: `ALTER TABLE ... ENABLE ROW LEVEL SECURITY`.
    pub row_security: bool,
    /// `relforcerowsecurity`: `... FORCE ROW LEVEL SECURITY` (the owner too).
    pub force_row_security: bool,
    /// `COMMENT ON TABLE`, if any.
    pub comment: Option<String>,
    /// The tables it inherits from, or the one it is a partition of.
    pub parents: Vec<LiveParent>,
    /// The tables that inherit from it, or its partitions, qualified.
    pub children: Vec<String>,
    /// For a sequence: its options and the column that owns it.
    pub sequence: Option<LiveSequence>,
    /// Columns in `attnum` order.
    pub columns: Vec<LiveColumn>,
    /// Indexes that do not back a constraint, by name.
    pub indexes: Vec<LiveIndex>,
    /// Constraints other than `NOT NULL` and constraint triggers, by name.
    pub constraints: Vec<LiveConstraint>,
    /// Triggers that are not internal (not those of foreign keys), by name.
    pub triggers: Vec<LiveTrigger>,
    /// Rewrite rules other than a view's own `_RETURN`, by name.
    pub rules: Vec<LiveRule>,
    /// Row-level security policies, by name.
    pub policies: Vec<LivePolicy>,
}

/// A parent in `pg_inherits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveParent {
    /// The parent, qualified (`schema.table`).
    pub name: String,
    /// `FOR VALUES ...` when the relation is a partition of it.
    pub partition_bound: Option<String>,
}

/// The column of a table in the same schema that owns a sequence (`pg_depend`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveOwner {
    /// The owning table.
    pub table: String,
    /// The owning column.
    pub column: String,
    /// Whether it is the column's identity sequence (else `OWNED BY`, as
    /// for `serial`).
    pub identity: bool,
}

/// A column.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveColumn {
    /// Its name.
    pub name: String,
    /// `format_type(atttypid, atttypmod)`.
    #[serde(rename = "type")]
    pub sql_type: String,
    /// `attnotnull`.
    pub not_null: bool,
    /// `attidentity`: `a` always, `d` by default, empty for none.
    pub identity: String,
    /// `attgenerated`: `s` stored (`v` virtual on PostgreSQL 18), empty for none.
    pub generated: String,
    /// `pg_get_expr` of the default or generation expression, if any.
    pub expression: Option<String>,
    /// The column's collation when it is not its type's default (`"C"`).
    pub collation: Option<String>,
    /// `COMMENT ON COLUMN`, if any.
    pub comment: Option<String>,
}

/// The options of a sequence (`pg_sequence`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSequence {
    /// The column that owns it, if it belongs to a table of the schema.
    pub owner: Option<LiveOwner>,
    /// `AS` type, as `format_type` reports it.
    #[serde(rename = "type")]
    pub sql_type: String,
    /// `START WITH`.
    pub start: i64,
    /// `INCREMENT BY`.
    pub increment: i64,
    /// `MINVALUE`.
    pub min: i64,
    /// `MAXVALUE`.
    pub max: i64,
    /// `CACHE`.
    pub cache: i64,
    /// `CYCLE`.
    pub cycle: bool,
    /// `p` logged, `u` unlogged.
    pub persistence: String,
}

impl LiveCatalog {
    /// The relation named `name`, if the schema has one.
    pub fn relation(&self, name: &str) -> Option<&LiveRelation> {
        self.relations.iter().find(|r| r.name == name)
    }

    /// The identity sequence of `table.column`, if the schema has it.
    pub fn identity_sequence(&self, table: &str, column: &str) -> Option<&LiveSequence> {
        self.relations
            .iter()
            .filter_map(|r| r.sequence.as_ref())
            .find(|s| {
                s.owner
                    .as_ref()
                    .is_some_and(|o| o.identity && o.table == table && o.column == column)
            })
    }
}

/// An index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveIndex {
    /// Its name.
    pub name: String,
    /// `pg_get_indexdef`, whole (`CREATE INDEX name ON schema.table USING ...`):
    /// key columns with their collation, operator class and order, `INCLUDE`,
    /// `NULLS NOT DISTINCT`, `WITH (...)` and `WHERE`.
    pub definition: String,
    /// `indisvalid`: false after a failed `CREATE INDEX CONCURRENTLY`.
    pub valid: bool,
}

/// A constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveConstraint {
    /// Its name.
    pub name: String,
    /// `contype`: `c` check, `p` primary key, `u` unique, `f` foreign key,
    /// `x` exclusion.
    #[serde(rename = "type")]
    pub constraint_type: String,
    /// `pg_get_constraintdef`.
    pub definition: String,
}

/// A trigger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveTrigger {
    /// Its name.
    pub name: String,
    /// `pg_get_triggerdef`.
    pub definition: String,
    /// `tgenabled`: `O` origin, `D` disabled, `R` replica, `A` always.
    pub enabled: String,
}

/// A rewrite rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveRule {
    /// Its name.
    pub name: String,
    /// `pg_get_ruledef`.
    pub definition: String,
}

/// A row-level security policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivePolicy {
    /// Its name.
    pub name: String,
    /// `polcmd`: `r` SELECT, `a` INSERT, `w` UPDATE, `d` DELETE, `*` ALL.
    pub command: String,
    /// `PERMISSIVE` (true) or `RESTRICTIVE`.
    pub permissive: bool,
    /// The roles it applies to (`public` for everyone).
    pub roles: Option<Vec<String>>,
    /// `USING (...)`.
    pub using: Option<String>,
    /// `WITH CHECK (...)`.
    pub check: Option<String>,
}

impl LiveIndex {
    /// The definition without its `CREATE [UNIQUE] INDEX name ON schema.table `
    /// prefix (from `USING` on, prefixed `UNIQUE ` for a unique index), the
    /// way [`schema_model::IndexDescription::definition`] has it, for messages.
    ///
    /// ```
    /// use schema_gen::catalog::LiveIndex;
    ///
    /// let index = LiveIndex {
    ///     name: "i".into(),
    ///     definition: "CREATE UNIQUE INDEX i ON s.t USING btree (a) WHERE (b IS NULL)".into(),
    ///     valid: true,
    /// };
    /// assert_eq!(index.from_using(), "UNIQUE USING btree (a) WHERE (b IS NULL)");
    /// ```
    pub fn from_using(&self) -> String {
        let using = self
            .definition
            .find(" USING ")
            .map(|at| &self.definition[at + 1..])
            .unwrap_or(&self.definition);
        if self.definition.starts_with("CREATE UNIQUE INDEX ") {
            format!("UNIQUE {using}")
        } else {
            using.to_owned()
        }
    }
}

impl LivePolicy {
    /// The policy in `CREATE POLICY` words, for messages.
    pub fn describe(&self) -> String {
        let command = match self.command.as_str() {
            "r" => "SELECT",
            "a" => "INSERT",
            "w" => "UPDATE",
            "d" => "DELETE",
            _ => "ALL",
        };
        let mut text = format!(
            "AS {} FOR {command} TO {}",
            if self.permissive {
                "PERMISSIVE"
            } else {
                "RESTRICTIVE"
            },
            self.roles.as_deref().unwrap_or_default().join(", ")
        );
        if let Some(using) = &self.using {
            text.push_str(&format!(" USING ({using})"));
        }
        if let Some(check) = &self.check {
            text.push_str(&format!(" WITH CHECK ({check})"));
        }
        text
    }
}

/// Reads the live catalog of `schema` in one round trip, bounded by
/// `options` (see the module docs). Outside any transaction: the bounds are
/// `SET LOCAL` in the simple query's own implicit transaction.
///
/// # Errors
///
/// [`ErrorKind::Connection`] when the connection is gone,
/// [`ErrorKind::LockTimeout`] when another session held `ACCESS EXCLUSIVE`
/// on a relation of the schema for longer than `options.lock_timeout` (the
/// error names the sessions holding it, as far as the role may see them),
/// [`ErrorKind::StatementPooling`] behind pgbouncer's statement pooling,
/// [`ErrorKind::Query`] for any other server error, [`ErrorKind::Other`] when
/// the reply cannot be decoded.
pub async fn read(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<LiveCatalog, Error> {
    let step = read_step(schema, options, false);
    let context = Context {
        role: "the current role".to_owned(),
        schema: schema.clone(),
    };
    match client.simple_query(&batch(schema, options)).await {
        Ok(messages) => decode(messages, schema),
        Err(err) => Err(explain(client, classify(err, &step, &context)).await),
    }
}

fn read_step(schema: &SchemaName, options: &Options, in_transaction: bool) -> Step {
    Step {
        doing: format!("reading the catalog of schema {schema}"),
        waiting_for: Some(format!(
            "ACCESS SHARE on a table of schema {schema}, which only ACCESS EXCLUSIVE blocks \
             (ALTER TABLE, DROP, TRUNCATE, VACUUM FULL, LOCK TABLE)"
        )),
        lock: Some(LockTarget::SchemaRelations {
            schema: schema.clone(),
        }),
        timeout: Some(options.effective_lock_timeout()),
        in_transaction,
        ..Step::default()
    }
}

pub(crate) fn decode(
    messages: Vec<SimpleQueryMessage>,
    schema: &SchemaName,
) -> Result<LiveCatalog, Error> {
    match first_text(&messages) {
        Some(text) => parse(text, schema),
        None => Err(ErrorKind::Other {
            message: format!(
                "decoding the catalog of schema {schema}: the server returned no row (a bug in \
                 schema-gen, or a proxy that drops rows)"
            ),
        }
        .into()),
    }
}

/// The first column of the first row of a simple query's reply.
fn first_text(messages: &[SimpleQueryMessage]) -> Option<&str> {
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0),
        _ => None,
    })
}

pub(crate) fn parse(text: &str, schema: &SchemaName) -> Result<LiveCatalog, Error> {
    serde_json::from_str(text).map_err(|err| {
        ErrorKind::Other {
            message: format!(
                "decoding the catalog of schema {schema}: {err} (a bug in schema-gen, or a \
                 PostgreSQL version whose catalog it does not know)"
            ),
        }
        .into()
    })
}

/// After a lock timeout: asks the server who holds (or is queued for) the
/// lock the step waited for, in one bounded round trip, and puts the answer
/// in the error. Any failure of the question leaves the error as it was.
pub(crate) async fn explain(client: &Client, err: Error) -> Error {
    let Some(target) = err.lock_target().cloned() else {
        return err;
    };
    match lock_holders(client, &target).await {
        Some(holders) => err.with_lock_holders(holders),
        None => err,
    }
}

/// The sessions that hold or wait for a lock a wait on `target` conflicts
/// with, in one round trip bounded to 2 s; `None` when the question fails.
pub(crate) async fn lock_holders(client: &Client, target: &LockTarget) -> Option<Vec<LockHolder>> {
    let probe = format!(
        "SET LOCAL statement_timeout = '2s';\n{}",
        holders_statement(target)
    );
    let messages = client.simple_query(&probe).await.ok()?;
    first_text(&messages).and_then(|text| serde_json::from_str::<Vec<LockHolder>>(text).ok())
}

/// The sessions, other than this one, that hold or wait for a lock that a
/// wait on `target` conflicts with, with what `pg_stat_activity` lets the
/// role see of them (for another role's session without `pg_read_all_stats`:
/// pid, role and application only).
fn holders_statement(target: &LockTarget) -> String {
    let filter = match target {
        // `ACCESS SHARE` (what the catalog read takes) conflicts only with
        // `ACCESS EXCLUSIVE`, held or queued ahead of it.
        LockTarget::SchemaRelations { schema } => format!(
            "l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock'
             AND l.relation IN (SELECT c.oid FROM pg_catalog.pg_class c
                                JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                WHERE n.nspname = {})",
            quote_literal(schema.as_str())
        ),
        LockTarget::Relation { schema, name } => format!(
            "l.locktype = 'relation'
             AND l.relation = (SELECT c.oid FROM pg_catalog.pg_class c
                               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                               WHERE n.nspname = {} AND c.relname = {})",
            quote_literal(schema.as_str()),
            quote_literal(name)
        ),
        // A bigint advisory key shows as its high half in classid, its low
        // half in objid, and objsubid 1.
        LockTarget::Advisory { key, .. } => {
            let bits = u64::from_ne_bytes(key.to_ne_bytes());
            format!(
                "l.locktype = 'advisory' AND l.classid = {} AND l.objid = {} AND l.objsubid = 1",
                bits >> 32,
                bits & 0xffff_ffff
            )
        }
    };
    format!(
        "SELECT COALESCE(json_agg(json_build_object(
             'pid', l.pid,
             'mode', l.mode,
             'granted', l.granted,
             'relation', (SELECT format('%I.%I', n.nspname, c.relname)
                          FROM pg_catalog.pg_class c
                          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                          WHERE c.oid = l.relation),
             'role', a.usename,
             'application', NULLIF(a.application_name, ''),
             'state', a.state,
             'since', to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'),
             'query', CASE WHEN a.state IS NOT NULL THEN left(a.query, 200) END,
             'blocked_by', CASE WHEN NOT l.granted THEN pg_catalog.pg_blocking_pids(l.pid) END
         ) ORDER BY l.granted DESC, l.pid), '[]'::json)::text
         FROM pg_catalog.pg_locks l
         LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
         WHERE l.pid <> pg_catalog.pg_backend_pid()
           AND l.database = (SELECT oid FROM pg_catalog.pg_database
                             WHERE datname = pg_catalog.current_database())
           AND {filter}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_missing_schema_and_a_table() {
        let schema = SchemaName::new("alk").unwrap();
        let missing = parse(
            r#"{"role":"r","database":"d","schema":null,"relations":[],"objects":[]}"#,
            &schema,
        )
        .unwrap();
        assert!(missing.schema.is_none());
        let one = parse(
            r#"{"role":"r","database":"d","schema":{"comment":null},"relations":[
                {"name":"t","kind":"r","persistence":"p","access_method":"heap",
                 "options":["fillfactor=70"],"row_security":false,"force_row_security":false,
                 "comment":"c","parents":[],"children":[],"sequence":null,
                 "columns":[{"name":"a","type":"bigint","not_null":true,"identity":"a",
                             "generated":"","expression":null,"collation":null,
                             "comment":null}],
                 "indexes":[{"name":"i","definition":"CREATE INDEX i ON alk.t USING btree (a)",
                             "valid":true}],
                 "constraints":[{"name":"t_pkey","type":"p","definition":"PRIMARY KEY (a)"}],
                 "triggers":[],"rules":[],"policies":[]},
                {"name":"t_a_seq","kind":"S","persistence":"p","sequence":{"type":"bigint",
                 "start":1,"increment":1,"min":1,"max":9223372036854775807,"cache":1,
                 "cycle":false,"persistence":"p",
                 "owner":{"table":"t","column":"a","identity":true}}}],
                "objects":["function alk.f(integer)"]}"#,
            &schema,
        )
        .unwrap();
        let t = one.relation("t").unwrap();
        assert_eq!(t.columns[0].sql_type, "bigint");
        assert_eq!(
            one.identity_sequence("t", "a").map(|s| s.max),
            Some(i64::MAX)
        );
        assert_eq!(t.indexes[0].from_using(), "USING btree (a)");
        assert_eq!(t.constraints[0].constraint_type, "p");
        assert_eq!(one.objects, ["function alk.f(integer)"]);
    }

    #[test]
    fn an_undecodable_reply_is_an_error_not_a_panic() {
        let schema = SchemaName::new("alk").unwrap();
        let err = parse("{", &schema).unwrap_err();
        assert!(err.to_string().contains("decoding the catalog"), "{err}");
    }

    #[test]
    fn the_schema_name_is_inlined_as_a_literal() {
        let schema = SchemaName::new("alk").unwrap();
        let sql = statement(&schema);
        assert!(!sql.contains("{schema}"));
        // Once for the schema, once for its version table.
        assert_eq!(sql.matches("'alk'").count(), 2);
    }

    #[test]
    fn an_advisory_key_is_split_as_pg_locks_shows_it() {
        let sql = holders_statement(&LockTarget::Advisory {
            schema: SchemaName::new("alk").unwrap(),
            key: -2,
        });
        assert!(
            sql.contains("l.classid = 4294967295 AND l.objid = 4294967294"),
            "{sql}"
        );
    }
}
