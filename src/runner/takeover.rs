//! Going on with a run a sweep took over here (its owner was lost: a process that died,
//! stalled past its lease, or stopped): its spec, agent and records read back, and the
//! launch of its task from its last durable round, under the new fence. The replica room
//! decides which runs; this reads what a run needs to go on.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::launch::Launch;
use super::live::Delivery;
use super::settings::RunnerSettings;
use super::spec::{RunSpec, StoredSpec};
use super::{prepare, run};
use crate::domain::{
    EventEnvelope, Message, MessageId, MessageStatus, RunCommand, RunEvent, Tenant, TenantLimits,
};
use crate::llm::ModelRegistry;
use crate::store::{Adopted, Store, StoreError};
use crate::telemetry::TraceParent;
use crate::tools::ToolRegistry;

/// What a run taken over is rebuilt from.
pub(super) struct Pickup<'a> {
    /// Where its records are.
    pub store: &'a Store,
    /// The models its agent names.
    pub models: &'a Arc<ModelRegistry>,
    /// The tools its agent names.
    pub tools: &'a Arc<ToolRegistry>,
    /// How runs run here.
    pub settings: &'a RunnerSettings,
}

/// What a run taken over goes on as.
pub(super) enum Picked {
    /// A run that had started: its task, from its last durable round.
    Run(Box<Launch>),
    /// A run still queued: its wait, from its last event.
    Queued(Box<super::queue::Enqueued>),
}

impl Pickup<'_> {
    /// The launch of a run taken over, with the commands `kept` for it while it had no
    /// owner: a cancel among them ends it `CANCELLED` before anything is made again; an
    /// answer waits for its wait. `None` when it ended meanwhile. `cancel` becomes the
    /// run's token.
    pub async fn launch(
        &self,
        adopted: Adopted,
        kept: &[RunCommand],
        cancel: CancellationToken,
    ) -> Result<Option<Picked>, RunError> {
        let Adopted {
            tenant,
            message: id,
            fence,
            handed_over,
        } = adopted;
        let message = self
            .store
            .get_message(&tenant, id)
            .await?
            .ok_or_else(|| RunError::not_found("message", id))?;
        if message.status.is_terminal() {
            return Ok(None);
        }
        // A spec an earlier version kept in another form (or none) cannot rebuild the run.
        let stored = read_spec(self.store, &tenant, id)
            .await
            .map_err(|_| RunError::NotResumable)?
            .ok_or(RunError::NotResumable)?;
        let events = self.store.list_events(&tenant, id, 0).await?;
        if message.status == MessageStatus::Queued {
            let mut spec = resumed_spec(tenant, &message, stored, &cancel);
            if kept.iter().any(|c| matches!(c, RunCommand::Cancel)) {
                cancel.cancel();
            }
            return Ok(Some(Picked::Queued(Box::new(super::queue::Enqueued {
                left: spec.deadline.take(),
                spec,
                message,
                cancel,
                fence,
                after_seq: events.last().map_or(0, |event| event.seq),
                interrupted: interruption(kept),
            }))));
        }
        let thoughts = self.store.all_thoughts(&tenant, id).await?;
        // Answers that come before the run asks again are kept for it.
        let waiting = matches!(
            message.status,
            MessageStatus::WaitingToolOutputs | MessageStatus::WaitingApproval
        );
        let coming = waiting.then(|| super::remote::last_wait(&events)).flatten();
        let mut resumption = run::rebuild(thoughts, &events);
        resumption.resume.handed_over = handed_over;
        resumption.resume.waited = waited_for_caller(&message, &events);
        let spec = resumed_spec(tenant, &message, stored, &cancel);
        let cancelled = kept
            .iter()
            .any(|c| matches!(c, RunCommand::Cancel | RunCommand::Interrupt(_)));
        if cancelled || self.parent_has_ended(&spec.tenant, &message).await? {
            cancel.cancel();
        }
        let agent = prepare::prepare_resumed(
            self.store,
            self.models,
            self.tools,
            &spec,
            self.settings,
            &message,
        )
        .await?;
        Ok(Some(Picked::Run(Box::new(Launch {
            spec,
            agent,
            message,
            cancel,
            fence,
            resumption: Some(resumption),
            early: early_answer(kept),
            coming,
            interrupted: interruption(kept),
        }))))
    }

    /// Whether `message` is a sub-agent's run whose parent has ended: nobody reads it, so it
    /// is not resumed but cancelled.
    async fn parent_has_ended(&self, tenant: &Tenant, message: &Message) -> Result<bool, RunError> {
        let Some(link) = message.parent.as_deref() else {
            return Ok(false);
        };
        let parent = self.store.get_message(tenant, link.message_id).await?;
        Ok(parent.is_none_or(|parent| parent.status.is_terminal()))
    }
}

