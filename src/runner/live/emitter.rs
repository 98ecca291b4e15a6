//! Publishes a run's records and events in order: events numbered at once, records and
//! events committed together, then broadcast to whoever follows the run once the commit
//! is durable. A client never holds a run back, and never sees an event that a crash
//! could lose, nor one whose record is not there.
//!
//! The run does not wait for writes. What it records and emits collects in its [`Outbox`]
//! until its task is about to wait (on the model, a tool, its caller); then the outbox
//! hands the lot to a publisher task, which commits it as one burst and broadcasts its
//! events. A burst (a thought and its tool calls, a model's answer arriving at once, the
//! run's last deltas, its end and the message's final state) costs one commit, and nothing
//! waits longer than the run's next wait to be handed on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::domain::{ConversationId, MessageId, Tenant};
use crate::domain::{EventEnvelope, RunEvent};
use crate::store::{Burst, Category, Fence, Record, Store, StoreError};

/// Where a run's burst goes, and under whose fence.
pub struct Destination {
    /// The store the run writes to.
    pub store: Store,
    /// The run's tenant.
    pub tenant: Tenant,
    /// The run's owner and epoch.
    pub fence: Fence,
    /// Until when a burst that could not be committed is tried again.
    pub shutdown: CancellationToken,
    /// How long commits are tried again while the store is unavailable before the run
    /// stops.
    pub write_timeout: Duration,
    /// Where followers on other replicas hear of committed events.
    pub bus: Arc<dyn crate::cluster::Bus>,
}

/// The run's side of its event stream.
pub struct Emitter {
    conversation_id: ConversationId,
    message_id: MessageId,
    seq: u64,
    /// Recorded and emitted, not yet handed to the publisher.
    outbox: Outbox,
    /// Told once the publisher committed the last burst, or gave up announcing it.
    settled: oneshot::Receiver<()>,
    /// Set once a burst could not be made durable: the run must end as a store failure.
    failed: Arc<AtomicBool>,
    /// Set while the last commit failed and is being tried again.
    failing: Arc<AtomicBool>,
}

impl Emitter {
    /// An emitter for one message; its publisher commits bursts to `destination` and
    /// broadcasts their events on `events`, on `tasks` (the runner's, which shutdown waits
    /// for). A storage failure cancels the run through `cancel`, since nothing it does
    /// could be announced any more.
    pub fn new(
        destination: Destination,
        conversation_id: ConversationId,
        message_id: MessageId,
        events: broadcast::Sender<EventEnvelope>,
        cancel: CancellationToken,
        tasks: &TaskTracker,
    ) -> Self {
        let (batches, queue) = mpsc::unbounded_channel();
        let failed = Arc::new(AtomicBool::new(false));
        let failing = Arc::new(AtomicBool::new(false));
        let (settle, settled) = oneshot::channel();
        let publisher = Publisher {
            destination,
            events: Some(events),
            cancel,
            failed: Arc::clone(&failed),
            failing: Arc::clone(&failing),
            settle: Some(settle),
        };
        tasks.spawn(publisher.run(queue));
        Self {
            conversation_id,
            message_id,
            seq: 0,
            outbox: Outbox::new(batches),
            settled,
            failed,
            failing,
        }
    }

