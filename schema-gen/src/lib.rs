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
//! live schema differs from the model; both wait for a lock at most
//! [`Options::lock_timeout`] ([`bootstrap_with`], [`verify_with`]) and fail
//! with an [`Error`] whose [`ErrorKind`] says what is wrong and what to do.

#![deny(missing_docs)]

pub mod bootstrap;
pub mod catalog;
#[cfg(feature = "cli")]
pub mod cli;
pub mod clickhouse;
#[cfg(feature = "connect")]
pub mod connect;
pub mod describe;
pub mod difference;
pub mod error;
pub mod options;
pub mod render;
pub mod statements;
pub mod upgrade;
pub mod verify;

pub use bootstrap::{Outcome, bootstrap, bootstrap_with};
pub use error::{Error, ErrorKind};
pub use options::Options;
pub use verify::{Difference, verify, verify_with};
