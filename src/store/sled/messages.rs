//! Conversations and messages, with the per-conversation index and the running markers.

use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::pieces::{self, Owner};
use super::{decode, encode, keys, run_index, Embedded, StoreError};
use crate::domain::{
    Conversation, ConversationId, IdempotencyRecord, Message, MessageId, PastMessage, Tenant,
};
use crate::store::contract::{Inserted, NewMessage};
use crate::store::conversation_rule::{queue_behind, ConversationRule};

/// The longest answer an ended message keeps in its own record: a record is written whole
/// (not in pieces), and sixteen of them in a leaf stay well below sled's blob threshold.
const ANSWER_INLINE: usize = 1024;

/// A message as stored: its answer kept apart in the `answers` tree when it has one
/// (records of earlier versions, and an ended message's short answer, have it inline and
/// no flag).
#[derive(Serialize)]
struct StoredMessageRef<'a> {
    #[serde(flatten)]
    message: &'a Message,
    answer_apart: bool,
}

pub(super) fn remove_prefix(tree: &sled::Tree, prefix: &[u8]) -> Result<(), StoreError> {
    for key in tree.scan_prefix(prefix).keys() {
        tree.remove(key?)?;
    }
    Ok(())
}

/// The agent index entry of `message`, when a stored agent answered it at the top.
pub(super) fn agent_key(tenant: &Tenant, message: &Message) -> Option<Vec<u8>> {
    let pin = message
        .agent
        .as_ref()
        .filter(|_| message.parent.is_none())?;
    Some(keys::agent_message(tenant, &pin.agent_id, message.id))
}

/// The running marker of `message`: admission tells sub-agents' runs apart by it.
fn running_marker(message: &Message) -> &'static [u8] {
    if message.parent.is_some() {
        super::admission::CHILD_MARKER
    } else if message.status == crate::domain::MessageStatus::Queued {
        super::admission::QUEUED_MARKER
    } else {
        &[]
    }
}

/// How a new message takes its place: its conversation's rule, and the tenant limits'
/// refusal, which holds only if it would start now.
struct Place {
    rule: ConversationRule,
    refused: Option<crate::store::contract::Refusal>,
}

fn transaction_error(err: TransactionError<StoreError>) -> StoreError {
    match err {
        TransactionError::Abort(err) => err,
        TransactionError::Storage(err) => err.into(),
    }
}

impl Embedded {
    /// Reads a conversation.
    pub fn get_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Conversation>, StoreError> {
        self.t()?
            .conversations
            .get(keys::conversation(tenant, id))?
            .map(|bytes| decode("conversations", &bytes))
            .transpose()
    }

    /// Reads what an idempotency key points at.
    pub fn get_idempotency(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.t()?
            .idempotency
            .get(keys::named(tenant, key))?
            .map(|bytes| decode("idempotency", &bytes))
            .transpose()
    }