    /// Numbers the events emitted from now on after `seq`: a run taken over goes on from
    /// the last event its lost owner made durable.
    pub fn continue_after(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// The `seq` the next event emitted gets.
    pub fn next_seq(&self) -> u64 {
        self.seq + 1
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
        self.outbox.put_event(envelope);
    }

    /// Sends `event` to the run's live followers, here and on peers, in its place among the
    /// events, without storing it: its `seq` is 0 and it is not replayed (reasoning the run
    /// may show but not keep). It goes out once the events before it are durable.
    pub fn flash(&mut self, event: RunEvent) {
        let envelope = EventEnvelope {
            seq: 0,
            conversation_id: self.conversation_id,
            message_id: self.message_id,
            created_at: crate::domain::now(),
            event,
        };
        self.outbox.put_flash(self.seq, envelope);
    }

    /// Puts a record in the outbox, to be committed with the events emitted after it.
    pub fn record(&self, record: Record) {
        self.outbox.put_record(record);
    }

    /// The run's outbox, for the future that drives the run to empty whenever it waits.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    /// Waits until everything recorded so far is committed, or the run was stopped for
    /// failing to commit it (after the write timeout): the run can then read back its own
    /// records, or knows it failed.
    pub async fn settle(&self) {
        let (done, settled) = oneshot::channel();
        self.outbox.hand_on_then(Outgoing::Settle(done));
        let _ = settled.await;
    }

    /// Whether the last commit failed and is being tried again (the store is unavailable).
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    /// Whether some records or events could not be made durable (the store cannot write).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits until every recorded and emitted thing is durable and broadcast, or (the
    /// store failing) until the last attempts to make them so gave up announcing them;
    /// the publisher then keeps trying to commit them until shutdown.
    pub async fn close(self) {
        self.outbox.close();
        let _ = self.settled.await;
    }
}

/// Events in the outbox past which it hands them on without waiting for the run to wait:
/// a run that streams without ever waiting still has its events published.
const OUTBOX_EVENTS: usize = 64;

/// Unstored events, each with the `seq` of the last event emitted before it.
type Flashes = Vec<(u64, EventEnvelope)>;

/// What the publisher is handed, in order.
enum Outgoing {
    /// Records and events to commit, and the unstored events among them.
    Burst(Burst, Flashes),
    /// Answered once everything handed on before it was committed (or could not be).
    Settle(oneshot::Sender<()>),
}

/// What a run recorded and emitted since its task last waited. The run puts them in; the
/// future that drives the run hands them to the publisher each time the run returns from a
/// poll, which is when it is about to wait or has ended.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Mutex<Staged>>,
}

struct Staged {
    burst: Burst,
    flashes: Flashes,
    /// `None` once the emitter closed. Unbounded because the publisher drains it in
    /// batches and a run produces at most as fast as its model streams.
    publisher: Option<mpsc::UnboundedSender<Outgoing>>,
}

impl Outbox {
    fn new(publisher: mpsc::UnboundedSender<Outgoing>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Staged {
                burst: Burst::default(),
                flashes: Vec::new(),
                publisher: Some(publisher),
            })),
        }
    }

    /// Drives `run`, handing what it emitted to the publisher whenever it returns from a
    /// poll: a burst the run handles without waiting goes out as one batch, and nothing is
    /// held while the run waits.
    pub fn drive<F: Future>(self, run: F) -> Driven<F> {
        Driven { run, outbox: self }
    }

    fn put_event(&self, event: EventEnvelope) {
        let mut staged = self.lock();
        staged.burst.events.push(event);
        if staged.burst.events.len() >= OUTBOX_EVENTS {
            staged.send();
        }
    }

    fn put_flash(&self, after: u64, event: EventEnvelope) {
        self.lock().flashes.push((after, event));
    }

    fn put_record(&self, record: Record) {
        self.lock().burst.push(record);
    }

    fn hand_on(&self) {
        self.lock().send();
    }

    /// Hands on what is staged, then `then`.
    fn hand_on_then(&self, then: Outgoing) {
        let mut staged = self.lock();
        staged.send();
        if let Some(publisher) = &staged.publisher {
            let _ = publisher.send(then);
        }
    }

    /// Hands on what is left and closes the publisher's queue, so it stops once it has
    /// published the rest.
    fn close(&self) {
        let mut staged = self.lock();
        staged.send();
        staged.publisher = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Staged> {
        // Nothing panics while holding the lock; a poisoned one still holds whole records.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pin_project_lite::pin_project! {
    /// A run's future pinned in place beside its outbox (see [`Outbox::drive`]). A struct
    /// rather than an `async fn` so the run's future is held once: an `async fn` keeps its
    /// argument and the pinned copy of it side by side, which doubled every run's task.
    pub struct Driven<F> {
        #[pin]
        run: F,
        outbox: Outbox,
    }
}

impl<F: Future> Future for Driven<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let poll = this.run.poll(cx);
        this.outbox.hand_on();
        poll
    }
}

/// A run dropped before closing its emitter (its task aborted) still hands on what it
/// staged, as it would have on its next wait.
impl Drop for Staged {
    fn drop(&mut self) {
        self.send();
    }
}

