//! The runner as the launcher of sub-agent runs: a child is a run like any other, started
//! by reference to its stored agent, linked to its parent and taking no tenant slot (its
//! parent's slot covers the tree).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::error::RunError;
use super::run::{ChildRun, ChildStart, Family, Launcher};
use super::spec::{AgentReference, RunSpec};
use super::{pin, Runner};

#[async_trait::async_trait]
impl Launcher for Runner {
    async fn start_child(
        &self,
        child: ChildStart,
        cancel: CancellationToken,
    ) -> Result<ChildRun, RunError> {
        if let Some(message) = self
            .store
            .get_message(&child.tenant, child.message_id)
            .await?
        {
            // Started before this run was taken over: followed, never started again.
            let events = self.attach(&child.tenant, message.id, 0).await?;
            return Ok(ChildRun {
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
        let spec = pin::pin(&self.store, spec).await?;
        let agent_version = spec.pinned.as_ref().map_or(0, |pin| pin.version);
        let handle = self.start(spec, cancel).await?;
        Ok(ChildRun {
            agent_version,
            events: handle.events,
        })
    }
}

impl Runner {
    /// What a run of `spec` needs to call its sub-agents; `None` when it names none.
    pub(super) fn family_of(&self, spec: &RunSpec) -> Option<Family> {
        if spec.agent.sub_agents.is_empty() {
            return None;
        }
        let mut lineage = spec.lineage.clone();
        if let Some(pinned) = &spec.pinned {
            lineage.push(pinned.agent_id.clone());
        }
        Some(Family {
            launcher: Arc::new(self.clone()),
            sub_agents: spec.agent.sub_agents.clone(),
            depth: spec.parent.as_ref().map_or(0, |parent| parent.depth),
            lineage,
            max_depth: self.settings.max_agent_depth,
            tenant: spec.tenant.clone(),
            user: spec.user.clone(),
        })
    }
}
