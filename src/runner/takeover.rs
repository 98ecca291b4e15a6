//! Runs whose owner was lost (a process that died, stalled past its lease, or stopped):
//! taken from the store by a sweep and resumed here from their last durable round, by the
//! task that would have run them anyway.

use super::live::Delivery;
use super::spec::{RunSpec, StoredSpec};
use super::{prepare, run, Launch, RunError, Runner};
use crate::domain::{
    EventEnvelope, Message, MessageStatus, RunCommand, RunEvent, RunFailure, TenantLimits,
};
use crate::domain::{MessageId, Tenant};
use crate::store::{Adopted, Adoption, Burst, Record};
use crate::telemetry::TraceParent;

/// What one sweep did with the runs no live process owned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Adoptions {
    /// Runs it ended interrupted.
    pub interrupted: usize,
    /// Runs it took over and resumed here.
    pub resumed: usize,
}

impl Runner {
    /// Takes the runs no live process owns, as `adoption` says: each taken over goes on
    /// here from its last durable round; one that cannot (its agent names what no longer
    /// exists, say) ends as failed, saying why.
    pub async fn adopt_orphans(&self, adoption: Adoption) -> Result<Adoptions, RunError> {
        let taking = self.taking.lock().await;
        let swept = self.store.take_orphans(adoption).await?;
        let mut adoptions = Adoptions {
            interrupted: swept.interrupted.len(),
            resumed: 0,
        };
        self.resume_adopted(swept.adopted, &mut adoptions).await?;
        drop(taking);
        self.stop_children_of(&swept.interrupted).await;
        Ok(adoptions)
    }

    /// Cancels the running children of runs a sweep ended, wherever they run: their
    /// parent's task, which would have cancelled them, is gone, and nobody reads them.
    async fn stop_children_of(&self, ended: &[(Tenant, MessageId)]) {
        for (tenant, parent) in ended {
            let children = match self.store.running_children(tenant, *parent).await {
                Ok(children) => children,
                Err(err) => {
                    tracing::warn!(error = %err, message_id = %parent, "the children of a run that lost its owner could not be found to stop them");
                    continue;
                }
            };
            for child in children {
                // Spawned: a cancel waits for its run to end, and the sweep goes on meanwhile.
                let (runner, tenant) = (self.clone(), tenant.clone());
                self.tracker.spawn(async move {
                    if let Err(err) = runner.cancel(&tenant, child).await {
                        tracing::warn!(error = %err, child = %child, "a child of a run that lost its owner was not cancelled");
                    }
                });
            }
        }
    }