/// What the caller answered while the run had no owner, for its wait: the last answer kept.
fn early_answer(kept: &[RunCommand]) -> Option<Delivery> {
    kept.iter().rev().find_map(|command| match command {
        RunCommand::Outputs(outputs) => Some(Delivery::Outputs(outputs.clone())),
        RunCommand::Decisions(decisions) => Some(Delivery::Decisions(decisions.clone())),
        RunCommand::Cancel | RunCommand::Interrupt(_) | RunCommand::Steer => None,
    })
}

/// The first newer run that stopped the run while it had no owner: it ends so.
fn interruption(kept: &[RunCommand]) -> Option<crate::domain::Interruption> {
    kept.iter().find_map(|command| match command {
        RunCommand::Interrupt(interruption) => Some(*interruption),
        RunCommand::Cancel
        | RunCommand::Outputs(_)
        | RunCommand::Decisions(_)
        | RunCommand::Steer => None,
    })
}

/// What the run of `message` was started with, as kept with it; `None` for messages of
/// earlier versions.
pub(super) async fn read_spec(
    store: &Store,
    tenant: &Tenant,
    message: MessageId,
) -> Result<Option<StoredSpec>, RunError> {
    let Some(stored) = store.get_run_spec(tenant, message).await? else {
        return Ok(None);
    };
    let spec = serde_json::from_value(stored).map_err(|source| StoreError::Codec {
        record: "specs",
        source,
    })?;
    Ok(Some(spec))
}

/// How long a run taken over while it waited for its caller had waited: since the event
/// that asked (the wait's limit counts from there, whoever holds the run).
fn waited_for_caller(message: &Message, events: &[EventEnvelope]) -> std::time::Duration {
    if !matches!(
        message.status,
        MessageStatus::WaitingToolOutputs | MessageStatus::WaitingApproval
    ) {
        return std::time::Duration::ZERO;
    }
    let asked = events.iter().rev().find(|event| {
        matches!(
            event.event,
            RunEvent::ToolCallsRequired { .. } | RunEvent::ApprovalRequired { .. }
        )
    });
    asked
        .and_then(|event| (crate::domain::now() - event.created_at).to_std().ok())
        .unwrap_or_default()
}

/// The spec of a run taken over, as kept with its message. A run whose client asked for a
/// cancel when its stream drops lost that stream with its owner: it is cancelled. Its
/// deadline stays the moment it was.
fn resumed_spec(
    tenant: Tenant,
    message: &Message,
    stored: StoredSpec,
    cancel: &CancellationToken,
) -> RunSpec {
    let remaining = stored.deadline.map(|at| {
        (at - crate::domain::now())
            .to_std()
            .unwrap_or(std::time::Duration::ZERO)
    });
    if stored.cancel_on_disconnect || remaining.is_some_and(|left| left.is_zero()) {
        cancel.cancel();
    }
    RunSpec {
        tenant,
        conversation_id: Some(message.conversation_id),
        query: message.query.clone(),
        inputs: message.inputs.clone(),
        user: message.user.clone(),
        agent: stored.agent,
        files: stored.files,
        client_tools: stored.client_tools,
        idempotency: None,
        deadline: remaining.filter(|left| !left.is_zero()),
        trace_parent: stored
            .trace_parent
            .as_deref()
            .map(TraceParent::from_header)
            .unwrap_or_default(),
        cancel_on_disconnect: false,
        limits: TenantLimits::default(),
        reference: None,
        pinned: message.agent.as_deref().cloned(),
        parent: message.parent.as_deref().cloned(),
        lineage: stored.lineage,
        message_id: Some(message.id),
        tree: None,
        // A run taken over has its place in the conversation already.
        conversation_policy: None,
    }
}