impl Staged {
    fn send(&mut self) {
        if self.burst.is_empty() && self.flashes.is_empty() {
            return;
        }
        let burst = std::mem::take(&mut self.burst);
        let flashes = std::mem::take(&mut self.flashes);
        if let Some(publisher) = &self.publisher {
            // The publisher only stops once the emitter closed; then no one is left to tell.
            let _ = publisher.send(Outgoing::Burst(burst, flashes));
        }
    }
}

/// How often a burst the store refused is tried again while the run goes on.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// The least time a closed run's last burst is tried for before its followers are told
/// it is lost, whatever the write timeout.
const CLOSING_AT_LEAST: Duration = Duration::from_millis(1500);

/// How often a burst that could not be committed is tried again once its run has ended,
/// until it is committed or the service shuts down: a live process leaves no run running.
const MENDING_INTERVAL: Duration = Duration::from_secs(1);

/// Commits and broadcasts a run's bursts until its emitter is closed.
struct Publisher {
    destination: Destination,
    /// `None` once the run's last events were given up for announcing.
    events: Option<broadcast::Sender<EventEnvelope>>,
    cancel: CancellationToken,
    failed: Arc<AtomicBool>,
    failing: Arc<AtomicBool>,
    /// Told once the closed run's last burst is committed, or given up for announcing.
    settle: Option<oneshot::Sender<()>>,
}

