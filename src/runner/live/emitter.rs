//! Publishes a run's events in order: numbered and stored at once, then broadcast to
//! whoever follows the run as soon as a flush has made them durable. A client never holds a
//! run back, and never sees an event that a crash could lose.
//!
//! The run does not wait for writes. What it emits collects in its [`Outbox`] until its task
//! is about to wait (on the model, a tool, its caller); then the outbox hands the lot to a
//! publisher task, which stores them as one record, flushes once, and broadcasts them all.
//! A burst of events (a thought and its tool calls, a model's answer arriving at once, the
//! run's last deltas and its end) costs one write and one flush, and no event waits longer
//! than the run's next wait to be handed on.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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
    /// Emitted events not yet handed to the publisher.
    outbox: Outbox,
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
        let (batches, queue) = mpsc::unbounded_channel();
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
            outbox: Outbox::new(batches),
            publisher,
            failed,
            writer,
        }
    }

    /// Numbers the event and puts it in the outbox, which hands it to the publisher with the
    /// rest of its burst; the publisher broadcasts it once durable. Every event is made
    /// durable, answer deltas included: a client may resume from any event it saw.
    pub fn emit(&mut self, event: RunEvent) {
        self.seq += 1;
        let envelope = EventEnvelope {
            seq: self.seq,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        self.outbox.put(envelope);
    }

    /// The run's outbox, for the future that drives the run to empty whenever it waits.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
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
        self.outbox.close();
        let _ = self.publisher.await;
    }
}

/// Events in the outbox past which it hands them on without waiting for the run to wait:
/// a run that streams without ever waiting still has its events published.
const OUTBOX_EVENTS: usize = 64;

/// Events a run emitted since its task last waited. The run puts them in; the future that
/// drives the run hands them to the publisher each time the run returns from a poll, which
/// is when it is about to wait or has ended.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Mutex<Outgoing>>,
}

struct Outgoing {
    events: Vec<EventEnvelope>,
    /// `None` once the emitter closed. Unbounded because the publisher drains it in
    /// batches and a run produces at most as fast as its model streams.
    publisher: Option<mpsc::UnboundedSender<Vec<EventEnvelope>>>,
}

impl Outbox {
    fn new(publisher: mpsc::UnboundedSender<Vec<EventEnvelope>>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Outgoing {
                events: Vec::new(),
                publisher: Some(publisher),
            })),
        }
    }

    /// Drives `run`, handing what it emitted to the publisher whenever it returns from a
    /// poll: a burst the run handles without waiting goes out as one batch, and nothing is
    /// held while the run waits.
    pub async fn drive<F: Future>(self, run: F) -> F::Output {
        let mut run = pin!(run);
        std::future::poll_fn(|cx| {
            let poll = run.as_mut().poll(cx);
            self.hand_on();
            poll
        })
        .await
    }

    fn put(&self, event: EventEnvelope) {
        let mut outgoing = self.lock();
        outgoing.events.push(event);
        if outgoing.events.len() >= OUTBOX_EVENTS {
            outgoing.send();
        }
    }

    fn hand_on(&self) {
        self.lock().send();
    }

    /// Hands on what is left and closes the publisher's queue, so it stops once it has
    /// published the rest.
    fn close(&self) {
        let mut outgoing = self.lock();
        outgoing.send();
        outgoing.publisher = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Outgoing> {
        // Nothing panics while holding the lock; a poisoned one still holds whole events.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A run dropped before closing its emitter (its task aborted) still hands on what it
/// emitted, as it would have on its next wait.
impl Drop for Outgoing {
    fn drop(&mut self) {
        self.send();
    }
}

impl Outgoing {
    fn send(&mut self) {
        if self.events.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.events);
        if let Some(publisher) = &self.publisher {
            // The publisher only stops once the emitter closed or storage failed; in both
            // cases there is no one left to tell.
            let _ = publisher.send(batch);
        }
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
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Vec<EventEnvelope>>) {
        let mut pending = Vec::new();
        let mut batches = Vec::new();
        while queue.recv_many(&mut batches, usize::MAX).await > 0 {
            pending.extend(batches.drain(..).flatten());
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::sync::oneshot;

    use super::*;
    use crate::domain::{ConversationId, MessageId, Tenant};

    /// An emitter over a temporary store, with its broadcast and a count of the store's
    /// flushes.
    fn emitter() -> (
        Emitter,
        broadcast::Receiver<EventEnvelope>,
        Arc<AtomicUsize>,
    ) {
        let store = Store::temporary().unwrap();
        let flushes = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&flushes);
        store.observe_flushes(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let (events, received) = broadcast::channel(1024);
        let emitter = Emitter::new(
            store,
            Tenant::default_tenant(),
            ConversationId::new(),
            MessageId::new(),
            events,
            Arc::default(),
            CancellationToken::new(),
        );
        (emitter, received, flushes)
    }

    fn delta(text: &str) -> RunEvent {
        RunEvent::AnswerDelta {
            text: text.to_owned(),
        }
    }

    async fn next(received: &mut broadcast::Receiver<EventEnvelope>) -> EventEnvelope {
        tokio::time::timeout(Duration::from_secs(10), received.recv())
            .await
            .expect("an event within 10 s")
            .unwrap()
    }

    /// What a run emits before it waits reaches followers while it waits, and a burst
    /// emitted without waiting costs one flush.
    #[tokio::test]
    async fn a_burst_is_published_once_the_run_waits() {
        let (mut emitter, mut received, flushes) = emitter();
        let (resume, waiting) = oneshot::channel::<()>();
        let outbox = emitter.outbox();
        let run = tokio::spawn(outbox.drive(async move {
            for text in ["a", "b", "c"] {
                emitter.emit(delta(text));
            }
            let _ = waiting.await;
            emitter.emit(delta("d"));
            emitter.close().await;
        }));
        for seq in 1..=3 {
            assert_eq!(next(&mut received).await.seq, seq);
        }
        assert_eq!(flushes.load(Ordering::SeqCst), 1, "one flush for the burst");
        resume.send(()).unwrap();
        assert_eq!(next(&mut received).await.seq, 4);
        run.await.unwrap();
        assert_eq!(flushes.load(Ordering::SeqCst), 2);
    }

    /// A run that emits without ever waiting still has its events published once the
    /// outbox holds [`OUTBOX_EVENTS`].
    #[tokio::test]
    async fn a_full_outbox_is_handed_on_without_a_wait() {
        let (mut emitter, mut received, _) = emitter();
        for _ in 0..OUTBOX_EVENTS {
            emitter.emit(delta("x"));
        }
        for seq in 1..=OUTBOX_EVENTS as u64 {
            assert_eq!(next(&mut received).await.seq, seq);
        }
        emitter.emit(delta("last"));
        emitter.close().await;
        assert_eq!(next(&mut received).await.seq, OUTBOX_EVENTS as u64 + 1);
    }
}
