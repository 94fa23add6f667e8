//! `stream_events` and `stream_offsets`: append-only event streams with
//! per-consumer checkpoints, and the [`StreamEvent`] / [`ConsumerOffset`] shapes.
//!
//! An event's `id` is its stream offset: assigned by the database, monotone,
//! immutable (`GENERATED ALWAYS`: nobody can supply or rewrite one), never
//! renumbered, with gaps where events were deleted.
//!
//! **Commit order.** An identity value is assigned at insert but becomes
//! visible at commit, so two concurrent appends can commit in the opposite
//! order of their ids, and a reader doing `id > last_offset` would skip the
//! lower id that commits second (reported against watermill, kamu-cli and
//! Eventuous). Every event therefore records its appending transaction in
//! `tx_id` (`pg_current_xact_id()`), and a gap-free reader:
//!
//! - only reads events whose transaction is older than every transaction
//!   still running: `tx_id < pg_snapshot_xmin(pg_current_snapshot())`. Any
//!   event that may still appear later belongs to a transaction at or above
//!   that horizon, so it sorts after everything read so far;
//! - reads in commit order, `ORDER BY tx_id, id`, served by
//!   `stream_events_commit_order_idx`, resuming after the `(tx_id, id)` of
//!   the event its checkpoint names (`stream_offsets.offset` is that event's
//!   id, so the checkpoint stays the offset of record).
//!
//! The price: the horizon is database-wide, so a long transaction anywhere in
//! the database delays delivery (never loses it) until it ends.
//!
//! The retention sweep must then delete only events below the slowest
//! consumer's checkpoint in that same `(tx_id, id)` order, never by id alone.
//! Readers that do not need gap-freedom (a tail, an offset lookup) use
//! `stream_events_stream_id_idx` in id order.

use sea_query::IdenStatic;
use serde::{Deserialize, Serialize};
use strum::EnumIter;

use crate::table::{
    CheckDef, CheckRule, Column, ColumnDefault, IndexDef, IndexKey, SqlType, TableModel,
};

/// The `stream_events` table: one row per event; its id is the stream offset.
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamEvents {
    /// The table itself.
    Table,
    /// The offset: database-assigned, monotone, immutable.
    Id,
    /// Stream name (streams are rows, not tables).
    Stream,
    /// Carried metadata, if the producer gave one.
    Key,
    /// The encoder's exact bytes.
    Payload,
    /// Unix seconds of the append (informational).
    CreatedAt,
    /// The appending transaction, for commit-order-safe reads.
    TxId,
}

impl TableModel for StreamEvents {
    const TABLE: Self = Self::Table;
    const DOC: &'static str = "One event of a stream; its id is the stream offset.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Id => Column::required(BigInt, "Stream offset: database-assigned, monotone, immutable, never renumbered; gaps on delete.")
                .with_default(ColumnDefault::IdentityAlways),
            Self::Stream => Column::required(Text, "Name of the stream the event belongs to."),
            Self::Key => Column::nullable(Text, "Carried metadata key given by the producer, if any."),
            Self::Payload => Column::required(Bytea, "The event payload, exactly the bytes the engine's encoder produced."),
            Self::CreatedAt => Column::required(BigInt, "Unix seconds when the event was appended (informational)."),
            Self::TxId => Column::required(Xid8, "Transaction that appended the event; gap-free readers go in (tx_id, id) order below the snapshot horizon.")
                .with_default(ColumnDefault::CurrentTransactionId),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Id]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        vec![
            IndexDef::new(
                "stream_events_stream_id_idx",
                [IndexKey::asc(Self::Stream), IndexKey::asc(Self::Id)],
                "Reads: a stream's events from an offset, offset ASC.",
            ),
            IndexDef::new(
                "stream_events_commit_order_idx",
                [
                    IndexKey::asc(Self::Stream),
                    IndexKey::asc(Self::TxId),
                    IndexKey::asc(Self::Id),
                ],
                "Gap-free reads: a stream's events in commit order, below the snapshot horizon.",
            ),
        ]
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![CheckDef {
            name: "stream_events_stream_not_empty",
            rule: CheckRule::NotEmpty(Self::Stream),
        }]
    }
}

/// The `stream_offsets` table: one checkpoint per (stream, consumer).
#[derive(IdenStatic, EnumIter, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamOffsets {
    /// The table itself.
    Table,
    /// Stream name.
    Stream,
    /// Consumer name.
    Consumer,
    /// The last offset the consumer processed.
    Offset,
}

impl TableModel for StreamOffsets {
    const TABLE: Self = Self::Table;
    const DOC: &'static str =
        "A consumer's checkpoint on a stream; the engine's upsert only moves it forward.";

    fn column(self) -> Option<Column<Self>> {
        use SqlType::*;
        Some(match self {
            Self::Table => return None,
            Self::Stream => Column::required(Text, "Name of the stream."),
            Self::Consumer => Column::required(Text, "Name of the consumer."),
            Self::Offset => Column::required(
                BigInt,
                "Id of the last event the consumer processed; only moves forward.",
            ),
        })
    }

    fn primary_key() -> Vec<Self> {
        vec![Self::Stream, Self::Consumer]
    }

    fn indexes() -> Vec<IndexDef<Self>> {
        Vec::new()
    }

    fn checks() -> Vec<CheckDef<Self>> {
        vec![
            CheckDef {
                name: "stream_offsets_stream_not_empty",
                rule: CheckRule::NotEmpty(Self::Stream),
            },
            CheckDef {
                name: "stream_offsets_consumer_not_empty",
                rule: CheckRule::NotEmpty(Self::Consumer),
            },
            CheckDef {
                name: "stream_offsets_offset_not_negative",
                rule: CheckRule::AtLeast(Self::Offset, 0),
            },
        ]
    }
}

/// A stream event, as the engine reads a [`StreamEvents`] row (`tx_id` is
/// bookkeeping the database fills, so it is not a field).
///
/// Not exhaustive (a new column is not a breaking change for engines):
/// outside this crate, start from [`StreamEvent::new`] (or
/// [`StreamEvent::default`]) and set the fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StreamEvent {
    /// The offset.
    pub id: i64,
    /// Stream name.
    pub stream: String,
    /// Carried metadata key.
    pub key: Option<String>,
    /// The encoder's exact bytes.
    pub payload: Vec<u8>,
    /// Unix second of the append.
    pub created_at: i64,
}

/// A consumer's checkpoint, as stored in [`StreamOffsets`].
///
/// Not exhaustive: outside this crate, build it with
/// [`ConsumerOffset::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsumerOffset {
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
    /// The last offset processed.
    pub offset: i64,
}

impl StreamEvent {
    /// An event for `stream` carrying `payload`, with no key, created at
    /// the epoch (set `created_at`), its `id` to be assigned by the append.
    pub fn new(stream: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            stream: stream.into(),
            payload: payload.into(),
            ..Self::default()
        }
    }
}

impl ConsumerOffset {
    /// `consumer`'s checkpoint on `stream` at `offset`.
    pub fn new(stream: impl Into<String>, consumer: impl Into<String>, offset: i64) -> Self {
        Self {
            stream: stream.into(),
            consumer: consumer.into(),
            offset,
        }
    }
}
