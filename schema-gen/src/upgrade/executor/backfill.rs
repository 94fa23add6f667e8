//! A backfill: the table's keys walked in windows of
//! [`UpgradeOptions::batch_size`](crate::upgrade::UpgradeOptions::batch_size),
//! one statement (one transaction) per window, each under the bounds of
//! [`Wait::Batches`] and tried again after a lock timeout.

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::Executor;
use crate::error::{Error, classify};
use crate::options::Bounds;
use crate::upgrade::StepBounds;
use crate::upgrade::bounds::backoff;
use crate::upgrade::progress::Progress;
use crate::versions::sql::BatchStatement;
use crate::versions::{Step, Wait};

impl Executor<'_> {
    /// Runs the batches of `step` under session-level bounds (reset
    /// afterwards); returns the rows they changed.
    pub(super) async fn backfill(
        &mut self,
        step: &Step,
        batch: &BatchStatement,
        doing: &str,
    ) -> Result<u64, Error> {
        let StepBounds { bounds, attempts } = self.options.bounds(Wait::Batches);
        let error_step = self.error_step(doing, Some(self.target(&step.table)), &bounds);
        if let Err(err) = self.client.batch_execute(&bounds.set_session()).await {
            return Err(classify(err, &error_step, &self.context));
        }
        let result = self.batches(step, batch, attempts).await;
        let _ = self.client.batch_execute(Bounds::RESET).await;
        match result {
            Ok(changed) => Ok(changed),
            Err(err) => Err(self.fail(err, &error_step).await),
        }
    }

    async fn batches(
        &mut self,
        step: &Step,
        batch: &BatchStatement,
        attempts: u32,
    ) -> Result<u64, tokio_postgres::Error> {
        let bounds = self.client.query_one(&batch.bounds_sql(), &[]).await?;
        let (Some(min), Some(max)) = (
            bounds.try_get::<_, Option<i64>>(0)?,
            bounds.try_get::<_, Option<i64>>(1)?,
        ) else {
            return Ok(0);
        };
        let mut changed = 0;
        let prepared = self.client.prepare(&batch.sql).await?;
        let size = i64::from(self.options.batch_size.max(1));
        let mut lo = min;
        let mut attempt = 1;
        while lo <= max {
            let hi = lo.saturating_add(size);
            let values = batch.values(lo, hi, unix_now());
            let params: Vec<&(dyn ToSql + Sync)> =
                values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            match self.client.execute(&prepared, &params).await {
                Ok(rows) => {
                    attempt = 1;
                    lo = hi;
                    changed += rows;
                    self.done.batches += 1;
                    self.done.rows += rows;
                    (self.progress)(&Progress::Batch {
                        step: step.clone(),
                        rows,
                        keys_done: (lo.min(max.saturating_add(1)) - min),
                        keys_total: max - min + 1,
                    });
                }
                Err(err)
                    if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) && attempt < attempts =>
                {
                    (self.progress)(&Progress::LockRetry {
                        step: step.clone(),
                        attempt,
                    });
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
        Ok(changed)
    }
}

/// The unix second a batch runs at (the backfill's `NotAfterNow`).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
