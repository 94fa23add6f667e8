//! Transactions of a session on a deadpool-postgres client: they share the
//! pool's statement cache of the client's physical connection.

use deadpool_postgres::{Object, Transaction};

use crate::statements::{Session, StatementError};

impl Session<Object> {
    /// Starts a transaction on this session's pooled client: a session that
    /// runs its calls inside it, with the statements its physical
    /// connection has prepared. [`commit`](Session::commit) it; dropped, it
    /// rolls back.
    ///
    /// # Errors
    ///
    /// The server refused `BEGIN` (statement `begin`).
    pub async fn transaction(&mut self) -> Result<Session<Transaction<'_>>, StatementError> {
        let sessions = self.sessions().clone();
        let transaction = self
            .client_mut()
            .transaction()
            .await
            .map_err(|e| StatementError::from_driver("begin", e))?;
        Ok(sessions.session(transaction))
    }
}

impl Session<Transaction<'_>> {
    /// Commits the transaction.
    ///
    /// # Errors
    ///
    /// The server refused `COMMIT` (statement `commit`): nothing of the
    /// transaction was kept.
    pub async fn commit(self) -> Result<(), StatementError> {
        self.into_client()
            .commit()
            .await
            .map_err(|e| StatementError::from_driver("commit", e))
    }

    /// Rolls the transaction back.
    ///
    /// # Errors
    ///
    /// The connection failed (statement `rollback`).
    pub async fn rollback(self) -> Result<(), StatementError> {
        self.into_client()
            .rollback()
            .await
            .map_err(|e| StatementError::from_driver("rollback", e))
    }
}
