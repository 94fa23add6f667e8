//! The two shapes of one webhook delivery attempt: the publisher's record
//! ([`AttemptEvent`], what arrives on the stream) and the table's row
//! ([`AttemptRow`], what the insert sends). They differ by one rename,
//! `attempted_at` to `ts`, which [`shape`](super::shape) performs.

use serde::{Deserialize, Serialize};

/// The publisher's record, as it arrives on `analytics.webhook.attempt.{env}`.
///
/// Its shape is not the table's: the instant is `attempted_at` (the column is
/// `ts`), and `status` / `error` are absent, not null, when unknown
/// (serializing an `AttemptEvent` omits them, as the publisher does). Use
/// [`shape`](super::shape) on the raw JSON to get the row; a record that cannot be shaped
/// is terminated, not retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEvent {
    /// The delivery (UUID).
    pub delivery_id: String,
    /// The endpoint called (UUID).
    pub endpoint_id: String,
    /// The tenant environment (UUID).
    pub environment_id: String,
    /// The event delivered (UUID).
    pub event_id: String,
    /// Attempt number within the delivery.
    pub attempt: u8,
    /// When the attempt was made: RFC 3339 with a UTC offset.
    pub attempted_at: String,
    /// Absent when nothing answered: a timeout has no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Present when there was no status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Milliseconds the endpoint took to answer.
    pub latency_ms: u32,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    pub outcome: String,
}

/// One row of `webhook_attempts`, keyed by column name: serialized, it is the
/// `JSONEachRow` line the insert sends, with every column present (a `None`
/// is an explicit `null`) and no other key. A test ties its fields to
/// [`WebhookAttempts`](super::WebhookAttempts)'s columns in both directions.
///
/// Build it with [`shape`](super::shape), which validates and canonicalises every value, so
/// a row reads back from the table equal to the one written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRow {
    /// The tenant environment: a lowercase UUID.
    pub environment_id: String,
    /// The record's `attempted_at`, canonical: `YYYY-MM-DDThh:mm:ss.mmmZ` in UTC.
    pub ts: String,
    /// The delivery: a lowercase UUID.
    pub delivery_id: String,
    /// The endpoint called: a lowercase UUID.
    pub endpoint_id: String,
    /// The event delivered: a lowercase UUID.
    pub event_id: String,
    /// Attempt number within the delivery.
    pub attempt: u8,
    /// HTTP status; `None` (NULL) when nothing answered, never 0.
    pub status: Option<u16>,
    /// Error text; `None` (NULL) when there was none, never `""`.
    pub error: Option<String>,
    /// Milliseconds the endpoint took to answer.
    pub latency_ms: u32,
    /// `delivered`, `rescheduled` or `dead_lettered`.
    pub outcome: String,
}

/// The publisher's field names [`shape`](super::shape) reads, in the publisher's order.
/// Anything else in a record is ignored: the ingester shapes, it does not
/// forward.
pub const EVENT_FIELDS: [&str; 10] = [
    "delivery_id",
    "endpoint_id",
    "environment_id",
    "event_id",
    "attempt",
    "attempted_at",
    "status",
    "error",
    "latency_ms",
    "outcome",
];
