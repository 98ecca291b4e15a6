//! The runs in progress, by message, so callers can find one to follow, cancel or answer.
//!
//! A run holds a [`Registration`] for as long as it is in progress; dropping it (the run's
//! task ended, however it ended) takes the run off the registry, so no path can leave a
//! finished run registered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::mailbox::Mailbox;
use crate::domain::{EventEnvelope, MessageId, Tenant};

/// A run in progress, as callers outside it reach it.
#[derive(Clone)]
pub struct LiveRun {
    /// Owner of the message.
    pub tenant: Tenant,
    /// Fires to stop the run.
    pub cancel: CancellationToken,
    /// Publishes the run's events once they are durable.
    pub events: broadcast::Sender<EventEnvelope>,
    /// Where `SubmitToolOutputs` delivers the results the run waits for.
    pub mailbox: Mailbox,
}

impl LiveRun {
    /// A new subscription to this run's events.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            events: self.events.subscribe(),
        }
    }
}

/// A live run's channel, as a follower needs it.
pub struct Subscription {
    pub(super) events: broadcast::Receiver<EventEnvelope>,
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
    fn lock(&self) -> MutexGuard<'_, HashMap<MessageId, LiveRun>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a run until the returned guard is dropped.
    pub fn register(self: &Arc<Self>, id: MessageId, run: LiveRun) -> Registration {
        self.lock().insert(id, run);
        Registration {
            runs: Arc::clone(self),
            id,
        }
    }

    /// The run of `id` if it is in progress and belongs to `tenant`.
    pub fn get(&self, tenant: &Tenant, id: MessageId) -> Option<LiveRun> {
        self.lock()
            .get(&id)
            .filter(|run| &run.tenant == tenant)
            .cloned()
    }

    /// The messages of every run in progress here.
    pub fn ids(&self) -> Vec<MessageId> {
        self.lock().keys().copied().collect()
    }
}

/// Keeps a run registered; dropping it forgets the run, and its followers then see the
/// channel close once the run's last sender is gone.
pub struct Registration {
    runs: Arc<LiveRuns>,
    id: MessageId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> LiveRun {
        LiveRun {
            tenant: Tenant::default_tenant(),
            cancel: CancellationToken::new(),
            events: broadcast::channel(1).0,
            mailbox: Mailbox::default(),
        }
    }

    #[test]
    fn a_run_is_registered_until_its_guard_is_dropped_and_only_for_its_tenant() {
        let runs = Arc::new(LiveRuns::default());
        let id = MessageId::new();
        let guard = runs.register(id, run());
        assert!(runs.get(&Tenant::default_tenant(), id).is_some());
        let other = Tenant::parse("other").unwrap();
        assert!(runs.get(&other, id).is_none());
        drop(guard);
        assert!(runs.get(&Tenant::default_tenant(), id).is_none());
    }
}
