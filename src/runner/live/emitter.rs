//! Publishes a run's events in order: numbered and stored at once, then broadcast to
//! whoever follows the run as soon as a flush has made them durable. A client never holds a
//! run back, and never sees an event that a crash could lose.
//!
//! The run does not wait for writes: a publisher task takes every event emitted since its
//! last batch, stores them as one record, flushes once, and broadcasts them all. A burst of
//! events (a thought, its tool calls, a run of answer deltas) costs one write and one flush.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::{ConversationId, MessageId, Tenant};
use crate::domain::{EventEnvelope, RunEvent};
use crate::store::{Store, StoreError};

/// The run's side of its event stream.
pub struct Emitter {
    conversation_id: ConversationId,
    message_id: MessageId,
    seq: u64,
    /// Stored events waiting for their flush; unbounded because the publisher drains it in
    /// batches and the run produces at most as fast as its model streams.
    stored: mpsc::UnboundedSender<EventEnvelope>,
    publisher: JoinHandle<()>,
}

impl Emitter {
    /// An emitter for one message; its publisher stores events in `store` and broadcasts
    /// them on `events`. A storage failure cancels the run through `cancel`, since nothing
    /// it does could be announced any more.
    pub fn new(
        store: Store,
        tenant: Tenant,
        conversation_id: ConversationId,
        message_id: MessageId,
        events: broadcast::Sender<EventEnvelope>,
        durable: Arc<AtomicU64>,
        cancel: CancellationToken,
    ) -> Self {
        let (stored, queue) = mpsc::unbounded_channel();
        let publisher = Publisher {
            store,
            tenant,
            events,
            durable,
            cancel,
        };
        let publisher = tokio::spawn(publisher.run(queue));
        Self {
            conversation_id,
            message_id,
            seq: 0,
            stored,
            publisher,
        }
    }

    /// Numbers the event and hands it to the publisher, which stores it with the rest of its
    /// burst and broadcasts it once durable. Every event is made durable, answer deltas
    /// included: a client may resume from any event it saw.
    pub fn emit(&mut self, event: RunEvent) {
        self.seq += 1;
        let envelope = EventEnvelope {
            seq: self.seq,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        // The publisher only stops when this emitter is dropped or storage failed; in both
        // cases there is no one left to tell.
        let _ = self.stored.send(envelope);
    }

    /// Waits until every emitted event is durable and broadcast.
    pub async fn close(self) {
        drop(self.stored);
        let _ = self.publisher.await;
    }
}

/// Stores, flushes and broadcasts emitted events in batches until the emitter is closed.
struct Publisher {
    store: Store,
    tenant: Tenant,
    events: broadcast::Sender<EventEnvelope>,
    durable: Arc<AtomicU64>,
    cancel: CancellationToken,
}

impl Publisher {
    async fn run(self, mut queue: mpsc::UnboundedReceiver<EventEnvelope>) {
        let mut batch = Vec::new();
        while queue.recv_many(&mut batch, usize::MAX).await > 0 {
            if let Err(err) = self.persist(&batch).await {
                tracing::error!(error = %err, "cannot make events durable; the run stops");
                self.cancel.cancel();
                return;
            }
            if let Some(last) = batch.last() {
                self.durable.fetch_max(last.seq, Ordering::SeqCst);
            }
            for envelope in batch.drain(..) {
                // No follower is not an error: the events are stored for Attach.
                let _ = self.events.send(envelope);
            }
        }
    }

    async fn persist(&self, batch: &[EventEnvelope]) -> Result<(), StoreError> {
        self.store.put_events(&self.tenant, batch)?;
        self.store.flush().await
    }
}
