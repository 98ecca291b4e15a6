//! The contract over the embedded database. sled's calls are quick in-memory work over its
//! page cache, so they run on the caller's task as before; what waits is durability: a
//! write returns after the flush that covers it, which many writers share.
//!
//! A read that only the contract makes is written here, in its trait method; what other
//! code of this backend shares stays with its record family. The family traits are named
//! by path and not imported, so a call on `self` here can only reach the synchronous method
//! of [`Embedded`] with the same name.

use std::ops::Bound;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::flusher::Writing;
use super::pieces::{self, Owner};
use super::{decode, keys, sized_page, Embedded};
use crate::domain::{
    ApiKeyRecord, Conversation, ConversationId, EventEnvelope, FileId, FileRecord,
    IdempotencyRecord, Message, MessageId, MessageStatus, PastMessage, ProviderRecord, Tenant,
    Thought,
};
use crate::store::contract::{
    Burst, Fence, Inserted, NewMessage, Page, PageSize, Record, StoredProvider,
};
use crate::store::error::StoreError;
use crate::store::run_listing::{ConversationPage, ConversationQuery, RunPage, RunQuery};

impl Embedded {
    /// Writes a burst's records, then its events: nothing of it is durable until the
    /// flush that follows, and its events are held back from readers until then.
    fn apply(&self, tenant: &Tenant, burst: &Burst) -> Result<(), StoreError> {
        for record in &burst.records {
            match record {
                Record::Thought(thought) => self.put_thought(tenant, thought)?,
                Record::Message(message) => self.update_message(tenant, message)?,
                Record::TenantTokens { day, tokens, once } => {
                    // Counted by the commit that first writes its event: a burst applied
                    // before (its flush failed) and committed again counts once.
                    let counted = match (once, burst.events.first()) {
                        (Some((message, seq)), Some(first)) => {
                            self.has_event(tenant, *message, first.seq, *seq)?
                        }
                        _ => false,
                    };
                    if !counted {
                        self.add_tenant_tokens(tenant, *day, *tokens)?;
                    }
                }
            }
        }
        self.put_events(tenant, &burst.events)
    }

    /// The message a burst belongs to, and what it says of the run's next commits: the
    /// message's status, when the burst writes it.
    fn writer_of(burst: &Burst) -> Option<(MessageId, Writing)> {
        let status = burst.records.iter().rev().find_map(|record| match record {
            Record::Message(message) => Some((message.id, message.status)),
            Record::Thought(_) | Record::TenantTokens { .. } => None,
        });
        let writing = match status.map(|(_, status)| status) {
            Some(status) if status.is_terminal() => Writing::Done,
            Some(MessageStatus::WaitingToolOutputs | MessageStatus::WaitingApproval) => {
                Writing::Idle
            }
            _ => Writing::Active,
        };
        let message = burst
            .events
            .first()
            .map(|e| e.message_id)
            .or(status.map(|(id, _)| id))
            .or_else(|| {
                burst.records.iter().find_map(|record| match record {
                    Record::Thought(thought) => Some(thought.message_id),
                    Record::Message(_) | Record::TenantTokens { .. } => None,
                })
            })?;
        Some((message, writing))
    }

    /// Waits until what was written so far is durable.
    fn count_change(&self, which: usize) {
        self.changes[which].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub(super) async fn written<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let value = self.noted(result)?;
        self.flush().await?;
        Ok(value)
    }

    /// `result`, noting a write the database refused as unavailable (a full disk met by
    /// the write itself, not by a flush) in the store's writability, which health follows.
    fn noted<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(err) = &result {
            if err.category() == crate::store::error::Category::Unavailable {
                self.state.mark_unwritable();
            }
        }
        result
    }
}

/// Which of [`Embedded::changes`] counts API keys, and which providers.
const API_KEYS: usize = 0;
const PROVIDERS: usize = 1;

#[async_trait]
impl crate::store::contract::Conversations for Embedded {
    async fn get_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Conversation>, StoreError> {
        self.get_conversation(tenant, id)
    }

    async fn get_idempotency(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.get_idempotency(tenant, key)
    }

    /// Durable with the run's first burst, whose flush covers it.
    async fn insert_message(&self, new: NewMessage<'_>) -> Result<Inserted, StoreError> {
        self.noted(self.insert_message(new))
    }

    async fn get_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<Message>, StoreError> {
        self.get_message(tenant, id)
    }

    async fn get_past_message(
        &self,
        tenant: &Tenant,
        id: MessageId,
    ) -> Result<Option<PastMessage>, StoreError> {
        self.get_past_message(tenant, id)
    }

