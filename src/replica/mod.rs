//! What this process does as one replica among others, on one task tracker: at start it
//! takes the runs a previous process of it left, then it keeps sweeping for runs whose
//! replica is gone (taking them over: [`takeover`]) and takes the commands other replicas
//! keep for the runs it holds (a cancel, tool outputs, approvals), when a peer wakes it and
//! every second in case a wake-up was lost. It reaches the runner through a small interface: the runs in
//! progress here, go on with this run, hand these commands over, cancel that run.
//!
//! The lease is the store's: its heartbeat renews this process's claim whoever opens the
//! store (a test, the bench, a tool), for as long as the store is open, so fences stay
//! valid through a shutdown's drain; runs hold it as a [`Lease`](crate::domain::Lease).

mod takeover;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::Bus;
use crate::domain::Adoption;
use crate::runner::{RunError, Runner};
use crate::store::Store;
pub use takeover::Adoptions;
use takeover::Takeover;

/// How often runs whose replica is gone are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often a replica looks for commands kept for the runs it holds, when no notice
/// wakes it sooner.
pub const COMMANDS_EVERY: Duration = Duration::from_secs(1);

/// This process as a replica: the runs it may take and the commands it takes.
#[derive(Clone)]
pub struct Replica {
    runner: Runner,
    store: Store,
    bus: Arc<dyn Bus>,
    adoption: Adoption,
    /// Held while commands are taken, and while runs taken over are started: their
    /// commands would otherwise find no run here yet, and be lost.
    taking: Arc<Mutex<()>>,
}

impl Replica {
    /// The replica that runs on `runner`, reads `store`, wakes peers over `bus` and treats
    /// runs whose owner was lost as `adoption` says.
    pub fn new(runner: Runner, store: Store, bus: Arc<dyn Bus>, adoption: Adoption) -> Self {
        Self {
            runner,
            store,
            bus,
            adoption,
            taking: Arc::default(),
        }
    }

    /// Takes the runs a previous process left (before any run starts here), then sweeps and
    /// follows commands on `tasks` until `stop`.
    pub async fn start(
        self,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) -> Result<(), RunError> {
        self.adopt_at_start().await?;
        tasks.spawn(self.clone().sweep(stop.clone()));
        tasks.spawn(self.follow_commands(stop.clone()));
        Ok(())
    }

    /// Takes the runs a previous process of this replica left: resumed, or ended
    /// interrupted, as configured.
    async fn adopt_at_start(&self) -> Result<(), RunError> {
        let adopted = self.adopt_orphans().await?;
        if adopted.interrupted > 0 {
            tracing::warn!(
                interrupted = adopted.interrupted,
                "messages left running by a previous process are now interrupted"
            );
        }
        if adopted.resumed > 0 {
            tracing::warn!(
                resumed = adopted.resumed,
                "messages left running by a previous process go on from their last durable round"
            );
        }
        Ok(())
    }

    /// Takes over (or ends) the runs of replicas whose heartbeat lapsed, every second until
    /// `stop`, so no message stays running without a live owner. (On the embedded store,
    /// which one process opens, there are none after start-up.)
    async fn sweep(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(SWEEP_EVERY) => {}
            }
            if let Err(err) = self.adopt_orphans().await {
                tracing::debug!(error = %err, "could not look for runs whose replica is gone");
            }
        }
    }

    /// Takes the runs no live process owns, as configured: each taken over goes on here
    /// from its last durable round; one that cannot ends, saying why.
    pub async fn adopt_orphans(&self) -> Result<Adoptions, RunError> {
        let takeover = Takeover {
            runner: &self.runner,
            store: &self.store,
            bus: self.bus.as_ref(),
            taking: &self.taking,
        };
        takeover.adopt_orphans(self.adoption).await
    }

    /// Takes the commands kept for the runs in progress here and hands each to its run;
    /// returns how many it took. Not while runs taken over are being started: their
    /// commands would find no run here yet, and be lost.
    pub async fn take_commands(&self) -> Result<usize, RunError> {
        let _taking = self.taking.lock().await;
        let taken = self.store.take_commands(&self.runner.live_ids()).await?;
        let count = taken.len();
        self.runner.hand_commands(taken).await;
        Ok(count)
    }

    /// Takes commands whenever a peer wakes this replica for one, and every
    /// [`COMMANDS_EVERY`] in case a wake-up was lost, until `stop`.
    async fn follow_commands(self, stop: CancellationToken) {
        let woken = self.bus.woken();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(COMMANDS_EVERY) => {}
                () = woken.notified() => {}
            }
            if let Err(err) = self.take_commands().await {
                tracing::debug!(error = %err, "could not look for commands from other replicas");
            }
        }
    }
}