    /// Writes a new message as running, with its conversation when that is new and its
    /// idempotency key when it has one, and gives it its place in the conversation: `seq`
    /// one past the conversation's last (1 in a new one) and `ordinal` one past its newest
    /// message's (0, unknown, when that one's is). The place is taken and written under the
    /// conversation's lock, so two runs started at once never share or skip a number, and a
    /// reader paging by `seq` never passes a message written after it looked.
    ///
    /// The spec is written first: a message in the store always has it (a crash between
    /// the two leaves a spec no message names, which nothing reads). Without a key the
    /// records are plain inserts, in an order that a crash can only cut into a state
    /// start-up recovery mends (see [`Embedded::take_unfinished`]): the conversation,
    /// the running marker, the message, then its index entry. A sled
    /// transaction would make them atomic but forces two log writes and holds a lock
    /// every other writer waits on, on every run. With a key, one transaction writes them
    /// all: of two requests racing with one key only one may win, and the loser must find
    /// the winner's message whole.
    pub fn insert_message(&self, new: NewMessage<'_>) -> Result<Inserted, StoreError> {
        let NewMessage {
            tenant,
            conversation,
            message,
            spec,
            idempotency,
            admission,
        } = new;
        // A retry of an earlier request follows its run, whatever the limits say now.
        if let Some((key, _)) = idempotency {
            if let Some(existing) = self.t()?.idempotency.get(keys::named(tenant, key))? {
                return Ok(Inserted::KeyTaken(decode("idempotency", &existing)?));
            }
        }
        // A message that will be queued is not admitted yet: the tenant's limits may refuse
        // it only if it would start now.
        let (admitted, refused) = match self.admit(tenant, admission, message.parent.is_some())? {
            Ok(admitted) => (Some(admitted), None),
            Err(refusal) if matches!(admission.rule, ConversationRule::Queue { .. }) => {
                (None, Some(refusal))
            }
            Err(refusal) => return Ok(Inserted::Refused(refusal)),
        };
        self.put_run_spec(tenant, message.id, spec)?;
        let place = Place {
            rule: admission.rule,
            refused,
        };
        let inserted = self.insert_in_place(tenant, conversation, message, idempotency, place);
        match inserted {
            Ok(Inserted::Yes) => admitted.into_iter().for_each(|admitted| admitted.started()),
            Ok(Inserted::Queued { .. }) => {}
            Ok(Inserted::KeyTaken(_) | Inserted::Refused(_)) | Err(_) => {
                self.remove_run_spec(tenant, message.id)?;
            }
        }
        inserted
    }

    /// The records of [`Embedded::insert_message`] after the spec.
    fn insert_in_place(
        &self,
        tenant: &Tenant,
        conversation: Option<&Conversation>,
        message: &mut Message,
        idempotency: Option<(&str, &IdempotencyRecord)>,
        place: Place,
    ) -> Result<Inserted, StoreError> {
        let t = self.t()?;
        let _place = self.order.lock(message.conversation_id);
        let mut admitted = Inserted::Yes;
        if place.rule.checks() {
            let live = self.live_in(tenant, message.conversation_id, u64::MAX)?;
            match place.rule.decide(&live) {
                Ok(None) => {}
                Ok(Some(ahead)) => {
                    queue_behind(message, &live);
                    admitted = Inserted::Queued { ahead };
                }
                Err(refusal) => return Ok(Inserted::Refused(refusal)),
            }
        }
        if let (Inserted::Yes, Some(refusal)) = (&admitted, place.refused) {
            return Ok(Inserted::Refused(refusal));
        }
        let (seq, ordinal) = self.next_place(tenant, message.conversation_id)?;
        message.seq = seq;
        message.ordinal = ordinal;
        let message = &*message;
        let conversation = conversation
            .map(|c| encode("conversations", c).map(|v| (keys::conversation(tenant, c.id), v)))
            .transpose()?;
        let message_key = keys::message(tenant, message.id);
        let message_value = self.encode_message(&message_key, message)?;
        let index_key = keys::conversation_message(tenant, message.conversation_id, message.seq);
        // Written first: an entry whose message never was is skipped when listed, while a
        // message without its entry would never be.
        let agent_key = agent_key(tenant, message);
        if let Some(key) = &agent_key {
            t.agent_messages.insert(key.as_slice(), &[] as &[u8])?;
        }
        let (runs, run_key) = run_index::entry_of(tenant, message);
        runs.of(&t).insert(run_key.as_slice(), &[] as &[u8])?;
        let Some((key, record)) = idempotency else {
            if let Some((key, value)) = &conversation {
                t.conversations.insert(key.as_slice(), value.as_slice())?;
            }
            t.running
                .insert(message_key.as_slice(), running_marker(message))?;
            t.messages
                .insert(message_key.as_slice(), message_value.as_slice())?;
            t.conversation_messages
                .insert(index_key.as_slice(), message.id.as_bytes().as_slice())?;
            self.live.started(tenant, message);
            return Ok(admitted);
        };
        let idempotency = (keys::named(tenant, key), encode("idempotency", record)?);
        let trees = (
            &t.conversations,
            &t.messages,
            &t.conversation_messages,
            &t.running,
            &t.idempotency,
        );
        let result = trees.transaction(|(conversations, messages, index, running, keys_tree)| {
            let (key, value) = &idempotency;
            if let Some(existing) = keys_tree.get(key.as_slice())? {
                let record = decode("idempotency", &existing)
                    .map_err(ConflictableTransactionError::Abort)?;
                return Ok(Inserted::KeyTaken(record));
            }
            keys_tree.insert(key.as_slice(), value.as_slice())?;
            if let Some((key, value)) = &conversation {
                conversations.insert(key.as_slice(), value.as_slice())?;
            }
            messages.insert(message_key.as_slice(), message_value.as_slice())?;
            index.insert(index_key.as_slice(), message.id.as_bytes().as_slice())?;
            running.insert(message_key.as_slice(), running_marker(message))?;
            Ok::<_, ConflictableTransactionError<StoreError>>(admitted.clone())
        });
        let inserted = result.map_err(transaction_error)?;
        if matches!(inserted, Inserted::Yes | Inserted::Queued { .. }) {
            self.live.started(tenant, message);
        }
        if let Inserted::KeyTaken(_) = &inserted {
            if let Some(key) = &agent_key {
                t.agent_messages.remove(key.as_slice())?;
            }
            runs.of(&t).remove(run_key.as_slice())?;
        }
        Ok(inserted)
    }

