//! The text of the catalog read: one `SELECT` that returns the schema's
//! whole catalog as one JSON document, and the simple query that bounds it.

use schema_model::SchemaName;

use crate::options::Options;
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
                    'comment', pg_catalog.col_description(c.oid, a.attnum),
                    'domain', (SELECT t.typtype = 'd' FROM pg_catalog.pg_type t
                               WHERE t.oid = a.atttypid)
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
                    'valid', x.indisvalid,
                    'evaluates', {evaluates}
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
            ), '[]'::json),
            'referenced_by', COALESCE((
                SELECT json_agg(json_build_object(
                    'constraint', k.conname,
                    'schema', fn.nspname,
                    'table', f.relname,
                    'definition', pg_catalog.pg_get_constraintdef(k.oid)
                ) ORDER BY fn.nspname, f.relname, k.conname)
                FROM pg_catalog.pg_constraint k
                JOIN pg_catalog.pg_class f ON f.oid = k.conrelid
                JOIN pg_catalog.pg_namespace fn ON fn.oid = f.relnamespace
                WHERE k.confrelid = c.oid AND k.contype = 'f'
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

/// What a write evaluates to maintain index `x` (a `pg_index` row) beyond
/// PostgreSQL's own leakproof functions on plain columns, as a `text[]`
/// ([`LiveIndex::evaluates`](super::LiveIndex::evaluates)). The expression
/// and predicate trees (`pg_node_tree`) are read as text: every node
/// starts with `{NAME`, every called function is a `:funcid` or
/// `:opfuncid`. Leakproof is PostgreSQL's own word for a function that has
/// no side effect and fails for no argument, so a write can never fail on
/// one. The patterns use bracket classes, not backslashes, so they read the
/// same under `standard_conforming_strings = off`.
const EVALUATES: &str = r#"ARRAY(
                        SELECT DISTINCT evaluated.what FROM (
                            SELECT 'expression node ' || pg_catalog.lower(m[1]) AS what
                            FROM pg_catalog.regexp_matches(
                                COALESCE(x.indexprs::text, '') || ' ' || COALESCE(x.indpred::text, ''),
                                '[{]([A-Z_]+)', 'g') m
                            WHERE m[1] NOT IN ('VAR', 'CONST', 'OPEXPR', 'FUNCEXPR',
                                               'SCALARARRAYOPEXPR', 'BOOLEXPR', 'NULLTEST',
                                               'BOOLEANTEST', 'RELABELTYPE', 'ARRAYEXPR')
                            UNION ALL
                            SELECT pg_catalog.pg_describe_object('pg_catalog.pg_proc'::regclass, p.oid, 0)
                            FROM pg_catalog.regexp_matches(
                                COALESCE(x.indexprs::text, '') || ' ' || COALESCE(x.indpred::text, ''),
                                ':(funcid|opfuncid) ([0-9]+)', 'g') m
                            JOIN pg_catalog.pg_proc p ON p.oid = m[2]::oid
                            WHERE NOT p.proleakproof
                               OR p.pronamespace <> 'pg_catalog'::regnamespace
                            UNION ALL
                            SELECT pg_catalog.pg_describe_object('pg_catalog.pg_opclass'::regclass, oc.oid, 0)
                            FROM pg_catalog.pg_opclass oc
                            WHERE oc.oid = ANY (x.indclass::oid[])
                              AND oc.opcnamespace <> 'pg_catalog'::regnamespace
                            UNION ALL
                            SELECT pg_catalog.pg_describe_object('pg_catalog.pg_collation'::regclass, co.oid, 0)
                            FROM pg_catalog.pg_collation co
                            WHERE co.oid = ANY (x.indcollation::oid[])
                              AND co.collnamespace <> 'pg_catalog'::regnamespace
                        ) evaluated ORDER BY 1)"#;

/// The catalog `SELECT` for `schema`, the name inlined as a literal (it is a
/// validated [`SchemaName`], quoted with [`render::quote_literal`]), so it can
/// travel in a simple query next to the `SET LOCAL`s that bound it.
pub fn statement(schema: &SchemaName) -> String {
    STATEMENT
        .replace("{evaluates}", EVALUATES)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_name_is_inlined_as_a_literal() {
        let schema = SchemaName::new("alk").unwrap();
        let sql = statement(&schema);
        assert!(!sql.contains("{schema}"));
        // Once for the schema, once for its version table.
        assert_eq!(sql.matches("'alk'").count(), 2);
    }
}
