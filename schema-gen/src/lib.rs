//! SQL rendering, bootstrap and verification of alkstore's engine schema, and
//! the `schema-gen` binary.
//!
//! [`render::bootstrap_statements`] is the only place DDL is produced; the
//! binary prints it, the snapshots record it and bootstrap runs it.
//! [`statements`] is the only place the engine's hot-path SQL is produced
//! (with the row mapping of the value shapes): engine code runs it,
//! `schema-gen statements` prints it, the tests prove it at scale.
//!
//! Against a live server: [`bootstrap()`] creates what is missing or proves,
//! in one catalog read, that everything is there; [`verify()`] lists how a
//! live schema differs from the model; both fail with an [`Error`] whose
//! [`ErrorKind`] says what is wrong and what to do.

#![deny(missing_docs)]

pub mod bootstrap;
pub mod catalog;
pub mod cli;
pub mod clickhouse;
pub mod describe;
pub mod difference;
pub mod error;
pub mod render;
pub mod statements;
pub mod verify;

pub use bootstrap::{Outcome, bootstrap};
pub use error::{Error, ErrorKind};
pub use verify::{Difference, verify};
