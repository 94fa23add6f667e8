//! `consumed_events`: the dedup ledger's claim, and the [`ConsumedEvent`]
//! row mapping.

use sea_query::{OnConflict, Query};
use sea_query_postgres::PostgresBinder;

use schema_model::{ConsumedEvent, ConsumedEvents, SchemaName};

use super::binder::{Binder, table};
use super::define::{Build, statement};
use super::row::get;
use super::{FromRow, Optional, RowError};

impl FromRow for ConsumedEvent {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        Ok(ConsumedEvent::new(
            get::<_, String>(row, ConsumedEvents::Consumer)?,
            get::<_, String>(row, ConsumedEvents::EventId)?,
            get(row, ConsumedEvents::ConsumedAt)?,
        ))
    }
}

statement! {
    name: "dedup_claim",
    returns: Optional<ConsumedEvent>,
    /// Dedup claim: records that `event.consumer` has taken
    /// `event.event_id`, and says whether the event was new: it returns the
    /// entry (one row) the first time and nothing for a duplicate (`ON
    /// CONFLICT DO NOTHING`), which leaves the first entry as it was. Run it
    /// in the transaction that performs the effect, before the effect: a
    /// rollback forgets the claim too.
    ///
    /// ```
    /// use schema_gen::statements::consumed_events;
    /// use schema_model::{ConsumedEvent, SchemaName};
    ///
    /// let s = consumed_events::claim(&SchemaName::default(), &ConsumedEvent::default());
    /// assert_eq!(
    ///     s.sql(),
    ///     concat!(
    ///         r#"INSERT INTO "alkstore"."consumed_events" ("consumer", "event_id", "consumed_at") "#,
    ///         r#"VALUES ($1, $2, $3) ON CONFLICT ("consumer", "event_id") DO NOTHING "#,
    ///         r#"RETURNING "consumer", "event_id", "consumed_at""#,
    ///     )
    /// );
    /// assert_eq!(s.param_names(), ["consumer", "event_id", "consumed_at"]);
    /// ```
    pub fn claim;
    /// A call of [`claim`]: returns the ledger entry when the event is new,
    /// `None` for a duplicate.
    pub struct Claim<'a> {
        /// The entry: consumer, event id, the current unix second.
        pub event: &'a ConsumedEvent,
    }
}

impl Build for Claim<'_> {
    fn build(&self, schema: &SchemaName, b: &mut Binder) -> impl PostgresBinder {
        let event = self.event;
        let values = [
            b.col(ConsumedEvents::Consumer, event.consumer.clone()),
            b.col(ConsumedEvents::EventId, event.event_id.clone()),
            b.col(ConsumedEvents::ConsumedAt, event.consumed_at),
        ];
        Query::insert()
            .into_table(table::<ConsumedEvents>(schema))
            .columns([
                ConsumedEvents::Consumer,
                ConsumedEvents::EventId,
                ConsumedEvents::ConsumedAt,
            ])
            .values_panic(values)
            .on_conflict(
                OnConflict::columns([ConsumedEvents::Consumer, ConsumedEvents::EventId])
                    .do_nothing()
                    .to_owned(),
            )
            .returning(Query::returning().columns([
                ConsumedEvents::Consumer,
                ConsumedEvents::EventId,
                ConsumedEvents::ConsumedAt,
            ]))
            .take()
    }
}