    /// The next `seq` and `ordinal` of a conversation, from its newest message.
    fn next_place(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<(u64, u64), StoreError> {
        let t = self.t()?;
        let prefix = keys::conversation_messages(tenant, conversation);
        let Some(last) = t.conversation_messages.scan_prefix(&prefix).next_back() else {
            return Ok((1, 1));
        };
        let (key, value) = last?;
        let seq = key
            .get(prefix.len()..)
            .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
            .map_or(0, u64::from_be_bytes);
        let newest = <[u8; 16]>::try_from(value.as_ref())
            .ok()
            .map(|bytes| MessageId(uuid::Uuid::from_bytes(bytes)));
        let ordinal = match newest {
            Some(id) => self.get_past_message(tenant, id)?.map_or(0, |m| m.ordinal),
            None => 0,
        };
        // An ordinal of 0 is unknown (messages of earlier versions), and stays so.
        let next_ordinal = if ordinal == 0 { 0 } else { ordinal + 1 };
        Ok((seq + 1, next_ordinal))
    }

    /// Overwrites a message; a terminal status also clears its running marker, after the
    /// message is written: a crash between the two leaves a marker on an ended message,
    /// which recovery clears, never a running message without its marker.
    pub fn update_message(&self, tenant: &Tenant, message: &Message) -> Result<(), StoreError> {
        let t = self.t()?;
        let key = keys::message(tenant, message.id);
        let value = self.encode_message(&key, message)?;
        t.messages.insert(key.as_slice(), value)?;
        self.past.forget(&key);
        if message.status.is_terminal() {
            t.running.remove(key.as_slice())?;
            self.live
                .ended(tenant, message.conversation_id, message.seq);
            let ended = message.updated_at.timestamp_nanos_opt().unwrap_or(i64::MAX);
            t.ended.insert(key.as_slice(), &ended.to_be_bytes())?;
        }
        Ok(())
    }

    /// Reads a message.
    pub fn get_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<Message>, StoreError> {
        self.read_message(tenant, id, |message: &mut Message| &mut message.answer)
    }

    /// Reads what history takes from a message, skipping the rest of its record; an ended
    /// one is kept in memory for the conversation's next turns.
    pub fn get_past_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<PastMessage>, StoreError> {
        let key = keys::message(tenant, id);
        if let Some(message) = self.past.get(&key) {
            return Ok(Some(message));
        }
        let stamp = self.past.stamp();
        let message =
            self.read_message(tenant, id, |message: &mut PastMessage| &mut message.answer)?;
        if let Some(message) = &message {
            self.past.put(key, message.clone(), stamp);
        }
        Ok(message)
    }

    /// Decodes a message record as `T`, putting back an answer written apart.
    fn read_message<T: DeserializeOwned>(
        &self,
        tenant: &Tenant,
        id: MessageId,
        answer_of: fn(&mut T) -> &mut String,
    ) -> Result<Option<T>, StoreError> {
        let t = self.t()?;
        let key = keys::message(tenant, id);
        let Some(bytes) = t.messages.get(&key)? else {
            return Ok(None);
        };
        // Decoded as a plain message, to which `answer_apart` is an unknown field: a
        // flattened wrapper made serde buffer every field first, which slowed reading history.
        // An answer written apart left the record's own empty.
        let mut message: T = decode("messages", &bytes)?;
        let answer = answer_of(&mut message);
        if answer.is_empty() {
            if let Some(stored) = t.answers.get(&key)? {
                let stored = pieces::join(&t.pieces, Owner::Answer, &key, stored)?;
                *answer = String::from_utf8_lossy(&stored).into_owned();
            }
        }
        Ok(Some(message))
    }

    /// The message's record, its answer written apart first (status updates then never
    /// rewrite it, and a large one is stored in pieces). An ended message's short answer
    /// stays in the record, as earlier versions wrote every answer: no status update
    /// follows the end, and most runs' end then costs one write less.
    fn encode_message(&self, key: &[u8], message: &Message) -> Result<Vec<u8>, StoreError> {
        if message.status.is_terminal() && message.answer.len() <= ANSWER_INLINE {
            return encode("messages", message);
        }
        let t = self.t()?;
        let answer_apart = !message.answer.is_empty();
        if answer_apart {
            pieces::put(
                &t.answers,
                &t.pieces,
                Owner::Answer,
                key,
                message.answer.as_bytes(),
            )?;
        }
        let stored = StoredMessageRef {
            message: &Message {
                answer: String::new(),
                ..message.clone()
            },
            answer_apart,
        };
        encode("messages", &stored)
    }

    /// Keeps what a run was started with (a record the runner defines) with its message;
    /// written before the message, once.
    fn put_run_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
        spec: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let t = self.t()?;
        let key = keys::message(tenant, message);
        let bytes = encode("specs", spec)?;
        pieces::put(&t.specs, &t.pieces, Owner::Spec, &key, &bytes)
    }

