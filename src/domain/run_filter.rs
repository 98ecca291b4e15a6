//! Which of a tenant's runs a listing returns.

use chrono::{DateTime, Utc};

use super::{ConversationId, FinishReason, Message, MessageId, MessageStatus};

/// What a listing of runs keeps; every condition set must hold. A run is a message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Any of these statuses; empty: any status.
    pub statuses: Vec<MessageStatus>,
    /// The stored agent that answered.
    pub agent_id: Option<String>,
    /// Its version; only with `agent_id`.
    pub agent_version: Option<u32>,
    /// The conversation.
    pub conversation: Option<ConversationId>,
    /// The end user the run was made for.
    pub user: Option<String>,
    /// The run whose sub-agent runs to list; `None` lists top-level runs only.
    pub parent: Option<MessageId>,
    /// How the run ended.
    pub finish_reason: Option<FinishReason>,
    /// Made at or after.
    pub created_after: Option<DateTime<Utc>>,
    /// Made before.
    pub created_before: Option<DateTime<Utc>>,
}

/// The index a listing reads in order, chosen by the filter: the narrowest one that holds
/// every run the filter can keep, so a page reads no more than it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunIndex {
    /// One conversation's messages, by their place in it.
    Conversation(ConversationId),
    /// One run's sub-agent runs.
    Children(MessageId),
    /// The runs not yet ended (running or waiting), top-level only.
    Live,
    /// One stored agent's top-level runs.
    Agent,
    /// Every top-level run.
    All,
}

impl RunFilter {
    /// Whether `message` is one of the runs the filter keeps.
    pub fn keeps(&self, message: &Message) -> bool {
        let pin = message.agent.as_deref();
        let parent = message.parent.as_deref().map(|link| link.message_id);
        (self.statuses.is_empty() || self.statuses.contains(&message.status))
            && self
                .agent_id
                .as_ref()
                .is_none_or(|id| pin.is_some_and(|pin| &pin.agent_id == id))
            && self
                .agent_version
                .is_none_or(|version| pin.is_some_and(|pin| pin.version == version))
            && self
                .conversation
                .is_none_or(|id| message.conversation_id == id)
            && self.user.as_ref().is_none_or(|user| &message.user == user)
            && parent == self.parent
            && self
                .finish_reason
                .is_none_or(|reason| message.finish_reason == Some(reason))
            && self
                .created_after
                .is_none_or(|after| message.created_at >= after)
            && self
                .created_before
                .is_none_or(|before| message.created_at < before)
    }

    /// The index to read.
    pub fn index(&self) -> RunIndex {
        if let Some(id) = self.conversation {
            return RunIndex::Conversation(id);
        }
        if let Some(parent) = self.parent {
            return RunIndex::Children(parent);
        }
        let live_only =
            !self.statuses.is_empty() && self.statuses.iter().all(|status| !status.is_terminal());
        if live_only {
            RunIndex::Live
        } else if self.agent_id.is_some() {
            RunIndex::Agent
        } else {
            RunIndex::All
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_statuses_read_the_live_index_and_others_the_whole() {
        let waiting = RunFilter {
            statuses: vec![
                MessageStatus::WaitingApproval,
                MessageStatus::WaitingToolOutputs,
            ],
            agent_id: Some("a".into()),
            ..RunFilter::default()
        };
        assert_eq!(waiting.index(), RunIndex::Live);
        let ended = RunFilter {
            statuses: vec![MessageStatus::Running, MessageStatus::Failed],
            ..RunFilter::default()
        };
        assert_eq!(ended.index(), RunIndex::All);
        let agent = RunFilter {
            agent_id: Some("a".into()),
            ..RunFilter::default()
        };
        assert_eq!(agent.index(), RunIndex::Agent);
    }
}
