//! `consumed_events`: the dedup ledger's claim, and the [`ConsumedEvent`]
//! row mapping.

use sea_query::{OnConflict, Query};
use sea_query_postgres::PostgresValues;

use schema_model::{ConsumedEvent, ConsumedEvents, SchemaName};

use super::row::get;
use super::{Call, FromRow, Optional, RowError, Statement, build, table, values};

impl FromRow for ConsumedEvent {
    fn from_row(row: &tokio_postgres::Row) -> Result<Self, RowError> {
        Ok(ConsumedEvent {
            consumer: get(row, ConsumedEvents::Consumer)?,
            event_id: get(row, ConsumedEvents::EventId)?,
            consumed_at: get(row, ConsumedEvents::ConsumedAt)?,
        })
    }
}

/// Dedup claim: records that `event.consumer` has taken `event.event_id`,
/// and says whether the event was new: it returns the entry (one row) the
/// first time and nothing for a duplicate (`ON CONFLICT DO NOTHING`), which
/// leaves the first entry as it was. Run it in the transaction that
/// performs the effect, before the effect: a rollback forgets the claim too.
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
pub fn claim(schema: &SchemaName, event: &ConsumedEvent) -> Statement {
    build("dedup_claim", |b| {
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
            .to_owned()
    })
}

/// A call of [`claim`]: returns the ledger entry when the event is new,
/// `None` for a duplicate.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The entry: consumer, event id, the current unix second.
    pub event: &'a ConsumedEvent,
}

impl Call for Claim<'_> {
    const NAME: &'static str = "dedup_claim";
    type Returns = Optional<ConsumedEvent>;

    fn statement(&self, schema: &SchemaName) -> Statement {
        claim(schema, self.event)
    }

    fn values(&self) -> PostgresValues {
        values([
            self.event.consumer.clone().into(),
            self.event.event_id.clone().into(),
            self.event.consumed_at.into(),
        ])
    }
}
