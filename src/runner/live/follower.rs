//! Followers that stream a message's events to a client: first the stored ones after a
//! given `seq`, then live ones, with no gap and no repeat.
//!
//! A run publishes each event on a broadcast channel once its commit is durable, and the
//! store shows readers no event before that. A follower subscribes before it reads the
//! store, so every event is either in what it read or still to come on the channel; when it falls behind (the channel overwrote events it had
//! not taken) it reads the missing ones back from the store. Clients never hold a run back.

use std::collections::VecDeque;
use std::pin::Pin;

use futures::Stream;
use tokio::sync::broadcast;

use super::registry::Subscription;
use crate::cluster::Watch;
use crate::domain::{EventEnvelope, MessageId, Tenant};
use crate::runner::error::RunError;
use crate::store::{Store, StoreError};

/// A message's events in `seq` order, as a client receives them; an error ends a live
/// run's stream whose last events could not be stored (or read back).
pub type EventStream = Pin<Box<dyn Stream<Item = Result<EventEnvelope, RunError>> + Send>>;

/// What the caller of [`follow`] already knows, which spares the follower a read of the
/// store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// Nothing: it reads what is stored, then (for a run held elsewhere) whether it ended.
    Nothing,
    /// Its live subscription was taken before the run's first event: nothing stored is
    /// missing from it.
    FromFirstEvent,
    /// The message was read running before its notices were watched: whatever it commits
    /// later is announced, or found by polling, so whether it ended need not be asked.
    SeenRunning,
}

/// The events of a message after `after_seq`: stored ones, then live ones from `live` until
/// the last event. Pulled by the client's response stream, so nothing runs once it is
/// dropped and no task sits between the run and the client.
pub fn follow(
    store: Store,
    tenant: Tenant,
    message: MessageId,
    after_seq: u64,
    live: Option<Subscription>,
    watch: Watch,
    known: Known,
) -> EventStream {
    let live = live.map(|Subscription { events }| events);
    let follower = Follower {
        watch,
        writable: store.writable(),
        status_checked: known == Known::SeenRunning,
        store,
        tenant,
        message,
        last: after_seq,
        was_live: live.is_some(),
        live,
        pending: VecDeque::new(),
        replayed: known == Known::FromFirstEvent,
        done: false,
        lost: None,
    };
    Box::pin(futures::stream::unfold(Box::new(follower), step))
}

/// One event of a follower's stream. The follower is boxed so that each event moves a
/// pointer and the small future of the live path, not the follower.
async fn step(
    mut follower: Box<Follower>,
) -> Option<(Result<EventEnvelope, RunError>, Box<Follower>)> {
    let event = follower.next().await?;
    Some((event, follower))
}

/// How often the store is read for the events of a run another replica holds when no
/// notice comes and nothing polls for the follower: the floor that makes a lost or slow
/// bus cost latency, never an event.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often a follower reads on its own when the bus polls the store for it (once a
/// second per followed message, for all its followers here): a safety net only.
const SAFETY_POLL_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a follower asks again a store that is unavailable before its stream fails.
const REFILL_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// How often it asks meanwhile.
const REFILL_AGAIN: std::time::Duration = std::time::Duration::from_millis(250);

/// How long one read may wait for its answer: a database that fell silent (no reset)
/// would otherwise hold the read for as long as the connection lives.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

struct Follower {
    /// Notices of a run held by another replica (taken before the store is read).
    watch: Watch,
    /// Whether the store can write: when it turns unable (its database lost), a follower
    /// of a run held elsewhere reads at once, so its client hears of it in time.
    writable: tokio::sync::watch::Receiver<bool>,
    /// Whether the store was asked if the run ended, since the follower began.
    status_checked: bool,
    store: Store,
    tenant: Tenant,
    message: MessageId,
    /// The last `seq` handed out.
    last: u64,
    live: Option<broadcast::Receiver<EventEnvelope>>,
    /// Events read back from the store, not yet handed out.
    pending: VecDeque<EventEnvelope>,
    replayed: bool,
    done: bool,
    /// Whether the message was running when the follower began: its stream must end with
    /// the run's last event, or say why not.
    was_live: bool,
    /// Why the stream ends early, once known.
    lost: Option<RunError>,
}

