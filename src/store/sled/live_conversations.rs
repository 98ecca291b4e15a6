//! Each conversation's live messages, kept in memory: one process opens the embedded store,
//! so this process sees every start and every end.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use super::{keys, Embedded};
use crate::domain::{ConversationId, Message, MessageId, MessageStatus, Tenant};
use crate::store::error::StoreError;

/// The live (not yet ended) messages of each conversation by `seq`. Written as a message
/// takes its place (under the conversation's order lock) and as it ends; rebuilt from the
/// running markers when the store opens. An entry is only a hint until checked against the
/// message itself (see [`super::Embedded`]'s `live_in`), so one left by a write that never
/// became durable does not keep a conversation busy.
#[derive(Default)]
pub(super) struct LiveConversations {
    by_conversation: Mutex<HashMap<(Tenant, ConversationId), BTreeMap<u64, MessageId>>>,
}

impl LiveConversations {
    /// Notes `message` as live in its conversation.
    pub fn started(&self, tenant: &Tenant, message: &Message) {
        self.lock()
            .entry((tenant.clone(), message.conversation_id))
            .or_default()
            .insert(message.seq, message.id);
    }

    /// Forgets `message`, which ended or went away.
    pub fn ended(&self, tenant: &Tenant, conversation: ConversationId, seq: u64) {
        let mut live = self.lock();
        let key = (tenant.clone(), conversation);
        if let Some(messages) = live.get_mut(&key) {
            messages.remove(&seq);
            if messages.is_empty() {
                live.remove(&key);
            }
        }
    }

    /// Forgets every message of a deleted conversation.
    pub fn forget(&self, tenant: &Tenant, conversation: ConversationId) {
        self.lock().remove(&(tenant.clone(), conversation));
    }

    /// The conversation's live messages, oldest first, as noted.
    pub fn of(&self, tenant: &Tenant, conversation: ConversationId) -> Vec<(u64, MessageId)> {
        self.lock()
            .get(&(tenant.clone(), conversation))
            .map(|messages| messages.iter().map(|(seq, id)| (*seq, *id)).collect())
            .unwrap_or_default()
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(Tenant, ConversationId), BTreeMap<u64, MessageId>>>
    {
        self.by_conversation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Embedded {
    /// The live messages of a conversation placed before `before_seq`, oldest first, each
    /// with whether it is queued. A noted one that is not live on disk (a write lost when
    /// the store was opened again) is forgotten on the way.
    pub(super) fn live_in(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        before_seq: u64,
    ) -> Result<Vec<(MessageId, bool)>, StoreError> {
        let mut live = Vec::new();
        for (seq, id) in self.live.of(tenant, conversation) {
            if seq >= before_seq {
                break;
            }
            match self.get_past_message(tenant, id)? {
                Some(message) if !message.status.is_terminal() => {
                    live.push((id, message.status == MessageStatus::Queued));
                }
                Some(_) | None => self.live.ended(tenant, conversation, seq),
            }
        }
        Ok(live)
    }

    /// Notes every live message a running marker names: the store's state when it opens.
    pub(super) fn note_live_messages(&self) -> Result<(), StoreError> {
        for entry in self.t()?.running.iter() {
            let (key, _) = entry?;
            let Some((tenant, id)) = keys::parse_message(&key) else {
                continue;
            };
            if let Some(message) = self.get_message(&tenant, id)? {
                if !message.status.is_terminal() {
                    self.live.started(&tenant, &message);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversation_is_live_until_its_last_message_ends() {
        let live = LiveConversations::default();
        let tenant = Tenant::default_tenant();
        let conversation = ConversationId::new();
        let message = |seq| {
            let mut message = Message::running(
                conversation,
                "q".into(),
                crate::domain::StrategyKind::FunctionCalling,
                "p".into(),
                "m".into(),
            );
            message.seq = seq;
            message
        };
        let (first, second) = (message(1), message(2));
        live.started(&tenant, &second);
        live.started(&tenant, &first);
        assert_eq!(
            live.of(&tenant, conversation),
            [(1, first.id), (2, second.id)]
        );
        live.ended(&tenant, conversation, 1);
        assert_eq!(live.of(&tenant, conversation), [(2, second.id)]);
        live.ended(&tenant, conversation, 2);
        assert!(live.of(&tenant, conversation).is_empty());
        assert!(
            live.lock().is_empty(),
            "no entry is left for an idle conversation"
        );
    }
}