    async fn list_messages(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        after_seq: u64,
        size: PageSize,
    ) -> Result<Page<Message>, StoreError> {
        let t = self.t()?;
        let prefix = keys::conversation_messages(tenant, conversation);
        let start = keys::conversation_message(tenant, conversation, after_seq.saturating_add(1));
        sized_page(
            t.conversation_messages.range(start..),
            &prefix,
            size,
            |_, value| {
                let Ok(id) = <[u8; 16]>::try_from(value.as_ref()) else {
                    return Ok(None);
                };
                let message = self.get_message(tenant, MessageId(uuid::Uuid::from_bytes(id)))?;
                Ok(message.map(|message| {
                    let stored = message.answer.len() + message.query.len() + 512;
                    (message, stored)
                }))
            },
        )
    }

    async fn message_ids_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        before_seq: u64,
        limit: usize,
    ) -> Result<Page<(u64, MessageId)>, StoreError> {
        let t = self.t()?;
        let prefix = keys::conversation_messages(tenant, conversation);
        let end = keys::conversation_message(tenant, conversation, before_seq);
        let mut page = Page {
            items: Vec::new(),
            more: false,
        };
        for entry in t.conversation_messages.range(prefix.clone()..end).rev() {
            let (key, value) = entry?;
            if page.items.len() >= limit {
                page.more = true;
                break;
            }
            let seq = key
                .get(prefix.len()..)
                .and_then(|bytes| <[u8; 8]>::try_from(bytes).ok())
                .map_or(0, u64::from_be_bytes);
            if let Ok(id) = <[u8; 16]>::try_from(value.as_ref()) {
                page.items
                    .push((seq, MessageId(uuid::Uuid::from_bytes(id))));
            }
        }
        Ok(page)
    }

    async fn agent_message_ids(
        &self,
        tenant: &Tenant,
        agent_id: &str,
        before: Option<MessageId>,
        limit: usize,
    ) -> Result<Page<MessageId>, StoreError> {
        let t = self.t()?;
        let prefix = keys::agent_messages(tenant, agent_id);
        let end = match before {
            Some(id) => keys::agent_message(tenant, agent_id, id),
            None => {
                let mut end = prefix.clone();
                end.extend_from_slice(&[0xff; 17]);
                end
            }
        };
        let mut page = Page {
            items: Vec::new(),
            more: false,
        };
        for entry in t.agent_messages.range(prefix.clone()..end).rev() {
            let (key, _) = entry?;
            let Some(id) = key
                .get(prefix.len()..)
                .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
            else {
                continue;
            };
            let id = MessageId(uuid::Uuid::from_bytes(id));
            if !t.messages.contains_key(keys::message(tenant, id))? {
                continue;
            }
            if page.items.len() >= limit {
                page.more = true;
                break;
            }
            page.items.push(id);
        }
        Ok(page)
    }

    async fn list_runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery<'_>,
    ) -> Result<RunPage, StoreError> {
        self.list_runs(tenant, query)
    }

    async fn list_conversations(
        &self,
        tenant: &Tenant,
        query: &ConversationQuery<'_>,
    ) -> Result<ConversationPage, StoreError> {
        self.list_conversations(tenant, query)
    }

    async fn get_run_spec(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.get_run_spec(tenant, message)
    }

    async fn delete_conversation(
        &self,
        tenant: &Tenant,
        id: ConversationId,
    ) -> Result<Option<Vec<MessageId>>, StoreError> {
        self.written(self.delete_conversation(tenant, id)).await
    }

    async fn running_in(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<bool, StoreError> {
        self.running_in(tenant, conversation)
    }

    async fn start_queued(
        &self,
        tenant: &Tenant,
        message: MessageId,
        _fence: &crate::store::contract::Fence,
        admission: crate::store::contract::Admission,
    ) -> Result<Option<crate::store::contract::Refusal>, StoreError> {
        // One process opens the embedded store and owns every run in it: no fence to check.
        self.start_queued(tenant, message, admission)
    }

    async fn drop_steer(
        &self,
        tenant: &Tenant,
        steer: MessageId,
        joined: MessageId,
        _fence: &crate::store::contract::Fence,
    ) -> Result<bool, StoreError> {
        // One process opens the embedded store and owns every run in it: no fence to check.
        self.written(self.drop_steer(tenant, steer, joined)).await
    }

    async fn live_before(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
        seq: u64,
    ) -> Result<Vec<MessageId>, StoreError> {
        let live = self.live_in(tenant, conversation, seq)?;
        Ok(live.into_iter().map(|(id, _)| id).collect())
    }

    async fn running_children(
        &self,
        tenant: &Tenant,
        parent: MessageId,
    ) -> Result<Vec<MessageId>, StoreError> {
        self.running_children(tenant, parent)
    }
}

