//! Publishes a run's events in order: numbered, stored and flushed, then broadcast to
//! whoever follows the run. A client never holds a run back, and never sees an event that
//! a crash could lose.

use tokio::sync::broadcast;

use crate::domain::{ConversationId, MessageId, Tenant};
use crate::events::{EventEnvelope, RunEvent};
use crate::store::{Store, StoreError};

/// The run's side of its event stream.
pub struct Emitter {
    store: Store,
    tenant: Tenant,
    conversation_id: ConversationId,
    message_id: MessageId,
    seq: u64,
    events: broadcast::Sender<EventEnvelope>,
}

impl Emitter {
    /// An emitter for one message.
    pub fn new(
        store: Store,
        tenant: Tenant,
        conversation_id: ConversationId,
        message_id: MessageId,
        events: broadcast::Sender<EventEnvelope>,
    ) -> Self {
        Self {
            store,
            tenant,
            conversation_id,
            message_id,
            seq: 0,
            events,
        }
    }

    /// Stores the event, makes it durable (with every record written before it), then
    /// publishes it. Every event is flushed, answer deltas included: a client may resume
    /// from any event it saw, so each must survive a crash.
    pub async fn emit(&mut self, event: RunEvent) -> Result<(), StoreError> {
        self.seq += 1;
        let envelope = EventEnvelope {
            seq: self.seq,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        self.store.put_event(&self.tenant, &envelope)?;
        self.store.flush().await?;
        // No follower is not an error: the events are stored for Attach.
        let _ = self.events.send(envelope);
        Ok(())
    }
}
