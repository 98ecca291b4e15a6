//! A family of runs as the store holds it: where answers given on a top run go (its own
//! run, or a sub-agent's below it), which conversations its sub-agents' runs are in, and
//! whether any run of the tree may wait on its caller. Functions of the store alone.

use super::error::RunError;
use super::pin;
use super::run::{child_message_id, legacy_child_message_id};
use crate::domain::{CallAt, ConversationId, FieldError, MessageId, Tenant};
use crate::store::{PageSize, Store};
use crate::tools::AGENT_PROVIDER;

/// How far up a sub-agent's run is followed to its top run at most: deeper than any
/// `runner.max_agent_depth` allows.
const MAX_ANCESTRY: usize = 16;

/// The conversations of the sub-agent runs that `conversation`'s messages started, and
/// theirs in turn, deepest first: deleting a conversation deletes them too. A child's
/// id follows from its parent's message and call (or, from earlier releases, the call's
/// id), so no index is kept.
pub(super) async fn child_conversations(
    store: &Store,
    tenant: &Tenant,
    conversation: ConversationId,
) -> Result<Vec<ConversationId>, RunError> {
    let mut found = Vec::new();
    let mut pending = vec![(conversation, 0usize)];
    while let Some((at, depth)) = pending.pop() {
        if depth >= MAX_ANCESTRY {
            continue;
        }
        for child in children_of(store, tenant, at).await? {
            if !found.contains(&child) {
                found.push(child);
                pending.push((child, depth + 1));
            }
        }
    }
    found.reverse();
    Ok(found)
}

/// The conversations of the children `conversation`'s messages started.
async fn children_of(
    store: &Store,
    tenant: &Tenant,
    conversation: ConversationId,
) -> Result<Vec<ConversationId>, RunError> {
    let mut children = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .list_messages(tenant, conversation, after, PageSize::FOR_THE_RUNNER)
            .await?;
        for message in &page.items {
            after = message.seq;
            for thought in store.all_thoughts(tenant, message.id).await? {
                for (index, call) in thought.tool_calls.iter().enumerate() {
                    if call.provider != AGENT_PROVIDER {
                        continue;
                    }
                    let at = CallAt {
                        position: thought.position,
                        index: u32::try_from(index).unwrap_or(u32::MAX),
                    };
                    for id in [
                        child_message_id(message.id, at, call),
                        legacy_child_message_id(message.id, &call.id),
                    ] {
                        if let Some(child) = store.get_message(tenant, id).await? {
                            children.push(child.conversation_id);
                        }
                    }
                }
            }
        }
        if !page.more {
            return Ok(children);
        }
    }
}

/// Refuses `target` unless it is `top` or a sub-agent's run below it.
pub(super) async fn check_below(
    store: &Store,
    tenant: &Tenant,
    top: MessageId,
    target: MessageId,
) -> Result<(), RunError> {
    let mut at = target;
    for _ in 0..MAX_ANCESTRY {
        if at == top {
            return Ok(());
        }
        let parent = store
            .get_message(tenant, at)
            .await?
            .and_then(|message| message.parent);
        match parent {
            Some(parent) => at = parent.message_id,
            None => break,
        }
    }
    Err(FieldError::new(
        "message_id",
        format!("{target} is not a sub-agent run of message {top}"),
    )
    .into())
}

/// Items grouped by the run they go to (`None` is `top`), `top`'s first, in order.
pub(super) fn by_target<T>(
    top: MessageId,
    items: Vec<(Option<MessageId>, T)>,
) -> Vec<(MessageId, Vec<T>)> {
    let mut groups: Vec<(MessageId, Vec<T>)> = Vec::new();
    for (target, item) in items {
        let target = target.unwrap_or(top);
        match groups.iter_mut().find(|(at, _)| *at == target) {
            Some((_, group)) => group.push(item),
            None => groups.push((target, vec![item])),
        }
    }
    if groups.is_empty() {
        // Nothing at all is still an answer to `top`, which says what it lacks.
        groups.push((top, Vec::new()));
    }
    groups.sort_by_key(|(at, _)| *at != top);
    groups
}

/// Whether a run of `definition` may wait on its caller anywhere in its tree: a tool
/// that asks for approval or a client tool, in it or in any sub-agent below it (as the
/// versions resolve now). A sub-agent that cannot be read is passed over: its call
/// would be a tool error, never a wait.
pub(super) async fn tree_waits_on_caller(
    store: &Store,
    tenant: &Tenant,
    definition: &super::spec::AgentDefinition,
) -> bool {
    if waits_on_caller(definition) {
        return true;
    }
    pin::tree_below(store, tenant, &definition.agent.sub_agents)
        .await
        .iter()
        .flatten()
        .any(waits_on_caller)
}

/// Whether calls of `definition` itself wait on the caller (approvals or client tools).
pub fn waits_on_caller(definition: &super::spec::AgentDefinition) -> bool {
    definition
        .agent
        .tools
        .iter()
        .any(|tool| tool.require_approval)
        || !definition.client_tools.is_empty()
}
