//! A plain-text dump of one schema as PostgreSQL reports it, for snapshots
//! and for "nothing changed" comparisons.
//!
//! Deliberately independent of `schema_gen::catalog`: columns come from
//! `information_schema.columns`, indexes from the `pg_indexes` view,
//! constraints from `pg_get_constraintdef`, comments from
//! `obj_description` / `col_description`. A bug in the library's catalog
//! reader therefore cannot hide itself in the tests that use this dump.

use std::fmt::Write as _;

use tokio_postgres::Client;

/// Dumps everything in `schema` (relations of every kind, their columns with
/// type, nullability, default / identity / generation and comment, their
/// constraints and indexes), one object per line, sorted by name so the dump
/// is stable. A schema that does not exist dumps as one line saying so.
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
                    obj_description(c.oid, 'pg_class')
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
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
        let _ = writeln!(
            out,
            "{what}{persistence} {name} -- {}",
            quoted(comment.as_deref())
        );
        if kind == "S" {
            continue;
        }
        dump_columns(client, schema, &name, &mut out).await;
        dump_constraints(client, schema, &name, &mut out).await;
        dump_indexes(client, schema, &name, &mut out).await;
    }
    out
}

async fn dump_columns(client: &Client, schema: &str, table: &str, out: &mut String) {
    let columns = client
        .query(
            "SELECT c.column_name::text, c.data_type::text, c.is_nullable::text,
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
        let default: Option<String> = column.get(3);
        let identity: Option<String> = column.get(4);
        let identity_generation: Option<String> = column.get(5);
        let generated: Option<String> = column.get(6);
        let generation: Option<String> = column.get(7);
        let comment: Option<String> = column.get(8);
        let mut line = format!("  column {name} {data_type}");
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
