//! Commands for runs this replica does not hold. A caller may reach any replica: a cancel,
//! an interruption, a steer's notice, tool outputs or approvals for a run held elsewhere are checked against what is stored
//! (with the refusals the owner would give), kept in the store, and only then answered;
//! the owner takes them on its next look (`commands.rs`).

use std::time::Duration;

use super::error::RunError;
use super::live::{not_waiting, Awaited, Delivery};
use crate::cluster::Bus;
use crate::domain::{MessageId, MessageStatus, RunCommand, RunEvent, Tenant};
use crate::store::Store;

/// How long `Cancel` waits for a run to record its end before answering.
pub(super) const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// How often a cancel sent to another replica's run looks whether the run has ended.
const ENDED_EVERY: Duration = Duration::from_millis(50);

/// Runs this replica does not hold, reached through what is stored and the bus to their
/// owner.
pub(super) struct Elsewhere<'a> {
    /// Where the runs' records are, and commands are kept for their owners.
    pub store: &'a Store,
    /// Wakes an owner for a command kept for it.
    pub bus: &'a dyn Bus,
}

impl Elsewhere<'_> {
    /// Cancels a run this replica does not hold (found not ended): keeps the cancel for its
    /// owner, then waits (briefly) for the run to record its end; returns the status it has
    /// then.
    pub async fn cancel(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
    ) -> Result<MessageStatus, RunError> {
        let owner = self
            .store
            .send_command(tenant, message_id, &RunCommand::Cancel)
            .await?;
        // Ended since it was found.
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

    /// Tells a run this replica does not hold of a newer run of its conversation (an
    /// interruption; a steer waiting to join it): keeps `command` for its owner and wakes
    /// it. Nothing is kept for a run that is no longer running.
    pub async fn notify(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        command: RunCommand,
    ) -> Result<(), RunError> {
        if let Some(owner) = self
            .store
            .send_command(tenant, message_id, &command)
            .await?
        {
            self.bus.wake(&owner).await;
        }
        Ok(())
    }

    /// Delivers outputs or decisions to a run this replica does not hold, found with
    /// `status`: the run must be waiting for them and every call it waits on (as its last
    /// event names them) answered.
    pub async fn deliver(
        &self,
        tenant: &Tenant,
        message_id: MessageId,
        delivery: Delivery,
        status: MessageStatus,
    ) -> Result<(), RunError> {
        let awaited = delivery.awaited();
        let waiting = match awaited {
            Awaited::ToolOutputs => MessageStatus::WaitingToolOutputs,
            Awaited::Approval => MessageStatus::WaitingApproval,
        };
        if status != waiting {
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
    pub async fn stored_status(
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
