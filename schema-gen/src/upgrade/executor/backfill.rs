//! A backfill: the table's keys walked in windows of
//! [`UpgradeOptions::batch_size`](crate::upgrade::UpgradeOptions::batch_size),
//! one statement (one transaction) per window, each under the bounds of
//! [`Wait::Batches`] and tried again after a lock timeout.

use std::time::Instant;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::Executor;
use crate::error::{Error, Tries, classify};
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
        let result = self.batches(step, batch, &bounds, attempts).await;
        let _ = self.client.batch_execute(Bounds::RESET).await;
        match result {
            Ok(changed) => Ok(changed),
            Err((err, tries)) => {
                let failed = self.fail(err, &error_step).await;
                Err(match tries {
                    Some(tries) => failed.with_tries(tries),
                    None => failed,
                })
            }
        }
    }

    /// The batches, each tried again after a lock timeout; a failure comes
    /// with the attempts its batch made when it was a lock timeout.
    async fn batches(
        &mut self,
        step: &Step,
        batch: &BatchStatement,
        bounds: &Bounds,
        attempts: u32,
    ) -> Result<u64, (tokio_postgres::Error, Option<Tries>)> {
        let keys = self
            .client
            .query_one(&batch.bounds_sql(), &[])
            .await
            .map_err(|e| (e, None))?;
        let range = (|| {
            Ok::<_, tokio_postgres::Error>((
                keys.try_get::<_, Option<i64>>(0)?,
                keys.try_get::<_, Option<i64>>(1)?,
            ))
        })()
        .map_err(|e| (e, None))?;
        let (Some(min), Some(max)) = range else {
            return Ok(0);
        };
        let mut changed = 0;
        // Prepared with the first batch, inside its retry: parsing the
        // UPDATE takes its ROW EXCLUSIVE lock already, so a wait there is
        // bounded and retried as a batch's is.
        let mut prepared: Option<tokio_postgres::Statement> = None;
        let size = i64::from(self.options.batch_size.max(1));
        let mut lo = min;
        let mut attempt = 1;
        let mut started = Instant::now();
        while lo <= max {
            let hi = lo.saturating_add(size);
            let values = batch.values(lo, hi, unix_now());
            let params: Vec<&(dyn ToSql + Sync)> =
                values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            let ran = match &prepared {
                Some(statement) => self.client.execute(statement, &params).await,
                None => match self.client.prepare(&batch.sql).await {
                    Ok(statement) => {
                        let ran = self.client.execute(&statement, &params).await;
                        prepared = Some(statement);
                        ran
                    }
                    Err(err) => Err(err),
                },
            };
            match ran {
                Ok(rows) => {
                    attempt = 1;
                    started = Instant::now();
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
                Err(err) if err.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                    if attempt >= attempts {
                        let tries = Tries {
                            attempts: attempt,
                            over: started.elapsed(),
                        };
                        return Err((err, Some(tries)));
                    }
                    self.report_retry(step, attempt, attempts, bounds).await;
                    tokio::time::sleep(backoff(attempt)).await;
                    attempt += 1;
                }
                Err(err) => return Err((err, None)),
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
