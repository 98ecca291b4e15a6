//! The bus without NATS: what peers say through the store itself (a shared database's
//! notifications). The store hands on what it hears; this bus tells followers here to read
//! the store, and wakes the command loop. Announcing and waking need nothing here: the
//! commits that keep events and commands notify by themselves.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, Notify};

use super::{Bus, Notice, Poll, Watch, Watchers};
use crate::domain::{EventEnvelope, MessageId};
use crate::store::{Heard, Store};
use crate::tasks::Tasks;

/// The bus over the store's notifications.
pub struct Notifications {
    /// Where unstored events go to peers.
    store: Store,
    watchers: Arc<Watchers>,
    woken: Arc<Notify>,
    /// The relay.
    tasks: Tasks,
}

impl Notifications {
    /// The bus over what `heard` hands on, relayed on a task of its own until the store
    /// stops sending.
    pub fn over(heard: broadcast::Receiver<Heard>, store: Store) -> Arc<Self> {
        let bus = Arc::new(Self {
            store,
            watchers: Arc::default(),
            woken: Arc::default(),
            tasks: Tasks::default(),
        });
        let relaying = relay(heard, Arc::clone(&bus.watchers), Arc::clone(&bus.woken));
        bus.tasks.spawn_until_stopped(relaying);
        bus
    }
}

#[async_trait]
impl Bus for Notifications {
    /// The commit already notified; events it does not store (`seq` 0) go through the
    /// store's notifications themselves.
    async fn announce(&self, message: MessageId, events: &[EventEnvelope]) {
        if events.first().is_some_and(|event| event.seq == 0) {
            self.store.flash(message, events).await;
        }
    }

    async fn watch(&self, message: MessageId, poll: Poll) -> Watch {
        // The store hears every run at once: nothing to subscribe per message.
        self.watchers.watch(message, || None, poll)
    }

    /// The command's commit already notified.
    async fn wake(&self, _owner: &str) {}

    fn woken(&self) -> Arc<Notify> {
        Arc::clone(&self.woken)
    }

    async fn stop(&self, within: Duration) {
        self.watchers.stop_beside(&self.tasks, within).await;
    }
}

/// Hands what the store hears to followers and the command loop here. A hearer that fell
/// behind missed notices: every follower reads the store.
async fn relay(mut heard: broadcast::Receiver<Heard>, watchers: Arc<Watchers>, woken: Arc<Notify>) {
    loop {
        match heard.recv().await {
            Ok(Heard::Committed { message, last_seq }) => {
                watchers.notify(
                    message,
                    Notice {
                        last_seq,
                        events: Vec::new(),
                    },
                );
            }
            Ok(Heard::Flashed { message, events }) => {
                watchers.notify(
                    message,
                    Notice {
                        last_seq: 0,
                        events,
                    },
                );
            }
            Ok(Heard::Missed) | Err(RecvError::Lagged(_)) => watchers.notify_all(),
            Ok(Heard::Woken) => woken.notify_one(),
            Err(RecvError::Closed) => return,
        }
    }
}
