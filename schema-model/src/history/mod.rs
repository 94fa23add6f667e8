//! Every shipped schema version of the engine family, and what moves a
//! database from one to the next.
//!
//! Version 1 is what the `e63468a` release created, version 2 what `b8b70fe`
//! created (neither recorded its version in the database), version 3 is this
//! model.

/// The version of the schema this model renders (what a fresh bootstrap
/// creates and what an upgrade moves a database to).
///
/// ```
/// assert_eq!(schema_model::history::MODEL_VERSION, 3);
/// ```
pub const MODEL_VERSION: u32 = 3;
