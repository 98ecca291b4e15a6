//! Conversations and messages, with the per-conversation index and the running markers.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use super::{decode, encode, keys, Store, StoreError};
use crate::domain::{
    Conversation, ConversationId, Message, MessageId, MessageStatus, RunFailure, Tenant,
};

fn transaction_error(err: TransactionError<StoreError>) -> StoreError {
    match err {
        TransactionError::Abort(err) => err,
        TransactionError::Storage(err) => StoreError::Sled(err),
    }
}

impl Store {
    /// Reads a conversation.
    pub fn get_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Conversation>, StoreError> {
        self.conversations
            .get(keys::conversation(tenant, id))?
            .map(|bytes| decode("conversations", &bytes))
            .transpose()
    }

    /// Writes a new message as running, with its conversation when that is new, in one
    /// transaction so no message ever exists without its conversation and index entry.
    pub fn insert_message(
        &self,
        tenant: &Tenant,
        conversation: Option<&Conversation>,
        message: &Message,
    ) -> Result<(), StoreError> {
        let conversation = conversation
            .map(|c| encode("conversations", c).map(|v| (keys::conversation(tenant, c.id), v)))
            .transpose()?;
        let message_key = keys::message(tenant, message.id);
        let message_value = encode("messages", message)?;
        let index_key = keys::conversation_message(tenant, message.conversation_id, message.seq);
        (
            &self.conversations,
            &self.messages,
            &self.conversation_messages,
            &self.running,
        )
            .transaction(|(conversations, messages, index, running)| {
                if let Some((key, value)) = &conversation {
                    conversations.insert(key.as_slice(), value.as_slice())?;
                }
                messages.insert(message_key.as_slice(), message_value.as_slice())?;
                index.insert(index_key.as_slice(), message.id.as_bytes().as_slice())?;
                running.insert(message_key.as_slice(), &[] as &[u8])?;
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })
            .map_err(transaction_error)
    }

    /// Overwrites a message; a terminal status also clears its running marker.
    pub fn update_message(&self, tenant: &Tenant, message: &Message) -> Result<(), StoreError> {
        let key = keys::message(tenant, message.id);
        let value = encode("messages", message)?;
        let terminal = message.status.is_terminal();
        (&self.messages, &self.running)
            .transaction(|(messages, running)| {
                messages.insert(key.as_slice(), value.as_slice())?;
                if terminal {
                    running.remove(key.as_slice())?;
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            })
            .map_err(transaction_error)
    }

    /// Reads a message.
    pub fn get_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<Message>, StoreError> {
        self.messages
            .get(keys::message(tenant, id))?
            .map(|bytes| decode("messages", &bytes))
            .transpose()
    }

    /// Up to `limit` messages of a conversation with `seq > after_seq`, oldest first.
    pub fn list_messages(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let prefix = keys::conversation_messages(tenant, conversation);
        let start = keys::conversation_message(tenant, conversation, after_seq.saturating_add(1));
        let mut out = Vec::new();
        for entry in self.conversation_messages.range(start..) {
            let (key, value) = entry?;
            if !key.starts_with(&prefix) || out.len() == limit {
                break;
            }
            let Ok(bytes) = <[u8; 16]>::try_from(value.as_ref()) else {
                continue;
            };
            if let Some(message) =
                self.get_message(tenant, MessageId(uuid::Uuid::from_bytes(bytes)))?
            {
                out.push(message);
            }
        }
        Ok(out)
    }

    /// Marks every message a previous process left running as interrupted. Called once at
    /// start-up, before any run can begin; returns how many were found.
    pub fn interrupt_unfinished(&self) -> Result<usize, StoreError> {
        let mut count = 0;
        for entry in self.running.iter() {
            let (key, _) = entry?;
            let Some((tenant, id)) = keys::parse_message(&key) else {
                self.running.remove(&key)?;
                continue;
            };
            if let Some(mut message) = self.get_message(&tenant, id)? {
                message.status = MessageStatus::Interrupted;
                message.error = Some(RunFailure {
                    code: "interrupted".to_owned(),
                    message: "the server stopped while this message was running".to_owned(),
                });
                message.updated_at = crate::domain::now();
                self.update_message(&tenant, &message)?;
                count += 1;
            } else {
                self.running.remove(&key)?;
            }
        }
        Ok(count)
    }
}
