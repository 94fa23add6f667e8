//! The listener's probe: does this connection keep a session of its own?
//!
//! It listens on a channel of its own; a second connection, opened the same
//! way, notifies that channel; the notification must arrive on the
//! listening connection. On a direct connection (or a pool in session mode)
//! it does, in a round trip. Behind a pooler in transaction or statement
//! mode the listening server connection went back to the pool when the
//! `LISTEN` ended, and nothing it receives reaches this client while it is
//! idle: if the second connection is handed that same server connection,
//! the notification arrives at the second connection (proof at once);
//! otherwise it arrives nowhere, and the probe gives up after its timeout.
//!
//! Why not a cheaper sign: `pg_backend_pid()` or `application_name` read in
//! two transactions agree whenever the pooler hands back the same server
//! connection, which an idle pool does; and pgbouncer answers `SHOW` only on
//! its admin console. What the listener needs is that a notification sent
//! elsewhere reaches it, so that is what the probe tries.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client, SimpleQueryMessage};

use schema_model::{SchemaName, WakeChannel};

use super::connect::Connect;
use super::error::{ListenError, PoolEvidence};
use super::listener::Event;
use super::notifier::notify_unnamed;
use crate::statements::wake;

/// Probes `client` (whose notifications arrive on `events`) and returns its
/// server process id.
pub(super) async fn check(
    connect: &impl Connect,
    schema: &SchemaName,
    client: &Client,
    events: &mut mpsc::UnboundedReceiver<Event>,
    timeout: Duration,
) -> Result<i32, ListenError> {
    let pid = backend_pid(client).await?;
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    // A queue name no engine uses: its channel is the hashed form.
    let channel = WakeChannel::new(schema, &format!("listener probe {pid} {nonce}"));
    client
        .batch_execute(&wake::listen(&channel))
        .await
        .map_err(|e| ListenError::query("LISTEN of its probe", e))?;

    let (other, mut other_messages) = connect.connect().await.map_err(ListenError::connect)?;
    let (seen_tx, mut seen_rx) = oneshot::channel();
    let watched = channel.as_str().to_owned();
    let other_driver = tokio::spawn(async move {
        let mut seen_tx = Some(seen_tx);
        while let Some(Ok(message)) = other_messages.next().await {
            if let AsyncMessage::Notification(n) = message
                && n.channel() == watched
                && let Some(tx) = seen_tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    let sent = notify_unnamed(&other, schema, &channel).await;
    let outcome = match sent {
        Err(e) => Err(ListenError::query("probe notification", e)),
        Ok(_) => wait(&channel, events, &mut seen_rx, timeout).await,
    };
    drop(other);
    other_driver.abort();
    outcome?;
    client
        .batch_execute(&wake::unlisten(&channel))
        .await
        .map_err(|e| ListenError::query("UNLISTEN of its probe", e))?;
    Ok(pid)
}

/// Waits for the probe's notification on the listening connection.
async fn wait(
    channel: &WakeChannel,
    events: &mut mpsc::UnboundedReceiver<Event>,
    seen_elsewhere: &mut oneshot::Receiver<()>,
    timeout: Duration,
) -> Result<(), ListenError> {
    let deadline = Instant::now() + timeout;
    // The other connection's driver may end without seeing it: then only
    // this connection and the clock are watched.
    let mut watching_other = true;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Notification(n)) if n.channel() == channel.as_str() => return Ok(()),
                Some(Event::Notification(_)) => {}
                Some(Event::Lost(detail)) => return Err(ListenError::Lost { detail }),
                None => return Err(ListenError::Lost { detail: "the connection closed".to_owned() }),
            },
            seen = &mut *seen_elsewhere, if watching_other => {
                if seen.is_ok() {
                    return Err(ListenError::Pooled { evidence: PoolEvidence::OtherConnection });
                }
                watching_other = false;
            }
            () = tokio::time::sleep_until(deadline) => {
                return Err(ListenError::Pooled { evidence: PoolEvidence::Timeout(timeout) });
            }
        }
    }
}

/// `pg_backend_pid()`, by the simple protocol (no statement to prepare:
/// a pooler in transaction mode may hand the execution to another server
/// connection than the preparation's).
async fn backend_pid(client: &Client) -> Result<i32, ListenError> {
    let messages = client
        .simple_query("SELECT pg_catalog.pg_backend_pid()")
        .await
        .map_err(|e| ListenError::query("pg_backend_pid()", e))?;
    Ok(messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).and_then(|pid| pid.parse().ok()),
            _ => None,
        })
        .unwrap_or(0))
}
