//! `schema-gen grants`: the least-privilege script of the engine's roles,
//! offline (it reads the statements, not a server).

use clap::Args;
use schema_model::Layout;

use super::{layout, schema_name};
use crate::grants::{role_name, script};

/// Which roles `grants` is about, and where the family lives.
#[derive(Debug, Args)]
pub struct GrantsArgs {
    /// The engine's runtime role: it opens the family and runs every
    /// statement of the layout, and nothing else.
    #[arg(long, value_name = "ROLE")]
    pub runtime_role: String,
    /// The role that runs the engine's vacuum of jobs (PostgreSQL 17 and
    /// later: MAINTAIN on jobs; before 17 the vacuum needs the owner, and
    /// the script says so instead of granting more).
    #[arg(long, value_name = "ROLE")]
    pub maintenance_role: Option<String>,
    /// The engine-owned schema.
    #[arg(long, default_value = schema_model::schema_name::DEFAULT_SCHEMA_NAME)]
    pub schema: String,
    /// Which statements the runtime role runs [default: single-server].
    #[arg(long, value_name = "LAYOUT", value_parser = layout::parser())]
    pub layout: Option<Layout>,
}

/// `schema-gen grants`: the script.
pub(super) fn grants(args: &GrantsArgs) -> Result<String, String> {
    let schema = schema_name(&args.schema)?;
    let runtime = role_name(&args.runtime_role)?;
    let maintenance = args
        .maintenance_role
        .as_deref()
        .map(role_name)
        .transpose()?;
    Ok(script(
        &schema,
        args.layout.unwrap_or_default(),
        &runtime,
        maintenance.as_deref(),
    ))
}
