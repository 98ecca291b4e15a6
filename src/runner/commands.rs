//! Commands other replicas kept for the runs this one holds (a cancel, tool outputs,
//! approvals): taken when a peer wakes this replica, and every second in case a wake-up was
//! lost, and handed to their runs; an answer a run being handed over cannot take is kept
//! again for its next owner.

use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::live::{not_waiting, Delivery, LiveRuns};
use crate::cluster::Bus;
use crate::domain::{MessageId, RunCommand, Tenant};
use crate::store::Store;

/// How often a replica looks for commands kept for the runs it holds, when no notice
/// wakes it sooner.
pub const COMMANDS_EVERY: Duration = Duration::from_secs(1);

/// The commands other replicas kept for the runs this one holds, taken and handed to them.
pub(super) struct Commands<'a> {
    /// Where the commands are kept.
    pub store: &'a Store,
    /// Wakes this replica for a command kept for it.
    pub bus: &'a dyn Bus,
    /// The runs in progress here.
    pub live: &'a LiveRuns,
    /// Held while commands are taken, and while runs taken over are started.
    pub taking: &'a Mutex<()>,
    /// Fires when this process hands its runs over.
    pub draining: &'a CancellationToken,
}

impl Commands<'_> {
    /// Takes the commands kept for the runs in progress here and hands each to its run;
    /// returns how many it took. Not while runs taken over are being started: their
    /// commands would find no run here yet, and be lost.
    pub async fn take(&self) -> Result<usize, RunError> {
        let _taking = self.taking.lock().await;
        let taken = self.store.take_commands(&self.live.ids()).await?;
        let count = taken.len();
        self.dispatch(taken).await;
        Ok(count)
    }

    /// Hands each command taken to its run here. An answer its run can no longer take
    /// because the run is being handed over is kept again, for the next owner: an answer
    /// a caller was told was kept is never dropped.
    pub async fn dispatch(&self, taken: Vec<crate::store::TakenCommand>) {
        for taken in taken {
            let run = self.live.get(&taken.tenant, taken.message);
            let delivery = match (&run, taken.command) {
                (Some(run), RunCommand::Cancel) => {
                    run.cancel.cancel();
                    continue;
                }
                (None, RunCommand::Cancel) => continue,
                (_, RunCommand::Outputs(outputs)) => Delivery::Outputs(outputs),
                (_, RunCommand::Decisions(decisions)) => Delivery::Decisions(decisions),
            };
            // Checked when it was kept; a run that stopped waiting since refuses it.
            let refused = match &run {
                Some(run) => run.mailbox.deliver(delivery.clone()).err(),
                None => Some(not_waiting(delivery.awaited())),
            };
            let Some(err) = refused else { continue };
            if self.draining.is_cancelled() {
                self.keep_for_next_owner(&taken.tenant, taken.message, delivery)
                    .await;
            } else {
                tracing::info!(error = %err, message_id = %taken.message, "a delivery from another replica came too late");
            }
        }
    }

    /// Keeps `delivery` again for whichever process goes on with the run of `message`
    /// (this one is handing it over).
    async fn keep_for_next_owner(&self, tenant: &Tenant, message: MessageId, delivery: Delivery) {
        let command = match delivery {
            Delivery::Outputs(outputs) => RunCommand::Outputs(outputs),
            Delivery::Decisions(decisions) => RunCommand::Decisions(decisions),
        };
        if let Err(err) = self.store.send_command(tenant, message, &command).await {
            tracing::error!(error = %err, message_id = %message, "an answer for a run being handed over could not be kept for its next owner");
        }
    }

    /// Takes commands whenever a peer wakes this replica for one, and every
    /// [`COMMANDS_EVERY`] in case a wake-up was lost, until `stop`.
    pub async fn follow(&self, stop: CancellationToken) {
        let woken = self.bus.woken();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(COMMANDS_EVERY) => {}
                () = woken.notified() => {}
            }
            if let Err(err) = self.take().await {
                tracing::debug!(error = %err, "could not look for commands from other replicas");
            }
        }
    }
}
