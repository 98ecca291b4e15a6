//! Notices between replicas: that a run committed events, that a command was kept for a
//! run. Notices carry no state (the store holds the log and the commands), so a notice
//! lost or late costs latency, never an event or a command: followers read the store on
//! any gap and at least every second, and owners look for commands every second.
//!
//! Two buses. NATS ([`nats`]): its notices carry the committed events themselves (up to
//! [`MAX_NOTICE_EVENTS_BYTES`] a run), a commit group's in one message ([`relay`]), sealed
//! ([`seal`]) so that only the deployment's replicas read or write them, and followers on
//! other replicas forward them without a read. Without NATS, the database's own
//! notifications, which carry only `message:last_seq` ([`Notifications`], over what the
//! store hears). [`Silent`] serves a single process, whose followers hear its runs
//! directly.

mod listening;
pub mod nats;
mod notifications;
mod outbox;
mod relay;
mod seal;
mod watchers;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use tokio::sync::{broadcast, Notify};

use crate::domain::{EventEnvelope, MessageId};
pub use notifications::Notifications;
pub use watchers::{Watch, Watchers};

/// The most bytes of events a notice carries; a larger burst is announced by its last
/// `seq` alone and read from the store.
pub const MAX_NOTICE_EVENTS_BYTES: usize = 64 * 1024;

/// A run committed events up to `last_seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The last committed `seq`.
    pub last_seq: u64,
    /// The events committed, in order, when the notice carries them; empty when a
    /// follower must read them from the store.
    pub events: Vec<EventEnvelope>,
}

/// Told of each notice that reached followers here: how many events it carried and how
/// long after the last one was produced it arrived.
pub type RelayObserver = Box<dyn Fn(usize, std::time::Duration) + Send + Sync>;

/// Told of each payload on the bus that did not open with the deployment's key.
pub type RejectObserver = Box<dyn Fn() + Send + Sync>;

/// Reads a followed message from the store for all of its followers on this replica, so
/// that a notice without its events, or one that was lost, costs one read here, not one per
/// follower.
#[async_trait]
pub trait Source: Send + Sync {
    /// Its last committed `seq` (`None`: it cannot be read now).
    async fn last_seq(&self) -> Option<u64>;

    /// Its committed events after `seq`, in order (`None`: they cannot be read now).
    async fn events_after(&self, seq: u64) -> Option<Vec<EventEnvelope>>;
}

/// A followed message's [`Source`], as the runner gives it to the bus.
pub type Poll = Arc<dyn Source>;

/// How replicas tell each other of committed events and kept commands.
#[async_trait]
pub trait Bus: Send + Sync {
    /// Tells followers on other replicas that `events` (consecutive, of `message`) are
    /// committed. Called after the commit; a bus that is down drops the notice.
    async fn announce(&self, message: MessageId, events: &[EventEnvelope]);

    /// Notices for `message` from now on, until the returned watch is dropped. For the
    /// message's first follower here, returns once the subscription is in place, so a
    /// follower that reads the store after it misses nothing in between. While the message
    /// has followers here, `poll` is asked once a second for its last committed `seq`; when
    /// it moved past what the followers were handed, or a notice came without its events,
    /// the events are read once through `poll` and handed to every follower: one read per
    /// followed message per replica, however many follow it.
    async fn watch(&self, message: MessageId, poll: Poll) -> Watch;

    /// Wakes replica `owner`: a command was kept for a run it holds.
    async fn wake(&self, owner: &str);

    /// Notified when a peer kept a command for a run this replica holds.
    fn woken(&self) -> Arc<Notify>;

    /// Stops the bus's own tasks (listeners, forwarders, fillers) and waits for them at
    /// most `within`; called once at shutdown, when nothing follows a run any more.
    async fn stop(&self, _within: Duration) {}

    /// Tells `observe` of every notice relayed to followers here; the first call counts.
    fn observe_relays(&self, _observe: RelayObserver) {}

    /// Tells `observe` of every payload dropped for not opening; the first call counts.
    fn observe_rejections(&self, _observe: RejectObserver) {}
}

/// The bus of a single process: nobody else to tell.
#[derive(Default)]
pub struct Silent {
    woken: Arc<Notify>,
}

#[async_trait]
impl Bus for Silent {
    async fn announce(&self, _message: MessageId, _events: &[EventEnvelope]) {}

    async fn watch(&self, _message: MessageId, _poll: Poll) -> Watch {
        Watch::never()
    }

    async fn wake(&self, _owner: &str) {}

    fn woken(&self) -> Arc<Notify> {
        Arc::clone(&self.woken)
    }
}

/// A receiver of notices, as followers hold it.
pub type Notices = broadcast::Receiver<Arc<Notice>>;
