//! A plain-text dump of one schema as PostgreSQL reports it, for snapshots
//! and for "nothing changed" comparisons.
//!
//! Deliberately independent of `schema_gen::catalog`: columns come from
//! `information_schema.columns`, indexes from the `pg_indexes` view,
//! constraints from `pg_get_constraintdef`, sequences from `pg_sequences`,
//! rules from `pg_rules`, policies from `pg_policies`, triggers from
//! `information_schema.triggers`, functions and types from `pg_proc` and
//! `pg_type`, comments from `obj_description` / `col_description`. A bug in
//! the library's catalog reader therefore cannot hide itself in the tests
//! that use this dump.
//!
//! Relation properties that are rarely set (an access method other than
//! `heap`, storage parameters, row-level security, inheritance) are printed
//! only when set, so the snapshot of a plain schema stays short.

use std::fmt::Write as _;

use tokio_postgres::Client;

/// Dumps everything in `schema` (relations of every kind with their access
/// method, storage parameters, row-level security and inheritance; their
/// columns with type, collation, nullability, default / identity /
/// generation and comment; their constraints, indexes, triggers, rules and
/// policies; sequences with their options; functions and types), one object
/// per line, sorted by name so the dump is stable. A schema that does not
/// exist dumps as one line saying so.
///
/// # Panics
///
/// If a catalog query fails.
pub async fn dump_schema(client: &Client, schema: &str) -> String {
    let mut out = String::new();
    let ns = client
        .query_opt(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: reading schema {schema}: {e}"));
    let Some(ns) = ns else {
        return format!("schema {schema}: does not exist\n");
    };
    let comment: Option<String> = ns.get(0);
    let _ = writeln!(out, "schema {schema} -- {}", quoted(comment.as_deref()));

    let relations = client
        .query(
            "SELECT c.relname::text, c.relkind::text, c.relpersistence::text,
                    obj_description(c.oid, 'pg_class'),
                    concat_ws(' ',
                        CASE WHEN am.amname <> 'heap' THEN 'USING ' || am.amname END,
                        'WITH (' || array_to_string(c.reloptions, ', ') || ')',
                        'TOAST WITH (' || array_to_string(t.reloptions, ', ') || ')',
                        CASE WHEN c.relrowsecurity THEN 'ROW LEVEL SECURITY' END,
                        CASE WHEN c.relforcerowsecurity THEN 'FORCE ROW LEVEL SECURITY' END,
                        (SELECT 'INHERITS (' || string_agg(i.inhparent::regclass::text, ', ') || ')'
                         FROM pg_inherits i WHERE i.inhrelid = c.oid),
                        (SELECT 'INHERITED BY (' || string_agg(i.inhrelid::regclass::text, ', '
                                                               ORDER BY 1) || ')'
                         FROM pg_inherits i WHERE i.inhparent = c.oid)),
                    (SELECT format('AS %s START %s INCREMENT %s MIN %s MAX %s CACHE %s%s',
                                   s.data_type, s.start_value, s.increment_by, s.min_value,
                                   s.max_value, s.cache_size,
                                   CASE WHEN s.cycle THEN ' CYCLE' ELSE '' END)
                     FROM pg_sequences s
                     WHERE s.schemaname = n.nspname AND s.sequencename = c.relname)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_am am ON am.oid = c.relam
             LEFT JOIN pg_class t ON t.oid = c.reltoastrelid
             WHERE n.nspname = $1 AND c.relkind NOT IN ('i', 'I')
             ORDER BY c.relname",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: listing relations of {schema}: {e}"));
    for relation in relations {
        let name: String = relation.get(0);
        let kind: String = relation.get(1);
        let persistence: String = relation.get(2);
        let comment: Option<String> = relation.get(3);
        let properties: String = relation.get(4);
        let sequence: Option<String> = relation.get(5);
        let what = match kind.as_str() {
            "r" => "table",
            "S" => "sequence",
            "v" => "view",
            "m" => "materialized view",
            "p" => "partitioned table",
            "f" => "foreign table",
            "c" => "composite type",
            other => other,
        };
        let persistence = match persistence.as_str() {
            "p" => "",
            "u" => " UNLOGGED",
            _ => " TEMPORARY",
        };
        let properties = [properties, sequence.unwrap_or_default()]
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(|p| format!(" {p}"))
            .collect::<String>();
        let _ = writeln!(
            out,
            "{what}{persistence} {name}{properties} -- {}",
            quoted(comment.as_deref())
        );
        if kind == "S" {
            continue;
        }
        dump_columns(client, schema, &name, &mut out).await;
        dump_constraints(client, schema, &name, &mut out).await;
        dump_indexes(client, schema, &name, &mut out).await;
        dump_rewriting(client, schema, &name, &mut out).await;
    }
    dump_routines_and_types(client, schema, &mut out).await;
    out
}

