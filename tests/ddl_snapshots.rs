//! The generated DDL and the family description, as reviewers read them.
//! Any change to a column, type, index, constraint or doc shows up here as a
//! snapshot diff (CI runs insta in check mode, so an unreviewed change fails).

use schema_gen::describe;
use schema_gen::render::{script, script_for};
use schema_model::{Layout, SchemaName};

fn schema(name: &str) -> SchemaName {
    SchemaName::new(name).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn ddl_for_the_default_schema() {
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("ddl_alkstore", script(&SchemaName::default()));
    });
}

#[test]
fn ddl_for_another_schema_name() {
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("ddl_tenant_42", script(&schema("tenant_42")));
    });
}

#[test]
fn ddl_for_the_citus_layout() {
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!(
            "ddl_alkstore_citus",
            script_for(&SchemaName::default(), Layout::CitusSchemaSharding)
        );
    });
}

#[test]
fn the_citus_ddl_is_the_single_server_ddl_then_the_distribution() {
    let single = script(&SchemaName::default());
    let citus = script_for(&SchemaName::default(), Layout::CitusSchemaSharding);
    let body = |text: &str| -> String {
        let start = text
            .find("BEGIN;")
            .unwrap_or_else(|| panic!("no BEGIN in {text}"));
        text[start..].to_owned()
    };
    let single_body = body(&single);
    let citus_body = body(&citus);
    let shared = single_body
        .strip_suffix("COMMIT;\n")
        .unwrap_or_else(|| panic!("no COMMIT at the end of {single_body}"));
    let added = citus_body
        .strip_prefix(shared)
        .unwrap_or_else(|| panic!("the citus script does not start with the single-server one"));
    assert_eq!(
        added,
        "SELECT citus_schema_distribute('\"alkstore\"');\n\n\
         SELECT truncate_local_data_after_distributing_table('\"alkstore\".\"schema_versions\"');\n\n\
         COMMIT;\n"
    );
}

#[test]
fn ddl_differs_between_schema_names_only_in_the_name_and_lock_key() {
    let normalise = |name: &str| {
        let schema = schema(name);
        let key = schema_gen::render::advisory_lock_key(&schema).to_string();
        script(&schema)
            .replace(&format!("\"{name}\""), "\"<schema>\"")
            .replace(&key, "<key>")
    };
    assert_eq!(normalise("alkstore"), normalise("tenant_42"));
}

#[test]
fn describe_markdown() {
    let description = describe::engine(&SchemaName::default());
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("describe_markdown", describe::to_markdown(&description));
    });
}

#[test]
fn describe_json() {
    let description = describe::engine(&SchemaName::default());
    let json = describe::to_json(&description).unwrap_or_else(|e| panic!("{e}"));
    harness::snapshots::settings().bind(|| {
        insta::assert_snapshot!("describe_json", json);
    });
}
