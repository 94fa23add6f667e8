//! `check`: how a live database compares with this release, in one
//! pipeline that bootstrap, `schema-gen check` and `upgrade` all run:
//! probe, read, compare, place.
//!
//! [`inspect`] sends one simple query (one round trip, bounded by
//! [`Options`]): the catalog read ([`crate::catalog`]) and, under the Citus
//! layout, the question about the node and the family's distribution
//! ([`crate::citus::statement`]) in the same query. Then, with no further
//! I/O, it refuses a node that cannot take the layout, judges where the
//! database stands ([`crate::versions::verdict()`]) and compares the family's
//! placement with the layout. [`status`] words that for `schema-gen check`;
//! [`verify_with`] lists the plain differences from the model.

mod state;
mod status;

use tokio_postgres::Client;

use schema_model::SchemaName;

use crate::catalog::{self, LiveCatalog};
use crate::citus;
use crate::difference::Difference;
use crate::error::{Error, ErrorKind};
use crate::options::Options;
use crate::verify::compare;
use crate::versions::{History, Verdict, verdict};

pub use state::{ForeignPolicy, State};
pub use status::{Status, VersionState};

/// What [`inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The live catalog.
    pub live: LiveCatalog,
    /// Where the database stands among the versions of the history.
    pub verdict: Verdict,
    /// Under the Citus layout: how the family is placed otherwise than the
    /// layout says (empty when it is placed right, or does not exist yet).
    pub placement: Vec<Difference>,
}

/// The history every check judges against: this release's.
///
/// # Errors
///
/// [`ErrorKind::Defect`] when a shipped version cannot be planned.
pub fn shipped_history() -> Result<&'static History, Error> {
    History::shipped().map_err(|err| {
        ErrorKind::Defect {
            message: err.to_string(),
        }
        .into()
    })
}

/// Reads `schema` (one round trip, bounded by `options`) and judges it
/// against `history`: see the module docs.
///
/// # Errors
///
/// [`ErrorKind::Layout`] under the Citus layout on a server without Citus
/// or on a worker (nothing else is concluded), and as [`catalog::read`].
pub async fn inspect(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
    history: &History,
) -> Result<Inspection, Error> {
    let citus = options.layout.is_citus();
    let questions: Vec<String> = if citus {
        vec![citus::statement(schema)]
    } else {
        Vec::new()
    };
    let (live, answers) = catalog::read_with(client, schema, options, &questions).await?;
    let mut placement = Vec::new();
    if citus {
        let node = citus::decode(answers.first().and_then(Option::as_deref), schema)?;
        if let Some(refusal) = node.refusal(schema) {
            return Err(refusal);
        }
        if let (Some(distribution), Some(_)) = (node.distribution(), &live.schema) {
            placement = citus::compare(distribution, schema, &history.target().shape);
        }
    }
    let verdict = verdict(&live, schema, history);
    Ok(Inspection {
        live,
        verdict,
        placement,
    })
}

/// Reads the catalog (one round trip, the Citus question included under
/// that layout) and reports where `schema` stands: what `schema-gen check`
/// prints.
///
/// # Errors
///
/// As [`inspect`].
pub async fn status(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Status, Error> {
    let inspection = inspect(client, schema, options, shipped_history()?).await?;
    let mut status = Status::of(&inspection.verdict, schema);
    status.differences.extend(inspection.placement);
    Ok(status)
}

/// [`verify_with`] under the default [`Options`] (a 5 s lock bound).
///
/// # Errors
///
/// As [`verify_with`].
pub async fn verify(client: &Client, schema: &SchemaName) -> Result<Vec<Difference>, Error> {
    verify_with(client, schema, &Options::default()).await
}

/// Returns the differences between the live catalog of `schema` and the
/// model, in one round trip that only reads `pg_catalog` and waits for a
/// lock at most `options.lock_timeout` (see [`catalog::read`]); under a
/// Citus `options.layout`, also how the family is distributed, asked in the
/// same round trip. Empty means the schema matches the model exactly,
/// comments included. A schema that does not exist is one difference,
/// [`Difference::MissingSchema`].
///
/// # Errors
///
/// As [`inspect`]: a node that cannot take the layout, a lost connection,
/// a lock timeout (naming the session that holds the lock), a server error
/// or an undecodable reply.
pub async fn verify_with(
    client: &Client,
    schema: &SchemaName,
    options: &Options,
) -> Result<Vec<Difference>, Error> {
    let history = shipped_history()?;
    let inspection = inspect(client, schema, options, history).await?;
    let mut differences = compare(&inspection.live, schema, &history.target().shape);
    differences.extend(inspection.placement);
    Ok(differences)
}