impl Publisher {
    /// Commits bursts as they come. A burst the store refuses stays pending and is tried
    /// again (with what comes next) every [`RETRY_EVERY`]: while the store is unavailable
    /// for less than the write timeout the run goes on and nothing is announced; past it,
    /// or on any other failure, the run stops, since nothing it does could be announced.
    /// Once the run closed its emitter, its last burst (its end among it) is tried until
    /// the write timeout (at least [`CLOSING_AT_LEAST`]) before its followers are told it
    /// is lost, then until it lands or the service shuts down.
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Outgoing>) {
        let mut pending = Burst::default();
        let mut flashes = Flashes::new();
        let mut failing: Option<Instant> = None;
        let mut batch = Vec::new();
        // Answered once what was handed on before them is committed, or given up on.
        let mut settles: Vec<oneshot::Sender<()>> = Vec::new();
        loop {
            let retry = async {
                match failing {
                    Some(_) if !pending.is_empty() => tokio::time::sleep(RETRY_EVERY).await,
                    _ => std::future::pending().await,
                }
            };
            let open = tokio::select! {
                received = queue.recv_many(&mut batch, usize::MAX) => received > 0,
                () = retry => true,
            };
            if !open {
                break;
            }
            for outgoing in batch.drain(..) {
                match outgoing {
                    Outgoing::Burst(burst, more) => {
                        pending.extend(burst);
                        flashes.extend(more);
                    }
                    Outgoing::Settle(done) => settles.push(done),
                }
            }
            // A failure counts from when the commit was tried: one the database never
            // answered took its deadline already.
            let attempted = Instant::now();
            let published = self.publish(&mut pending, &mut flashes).await;
            self.failing.store(published.is_err(), Ordering::SeqCst);
            match published {
                Ok(()) => failing = None,
                Err(StoreError::Fenced) => {
                    // The run is no longer ours: nothing it staged may be written.
                    tracing::warn!("the run was ended or taken over by another replica; it stops here and writes nothing more");
                    self.failed.store(true, Ordering::SeqCst);
                    self.cancel.cancel();
                    pending = Burst::default();
                    flashes.clear();
                }
                Err(err) => {
                    let since = *failing.get_or_insert(attempted);
                    let waiting = err.category() == Category::Unavailable
                        && since.elapsed() < self.destination.write_timeout;
                    if !waiting && !self.failed.swap(true, Ordering::SeqCst) {
                        tracing::error!(error = %err, "cannot make the run's records durable; the run stops");
                        self.cancel.cancel();
                    }
                }
            }
            if pending.is_empty() || self.failed.load(Ordering::SeqCst) {
                for done in settles.drain(..) {
                    let _ = done.send(());
                }
            }
        }
        drop(settles);
        let since = failing.unwrap_or_else(Instant::now);
        let closing = self.destination.write_timeout.max(CLOSING_AT_LEAST);
        while !pending.is_empty() && since.elapsed() < closing {
            tokio::time::sleep(RETRY_EVERY).await;
            if let Err(StoreError::Fenced) = self.publish(&mut pending, &mut flashes).await {
                pending = Burst::default();
            }
        }
        if !pending.is_empty() {
            tracing::error!(
                events = pending.events.len(),
                "the run's last records could not be made durable; followers see the stream fail"
            );
        }
        // Followers learn the rest is lost once the run has left, and no sender is left.
        self.events = None;
        if let Some(settle) = self.settle.take() {
            let _ = settle.send(());
        }
        self.mend(pending).await;
    }

    /// Commits `pending` (records and events) and broadcasts its events, each unstored one
    /// of `flashes` in its place among them; on failure both stay pending.
    async fn publish(&self, pending: &mut Burst, flashes: &mut Flashes) -> Result<(), StoreError> {
        if pending.is_empty() {
            self.flash(std::mem::take(flashes)).await;
            return Ok(());
        }
        let Destination {
            store,
            tenant,
            fence,
            ..
        } = &self.destination;
        // On failure everything stays pending, tokens included: they count only with the
        // first commit that writes their event, whichever try lands.
        store.commit(tenant, fence, pending).await?;
        pending.records.clear();
        if let Some(first) = pending.events.first() {
            self.destination
                .bus
                .announce(first.message_id, &pending.events)
                .await;
        }
        let flashes = std::mem::take(flashes);
        // Peers hear of them after the burst's events, in one notice of their own.
        self.announce_unstored(&flashes).await;
        let mut unstored = flashes.into_iter().peekable();
        for envelope in pending.events.drain(..) {
            let Some(events) = &self.events else { continue };
            while let Some((_, flash)) = unstored.next_if(|(after, _)| *after < envelope.seq) {
                let _ = events.send(flash);
            }
            // No follower is not an error: the events are stored for Attach.
            let _ = events.send(envelope);
        }
        if let Some(events) = &self.events {
            for (_, flash) in unstored {
                let _ = events.send(flash);
            }
        }
        Ok(())
    }

    /// Sends unstored events to the run's followers on peers and here; one that is lost
    /// is missed by nothing that keeps count.
    async fn flash(&self, flashes: Flashes) {
        self.announce_unstored(&flashes).await;
        if let Some(events) = &self.events {
            for (_, flash) in flashes {
                let _ = events.send(flash);
            }
        }
    }

    /// Tells peers' followers of unstored events (a notice whose `seq`s are all 0).
    async fn announce_unstored(&self, flashes: &Flashes) {
        let events: Vec<EventEnvelope> = flashes.iter().map(|(_, flash)| flash.clone()).collect();
        if let Some(first) = events.first() {
            self.destination
                .bus
                .announce(first.message_id, &events)
                .await;
        }
    }

    /// Tries the burst the run could not commit again until it lands or the service shuts
    /// down, so its message does not stay running while the process lives.
    async fn mend(&self, mut pending: Burst) {
        while !pending.is_empty() {
            let wait = tokio::time::sleep(MENDING_INTERVAL);
            tokio::select! {
                () = self.destination.shutdown.cancelled() => return,
                () = wait => {}
            }
            match self.publish(&mut pending, &mut Flashes::new()).await {
                Ok(()) => tracing::info!("the records of an ended run were made durable at last"),
                Err(StoreError::Fenced) => return,
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::sync::oneshot;

    use super::*;
    use crate::domain::{ConversationId, MessageId, Tenant};

    /// Where a run of this process writes, with a silent bus and a second to write.
    fn local(store: Store, tenant: Tenant) -> Destination {
        Destination {
            store,
            tenant,
            fence: Fence::local(),
            shutdown: CancellationToken::new(),
            write_timeout: Duration::from_secs(1),
            bus: Arc::new(crate::cluster::Silent::default()),
        }
    }

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
        store.observe_commits(Box::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        let (events, received) = broadcast::channel(1024);
        let destination = local(store, Tenant::default_tenant());
        let emitter = Emitter::new(
            destination,
            ConversationId::new(),
            MessageId::new(),
            events,
            CancellationToken::new(),
            &TaskTracker::new(),
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

    /// An unstored event goes out in its place among the stored ones, with `seq` 0, and
    /// costs no commit of its own; one sent while nothing else is pending goes out too.
    #[tokio::test]
    async fn unstored_events_go_out_in_their_place_without_a_commit() {
        let (mut emitter, mut received, flushes) = emitter();
        let (resume, waiting) = oneshot::channel::<()>();
        let outbox = emitter.outbox();
        let run = tokio::spawn(outbox.drive(async move {
            emitter.emit(delta("a"));
            emitter.flash(delta("thinking"));
            emitter.emit(delta("b"));
            let _ = waiting.await;
            emitter.flash(delta("alone"));
            emitter.settle().await;
            emitter.close().await;
        }));
        let order: Vec<(u64, RunEvent)> = [
            next(&mut received).await,
            next(&mut received).await,
            next(&mut received).await,
        ]
        .into_iter()
        .map(|envelope| (envelope.seq, envelope.event))
        .collect();
        assert_eq!(
            order,
            vec![(1, delta("a")), (0, delta("thinking")), (2, delta("b"))]
        );
        assert_eq!(flushes.load(Ordering::SeqCst), 1);
        resume.send(()).unwrap();
        let alone = next(&mut received).await;
        assert_eq!((alone.seq, alone.event), (0, delta("alone")));
        run.await.unwrap();
        assert_eq!(flushes.load(Ordering::SeqCst), 1, "nothing stored for it");
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

    /// A running message in a temporary store, and an emitter for it.
    async fn emitter_for_message() -> (
        Store,
        crate::domain::Message,
        Emitter,
        broadcast::Receiver<EventEnvelope>,
    ) {
        use crate::store::test_records::{conversation, running_message};
        let store = Store::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let opening = conversation(&tenant);
        let mut message = running_message(opening.id, 0);
        store
            .insert_message(crate::store::NewMessage {
                tenant: &tenant,
                conversation: Some(&opening),
                message: &mut message,
                spec: &serde_json::Value::Null,
                idempotency: None,
                admission: crate::store::Admission::default(),
            })
            .await
            .unwrap();
        let (events, received) = broadcast::channel(16);
        let destination = local(store.clone(), tenant);
        let emitter = Emitter::new(
            destination,
            opening.id,
            message.id,
            events,
            CancellationToken::new(),
            &TaskTracker::new(),
        );
        (store, message, emitter, received)
    }

    fn ended(message: &crate::domain::Message) -> crate::domain::Message {
        crate::domain::Message {
            status: crate::domain::MessageStatus::Completed,
            answer: "done".into(),
            ..message.clone()
        }
    }

    /// A follower told of an event finds the record it announces already there.
    #[tokio::test]
    async fn a_record_is_there_when_its_event_arrives() {
        let (store, message, mut emitter, mut received) = emitter_for_message().await;
        emitter.record(Record::Message(ended(&message)));
        emitter.emit(delta("done"));
        emitter.outbox().hand_on();
        assert_eq!(next(&mut received).await.seq, 1);
        let read = store
            .get_message(&Tenant::default_tenant(), message.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.status, crate::domain::MessageStatus::Completed);
        emitter.close().await;
    }

    /// A run whose last burst cannot be committed ends its followers' stream after a few
    /// attempts, and keeps trying: once the store can write, its end lands, events and all.
    #[tokio::test]
    async fn an_end_that_could_not_be_committed_lands_once_the_store_can_write() {
        let (store, message, mut emitter, mut received) = emitter_for_message().await;
        let tenant = Tenant::default_tenant();
        store.fail_writes(true);
        emitter.record(Record::Message(ended(&message)));
        emitter.emit(delta("done"));
        assert!(
            tokio::time::timeout(Duration::from_secs(10), emitter.close())
                .await
                .is_ok()
        );
        let told = tokio::time::timeout(Duration::from_secs(10), received.recv()).await;
        assert!(
            matches!(told, Ok(Err(broadcast::error::RecvError::Closed))),
            "followers learn the stream ends: {told:?}"
        );
        assert!(store
            .list_events(&tenant, message.id, 0)
            .await
            .unwrap()
            .is_empty());

        store.fail_writes(false);
        let landed = async {
            loop {
                let events = store.list_events(&tenant, message.id, 0).await.unwrap();
                if !events.is_empty() {
                    return events;
                }
                // A real store, written by its own threads: real time, polled.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let events = tokio::time::timeout(Duration::from_secs(10), landed)
            .await
            .expect("the end lands within seconds");
        assert_eq!(events.len(), 1);
        let read = store
            .get_message(&tenant, message.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.status, crate::domain::MessageStatus::Completed);
    }
}
