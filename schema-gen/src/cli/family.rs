//! `schema-gen sql` and `schema-gen describe`: the offline commands, which
//! print a family's SQL or description and never touch a server.

use clap::Args;
use schema_model::{DatabaseName, Layout, SchemaName};

use super::{Dialect, Format, layout, schema_name};
use crate::{clickhouse, describe as describe_mod, render};

/// Which family `sql` and `describe` are about, and where it lives.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// The engine-owned schema: lowercase letters, digits and '_', at most 63 bytes
    /// (postgres dialect only) [default: alkstore].
    #[arg(long)]
    pub schema: Option<String>,
    /// Which family: the engine's PostgreSQL tables, or the ClickHouse analytics sink.
    #[arg(long, value_enum, default_value_t = Dialect::Postgres)]
    pub dialect: Dialect,
    /// The ClickHouse database (clickhouse dialect only) [default: relay_analytics].
    #[arg(long)]
    pub database: Option<String>,
    /// Where the engine family lives (sql, postgres dialect only): `citus`
    /// adds the citus_schema_distribute call [default: single-server].
    #[arg(long, value_name = "LAYOUT", value_parser = layout::parser())]
    pub layout: Option<Layout>,
}

/// The validated target of `sql` / `describe`. A name flag of the other
/// dialect is refused rather than ignored: it would mean the operator had a
/// different database in mind than the one printed.
enum Target {
    Postgres(SchemaName),
    Clickhouse(DatabaseName),
}

fn target(args: &TargetArgs) -> Result<Target, String> {
    match (args.dialect, &args.schema, &args.database) {
        (Dialect::Postgres, schema, None) => {
            Ok(Target::Postgres(schema_name(schema.as_deref().unwrap_or(
                schema_model::schema_name::DEFAULT_SCHEMA_NAME,
            ))?))
        }
        (Dialect::Postgres, _, Some(_)) => Err(
            "--database names a ClickHouse database and needs --dialect clickhouse; \
             the postgres dialect takes --schema"
                .to_owned(),
        ),
        (Dialect::Clickhouse, Some(_), _) => Err(
            "--schema names a PostgreSQL schema; with --dialect clickhouse use --database"
                .to_owned(),
        ),
        (Dialect::Clickhouse, None, database) => database
            .as_deref()
            .map_or_else(|| Ok(DatabaseName::default()), DatabaseName::new)
            .map(Target::Clickhouse)
            .map_err(|err| err.to_string()),
    }
}

/// `schema-gen sql`: the script of the chosen family.
pub(super) fn sql(args: &TargetArgs) -> Result<String, String> {
    let layout = args.layout.unwrap_or_default();
    Ok(match target(args)? {
        Target::Postgres(schema) => render::script_for(&schema, layout),
        Target::Clickhouse(_) if args.layout.is_some() => {
            return Err(
                "--layout places the engine's PostgreSQL family; the clickhouse dialect has none"
                    .to_owned(),
            );
        }
        Target::Clickhouse(database) => clickhouse::script(&database),
    })
}

/// `schema-gen describe`: the chosen family as markdown or JSON.
pub(super) fn describe(args: &TargetArgs, format: Format) -> Result<String, String> {
    if args.layout.is_some() {
        return Err(
            "--layout is for sql, apply and check: the family's description is the same \
             under every layout"
                .to_owned(),
        );
    }
    match (target(args)?, format) {
        (Target::Postgres(schema), Format::Markdown) => {
            Ok(describe_mod::to_markdown(&describe_mod::engine(&schema)))
        }
        (Target::Postgres(schema), Format::Json) => {
            describe_mod::to_json(&describe_mod::engine(&schema)).map_err(|err| err.to_string())
        }
        (Target::Clickhouse(database), Format::Markdown) => Ok(
            describe_mod::analytics_to_markdown(&clickhouse::describe(&database)),
        ),
        (Target::Clickhouse(database), Format::Json) => {
            describe_mod::to_json(&clickhouse::describe(&database)).map_err(|err| err.to_string())
        }
    }
}
