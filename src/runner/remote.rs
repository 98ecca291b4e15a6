//! Commands for runs this replica does not hold. A caller may reach any replica: a cancel,
//! tool outputs or approvals for a run held elsewhere are checked against what is stored
//! (with the refusals the owner would give), kept in the store, and only then answered;
//! the owner takes them on its next look ([`Runner::follow_commands`]).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::live::{not_waiting, Awaited, Delivery};
use super::{RunError, Runner, CANCEL_WAIT};
use crate::domain::{MessageId, MessageStatus, RunCommand, RunEvent, Tenant};

/// How often a replica looks for commands kept for the runs it holds, when no notice
/// wakes it sooner.
pub const COMMANDS_EVERY: Duration = Duration::from_secs(1);

/// How often a cancel sent to another replica's run looks whether the run has ended.
const ENDED_EVERY: Duration = Duration::from_millis(50);

impl Runner {
    /// Cancels a run this replica does not hold: keeps the cancel for its owner, then
    /// waits (briefly) for the run to record its end; returns the status it has then.
    pub(super) async fn cancel_elsewhere(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<MessageStatus, RunError> {
        let status = self.stored_status(tenant, message_id).await?;
        let owner = match status.is_terminal() {
            true => None,
            false => {
                self.store
                    .send_command(tenant, message_id, &RunCommand::Cancel)
                    .await?
            }
        };
        let Some(owner) = owner else {
            return Err(RunError::NotRunning {
                id: message_id.to_string(),
                status: self.stored_status(tenant, message_id).await?,
            });
        };
        self.bus.wake(&owner).await;
        let waited = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(ENDED_EVERY).await;
            let status = self.stored_status(tenant, message_id).await?;
            if status.is_terminal() || waited.elapsed() >= CANCEL_WAIT {
                return Ok(status);
            }
        }
    }

    /// Delivers outputs or decisions to a run this replica does not hold: the run must be
    /// waiting for them and every call it waits on (as its last event names them) answered.
    pub(super) async fn deliver_elsewhere(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        delivery: Delivery,
    ) -> Result<(), RunError> {
        let awaited = delivery.awaited();
        let waiting = match awaited {
            Awaited::ToolOutputs => MessageStatus::WaitingToolOutputs,
            Awaited::Approval => MessageStatus::WaitingApproval,
        };
        if self.stored_status(tenant, message_id).await? != waiting {
            return Err(not_waiting(awaited));
        }
        let ids = match self.stored_wait(tenant, message_id).await? {
            Some((kind, ids)) if kind == awaited => ids,
            _ => return Err(not_waiting(awaited)),
        };
        delivery.answers(&ids)?;
        let command = match delivery {
            Delivery::Outputs(outputs) => RunCommand::Outputs(outputs),
            Delivery::Decisions(decisions) => RunCommand::Decisions(decisions),
        };
        let Some(owner) = self
            .store
            .send_command(tenant, message_id, &command)
            .await?
        else {
            return Err(not_waiting(awaited));
        };
        self.bus.wake(&owner).await;
        Ok(())
    }

    /// What a waiting message waits for, as its last asking event names it: usually its
    /// last event; after a takeover, the new owner may have announced others before it
    /// asks again.
    async fn stored_wait(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<Option<(Awaited, Vec<String>)>, RunError> {
        if let Some(last) = self.store.last_event(tenant, message_id).await? {
            if let Some(wait) = waited_on(&last.event) {
                return Ok(Some(wait));
            }
        }
        let events = self.store.list_events(tenant, message_id, 0).await?;
        Ok(last_wait(&events))
    }

    /// The message's status as stored.
    pub(super) async fn stored_status(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<MessageStatus, RunError> {
        let message = self
            .store
            .get_message(tenant, message_id)
            .await?
            .ok_or_else(|| RunError::not_found("message", message_id))?;
        Ok(message.status)
    }

    /// Takes the commands kept for the runs in progress here and hands each to its run;
    /// returns how many it took. Not while runs taken over are being started: their
    /// commands would find no run here yet, and be lost.
    pub async fn take_commands(&self) -> Result<usize, RunError> {
        let _taking = self.taking.lock().await;
        let taken = self.store.take_commands(&self.live.ids()).await?;
        let count = taken.len();
        self.dispatch(taken).await;
        Ok(count)
    }

    /// Hands each command taken to its run here. An answer its run can no longer take
    /// because the run is being handed over is kept again, for the next owner: an answer
    /// a caller was told was kept is never dropped.
    pub(super) async fn dispatch(&self, taken: Vec<crate::store::TakenCommand>) {
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
    pub(super) async fn keep_for_next_owner(
        &self,
        tenant: &Tenant,
        message: MessageId,
        delivery: Delivery,
    ) {
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
    pub async fn follow_commands(&self, stop: CancellationToken) {
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

/// What `event` asks the caller for, if it asks: the kind of answer and the calls.
fn waited_on(event: &RunEvent) -> Option<(Awaited, Vec<String>)> {
    let (awaited, calls) = if let RunEvent::ToolCallsRequired { calls, .. } = event {
        (Awaited::ToolOutputs, calls)
    } else if let RunEvent::ApprovalRequired { calls, .. } = event {
        (Awaited::Approval, calls)
    } else {
        return None;
    };
    Some((awaited, calls.iter().map(|call| call.id.clone()).collect()))
}

/// What the last asking event of `events` asks for.
pub(super) fn last_wait(events: &[crate::domain::EventEnvelope]) -> Option<(Awaited, Vec<String>)> {
    events
        .iter()
        .rev()
        .find_map(|event| waited_on(&event.event))
}
