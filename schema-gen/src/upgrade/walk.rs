//! The one loop of an upgrade: the legs of an [`Itinerary`], in order, each
//! handed to a [`Backend`]. The executor runs them; the dry run prints
//! them.

use crate::error::Error;
use crate::versions::{Itinerary, Leg, Record, StepLeg};

/// What runs (or prints) each leg.
pub(super) trait Backend {
    /// A bookkeeping transaction of `schema_versions`.
    async fn record(&mut self, record: Record, statements: &[String]) -> Result<(), Error>;

    /// A step, unless the catalog shows it done.
    async fn step(&mut self, leg: &StepLeg) -> Result<(), Error>;
}

/// Hands every leg of `itinerary` to `backend`, in order, stopping at the
/// first failure.
pub(super) async fn walk(itinerary: &Itinerary, backend: &mut impl Backend) -> Result<(), Error> {
    for leg in &itinerary.legs {
        match leg {
            Leg::Record { record, statements } => backend.record(*record, statements).await?,
            Leg::Step(leg) => backend.step(leg).await?,
        }
    }
    Ok(())
}