    /// Resumes the runs a sweep took over here, each with the commands kept for it.
    async fn resume_adopted(
        &self,
        adopted: Vec<Adopted>,
        adoptions: &mut Adoptions,
    ) -> Result<(), RunError> {
        if adopted.is_empty() {
            return Ok(());
        }
        // Commands kept while the runs had no owner are now this replica's: a cancel
        // among them wins over resuming its run.
        let mut runs = self.live.ids();
        runs.extend(adopted.iter().map(|adopted| adopted.message));
        let (theirs, others): (Vec<_>, Vec<_>) = self
            .store
            .take_commands(&runs)
            .await?
            .into_iter()
            .partition(|taken| {
                adopted
                    .iter()
                    .any(|a| a.message == taken.message && a.tenant == taken.tenant)
            });
        for adopted in adopted {
            let kept: Vec<&RunCommand> = theirs
                .iter()
                .filter(|taken| taken.message == adopted.message)
                .map(|taken| &taken.command)
                .collect();
            let cancelled = kept.iter().any(|c| matches!(c, RunCommand::Cancel));
            // What the caller answered while the run had no owner waits for its wait.
            let early = kept.into_iter().rev().find_map(|command| match command {
                RunCommand::Outputs(outputs) => Some(Delivery::Outputs(outputs.clone())),
                RunCommand::Decisions(decisions) => Some(Delivery::Decisions(decisions.clone())),
                RunCommand::Cancel => None,
            });
            match self.resume(adopted.clone(), cancelled, early).await {
                Ok(()) => adoptions.resumed += 1,
                Err(err) => {
                    tracing::error!(error = %err, message_id = %adopted.message, "a run taken over cannot go on; it ends");
                    let (status, failure) = unresumable(&err);
                    self.end_unresumable(adopted, status, failure).await?;
                }
            }
        }
        self.commands().dispatch(others).await;
        Ok(())
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

    /// Ends a run taken over that cannot go on, under its new fence, so it does not stay
    /// running with an owner that does not run it.
    async fn end_unresumable(
        &self,
        adopted: Adopted,
        status: MessageStatus,
        failure: RunFailure,
    ) -> Result<(), RunError> {
        let Some(mut message) = self
            .store
            .get_message(&adopted.tenant, adopted.message)
            .await?
        else {
            return Ok(());
        };
        let last = self
            .store
            .last_event(&adopted.tenant, adopted.message)
            .await?
            .map_or(0, |event| event.seq);
        let end = message.end_stranded(status, failure, last);
        let burst = Burst {
            records: vec![Record::Message(message)],
            events: vec![end],
        };
        self.store
            .commit(&adopted.tenant, &adopted.fence, &burst)
            .await?;
        self.bus.announce(adopted.message, &burst.events).await;
        Ok(())
    }

    /// Resumes one run taken over: its spec, agent and records read back, its task
    /// started under the new fence; `cancelled` when a cancel was kept for it meanwhile,
    /// so it ends `CANCELLED` before anything is made again.
    async fn resume(
        &self,
        adopted: Adopted,
        cancelled: bool,
        early: Option<Delivery>,
    ) -> Result<(), RunError> {
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
            return Ok(());
        }
        // A spec an earlier version kept in another form (or none) cannot rebuild the run.
        let stored = self
            .stored_spec(&tenant, id)
            .await
            .map_err(|_| RunError::NotResumable)?;
        let thoughts = self.store.all_thoughts(&tenant, id).await?;
        let events = self.store.list_events(&tenant, id, 0).await?;
        let waited = waited_for_caller(&message, &events);
        // Answers that come before the run asks again are kept for it.
        let waiting = matches!(
            message.status,
            MessageStatus::WaitingToolOutputs | MessageStatus::WaitingApproval
        );
        let coming = waiting.then(|| super::remote::last_wait(&events)).flatten();
        let mut resumption = run::rebuild(thoughts, &events);
        resumption.resume.handed_over = handed_over;
        resumption.resume.waited = waited;
        let cancel = self.run_token();
        let stored = stored.ok_or(RunError::NotResumable)?;
        let spec = resumed_spec(tenant, &message, stored, &cancel);
        if cancelled || self.parent_has_ended(&spec.tenant, &message).await? {
            cancel.cancel();
        }
        let agent = prepare::prepare_resumed(
            &self.store,
            &self.models,
            &self.tools,
            &spec,
            &self.settings,
            &message,
        )
        .await?;
        self.launch_task(Launch {
            spec,
            agent,
            message,
            cancel,
            fence,
            resumption: Some(resumption),
            early,
            coming,
        });
        Ok(())
    }
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

/// How a run that cannot go on ends: one of an earlier version is interrupted, as runs
/// left running always were; one whose agent no longer resolves (a provider removed since)
/// fails, saying why.
fn unresumable(err: &RunError) -> (MessageStatus, RunFailure) {
    if let RunError::NotResumable = err {
        return (
            MessageStatus::Interrupted,
            RunFailure {
                code: "interrupted".to_owned(),
                message: format!("its process stopped while it was running, and {err}"),
            },
        );
    }
    (
        MessageStatus::Failed,
        RunFailure {
            code: "resume_failed".to_owned(),
            message: format!("the run lost its owner and could not go on: {err}"),
        },
    )
}

/// The spec of a run taken over, as kept with its message. A run whose client asked for a
/// cancel when its stream drops lost that stream with its owner: it is cancelled. Its
/// deadline stays the moment it was.
fn resumed_spec(
    tenant: crate::domain::Tenant,
    message: &Message,
    stored: StoredSpec,
    cancel: &tokio_util::sync::CancellationToken,
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
    }
}
