//! Publishes a run's events in order: numbered and stored at once, then broadcast to
//! whoever follows the run as soon as a flush has made them durable. A client never holds a
//! run back, and never sees an event that a crash could lose.
//!
//! The run does not wait for flushes: a publisher task takes every event stored since its
//! last flush, flushes once, and broadcasts them all. A burst of events (a thought, its tool
//! calls, a run of answer deltas) costs one flush instead of one each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

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
    /// Stored events waiting for their flush; unbounded because the publisher drains it in
    /// batches and the run produces at most as fast as its model streams.
    stored: mpsc::UnboundedSender<EventEnvelope>,
    publisher: JoinHandle<()>,
}

impl Emitter {
    /// An emitter for one message; its publisher broadcasts on `events`.
    pub fn new(
        store: Store,
        tenant: Tenant,
        conversation_id: ConversationId,
        message_id: MessageId,
        events: broadcast::Sender<EventEnvelope>,
        durable: Arc<AtomicU64>,
    ) -> Self {
        let (stored, queue) = mpsc::unbounded_channel();
        let publisher = tokio::spawn(publish(store.clone(), queue, events, durable));
        Self {
            store,
            tenant,
            conversation_id,
            message_id,
            seq: 0,
            stored,
            publisher,
        }
    }

    /// Numbers and stores the event; it is broadcast once durable. Every event is made
    /// durable, answer deltas included: a client may resume from any event it saw.
    pub fn emit(&mut self, event: RunEvent) -> Result<(), StoreError> {
        self.seq += 1;
        let envelope = EventEnvelope {
            seq: self.seq,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        self.store.put_event(&self.tenant, &envelope)?;
        // The publisher only stops when this emitter is dropped or a flush failed; in both
        // cases there is no one left to tell.
        let _ = self.stored.send(envelope);
        Ok(())
    }

    /// Waits until every emitted event is durable and broadcast.
    pub async fn close(self) {
        drop(self.stored);
        let _ = self.publisher.await;
    }
}

/// Flushes and broadcasts stored events in batches until the emitter is closed.
async fn publish(
    store: Store,
    mut queue: mpsc::UnboundedReceiver<EventEnvelope>,
    events: broadcast::Sender<EventEnvelope>,
    durable: Arc<AtomicU64>,
) {
    let mut batch = Vec::new();
    while queue.recv_many(&mut batch, usize::MAX).await > 0 {
        if let Err(err) = store.flush().await {
            tracing::error!(error = %err, "cannot make events durable; they are not sent");
            return;
        }
        if let Some(last) = batch.last() {
            durable.fetch_max(last.seq, Ordering::SeqCst);
        }
        for envelope in batch.drain(..) {
            // No follower is not an error: the events are stored for Attach.
            let _ = events.send(envelope);
        }
    }
}
