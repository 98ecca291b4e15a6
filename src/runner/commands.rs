//! Commands other replicas kept for the runs this one holds (a cancel, an interruption,
//! tool outputs, approvals), as the replica takes them, handed to their runs; an answer a run being
//! handed over cannot take is kept again for its next owner.

use tokio_util::sync::CancellationToken;

use super::live::{not_waiting, Delivery, LiveRuns};
use crate::domain::{MessageId, RunCommand, Tenant};
use crate::store::Store;

/// The commands other replicas kept for the runs this one holds, taken and handed to them.
pub(super) struct Commands<'a> {
    /// Where an answer is kept again for a run's next owner.
    pub store: &'a Store,
    /// The runs in progress here.
    pub live: &'a LiveRuns,
    /// Fires when this process hands its runs over.
    pub draining: &'a CancellationToken,
}

impl Commands<'_> {
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
                (Some(run), RunCommand::Interrupt(interruption)) => {
                    run.mailbox.interrupt(interruption);
                    run.cancel.cancel();
                    continue;
                }
                (Some(run), RunCommand::Steer) => {
                    run.mailbox.steer_waits();
                    continue;
                }
                // A run that left here reads its steers where it goes on.
                (None, RunCommand::Cancel | RunCommand::Interrupt(_) | RunCommand::Steer) => {
                    continue
                }
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
}
