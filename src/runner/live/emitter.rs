//! Publishes a run's events in order: numbered and stored at once, then broadcast to
//! whoever follows the run as soon as a flush has made them durable. A client never holds a
//! run back, and never sees an event that a crash could lose.
//!
//! The run does not wait for writes: a publisher task takes every event emitted since its
//! last batch, stores them as one record, flushes once, and broadcasts them all. A burst of
//! events (a thought, its tool calls, a run of answer deltas) costs one write and one flush.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::{ConversationId, MessageId, Tenant};
use crate::domain::{EventEnvelope, RunEvent};
use crate::store::{Store, StoreError, WriterGuard};

/// The run's side of its event stream.
pub struct Emitter {
    conversation_id: ConversationId,
    message_id: MessageId,
    seq: u64,
    /// Stored events waiting for their flush; unbounded because the publisher drains it in
    /// batches and the run produces at most as fast as its model streams.
    stored: mpsc::UnboundedSender<EventEnvelope>,
    publisher: JoinHandle<()>,
    /// Set once events could not be made durable: the run must end as a store failure.
    failed: Arc<AtomicBool>,
    /// Counts the run among the writers a flush waits for, until the emitter is closed.
    writer: WriterGuard,
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
        let failed = Arc::new(AtomicBool::new(false));
        let writer = store.writer();
        let publisher = Publisher {
            store,
            tenant,
            events,
            durable,
            cancel,
            failed: Arc::clone(&failed),
        };
        let publisher = tokio::spawn(publisher.run(queue));
        Self {
            conversation_id,
            message_id,
            seq: 0,
            stored,
            publisher,
            failed,
            writer,
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

    /// Tells the store whether the run is waiting on its caller (client tools, approval),
    /// when it emits nothing for a long while and flushes should not wait for it.
    pub fn set_waiting(&self, waiting: bool) {
        self.writer.set_idle(waiting);
    }

    /// Whether some events could not be made durable (the store cannot write).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits until every emitted event is durable and broadcast, or (the store failing)
    /// until the last attempts to make them so gave up.
    pub async fn close(self) {
        drop(self.stored);
        let _ = self.publisher.await;
    }
}

/// Waits before the last attempts to store a closed run's events, when the store failed.
const CLOSING_RETRIES: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(400),
    Duration::from_millis(1000),
];

/// Stores, flushes and broadcasts emitted events in batches until the emitter is closed.
struct Publisher {
    store: Store,
    tenant: Tenant,
    events: broadcast::Sender<EventEnvelope>,
    durable: Arc<AtomicU64>,
    cancel: CancellationToken,
    failed: Arc<AtomicBool>,
}

impl Publisher {
    /// Publishes batches as they come. Events that cannot be made durable stay pending and
    /// are tried again with the next batch; the first failure stops the run, since nothing
    /// it does could be announced. Once the run closed its emitter, its last events (its
    /// `error` among them) get a few more attempts, in case the disk has room again.
    async fn run(self, mut queue: mpsc::UnboundedReceiver<EventEnvelope>) {
        let mut pending = Vec::new();
        while queue.recv_many(&mut pending, usize::MAX).await > 0 {
            if let Err(err) = self.publish(&mut pending).await {
                if !self.failed.swap(true, Ordering::SeqCst) {
                    tracing::error!(error = %err, "cannot make events durable; the run stops");
                    self.cancel.cancel();
                }
            }
        }
        for wait in CLOSING_RETRIES {
            if pending.is_empty() {
                return;
            }
            tokio::time::sleep(wait).await;
            if self.publish(&mut pending).await.is_ok() {
                return;
            }
        }
        if !pending.is_empty() {
            tracing::error!(
                events = pending.len(),
                "the run's last events could not be made durable; followers see the stream fail"
            );
        }
    }

    /// Stores and flushes `pending` as one record, then broadcasts it; on failure the
    /// events stay pending.
    async fn publish(&self, pending: &mut Vec<EventEnvelope>) -> Result<(), StoreError> {
        self.store.put_events(&self.tenant, pending)?;
        self.store.flush().await?;
        if let Some(last) = pending.last() {
            self.durable.fetch_max(last.seq, Ordering::SeqCst);
        }
        for envelope in pending.drain(..) {
            // No follower is not an error: the events are stored for Attach.
            let _ = self.events.send(envelope);
        }
        Ok(())
    }
}
