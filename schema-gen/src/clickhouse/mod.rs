//! The ClickHouse dialect: DDL, the insert statement and the `FINAL` count
//! query of the analytics family, rendered from the model's
//! `ClickHouseTable` enums (`schema_model::analytics`).
//!
//! sea-query has no ClickHouse backend (its MySQL builder quotes and types
//! differently), so this is a small renderer of its own over the same kind
//! of `Iden` enums: column lists come from `EnumIter`, every column,
//! partition, sorting-key and TTL reference goes through the enum, and the
//! only user input, the [`DatabaseName`], is
//! validated before it gets here and backtick-quoted anyway.
//!
//! `schema-gen sql --dialect clickhouse` prints [`script`]; the snapshots
//! record it; the integration tests run its [`statements`] on a real engine.
//!
//! | module | holds |
//! |---|---|
//! | [`quote`] | identifier and string quoting, and identifiers as the engine prints them |
//! | `expression` (private) | sorting keys, partition keys, TTLs and checks, for both readers below |
//! | [`render`] | the DDL, the insert and the `FINAL` count |
//! | [`describe`](mod@describe) | the family as plain data, spelled as the engine reports it |
//!
//! ```
//! use schema_gen::clickhouse::{count_final_query, insert_statement};
//! use schema_model::{DatabaseName, WebhookAttempts};
//!
//! let db = DatabaseName::default();
//! assert_eq!(
//!     insert_statement::<WebhookAttempts>(&db),
//!     "INSERT INTO `relay_analytics`.`webhook_attempts` \
//!      SETTINGS input_format_skip_unknown_fields=0, date_time_input_format='best_effort' \
//!      FORMAT JSONEachRow"
//! );
//! assert_eq!(
//!     count_final_query::<WebhookAttempts>(&db),
//!     "SELECT count() FROM `relay_analytics`.`webhook_attempts` FINAL"
//! );
//! ```

pub mod describe;
mod expression;
pub mod quote;
pub mod render;

pub use describe::{
    AnalyticsDescription, ClickHouseColumnDescription, ClickHouseTableDescription, describe,
};
pub use quote::{engine_ident, quote_ident, quote_string};
pub use render::{
    ClickHouseStatement, ClickHouseStatementKind, DATABASE_DOC, INSERT_SETTINGS, count_final_query,
    create_database, create_table, insert_statement, qualified, script, statements,
};

/// The analytics database's name (from `schema-model`), which the rendering
/// functions take.
#[doc(inline)]
pub use schema_model::DatabaseName;
