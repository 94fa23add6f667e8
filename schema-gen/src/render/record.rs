//! The statements that write `schema_versions`, built from its typed
//! identifiers. Instants are the server's clock, so every row of a
//! database agrees with the others whatever machine ran the upgrade.

use sea_query::{Alias, Expr, ExprTrait, OnConflict, PostgresQueryBuilder, Query};

use schema_model::history::MODEL_VERSION;
use schema_model::{SchemaName, SchemaVersions};

/// The release that writes a row: `schema-gen 0.3.0`.
pub fn release() -> String {
    format!("schema-gen {}", env!("CARGO_PKG_VERSION"))
}

fn now() -> Expr {
    Expr::cust("CAST(EXTRACT(EPOCH FROM now()) AS bigint)")
}

fn table(schema: &SchemaName) -> (Alias, SchemaVersions) {
    (Alias::new(schema.as_str()), SchemaVersions::Table)
}

/// Records `version` as reached whole (created by a bootstrap, or recognised
/// by its shape): started, expanded and contracted now, by `release`.
///
/// ```
/// use schema_gen::render::record;
/// use schema_model::SchemaName;
///
/// assert_eq!(
///     record::reached(&SchemaName::new("s").unwrap(), 3, "schema-gen 0.3.0"),
///     r#"INSERT INTO "s"."schema_versions" ("version", "release", "started_at", "expanded_at", "contracted_at") VALUES (3, 'schema-gen 0.3.0', CAST(EXTRACT(EPOCH FROM now()) AS bigint), CAST(EXTRACT(EPOCH FROM now()) AS bigint), CAST(EXTRACT(EPOCH FROM now()) AS bigint)) ON CONFLICT ("version") DO NOTHING"#
/// );
/// ```
pub fn reached(schema: &SchemaName, version: u32, release: &str) -> String {
    Query::insert()
        .into_table(table(schema))
        .columns([
            SchemaVersions::Version,
            SchemaVersions::Release,
            SchemaVersions::StartedAt,
            SchemaVersions::ExpandedAt,
            SchemaVersions::ContractedAt,
        ])
        .values_panic([
            Expr::val(i64::from(version)),
            Expr::val(release),
            now(),
            now(),
            now(),
        ])
        .on_conflict(
            OnConflict::column(SchemaVersions::Version)
                .do_nothing()
                .to_owned(),
        )
        .to_string(PostgresQueryBuilder)
}

/// Records, in a `schema_versions` table that holds no row yet (one just
/// created by a bootstrap or its printed script), that the schema is at the
/// model's version, whole. On a table that holds rows it records nothing:
/// re-running the script never rewrites a database's history.
///
/// ```
/// use schema_gen::render::record;
/// use schema_model::SchemaName;
/// use schema_model::history::MODEL_VERSION;
///
/// let sql = record::created(&SchemaName::new("s").unwrap());
/// assert!(sql.starts_with(&format!(r#"INSERT INTO "s"."schema_versions" ("version", "release", "started_at", "expanded_at", "contracted_at") SELECT {MODEL_VERSION}, "#)), "{sql}");
/// assert!(sql.ends_with(r#"WHERE NOT EXISTS(SELECT 1 FROM "s"."schema_versions")"#), "{sql}");
/// ```
pub fn created(schema: &SchemaName) -> String {
    let mut select = Query::select();
    select
        .expr(Expr::val(i64::from(MODEL_VERSION)))
        .expr(Expr::val(release()))
        .expr(now())
        .expr(now())
        .expr(now())
        .and_where(
            Expr::exists(
                Query::select()
                    .expr(Expr::val(1))
                    .from(table(schema))
                    .to_owned(),
            )
            .not(),
        );
    let mut insert = Query::insert();
    insert.into_table(table(schema)).columns([
        SchemaVersions::Version,
        SchemaVersions::Release,
        SchemaVersions::StartedAt,
        SchemaVersions::ExpandedAt,
        SchemaVersions::ContractedAt,
    ]);
    // The column list and the select list have the same five entries.
    let _ = insert.select_from(select);
    insert.to_string(PostgresQueryBuilder)
}

/// Records that the upgrade to `version` started (its expand steps run next).
pub fn started(schema: &SchemaName, version: u32, release: &str) -> String {
    Query::insert()
        .into_table(table(schema))
        .columns([
            SchemaVersions::Version,
            SchemaVersions::Release,
            SchemaVersions::StartedAt,
        ])
        .values_panic([Expr::val(i64::from(version)), Expr::val(release), now()])
        .on_conflict(
            OnConflict::column(SchemaVersions::Version)
                .do_nothing()
                .to_owned(),
        )
        .to_string(PostgresQueryBuilder)
}

/// Records that the expand steps of `version` are done.
pub fn expanded(schema: &SchemaName, version: u32) -> String {
    Query::update()
        .table(table(schema))
        .value(SchemaVersions::ExpandedAt, now())
        .and_where(Expr::col(SchemaVersions::Version).eq(i64::from(version)))
        .and_where(Expr::col(SchemaVersions::ExpandedAt).is_null())
        .to_string(PostgresQueryBuilder)
}

/// Records that the contract steps of `version` are done.
pub fn contracted(schema: &SchemaName, version: u32) -> String {
    Query::update()
        .table(table(schema))
        .value(SchemaVersions::ContractedAt, now())
        .and_where(Expr::col(SchemaVersions::Version).eq(i64::from(version)))
        .and_where(Expr::col(SchemaVersions::ContractedAt).is_null())
        .to_string(PostgresQueryBuilder)
}