impl Follower {
    /// The next event, or `None` after the last one; an error when a live run ended
    /// without its last event stored, or the store cannot be read.
    async fn next(&mut self) -> Option<Result<EventEnvelope, RunError>> {
        loop {
            if let Some(lost) = self.lost.take() {
                self.done = true;
                return Some(Err(lost));
            }
            if self.done {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                // An unstored event (seq 0) is handed out in its place and counts for nothing.
                if event.seq == 0 {
                    return Some(Ok(event));
                }
                self.last = event.seq;
                self.done = event.event.is_terminal();
                return Some(Ok(event));
            }
            // Every path but the live one is boxed where it is taken: the future of `next`,
            // made again for each event, then holds only the live path's.
            if !self.replayed {
                self.replayed = true;
                Box::pin(self.refill()).await;
                continue;
            }
            let Some(live) = self.live.as_mut() else {
                if self.was_live {
                    self.lost = Some(Box::pin(self.why_cut_off()).await);
                } else {
                    Box::pin(self.await_elsewhere()).await;
                }
                continue;
            };
            match live.recv().await {
                Ok(event) if event.seq == 0 => self.pending.push_back(event),
                Ok(event) if event.seq <= self.last => {}
                Ok(event) if event.seq == self.last + 1 => self.pending.push_back(event),
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    Box::pin(self.refill()).await;
                }
                Err(broadcast::error::RecvError::Closed) => {
                    self.live = None;
                    Box::pin(self.refill()).await;
                }
            }
        }
    }

    /// Waits for more of a run this process does not hold: one that runs on another
    /// replica, or ended. Notices from the bus hand on their events when they follow the
    /// last one handed out; any other notice (a gap, a notice without events, a lag) reads
    /// the store. Without a notice, the store is read every [`POLL_EVERY`], or every
    /// [`SAFETY_POLL_EVERY`] where the bus polls for all of a message's followers. A message that
    /// ended without an end event (written by an earlier version) ends the stream with
    /// what it has.
    async fn await_elsewhere(&mut self) {
        if !self.status_checked {
            self.status_checked = true;
            if self.ended_in_store().await {
                return;
            }
        }
        let every = match self.watch.is_polled() {
            true => SAFETY_POLL_EVERY,
            false => POLL_EVERY,
        };
        let heard = tokio::select! {
            heard = self.watch.next() => heard,
            () = tokio::time::sleep(every) => None,
            () = store_lost(&mut self.writable) => None,
        };
        match heard {
            // Unstored events (reasoning shown, not kept) reach live followers only.
            Some(Ok(notice)) if notice.last_seq == 0 => {
                self.pending.extend(notice.events.iter().cloned());
            }
            Some(Ok(notice)) if notice.last_seq <= self.last => {}
            Some(Ok(notice))
                if notice
                    .events
                    .first()
                    .is_some_and(|first| first.seq == self.last + 1) =>
            {
                self.pending.extend(notice.events.iter().cloned());
            }
            Some(_) => self.refill().await,
            None => {
                if !self.ended_in_store().await {
                    self.refill().await;
                }
            }
        }
    }

    /// Why a run this process held left without its last event: handed over to another
    /// process (the client attaches again), or its last events could not be stored.
    async fn why_cut_off(&self) -> RunError {
        match self.store.get_message(&self.tenant, self.message).await {
            Ok(Some(message)) if message.handed_over && !message.status.is_terminal() => {
                RunError::HandedOver
            }
            _ => RunError::EventsLost,
        }
    }

    /// Whether the store says the run ended; if so, what is left is queued (and the
    /// stream ends once it is handed out).
    async fn ended_in_store(&mut self) -> bool {
        match self.read_message().await {
            Ok(Some(message)) if !message.status.is_terminal() => false,
            Ok(_) => {
                self.refill().await;
                if self.pending.is_empty() {
                    self.done = true;
                }
                true
            }
            Err(err) => {
                self.lost = Some(err.into());
                true
            }
        }
    }

    /// The message as stored, asked [`patiently`].
    async fn read_message(&self) -> Result<Option<crate::domain::Message>, StoreError> {
        patiently(&self.store, || {
            self.store.get_message(&self.tenant, self.message)
        })
        .await
    }

    /// Queues every committed event after the last one handed out, asked [`patiently`].
    async fn refill(&mut self) {
        let (store, tenant, message, last) = (&self.store, &self.tenant, self.message, self.last);
        match patiently(store, || store.list_events(tenant, message, last)).await {
            Ok(stored) => self.pending = stored.into(),
            Err(err) => {
                tracing::error!(error = %err, "cannot replay stored events");
                self.lost = Some(err.into());
            }
        }
    }
}

/// Resolves when the store turns unable to write; never, while it stays able or once its
/// sender is gone.
async fn store_lost(writable: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if writable.changed().await.is_err() {
            return std::future::pending().await;
        }
        if !*writable.borrow_and_update() {
            return;
        }
    }
}

/// What `read` gives, asking a store that is unavailable for a moment (its connections all
/// busy, say) again for up to [`REFILL_PATIENCE`]: a busy store costs a follower latency,
/// not its stream. Once `store` says it cannot write (its database lost, not busy), a
/// failed read is not asked again: the follower's client is told at once, in words,
/// instead of waiting out [`REFILL_PATIENCE`]. No read waits past [`READ_DEADLINE`].
async fn patiently<T, Fut>(store: &Store, mut read: impl FnMut() -> Fut) -> Result<T, StoreError>
where
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let started = tokio::time::Instant::now();
    loop {
        let answered = match tokio::time::timeout(READ_DEADLINE, read()).await {
            Ok(answered) => answered,
            Err(_) => Err(crate::store::StoreError::Backend {
                category: crate::store::Category::Unavailable,
                message: format!(
                    "the database cannot be reached: no answer within {} s",
                    READ_DEADLINE.as_secs()
                ),
            }),
        };
        let lost = !*store.writable().borrow();
        match answered {
            Err(err)
                if err.category() == crate::store::Category::Unavailable
                    && started.elapsed() < REFILL_PATIENCE
                    && !lost =>
            {
                tokio::time::sleep(REFILL_AGAIN).await;
            }
            answered => return answered,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Each event of a client's stream makes this future again, moving it whole: it holds
    /// the live path's wait, not room for the store reads of the rare paths.
    #[test]
    fn an_events_future_stays_small() {
        fn returned<A, R>(_: impl FnOnce(A) -> R) -> usize {
            std::mem::size_of::<R>()
        }
        let step = returned(super::step);
        assert!(step <= 768, "a follower's step takes {step} bytes");
    }
}
