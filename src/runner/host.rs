//! The runner as a run that waits before it starts (queued, steering, interrupting) sees
//! it: the pieces it reads and how it goes live and starts. A trait, so those waits stand
//! below the facade that chooses them instead of reaching back up into it.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::RunError;
use super::launch::{Launch, Opened};
use super::live::{self, EventStream, LiveRuns, Mailbox};
use super::remote::Elsewhere;
use super::settings::RunnerSettings;
use crate::cluster::{Bus, Poll};
use crate::domain::{Message, MessageId, Tenant};
use crate::llm::ModelRegistry;
use crate::store::{Fence, Store};
use crate::telemetry::Metrics;
use crate::tools::ToolRegistry;

/// The runner's shared pieces, borrowed.
pub(super) struct Parts<'a> {
    pub store: &'a Store,
    pub models: &'a Arc<ModelRegistry>,
    pub tools: &'a Arc<ToolRegistry>,
    pub settings: &'a RunnerSettings,
    pub live: &'a LiveRuns,
    pub bus: &'a dyn Bus,
    pub metrics: &'a Metrics,
    /// Fires when the service shuts down.
    pub shutdown: &'a CancellationToken,
    /// Fires when the service starts to hand its runs over.
    pub draining: &'a CancellationToken,
    /// Where the runner's tasks run, so shutdown waits for them.
    pub tracker: &'a TaskTracker,
}

/// What a waiting run needs of the runner that holds it.
pub(super) trait Host: Clone + Send + Sync + 'static {
    /// The runner's pieces.
    fn parts(&self) -> Parts<'_>;

    /// Registers a run as live here and opens its event stream after `after_seq`; returns
    /// them with its first follower's subscription, taken before anything is emitted.
    fn open_live(
        &self,
        tenant: &Tenant,
        message: &Message,
        fence: Fence,
        cancel: &CancellationToken,
        mailbox: Mailbox,
        after_seq: u64,
    ) -> (Opened, live::Subscription);

    /// Hands a run registered by [`Host::open_live`] to its own task.
    fn spawn_run(&self, launch: Launch, opened: Opened);

    /// The events of a message after `after_seq`, wherever it runs.
    fn attach(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        after_seq: u64,
    ) -> impl Future<Output = Result<EventStream, RunError>> + Send;

    /// Runs this replica does not hold.
    fn elsewhere(&self) -> Elsewhere<'_> {
        let parts = self.parts();
        Elsewhere {
            store: parts.store,
            bus: parts.bus,
        }
    }

    /// Reads `message` from the store for all its followers here: what the bus's shared
    /// poll and fill ask for.
    fn last_seq_of(&self, tenant: &Tenant, message: MessageId) -> Poll {
        Arc::new(live::StoredMessage::new(
            self.parts().store.clone(),
            tenant.clone(),
            message,
        ))
    }
}
