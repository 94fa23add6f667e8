//! The session-level advisory lock that lets one upgrade of a schema run at
//! a time ([`AdvisoryLock::Upgrade`]).

use tokio_postgres::{Client, SimpleQueryMessage};

use schema_model::SchemaName;

use crate::catalog;
use crate::error::{Context, Error, ErrorKind, LockTarget, Step, classify};
use crate::render::AdvisoryLock;

/// The upgrade lock, held by this session until [`UpgradeLock::release`]
/// (or until the connection ends).
pub(in crate::upgrade) struct UpgradeLock {
    key: i64,
    schema: SchemaName,
    /// The backend that took it.
    pid: i32,
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
            .query_one(
                "SELECT pg_catalog.pg_try_advisory_lock($1), pg_catalog.pg_backend_pid()",
                &[&key],
            )
            .await
        {
            Ok(row) => row,
            Err(err) => return Err(fail(err).await),
        };
        let (taken, pid): (bool, i32) = match (row.try_get(0), row.try_get(1)) {
            (Ok(taken), Ok(pid)) => (taken, pid),
            (Err(err), _) | (_, Err(err)) => return Err(fail(err).await),
        };
        if taken {
            return Ok(Self {
                key,
                schema: schema.clone(),
                pid,
            });
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

    /// Checks that the session the connection runs on now is the one that
    /// took the lock, and still holds it: behind a pooler in transaction
    /// mode (one the probe missed) the next transaction may run on another
    /// server connection, which neither holds the lock nor keeps session
    /// settings. One simple query (no statement to prepare).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::SessionChanged`]; the query's own failure.
    pub(in crate::upgrade) async fn verify(&self, client: &Client) -> Result<(), Error> {
        let bits = u64::from_ne_bytes(self.key.to_ne_bytes());
        let question = format!(
            "SELECT pg_catalog.pg_backend_pid()::text, EXISTS (SELECT FROM pg_catalog.pg_locks l \
             WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.granted \
             AND l.classid = {} AND l.objid = {} AND l.objsubid = 1)::text",
            bits >> 32,
            bits & 0xffff_ffff
        );
        let step = Step {
            doing: format!(
                "checking that this session still holds the upgrade lock of schema {}",
                self.schema
            ),
            ..Step::default()
        };
        let messages = match client.simple_query(&question).await {
            Ok(messages) => messages,
            Err(err) => return Err(classify(err, &step, &Context::unnamed(&self.schema))),
        };
        let row = messages.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some((row.get(0), row.get(1))),
            _ => None,
        });
        let Some((Some(now), Some(held))) = row else {
            return Err(ErrorKind::UndecodableReply {
                what: step.doing,
                detail: "no row".to_owned(),
            }
            .into());
        };
        let now: i32 = now.parse().unwrap_or_default();
        let held = held == "true";
        if now == self.pid && held {
            return Ok(());
        }
        Err(ErrorKind::SessionChanged {
            schema: self.schema.clone(),
            took: self.pid,
            now,
            held,
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
