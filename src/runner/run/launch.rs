//! What a run needs to start sub-agents: the launcher (the runner is one), the run's place
//! in its tree, and the id a call's child gets, so an owner taking the run over finds the
//! child instead of starting it again (and never another call's child).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::domain::{CallAt, MessageId, ParentLink, RunBudget, Tenant, ToolCallRecord};
use crate::runner::error::RunError;
use crate::runner::live::EventStream;
use crate::runner::settings::RunnerSettings;
use crate::runner::spec::{RunSpec, SubAgentRef};
use crate::runner::tree::{Tree, TreeHandle};

/// A sub-agent run to start for a call.
pub struct ChildStart {
    /// The tenant of the whole tree.
    pub tenant: Tenant,
    /// The end user of the top run.
    pub user: String,
    /// Which stored agent and version.
    pub agent: SubAgentRef,
    /// What the model asked of it.
    pub input: String,
    /// This run and the call.
    pub parent: ParentLink,
    /// The stored agents above the child, outermost first.
    pub lineage: Vec<String>,
    /// The child's message id, derived from this run's message and the call.
    pub message_id: MessageId,
    /// The id a release that derived it from the call's id alone gave the child: a run
    /// it started and this one took over finds its child there.
    pub legacy_id: MessageId,
    /// This run's budget left for the child: its own is held within it.
    pub budget: RunBudget,
    /// The tree the child joins.
    pub tree: TreeHandle,
    /// The tenant's `max_concurrent_child_runs` (0: the server's default).
    pub max_children: u32,
}

/// A sub-agent run started (or, for a run taken over, found already started).
pub struct ChildRun {
    /// Whether it had started before (this run was taken over): its events this run
    /// already carried are not carried again.
    pub found: bool,
    /// Its message.
    pub message_id: MessageId,
    /// The version that runs.
    pub agent_version: u32,
    /// Its events from the first.
    pub events: EventStream,
}

/// Starts sub-agent runs; the runner is one.
#[async_trait::async_trait]
pub trait Launcher: Send + Sync {
    /// Starts the run `child` asks for under `cancel`, or follows it from its first event
    /// when a message of its id exists (this run was taken over after starting it).
    async fn start_child(
        &self,
        child: ChildStart,
        cancel: CancellationToken,
    ) -> Result<ChildRun, RunError>;
}

/// What a run needs to call stored agents: where they start, which it may call, and where
/// it sits in its tree.
#[derive(Clone)]
pub struct Family {
    /// Starts the children.
    pub launcher: Arc<dyn Launcher>,
    /// The stored agents the model may call, by id.
    pub sub_agents: Vec<SubAgentRef>,
    /// This run's depth (0 for a top run).
    pub depth: u32,
    /// The stored agents of this run and those above it.
    pub lineage: Vec<String>,
    /// The deepest a child may sit (`runner.max_agent_depth`).
    pub max_depth: u32,
    /// The tenant of the tree.
    pub tenant: Tenant,
    /// The end user of the tree.
    pub user: String,
    /// The runs of the tree, counted against `runner.max_tree_runs` and `_total`.
    pub tree: Arc<Tree>,
    /// The tenant's `max_concurrent_child_runs` (0: the server's default).
    pub max_children: u32,
}

impl Family {
    /// What a run of `spec` needs to call its sub-agents, started by `launcher`, in a tree
    /// bounded by `settings` unless it is a child in a tree already.
    pub fn of(spec: &RunSpec, launcher: Arc<dyn Launcher>, settings: &RunnerSettings) -> Self {
        let mut lineage = spec.lineage.clone();
        if let Some(pinned) = &spec.pinned {
            lineage.push(pinned.agent_id.clone());
        }
        Family {
            launcher,
            sub_agents: spec.agent.sub_agents.clone(),
            depth: spec.parent.as_ref().map_or(0, |parent| parent.depth),
            lineage,
            max_depth: settings.max_agent_depth,
            tenant: spec.tenant.clone(),
            user: spec.user.clone(),
            tree: spec.tree.as_ref().map_or_else(
                || Tree::new(settings.max_tree_runs, settings.max_tree_runs_total),
                |tree| Arc::clone(&tree.0),
            ),
            max_children: spec.limits.max_concurrent_child_runs,
        }
    }
}

/// The message id of the child a call starts: the same for the same run, round, place in
/// the round, call id and arguments, so an owner that takes the run over finds the child
/// instead of starting it again, while a model that numbers its calls per round (`call_0`
/// every round, as local servers do) or repeats an id within one round gets a child per
/// call.
pub fn child_message_id(parent: MessageId, at: CallAt, call: &ToolCallRecord) -> MessageId {
    digest_id(&format!(
        "child:{parent}:{}:{}:{}:{}",
        at.position, at.index, call.id, call.arguments
    ))
}

/// The id releases that derived it from the parent and the call's id alone gave a child.
pub fn legacy_child_message_id(parent: MessageId, call_id: &str) -> MessageId {
    digest_id(&format!("child:{parent}:{call_id}"))
}

fn digest_id(text: &str) -> MessageId {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    MessageId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, arguments: &str) -> ToolCallRecord {
        ToolCallRecord {
            id: id.into(),
            name: "researcher".into(),
            provider: "agent".into(),
            arguments: arguments.into(),
            observation: None,
            meta: None,
        }
    }

    #[test]
    fn a_child_id_is_the_same_for_the_same_call_only() {
        let parent = MessageId::new();
        let at = |position, index| CallAt { position, index };
        let first = call("call_0", r#"{"input": "a"}"#);
        assert_eq!(
            child_message_id(parent, at(1, 0), &first),
            child_message_id(parent, at(1, 0), &first)
        );
        for other in [
            child_message_id(parent, at(2, 0), &first),
            child_message_id(parent, at(1, 1), &first),
            child_message_id(parent, at(1, 0), &call("call_0", r#"{"input": "b"}"#)),
            child_message_id(parent, at(1, 0), &call("call_1", r#"{"input": "a"}"#)),
            child_message_id(MessageId::new(), at(1, 0), &first),
        ] {
            assert_ne!(child_message_id(parent, at(1, 0), &first), other);
        }
        assert_eq!(
            legacy_child_message_id(parent, "c1"),
            legacy_child_message_id(parent, "c1")
        );
    }
}
