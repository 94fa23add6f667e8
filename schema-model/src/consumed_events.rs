//! `consumed_events`: the dedup ledger a consumer's claim-then-effect
//! transaction inserts into (`ON CONFLICT DO NOTHING`) before performing the
//! effect, and the [`ConsumedEvent`] shape.

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{CheckDef, CheckRule, Column, IndexDef, SqlType, TableModel};

/// The `consumed_events` table: one row per (consumer, event) handled.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumedEvents {
    /// The table itself.
    Table,
    /// Consumer name.
    Consumer,
    /// The event's identity as the producer gave it.
    EventId,
    /// Unix seconds when the consumer claimed it.
    ConsumedAt,
}

impl TableModel for ConsumedEvents {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "Dedup ledger: an event a consumer has claimed; a second claim of the same pair is a duplicate.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Consumer => {
                Column::required(Text, "Name of the consumer that claimed the event.")
            }
            Self::EventId => {
                Column::required(Text, "Identity of the event as its producer gave it.")
            }
            Self::ConsumedAt => {
                Column::required(BigInt, "Unix seconds when the consumer claimed the event.")
            }
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Consumer, Self::EventId]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        Vec::new()
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "consumed_events_consumer_not_empty",
                rule: CheckRule::NotEmpty(Self::Consumer),
            },
            CheckDef {
                name: "consumed_events_event_id_not_empty",
                rule: CheckRule::NotEmpty(Self::EventId),
            },
        ]
    }
}

/// A ledger entry, as a consumer writes a [`ConsumedEvents`] row.
///
/// Not exhaustive: outside this crate, build it with
/// [`ConsumedEvent::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsumedEvent {
    /// Consumer name.
    pub consumer: String,
    /// The event's identity.
    pub event_id: String,
    /// Unix second of the claim.
    pub consumed_at: i64,
}

impl ConsumedEvent {
    /// `consumer` took `event_id` at `consumed_at` (a unix second).
    pub fn new(consumer: impl Into<String>, event_id: impl Into<String>, consumed_at: i64) -> Self {
        Self {
            consumer: consumer.into(),
            event_id: event_id.into(),
            consumed_at,
        }
    }
}
