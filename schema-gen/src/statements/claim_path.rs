//! [`Session::claim`]: the claim path as the engine runs it, promoting only
//! when a promote can find something ([`jobs::PromotePacer`]).

use super::jobs::{self, PROMOTE_PER_CLAIMED};
use super::{Connection, Output, Session, StatementError};

impl<C: Connection> Session<C> {
    /// The claim path: claims up to `claim.limit` jobs of `claim.queue`,
    /// promoting the queue's due jobs first when its [`jobs::PromotePacer`] (one
    /// per [`Sessions`](super::Sessions)) says a promote can find any: the
    /// first claim of a queue in each unix second of `claim.now`, and the
    /// one after a promote that filled its limit. Then it is
    /// [`run_pipelined`](Self::run_pipelined)`(`[`jobs::Promote`]`, claim)`,
    /// one round trip, with a promote limit of [`PROMOTE_PER_CLAIMED`] times
    /// the claim's; otherwise the claim alone, one statement and one commit
    /// (measured in BENCHMARKS.md, issue 24: faster on every claim and loop
    /// cell but one than promoting before every claim).
    ///
    /// ```no_run
    /// # async fn demo(session: &schema_gen::statements::Session) -> Result<(), schema_gen::statements::StatementError> {
    /// use schema_gen::statements::jobs;
    ///
    /// let claimed = session
    ///     .claim(&jobs::Claim { queue: "mail", worker_id: "worker-1", now: 1_700_000_000, limit: 10 })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The promote's error if it failed (the next claim then promotes
    /// again), else the claim's: see [`run`](Self::run).
    pub async fn claim(
        &self,
        claim: &jobs::Claim<'_>,
    ) -> Result<Output<jobs::Claim<'_>>, StatementError> {
        let pacer = self.sessions().pacer();
        if !pacer.promote_first(claim.queue, claim.now) {
            return self.run(claim).await;
        }
        let promote = jobs::Promote {
            queue: claim.queue,
            now: claim.now,
            limit: claim.limit.saturating_mul(PROMOTE_PER_CLAIMED),
        };
        // A failed promote records nothing, so the next claim promotes again.
        let (promoted, claimed) = self.run_pipelined(&promote, claim).await?;
        pacer.promoted(claim.queue, claim.now, promoted, promote.limit);
        Ok(claimed)
    }
}