#[async_trait]
impl crate::store::contract::Records for Embedded {
    async fn list_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after: Option<u32>,
        size: PageSize,
    ) -> Result<Page<Thought>, StoreError> {
        let t = self.t()?;
        let prefix = keys::message_children(tenant, message);
        let start = match after {
            None => Bound::Included(prefix.clone()),
            Some(position) => Bound::Excluded(keys::thought(tenant, message, position)),
        };
        sized_page(
            t.thoughts.range((start, Bound::Unbounded)),
            &prefix,
            size,
            |key, value| {
                let value = pieces::join(&t.pieces, Owner::Thought, key, value)?;
                Ok(Some((decode("thoughts", &value)?, value.len())))
            },
        )
    }

    async fn all_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Vec<Thought>, StoreError> {
        let mut thoughts = self.thoughts_of(tenant, message)?;
        self.sealer.open_thoughts(&mut thoughts);
        Ok(thoughts)
    }

    fn open_reasoning(&self, thoughts: &mut [Thought]) {
        self.sealer.open_thoughts(thoughts);
    }

    async fn put_file(
        &self,
        tenant: &Tenant,
        record: &FileRecord,
        bytes: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        self.written(self.put_file(tenant, record, bytes)).await
    }

    async fn get_file(
        &self,
        tenant: &Tenant,
        id: FileId,
    ) -> Result<Option<(FileRecord, Vec<u8>)>, StoreError> {
        self.get_file(tenant, id)
    }
}

#[async_trait]
impl crate::store::contract::EventLog for Embedded {
    /// One process holds the database's lock, so every fence is its own: there is no
    /// other writer to keep out.
    async fn commit(
        &self,
        tenant: &Tenant,
        fence: &Fence,
        burst: &Burst,
    ) -> Result<(), StoreError> {
        if burst.is_empty() {
            return Ok(());
        }
        // One process owns every run of the embedded store; no other fence is its.
        if *fence != Fence::local() {
            return Err(StoreError::Fenced);
        }
        if let Some(first) = burst.events.first() {
            self.inflight
                .hold(first.message_id, first.seq.saturating_sub(1));
        }
        if let Some((writer, writing)) = Self::writer_of(burst) {
            self.state.note_writer(writer.0.as_u128(), writing);
        }
        self.noted(self.apply(tenant, burst))?;
        self.flush().await?;
        if let Some(first) = burst.events.first() {
            self.inflight.release(first.message_id);
        }
        Ok(())
    }

    async fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        self.list_events(tenant, message, after_seq)
    }

    async fn retire_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.written(self.retire_events(before, limit)).await
    }
}

#[async_trait]
impl crate::store::contract::Registry for Embedded {
    async fn put_provider(
        &self,
        tenant: &Tenant,
        record: &ProviderRecord,
    ) -> Result<(), StoreError> {
        let put = self.put_provider(tenant, record);
        self.count_change(PROVIDERS);
        self.written(put).await
    }

    async fn get_provider(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<ProviderRecord>, StoreError> {
        self.get_provider(tenant, name)
    }

    async fn delete_provider(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError> {
        let deleted = self.delete_provider(tenant, name);
        self.count_change(PROVIDERS);
        self.written(deleted).await
    }

    async fn all_providers(&self) -> Result<Vec<StoredProvider>, StoreError> {
        self.all_providers()
    }

    async fn seal_plaintext_credentials(&self) -> Result<usize, StoreError> {
        self.written(self.seal_plaintext_credentials()).await
    }

    async fn put_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        let put = self.put_api_key(record);
        self.count_change(API_KEYS);
        self.written(put).await
    }

    async fn delete_api_key(&self, id: &str) -> Result<bool, StoreError> {
        let deleted = self.delete_api_key(id);
        self.count_change(API_KEYS);
        self.written(deleted).await
    }

    async fn touch_api_key(&self, record: &ApiKeyRecord) -> Result<bool, StoreError> {
        self.written(self.touch_api_key(record)).await
    }

    async fn registry_changes(
        &self,
    ) -> Result<crate::store::contract::RegistryChanges, StoreError> {
        use std::sync::atomic::Ordering;
        Ok(crate::store::contract::RegistryChanges {
            api_keys: self.changes[API_KEYS].load(Ordering::SeqCst),
            providers: self.changes[PROVIDERS].load(Ordering::SeqCst),
        })
    }

    async fn all_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.all_api_keys()
    }

    async fn tenant_tokens(&self, tenant: &Tenant, day: u32) -> Result<u64, StoreError> {
        self.tenant_tokens(tenant, day)
    }
}

#[async_trait]
impl crate::store::contract::Health for Embedded {
    fn writable(&self) -> watch::Receiver<bool> {
        self.state.writable()
    }

    async fn probe(&self) -> Result<(), StoreError> {
        self.probe_disk().await
    }

    fn observe_commits(&self, observe: Box<dyn Fn(Duration) + Send + Sync>) {
        self.state.observe(observe);
    }

    #[cfg(any(test, feature = "test-utils"))]
    fn fail_writes(&self, fail: bool) {
        self.fail_flushes(fail);
    }

    #[cfg(any(test, feature = "test-utils"))]
    async fn find_bytes(&self, needle: &[u8]) -> Result<Vec<String>, StoreError> {
        self.find_bytes_now(needle)
    }
}
