//! Shared test harness: a real PostgreSQL server and a real ClickHouse engine
//! for the integration tests, and the helpers the tests share.
//!
//! The PostgreSQL part lives in [`pg`] and is re-exported here, so tests write
//! `harness::connect().await`.

pub mod bench;
pub mod citus;
pub mod cli;
pub mod clickhouse;
pub mod dump;
pub mod engine;
pub mod explain;
pub mod fingerprint;
pub mod history;
mod hygiene;
pub mod lock_waits;
pub mod names;
pub mod paths;
pub mod pg;
pub mod pgbouncer;
pub mod shadow;
pub mod snapshots;
pub mod squawk;
pub mod tls;
pub mod tls_v1;
pub mod upgrade;
pub mod wire;

pub use pg::{
    ClusterSetup, DATABASE_URL_ENV, LocalCluster, Notices, PG_BIN_ENV, SKIP_ENV, connect,
    connect_as, connect_url, connect_with_notices, create_database, database_url, describe_error,
    exec, psql, psql_script, psql_with_url, rows, server_version_num, skip_db_tests, start_cluster,
    unique_name, unique_schema, unique_schema_name, url_for, url_for_role,
};
