//! Sends a run's events in order: numbered, persisted, flushed when they announce a record,
//! and only then handed to the client.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::domain::{ConversationId, MessageId, Tenant};
use crate::events::{EventEnvelope, RunEvent};
use crate::store::{Store, StoreError};

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The run was cancelled while waiting for the client to take the event.
    #[error("cancelled")]
    Cancelled,
    /// The event could not be persisted.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long the last event waits for a slow client before it is only kept in the store.
const FINAL_EVENT_GRACE: Duration = Duration::from_secs(5);

/// The run's side of its event stream.
pub struct Emitter {
    store: Store,
    tenant: Tenant,
    conversation_id: ConversationId,
    message_id: MessageId,
    seq: u64,
    tx: mpsc::Sender<EventEnvelope>,
    cancel: CancellationToken,
}

impl Emitter {
    /// An emitter for one message; `cancel` fires when the client goes away.
    pub fn new(
        store: Store,
        tenant: Tenant,
        conversation_id: ConversationId,
        message_id: MessageId,
        tx: mpsc::Sender<EventEnvelope>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            store,
            tenant,
            conversation_id,
            message_id,
            seq: 0,
            tx,
            cancel,
        }
    }

    async fn record(&mut self, event: RunEvent) -> Result<EventEnvelope, StoreError> {
        self.seq += 1;
        let envelope = EventEnvelope {
            seq: self.seq,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        self.store.put_event(&self.tenant, &envelope)?;
        if envelope.event.announces_record() {
            self.store.flush().await?;
        }
        Ok(envelope)
    }

    /// Persists the event, then waits for room in the client's buffer (backpressure).
    /// A client that has gone away cancels the run.
    ///
    /// # Cancel safety
    /// Returns `Cancelled` once the run's token fires; the event is already persisted.
    pub async fn emit(&mut self, event: RunEvent) -> Result<(), EmitError> {
        let envelope = self.record(event).await?;
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(EmitError::Cancelled),
            sent = self.tx.send(envelope) => match sent {
                Ok(()) => Ok(()),
                Err(_) => {
                    self.cancel.cancel();
                    Err(EmitError::Cancelled)
                }
            },
        }
    }

    /// Persists and flushes the run's last event and delivers it if the client still
    /// listens. Runs even after cancellation, because the outcome must be recorded.
    pub async fn emit_last(&mut self, event: RunEvent) -> Result<(), StoreError> {
        let envelope = self.record(event).await?;
        self.store.flush().await?;
        let _ = tokio::time::timeout(FINAL_EVENT_GRACE, self.tx.send(envelope)).await;
        Ok(())
    }
}
