//! Shared test harness: a real PostgreSQL server (and later a real ClickHouse engine) for the integration tests.
