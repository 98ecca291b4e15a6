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

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::domain::{MessageId, Tenant};
use crate::events::EventEnvelope;
use crate::store::{Store, StoreError};

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

/// Streams the events of a message after `after_seq` into a new channel: stored ones, then
/// live ones from `live` until the last event. The task ends when the client goes away.
pub fn follow(
    store: Store,
    tenant: Tenant,
    message: MessageId,
    after_seq: u64,
    live: Option<Subscription>,
    buffer: usize,
) -> mpsc::Receiver<EventEnvelope> {
    let (tx, rx) = mpsc::channel(buffer.max(1));
    let follower = Follower {
        store,
        tenant,
        message,
        last: after_seq,
        durable: live.as_ref().map(|l| Arc::clone(&l.durable)),
        tx,
    };
    tokio::spawn(async move {
        if let Err(err) = follower.run(live).await {
            tracing::error!(error = %err, "cannot replay stored events");
        }
    });
    rx
}

struct Follower {
    store: Store,
    tenant: Tenant,
    message: MessageId,
    last: u64,
    /// For a live run, how far its stored events are durable; a finished run's all are.
    durable: Option<Arc<AtomicU64>>,
    tx: mpsc::Sender<EventEnvelope>,
}

/// Whether to keep following.
enum Flow {
    Continue,
    Stop,
}

impl Follower {
    async fn run(mut self, live: Option<Subscription>) -> Result<(), StoreError> {
        if let Flow::Stop = self.replay().await? {
            return Ok(());
        }
        let Some(Subscription {
            events: mut live, ..
        }) = live
        else {
            return Ok(());
        };
        loop {
            let received = tokio::select! {
                _ = self.tx.closed() => return Ok(()),
                received = live.recv() => received,
            };
            let flow = match received {
                Ok(event) if event.seq <= self.last => Flow::Continue,
                Ok(event) if event.seq == self.last + 1 => self.send(event).await,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => self.replay().await?,
                Err(broadcast::error::RecvError::Closed) => {
                    self.replay().await?;
                    Flow::Stop
                }
            };
            if let Flow::Stop = flow {
                return Ok(());
            }
        }
    }

    /// Sends every stored, durable event after the last one sent.
    async fn replay(&mut self) -> Result<Flow, StoreError> {
        let limit = self
            .durable
            .as_ref()
            .map_or(u64::MAX, |d| d.load(Ordering::SeqCst));
        let stored = self
            .store
            .list_events(&self.tenant, self.message, self.last)?;
        for event in stored.into_iter().take_while(|e| e.seq <= limit) {
            if let Flow::Stop = self.send(event).await {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    async fn send(&mut self, event: EventEnvelope) -> Flow {
        self.last = event.seq;
        let terminal = event.event.is_terminal();
        if self.tx.send(event).await.is_err() || terminal {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}