/// Triggers, rules and policies: what can rewrite, drop or hide rows.
async fn dump_rewriting(client: &Client, schema: &str, table: &str, out: &mut String) {
    let rows = client
        .query(
            "SELECT 'trigger ' || trigger_name || ' ' || action_timing || ' ' ||
                    string_agg(event_manipulation, ' OR ' ORDER BY event_manipulation) ||
                    ' FOR EACH ' || action_orientation || ' ' || action_statement
             FROM information_schema.triggers
             WHERE event_object_schema = $1 AND event_object_table = $2
             GROUP BY trigger_name, action_timing, action_orientation, action_statement
             UNION ALL
             SELECT 'rule ' || rulename || ': ' || regexp_replace(definition, '\\s+', ' ', 'g')
             FROM pg_rules WHERE schemaname = $1 AND tablename = $2
             UNION ALL
             SELECT format('policy %s %s FOR %s TO %s USING (%s) WITH CHECK (%s)',
                           policyname, permissive, cmd, roles, qual, with_check)
             FROM pg_policies WHERE schemaname = $1 AND tablename = $2
             ORDER BY 1",
            &[&schema, &table],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: triggers, rules, policies of {schema}.{table}: {e}"));
    for row in rows {
        let line: String = row.get(0);
        let _ = writeln!(out, "  {line}");
    }
}

/// Functions, procedures and free-standing types (not the row and array
/// types PostgreSQL makes for each table).
async fn dump_routines_and_types(client: &Client, schema: &str, out: &mut String) {
    let rows = client
        .query(
            "SELECT CASE p.prokind WHEN 'p' THEN 'procedure ' ELSE 'function ' END ||
                    p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')'
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = $1
             UNION ALL
             SELECT 'type ' || t.typname || ' (' || t.typtype::text || ')'
             FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
             WHERE n.nspname = $1 AND t.typelem = 0
               AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
             ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: routines and types of {schema}: {e}"));
    for row in rows {
        let line: String = row.get(0);
        let _ = writeln!(out, "{line}");
    }
}

async fn dump_columns(client: &Client, schema: &str, table: &str, out: &mut String) {
    let columns = client
        .query(
            "SELECT c.column_name::text, c.data_type::text, c.is_nullable::text,
                    c.collation_name::text,
                    c.column_default::text, c.is_identity::text, c.identity_generation::text,
                    c.is_generated::text, c.generation_expression::text,
                    col_description(format('%I.%I', c.table_schema, c.table_name)::regclass,
                                    c.ordinal_position::int)
             FROM information_schema.columns c
             WHERE c.table_schema = $1 AND c.table_name = $2
             ORDER BY c.ordinal_position",
            &[&schema, &table],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: columns of {schema}.{table}: {e}"));
    for column in columns {
        let name: String = column.get(0);
        let data_type: String = column.get(1);
        let nullable: String = column.get(2);
        let collation: Option<String> = column.get(3);
        let default: Option<String> = column.get(4);
        let identity: Option<String> = column.get(5);
        let identity_generation: Option<String> = column.get(6);
        let generated: Option<String> = column.get(7);
        let generation: Option<String> = column.get(8);
        let comment: Option<String> = column.get(9);
        let mut line = format!("  column {name} {data_type}");
        if let Some(collation) = collation {
            let _ = write!(line, " COLLATE {collation}");
        }
        if nullable == "NO" {
            line.push_str(" NOT NULL");
        }
        if identity.as_deref() == Some("YES") {
            let _ = write!(
                line,
                " GENERATED {} AS IDENTITY",
                identity_generation.unwrap_or_default()
            );
        }
        if generated.as_deref() == Some("ALWAYS") {
            let _ = write!(
                line,
                " GENERATED ALWAYS AS ({}) STORED",
                generation.unwrap_or_default()
            );
        }
        if let Some(default) = default {
            let _ = write!(line, " DEFAULT {default}");
        }
        let _ = writeln!(out, "{line} -- {}", quoted(comment.as_deref()));
    }
}

async fn dump_constraints(client: &Client, schema: &str, table: &str, out: &mut String) {
    let constraints = client
        .query(
            "SELECT k.conname::text, pg_get_constraintdef(k.oid)
             FROM pg_constraint k
             JOIN pg_class c ON c.oid = k.conrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relname = $2
             ORDER BY k.conname",
            &[&schema, &table],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: constraints of {schema}.{table}: {e}"));
    for constraint in constraints {
        let name: String = constraint.get(0);
        let definition: String = constraint.get(1);
        let _ = writeln!(out, "  constraint {name} {definition}");
    }
}

async fn dump_indexes(client: &Client, schema: &str, table: &str, out: &mut String) {
    let indexes = client
        .query(
            "SELECT indexname::text, indexdef FROM pg_indexes
             WHERE schemaname = $1 AND tablename = $2
             ORDER BY indexname",
            &[&schema, &table],
        )
        .await
        .unwrap_or_else(|e| panic!("dump: indexes of {schema}.{table}: {e}"));
    for index in indexes {
        let name: String = index.get(0);
        let definition: String = index.get(1);
        let _ = writeln!(out, "  index {name}: {definition}");
    }
}

fn quoted(comment: Option<&str>) -> String {
    match comment {
        Some(text) => format!("{text:?}"),
        None => "(no comment)".to_owned(),
    }
}
