//! The runner as the launcher of sub-agent runs: a child is a run like any other, started
//! by reference to its stored agent, linked to its parent and taking no tenant slot (its
//! parent's slot covers the tree); it counts against the tenant's
//! `max_concurrent_child_runs` and its tree's bounds instead.

use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::run::{ChildRun, ChildStart, Launcher};
use super::spec::{AgentReference, RunSpec};
use super::{pin, Runner};
use crate::domain::{Message, MessageId, Tenant};
use crate::store::Store;

#[async_trait::async_trait]
impl Launcher for Runner {
    async fn start_child(
        &self,
        child: ChildStart,
        cancel: CancellationToken,
    ) -> Result<ChildRun, RunError> {
        if let Some(message) = started_before(&self.store, &child).await? {
            // Started before this run was taken over: followed, never started again, and
            // cancelled with this run wherever it runs now.
            let events = self.attach(&child.tenant, message.id, 0).await?;
            cancel_with(self, cancel, child.tenant.clone(), message.id);
            return Ok(ChildRun {
                found: true,
                message_id: message.id,
                agent_version: message.agent.map_or(0, |pin| pin.version),
                events,
            });
        }
        let ChildStart {
            tenant,
            user,
            agent,
            input,
            parent,
            lineage,
            message_id,
            legacy_id: _,
            budget,
            tree,
            max_children,
        } = child;
        let mut spec = RunSpec::new(tenant, input);
        spec.user = user;
        spec.reference = Some(AgentReference {
            pick: agent.pick(),
            agent_id: agent.agent_id,
            overrides: Default::default(),
        });
        spec.parent = Some(parent);
        spec.lineage = lineage;
        spec.message_id = Some(message_id);
        spec.tree = Some(tree);
        spec.limits.max_concurrent_child_runs = max_children;
        let mut spec = pin::pin(&self.store, spec).await?;
        spec.agent.budget = spec.agent.budget.within(&budget);
        let agent_version = spec.pinned.as_ref().map_or(0, |pin| pin.version);
        let handle = self.start(spec, cancel).await?;
        Ok(ChildRun {
            found: false,
            message_id,
            agent_version,
            events: handle.events,
        })
    }
}

/// Cancels the run of `message` (here or on whichever replica holds it) once `cancel`
/// fires: how a run taken over keeps its children under its own cancellation.
fn cancel_with(runner: &Runner, cancel: CancellationToken, tenant: Tenant, message: MessageId) {
    let runner = runner.clone();
    runner.tracker.clone().spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = runner.shutdown.cancelled() => return,
        }
        if let Err(err) = runner.cancel(&tenant, message).await {
            tracing::debug!(error = %err, child = %message, "a sub-agent's run was not cancelled with its parent");
        }
    });
}

/// The child `child` names, when its call started it before this run was taken over:
/// by its id, or by the id an earlier release gave it when that run's call (id and
/// input) is this one and it recorded no place (so a reused call id finds nothing).
async fn started_before(store: &Store, child: &ChildStart) -> Result<Option<Message>, RunError> {
    let tenant = &child.tenant;
    if let Some(message) = store.get_message(tenant, child.message_id).await? {
        return Ok(Some(message));
    }
    let legacy = store.get_message(tenant, child.legacy_id).await?;
    Ok(legacy.filter(|message| {
        message.parent.as_deref().is_some_and(|link| {
            link.message_id == child.parent.message_id
                && link.tool_call_id == child.parent.tool_call_id
                && link.call_at.is_none()
        }) && message.query == child.input
    }))
}
