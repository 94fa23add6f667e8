//! The session-level advisory lock that lets one upgrade of a schema run at
//! a time ([`AdvisoryLock::Upgrade`]).

use tokio_postgres::Client;

use schema_model::SchemaName;

use crate::catalog;
use crate::error::{Context, Error, ErrorKind, LockTarget, Step, classify};
use crate::render::AdvisoryLock;

/// The upgrade lock, held by this session until [`UpgradeLock::release`]
/// (or until the connection ends).
pub(in crate::upgrade) struct UpgradeLock {
    key: i64,
}

impl UpgradeLock {
    /// Takes the lock at once, or refuses naming the session that holds it.
    pub(in crate::upgrade) async fn take(
        client: &Client,
        schema: &SchemaName,
    ) -> Result<Self, Error> {
        let key = AdvisoryLock::Upgrade.key(schema);
        let step = Step {
            doing: format!("taking the upgrade lock of schema {schema}"),
            ..Step::default()
        };
        let fail = async |err| {
            catalog::explain(client, classify(err, &step, &Context::unnamed(schema))).await
        };
        let row = match client
            .query_one("SELECT pg_catalog.pg_try_advisory_lock($1)", &[&key])
            .await
        {
            Ok(row) => row,
            Err(err) => return Err(fail(err).await),
        };
        let taken: bool = match row.try_get(0) {
            Ok(taken) => taken,
            Err(err) => return Err(fail(err).await),
        };
        if taken {
            return Ok(Self { key });
        }
        let holders = catalog::lock_holders(
            client,
            &LockTarget::Advisory {
                schema: schema.clone(),
                key,
            },
        )
        .await
        .unwrap_or_default();
        Err(ErrorKind::UpgradeLocked {
            schema: schema.clone(),
            key,
            holders,
        }
        .into())
    }

    /// Releases the lock; a lost connection releases it too.
    pub(in crate::upgrade) async fn release(self, client: &Client) {
        let _ = client
            .query_one("SELECT pg_catalog.pg_advisory_unlock($1)", &[&self.key])
            .await;
    }
}
