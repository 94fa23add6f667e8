//! SQL rendering, bootstrap and verification of alkstore's engine schema, and
//! the `schema-gen` binary.
//!
//! [`render::bootstrap_statements`] is the only place DDL is produced; the
//! binary prints it, the snapshots record it and bootstrap runs it.
//! [`statements`] is the only place the engine's hot-path SQL is produced
//! (with the row mapping of the value shapes): engine code runs it,
//! `schema-gen statements` prints it, the tests prove it at scale.
//!
//! Where a database stands among the schema versions is decided in one
//! place, without I/O ([`versions::verdict()`]); [`check`] reads a database
//! in one round trip and asks it, and so do [`bootstrap()`] and
//! [`upgrade`] (the upgrade executor and its dry run walk one
//! [`versions::Itinerary`]). The README's "Layout" shows the floors.
//!
//! Against a live server: [`bootstrap()`] creates what is missing or proves,
//! in one catalog read, that everything is there; [`verify()`] lists how a
//! live schema differs from the model; both wait for a lock at most
//! [`Options::lock_timeout`] ([`bootstrap_with`], [`verify_with`]) and fail
//! with an [`Error`] whose [`ErrorKind`] says what is wrong and what to do.
//!
//! # Engine code: this crate is the one dependency
//!
//! An engine depends on `schema-gen` (with `default-features = false` to
//! leave out the CLI) and its async runtime, nothing else: the driver is
//! re-exported as `schema_gen::tokio_postgres` (the very version the
//! statements bind through, so its types always match), the model as
//! `schema_gen::schema_model` (names, tables, the typed identifiers), the
//! schema name as [`SchemaName`], and the value shapes, with their fields,
//! beside the statements ([`statements::Job`], ...). [`statements::Session`] prepares the
//! statements once per physical connection (or sends them unnamed behind a
//! transaction pooler, [`pooler`]) and runs them typed, on a connection of
//! its own or a pool's ([`pool`]); its docs hold a whole engine program
//! (`examples/engine.rs`).

#![deny(missing_docs)]

/// The PostgreSQL driver the statements are bound through (tokio-postgres,
/// re-exported): connect with it, and hand its `Client` to [`bootstrap()`]
/// and [`statements::Session`].
pub use tokio_postgres;

/// The typed schema model (`schema-model`, re-exported): [`SchemaName`],
/// the tables and their typed identifiers, the value shapes.
pub use schema_model;

/// The name of the engine-owned schema (from `schema-model`).
#[doc(inline)]
pub use schema_model::SchemaName;

pub mod bootstrap;
pub mod catalog;
pub mod check;
pub mod citus;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clickhouse;
#[cfg(feature = "connect")]
pub mod connect;
pub mod describe;
pub mod difference;
pub mod error;
pub mod options;
pub mod pool;
pub mod pooler;
pub mod render;
pub mod statements;
pub mod upgrade;
pub mod verify;
pub mod versions;
pub mod wake;

pub use bootstrap::{Outcome, bootstrap, bootstrap_with};
pub use check::{verify, verify_with};
pub use error::{Error, ErrorKind};
pub use options::Options;
pub use verify::Difference;