    /// What the run of `message` was started with; `None` for messages of earlier versions
    /// (or of none).
    pub fn get_run_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let t = self.t()?;
        let key = keys::message(tenant, message);
        let Some(stored) = t.specs.get(&key)? else {
            return Ok(None);
        };
        let bytes = pieces::join(&t.pieces, Owner::Spec, &key, stored)?;
        decode("specs", &bytes).map(Some)
    }

    /// Forgets a spec whose message was never written (another request took its key).
    fn remove_run_spec(&self, tenant: &Tenant, message: MessageId) -> Result<(), StoreError> {
        let t = self.t()?;
        let key = keys::message(tenant, message);
        t.specs.remove(&key)?;
        pieces::remove(&t.pieces, Owner::Spec, &key)
    }

    /// Deletes a conversation with all its messages, thoughts, events and idempotency keys;
    /// returns the deleted messages' ids, or `None` when there is no such conversation.
    pub fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Vec<MessageId>>, StoreError> {
        let t = self.t()?;
        if t.conversations
            .remove(keys::conversation(tenant, id))?
            .is_none()
        {
            return Ok(None);
        }
        self.live.forget(tenant, id);
        let mut deleted = Vec::new();
        for entry in t
            .conversation_messages
            .scan_prefix(keys::conversation_messages(tenant, id))
        {
            let (index_key, value) = entry?;
            t.conversation_messages.remove(index_key)?;
            if let Ok(bytes) = <[u8; 16]>::try_from(value.as_ref()) {
                deleted.push(MessageId(uuid::Uuid::from_bytes(bytes)));
            }
        }
        for message in &deleted {
            if let Some(record) = self.get_message(tenant, *message)? {
                if let Some(key) = agent_key(tenant, &record) {
                    t.agent_messages.remove(key)?;
                }
                let (runs, key) = run_index::entry_of(tenant, &record);
                runs.of(&t).remove(key)?;
            }
            let files: Vec<_> = self
                .thoughts_of(tenant, *message)?
                .into_iter()
                .flat_map(|thought| thought.file_ids)
                .filter_map(|id| id.parse().ok())
                .collect();
            self.delete_files(tenant, &files)?;
            let key = keys::message(tenant, *message);
            t.messages.remove(&key)?;
            self.past.forget(&key);
            t.running.remove(&key)?;
            t.ended.remove(&key)?;
            t.answers.remove(&key)?;
            pieces::remove(&t.pieces, Owner::Answer, &key)?;
            t.specs.remove(&key)?;
            pieces::remove(&t.pieces, Owner::Spec, &key)?;
            let children = keys::message_children(tenant, *message);
            remove_prefix(&t.thoughts, &children)?;
            remove_prefix(&t.events, &children)?;
            pieces::remove_under(&t.pieces, Owner::Thought, &children)?;
            pieces::remove_under(&t.pieces, Owner::Events, &children)?;
        }
        self.forget_idempotency(tenant, &deleted)?;
        Ok(Some(deleted))
    }

    fn forget_idempotency(
        &self,
        tenant: &Tenant,
        messages: &[MessageId],
    ) -> Result<(), StoreError> {
        let t = self.t()?;
        for entry in t.idempotency.scan_prefix(keys::tenant_prefix(tenant, 0)) {
            let (key, value) = entry?;
            let record: IdempotencyRecord = decode("idempotency", &value)?;
            if messages.contains(&record.message_id) {
                t.idempotency.remove(key)?;
            }
        }
        Ok(())
    }

    /// Takes every message a previous process left running: as `adoption` says, taken
    /// over (its takeover count raised) for this process to resume, or marked interrupted
    /// with its end event. Called once at start-up, before any run can begin.
    ///
    /// Also mends what a crash while a message was being written or ending can leave (see
    /// [`Embedded::insert_message`]): a marker without its message, or on a message that had
    /// ended, is removed; a message whose index entry was not yet written gets it.
    pub fn take_unfinished(
        &self,
        adoption: crate::domain::Adoption,
    ) -> Result<crate::store::contract::Swept, StoreError> {
        let t = self.t()?;
        let mut swept = crate::store::contract::Swept::default();
        for entry in t.running.iter() {
            let (key, _) = entry?;
            let Some((tenant, id)) = keys::parse_message(&key) else {
                t.running.remove(&key)?;
                continue;
            };
            match self.get_message(&tenant, id)? {
                Some(message) if message.status.is_terminal() => {
                    t.running.remove(&key)?;
                }
                Some(mut message) => {
                    let index_key =
                        keys::conversation_message(&tenant, message.conversation_id, message.seq);
                    t.conversation_messages
                        .insert(index_key, message.id.as_bytes().as_slice())?;
                    match crate::domain::fate(&message, adoption, crate::domain::STOPPED) {
                        crate::domain::Fate::Adopt => {
                            let handed_over = crate::domain::adopt(&mut message);
                            self.update_message(&tenant, &message)?;
                            swept.adopted.push(crate::store::contract::Adopted {
                                tenant,
                                message: id,
                                fence: crate::store::contract::Fence::local(),
                                handed_over,
                            });
                        }
                        crate::domain::Fate::End(code, why) => {
                            let last_seq = self
                                .list_events(&tenant, id, 0)?
                                .last()
                                .map_or(0, |event| event.seq);
                            let end = crate::domain::end_orphan(&mut message, code, &why, last_seq);
                            self.update_message(&tenant, &message)?;
                            self.put_events(&tenant, std::slice::from_ref(&end))?;
                            swept.interrupted.push((tenant, id));
                        }
                    }
                }
                None => {
                    t.running.remove(&key)?;
                }
            }
        }
        Ok(swept)
    }

    /// Writes `message` into `conversation` with no key and no limits, as a test's setting.
    #[cfg(test)]
    pub(super) fn insert_plain(
        &self,
        tenant: &Tenant,
        conversation: &crate::domain::Conversation,
        message: &mut Message,
    ) {
        self.insert_message(NewMessage {
            tenant,
            conversation: Some(conversation),
            message,
            spec: &serde_json::Value::Null,
            idempotency: None,
            admission: crate::store::contract::Admission::default(),
        })
        .unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Conversation;
    use crate::domain::MessageStatus;
    use crate::store::test_records::{conversation, running_message};

    /// How many messages recovery ends as interrupted.
    fn interrupted_at_recovery(store: &Embedded) -> usize {
        store
            .take_unfinished(crate::domain::Adoption::INTERRUPT)
            .unwrap()
            .interrupted
            .len()
    }

    /// A running marker under `key`, as a crash between two writes leaves it.
    fn leave_marker(store: &Embedded, key: &[u8]) {
        let running = &store.t().unwrap().running;
        running.insert(key, &[] as &[u8]).unwrap();
    }

    /// A store with one running message, in a new conversation of the default tenant.
    fn started() -> (Embedded, Tenant, Conversation, Message) {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let conversation = conversation(&tenant);
        let mut message = running_message(conversation.id, 0);
        store.insert_plain(&tenant, &conversation, &mut message);
        (store, tenant, conversation, message)
    }

    fn listed(store: &Embedded, tenant: &Tenant, conversation: ConversationId) -> Vec<Message> {
        let size = crate::store::contract::PageSize {
            limit: 100,
            max_bytes: 1 << 20,
        };
        let listing = crate::store::contract::Conversations::list_messages(
            store,
            tenant,
            conversation,
            0,
            size,
        );
        // The embedded store answers at once: its reads are synchronous under the contract.
        futures::executor::block_on(listing).unwrap().items
    }

    /// A crash after the message but before its index entry (the last of the inserts)
    /// leaves a message recovery can find by its marker: it is interrupted and listed.
    #[test]
    fn recovery_lists_a_message_whose_index_entry_a_crash_lost() {
        let (store, tenant, conversation, message) = started();
        let index_key = keys::conversation_message(&tenant, conversation.id, message.seq);
        store
            .t()
            .unwrap()
            .conversation_messages
            .remove(index_key)
            .unwrap();
        assert!(listed(&store, &tenant, conversation.id).is_empty());

        assert_eq!(interrupted_at_recovery(&store), 1);

        let listed = listed(&store, &tenant, conversation.id);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, message.id);
        assert_eq!(listed[0].status, MessageStatus::Interrupted);
        assert!(store.t().unwrap().running.is_empty());
    }

    /// A crash between writing a message's end and clearing its marker leaves the marker:
    /// recovery clears it and keeps the status the message ended with.
    #[test]
    fn recovery_keeps_the_end_of_a_message_whose_marker_a_crash_left() {
        let (store, tenant, _, mut message) = started();
        message.status = MessageStatus::Completed;
        message.answer = "done".into();
        store.update_message(&tenant, &message).unwrap();
        assert!(
            store.t().unwrap().running.is_empty(),
            "an end clears the marker"
        );
        let key = keys::message(&tenant, message.id);
        leave_marker(&store, &key);

        assert_eq!(interrupted_at_recovery(&store), 0);

        let read = store.get_message(&tenant, message.id).unwrap().unwrap();
        assert_eq!(read.status, MessageStatus::Completed);
        assert_eq!(read.answer, "done");
        assert!(store.t().unwrap().running.is_empty());
    }

    /// An ended message's short answer is kept in its record (one write less), a long one
    /// and a running message's apart; each reads back whole, for history and for clients.
    #[test]
    fn an_answer_is_kept_in_its_record_only_when_ended_and_short() {
        let kept_apart = |store: &Embedded, tenant: &Tenant, message: &Message| {
            let key = keys::message(tenant, message.id);
            store.t().unwrap().answers.get(key).unwrap().is_some()
        };
        let (store, tenant, _, mut message) = started();
        message.answer = "so far".into();
        store.update_message(&tenant, &message).unwrap();
        assert!(
            kept_apart(&store, &tenant, &message),
            "a running message's answer may still change"
        );

        let (store, tenant, _, mut message) = started();
        message.status = MessageStatus::Completed;
        message.answer = "It is noon.".into();
        store.update_message(&tenant, &message).unwrap();
        assert!(!kept_apart(&store, &tenant, &message));
        let read = store.get_message(&tenant, message.id).unwrap().unwrap();
        assert_eq!(read.answer, "It is noon.");
        let past = store
            .get_past_message(&tenant, message.id)
            .unwrap()
            .unwrap();
        assert_eq!(past.answer, "It is noon.");

        let (store, tenant, _, mut message) = started();
        message.status = MessageStatus::Completed;
        message.answer = "long ".repeat(ANSWER_INLINE / 5 + 1);
        store.update_message(&tenant, &message).unwrap();
        assert!(kept_apart(&store, &tenant, &message));
        let read = store.get_message(&tenant, message.id).unwrap().unwrap();
        assert_eq!(read.answer, message.answer);
    }

    /// History's copy of an ended message, kept in memory, follows the record: a later
    /// write and the conversation's deletion show at once.
    #[test]
    fn a_kept_past_message_follows_writes_and_deletion() {
        let (store, tenant, conversation, mut message) = started();
        let answer = |store: &Embedded| {
            store
                .get_past_message(&tenant, message.id)
                .unwrap()
                .map(|past| past.answer)
        };
        assert_eq!(answer(&store).as_deref(), Some(""));
        message.status = MessageStatus::Completed;
        message.answer = "first".into();
        store.update_message(&tenant, &message).unwrap();
        assert_eq!(answer(&store).as_deref(), Some("first"));
        assert_eq!(answer(&store).as_deref(), Some("first"), "read again, kept");

        message.answer = "second".into();
        store.update_message(&tenant, &message).unwrap();
        assert_eq!(answer(&store).as_deref(), Some("second"));

        store.delete_conversation(&tenant, conversation.id).unwrap();
        assert_eq!(answer(&store), None);
    }

    /// What history reads of a message (with its answer written apart) is what the whole
    /// record says.
    #[test]
    fn a_past_message_reads_as_the_whole_record_says() {
        let (store, tenant, _, mut message) = started();
        message.ordinal = 7;
        message.status = MessageStatus::Completed;
        message.finish_reason = Some(crate::domain::FinishReason::Stop);
        message.iterations = 2;
        message.answer = "It is noon.".into();
        message.history_tokens.insert("o200k_base".into(), 42);
        store.update_message(&tenant, &message).unwrap();

        let whole = store.get_message(&tenant, message.id).unwrap().unwrap();
        let past = store
            .get_past_message(&tenant, message.id)
            .unwrap()
            .unwrap();
        assert_eq!(whole, message);
        assert_eq!(past, PastMessage::from(&message));
        assert_eq!(past.answer, "It is noon.");
    }

    /// A crash after the marker but before the message leaves a marker of nothing:
    /// recovery removes it and reports no message.
    #[test]
    fn recovery_drops_a_marker_without_its_message() {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let key = keys::message(&tenant, MessageId::new());
        leave_marker(&store, &key);

        assert_eq!(interrupted_at_recovery(&store), 0);
        assert!(store.t().unwrap().running.is_empty());
    }
}
