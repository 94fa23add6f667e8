//! SQL rendering, bootstrap and verification of alkstore's engine schema, and
//! the `schema-gen` binary.
//!
//! [`render::bootstrap_statements`] is the only place SQL is produced; the
//! binary prints it, the snapshots record it and bootstrap runs it.

#![deny(missing_docs)]

pub mod cli;
pub mod describe;
pub mod render;
