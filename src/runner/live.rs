//! Runs in progress, and followers that stream a message's events to a client: first the
//! stored ones after a given `seq`, then live ones, with no gap and no repeat.
//!
//! A run publishes each event on a broadcast channel after it is stored and flushed. A
//! follower subscribes before it reads the store, so every event is either in what it read
//! or still to come on the channel; when it falls behind (the channel overwrote events it had
//! not taken) it reads the missing ones back from the store. Clients never hold a run back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::collections::VecDeque;
use std::pin::Pin;

use futures::Stream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::domain::{MessageId, Tenant};
use crate::events::EventEnvelope;
use crate::store::Store;

/// A run in progress.
#[derive(Clone)]
pub struct LiveRun {
    /// Owner of the message.
    pub tenant: Tenant,
    /// Fires to stop the run.
    pub cancel: CancellationToken,
    /// Publishes the run's events once they are durable.
    pub events: broadcast::Sender<EventEnvelope>,
    /// The highest `seq` made durable so far: stored events above it may not be sent yet.
    pub durable: Arc<AtomicU64>,
    /// Client tool calls the run waits for.
    pub client_slot: super::client_tools::PendingSlot,
}

/// A live run's channel and durability mark, as a follower needs them.
pub struct Subscription {
    events: broadcast::Receiver<EventEnvelope>,
    durable: Arc<AtomicU64>,
}

/// Every run in progress, by message.
///
/// A `std` mutex: it guards a map for a few instructions per access and is never held
/// across an await.
#[derive(Default)]
pub struct LiveRuns {
    runs: Mutex<HashMap<MessageId, LiveRun>>,
}

impl LiveRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageId, LiveRun>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a run.
    pub fn insert(&self, id: MessageId, run: LiveRun) {
        self.lock().insert(id, run);
    }

    /// Forgets a run that has ended; its followers then see the channel close.
    pub fn remove(&self, id: MessageId) {
        self.lock().remove(&id);
    }

    /// The run of `id` if it is in progress and belongs to `tenant`.
    pub fn get(&self, tenant: &Tenant, id: MessageId) -> Option<LiveRun> {
        self.lock()
            .get(&id)
            .filter(|run| &run.tenant == tenant)
            .cloned()
    }

    /// A subscription to the live events of `id`, if it runs.
    pub fn subscribe(&self, tenant: &Tenant, id: MessageId) -> Option<Subscription> {
        self.get(tenant, id).map(|run| run.subscribe())
    }
}

impl LiveRun {
    /// A new subscription to this run's events.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            events: self.events.subscribe(),
            durable: Arc::clone(&self.durable),
        }
    }
}

/// A message's events in `seq` order, as a client receives them.
pub type EventStream = Pin<Box<dyn Stream<Item = EventEnvelope> + Send>>;

/// The events of a message after `after_seq`: stored ones, then live ones from `live` until
/// the last event. Pulled by the client's response stream, so nothing runs once it is
/// dropped and no task sits between the run and the client.
pub fn follow(
    store: Store,
    tenant: Tenant,
    message: MessageId,
    after_seq: u64,
    live: Option<Subscription>,
) -> EventStream {
    let (durable, live) = match live {
        Some(Subscription { events, durable }) => (Some(durable), Some(events)),
        None => (None, None),
    };
    let follower = Follower {
        store,
        tenant,
        message,
        last: after_seq,
        durable,
        live,
        pending: VecDeque::new(),
        replayed: false,
        done: false,
    };
    Box::pin(futures::stream::unfold(
        follower,
        |mut follower| async move {
            let event = follower.next().await?;
            Some((event, follower))
        },
    ))
}

struct Follower {
    store: Store,
    tenant: Tenant,
    message: MessageId,
    /// The last `seq` handed out.
    last: u64,
    /// For a live run, how far its stored events are durable; a finished run's all are.
    durable: Option<Arc<AtomicU64>>,
    live: Option<broadcast::Receiver<EventEnvelope>>,
    /// Events read back from the store, not yet handed out.
    pending: VecDeque<EventEnvelope>,
    replayed: bool,
    done: bool,
}

impl Follower {
    /// The next event, or `None` after the last one (or when the run ended unrecorded).
    async fn next(&mut self) -> Option<EventEnvelope> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                self.last = event.seq;
                self.done = event.event.is_terminal();
                return Some(event);
            }
            if !self.replayed {
                self.replayed = true;
                self.refill();
                continue;
            }
            let Some(live) = self.live.as_mut() else {
                self.done = true;
                continue;
            };
            match live.recv().await {
                Ok(event) if event.seq <= self.last => {}
                Ok(event) if event.seq == self.last + 1 => self.pending.push_back(event),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.refill(),
                Err(broadcast::error::RecvError::Closed) => {
                    self.live = None;
                    self.refill();
                }
            }
        }
    }

    /// Queues every stored, durable event after the last one handed out.
    fn refill(&mut self) {
        let limit = self
            .durable
            .as_ref()
            .map_or(u64::MAX, |d| d.load(Ordering::SeqCst));
        match self
            .store
            .list_events(&self.tenant, self.message, self.last)
        {
            Ok(stored) => {
                self.pending = stored.into_iter().take_while(|e| e.seq <= limit).collect();
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot replay stored events");
                self.done = true;
            }
        }
    }
}
