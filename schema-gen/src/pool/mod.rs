//! Sessions on a connection pool, with no adapter in the engine: each
//! statement is prepared once per physical connection (never again on a
//! later checkout, never twice at once), or, behind a pooler in transaction
//! pooling, never prepared at all ([`StatementMode::Unnamed`]).
//!
//! Both pools are optional features of this crate, off by default.
//!
//! # deadpool-postgres (feature `deadpool`)
//!
//! A checked-out client (`deadpool_postgres::Object`) is a
//! [`Connection`](crate::statements::Connection): make a [`Session`] on it
//! for the checkout. The statements are prepared through the client's
//! `prepare_typed_cached`, the pool's statement cache of that physical
//! connection, which lives as long as the connection; a transaction
//! ([`Session::transaction`](crate::statements::Session::transaction))
//! shares it.
//!
//! ```no_run
//! # #[cfg(feature = "deadpool")]
//! # async fn demo(config: schema_gen::tokio_postgres::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use deadpool_postgres::{Manager, Pool};
//! use schema_gen::SchemaName;
//! use schema_gen::statements::{Sessions, jobs};
//! use schema_gen::tokio_postgres::NoTls;
//!
//! let pool = Pool::builder(Manager::new(config, NoTls)).max_size(8).build()?;
//! let sessions = Sessions::new(SchemaName::default()); // once, at start-up
//!
//! let session = sessions.session(pool.get().await?); // per checkout
//! let (_promoted, claimed) = session
//!     .run_pipelined(
//!         &jobs::Promote { queue: "mail", now: 1_700_000_000, limit: 100 },
//!         &jobs::Claim { queue: "mail", worker_id: "worker-1", now: 1_700_000_000, limit: 10 },
//!     )
//!     .await?;
//! drop(session); // the client goes back to the pool, its statements with it
//! # let _ = claimed; Ok(()) }
//! ```
//!
//! Keep deadpool's default `RecyclingMethod::Fast` or `Verified`; `Clean`
//! also works (it closes no prepared statement). Never run `DISCARD ALL` or
//! `DEALLOCATE ALL` on a pooled client yourself: the cache would name
//! statements that no longer exist.
//!
//! # bb8 (feature `bb8`)
//!
//! bb8-postgres keeps no statements, so the pool's connections are
//! sessions: `SessionManager` wraps bb8-postgres's
//! `PostgresConnectionManager` (which connects and checks the connections)
//! and each connection it makes is a [`Session`] that owns its client and
//! the statements prepared on it. A checkout derefs to that session.
//!
//! ```no_run
//! # #[cfg(feature = "bb8")]
//! # async fn demo(config: schema_gen::tokio_postgres::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use bb8_postgres::PostgresConnectionManager;
//! use schema_gen::SchemaName;
//! use schema_gen::pool::SessionManager;
//! use schema_gen::statements::{Sessions, jobs};
//! use schema_gen::tokio_postgres::NoTls;
//!
//! let sessions = Sessions::new(SchemaName::default());
//! let manager = SessionManager::new(PostgresConnectionManager::new(config, NoTls), sessions);
//! let pool = bb8::Pool::builder().max_size(8).build(manager).await?;
//!
//! let session = pool.get().await?; // a session, with its connection's statements
//! let acked: u64 = session.run(&jobs::Ack { id: 1, worker_id: "worker-1", attempts: 1 }).await?;
//! # Ok(()) }
//! ```
//!
//! # Behind pgbouncer
//!
//! A pool in front of pgbouncer in transaction pooling (each pooled client
//! is a pgbouncer client) must use [`StatementMode::Unnamed`]: make its
//! [`Sessions`] `with_mode(StatementMode::Unnamed)`, or from what
//! [`crate::pooler::probe`] finds. See [`Session`]'s docs, "Behind a
//! pooler", for what works there.
//!
//! [`Session`]: crate::statements::Session
//! [`Sessions`]: crate::statements::Sessions
//! [`StatementMode::Unnamed`]: crate::statements::StatementMode::Unnamed

#[cfg(feature = "bb8")]
mod bb8;
#[cfg(feature = "deadpool")]
mod deadpool;

#[cfg(feature = "bb8")]
pub use bb8::SessionManager;
