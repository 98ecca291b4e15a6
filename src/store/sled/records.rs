//! Thoughts and events: the per-message records, keyed so scans come out in order.

use super::pieces::{self, Owner};
use super::{decode, encode, keys, scan, scan_with, Embedded, StoreError};
use crate::domain::EventEnvelope;
use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::{
    ConversationId, FileId, FileRecord, MessageId, ProviderRecord, RunEvent, Tenant, Thought,
};
use chrono::DateTime;

/// A stored batch of events, as read. Written in the compact form (by [`CompactRef`]); the
/// other forms are read from records of earlier versions.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum StoredBatch {
    /// The form written now (see [`CompactBatch`]).
    Compact(CompactBatch),
    /// Every event whole.
    Whole(Vec<EventEnvelope>),
    /// The `end` event's answer is the message's answer, not repeated here.
    AnswerApart {
        events: Vec<EventEnvelope>,
        answer_apart: bool,
    },
}

/// The batch's ids once, its `seq`s implied by the first (a batch is consecutive), each
/// event as `[created_at in ns, event]`, and the end's answer left to the message: a third
/// of the bytes of whole envelopes for answer deltas.
#[derive(Deserialize, Serialize)]
struct CompactBatch {
    conversation_id: ConversationId,
    message_id: MessageId,
    first_seq: u64,
    timed: Vec<(i64, RunEvent)>,
    answer_apart: bool,
}

/// Where a compact batch starts and how many events it holds, the events skipped unread.
#[derive(Deserialize)]
struct BatchSpan {
    first_seq: u64,
    timed: Vec<serde::de::IgnoredAny>,
}

/// [`CompactBatch`] as written: the events borrowed, only an end with an answer
/// copied (to leave its answer out), so storing a burst copies none of its events.
#[derive(Serialize)]
struct CompactRef<'a> {
    conversation_id: ConversationId,
    message_id: MessageId,
    first_seq: u64,
    timed: Vec<(i64, Cow<'a, RunEvent>)>,
    answer_apart: bool,
}

impl<'a> CompactRef<'a> {
    /// The compact form of `events`, consecutive events of one message.
    fn new(first: &EventEnvelope, events: &'a [EventEnvelope]) -> Self {
        let mut answer_apart = false;
        let timed = events
            .iter()
            .map(|envelope| {
                let ends_with_answer = matches!(
                    &envelope.event,
                    RunEvent::MessageEnd(end) if !end.answer.is_empty()
                );
                // The end's answer is the message's: kept once, there, and put back on reading.
                let event = if ends_with_answer {
                    answer_apart = true;
                    let mut end = envelope.event.clone();
                    if let RunEvent::MessageEnd(end) = &mut end {
                        end.answer.clear();
                    }
                    Cow::Owned(end)
                } else {
                    Cow::Borrowed(&envelope.event)
                };
                let nanos = envelope.created_at.timestamp_nanos_opt();
                (nanos.unwrap_or(i64::MAX), event)
            })
            .collect();
        Self {
            conversation_id: first.conversation_id,
            message_id: first.message_id,
            first_seq: first.seq,
            timed,
            answer_apart,
        }
    }
}

impl StoredBatch {
    /// A stored batch, read as the compact form first: an untagged enum buffers the whole
    /// record before it tries each form, and only a record of an earlier version should pay
    /// for that.
    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        match decode::<CompactBatch>("events", bytes) {
            Ok(batch) => Ok(Self::Compact(batch)),
            Err(_) => decode("events", bytes),
        }
    }

    /// The `seq` of the batch's last event, its events decoded only for an earlier form.
    fn last_seq(bytes: &[u8]) -> Result<Option<u64>, StoreError> {
        if let Ok(span) = decode::<BatchSpan>("events", bytes) {
            let count = u64::try_from(span.timed.len()).unwrap_or(u64::MAX);
            return Ok(count
                .checked_sub(1)
                .map(|n| span.first_seq.saturating_add(n)));
        }
        let (events, _) = Self::decode(bytes)?.into_envelopes();
        Ok(events.last().map(|event| event.seq))
    }

    /// The batch's envelopes, and whether the end's answer must be put back.
    fn into_envelopes(self) -> (Vec<EventEnvelope>, bool) {
        match self {
            StoredBatch::Compact(CompactBatch {
                conversation_id,
                message_id,
                first_seq,
                timed,
                answer_apart,
            }) => {
                let events = (first_seq..)
                    .zip(timed)
                    .map(|(seq, (nanos, event))| EventEnvelope {
                        seq,
                        conversation_id,
                        message_id,
                        created_at: DateTime::from_timestamp_nanos(nanos),
                        event,
                    })
                    .collect();
                (events, answer_apart)
            }
            StoredBatch::Whole(events) => (events, false),
            StoredBatch::AnswerApart { events, .. } => (events, true),
        }
    }
}

/// A provider as stored: the definition without its credentials, which are sealed beside
/// it (records of earlier versions have none sealed and their credentials in place).
#[derive(Serialize, Deserialize)]
struct StoredProvider {
    #[serde(flatten)]
    record: ProviderRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed_credentials: Option<String>,
}

impl Embedded {
    /// Writes (or overwrites) a thought record.
    pub fn put_thought(&self, tenant: &Tenant, thought: &Thought) -> Result<(), StoreError> {
        let t = self.t()?;
        let key = keys::thought(tenant, thought.message_id, thought.position);
        let value = encode("thoughts", &*self.sealer.seal_thought(thought)?)?;
        pieces::put(&t.thoughts, &t.pieces, Owner::Thought, &key, &value)
    }

    /// Every thought of a message, by position.
    pub fn thoughts_of(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Vec<Thought>, StoreError> {
        let t = self.t()?;
        scan(
            &t.thoughts,
            (&t.pieces, Owner::Thought),
            "thoughts",
            &keys::message_children(tenant, message),
        )
    }

    /// Stores a file a tool produced, with its bytes when it has them.
    pub fn put_file(
        &self,
        tenant: &Tenant,
        record: &FileRecord,
        bytes: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        let t = self.t()?;
        let key = keys::file(tenant, record.id);
        if let Some(bytes) = bytes {
            pieces::put(&t.file_data, &t.pieces, Owner::File, &key, bytes)?;
        }
        t.files.insert(key, encode("files", record)?)?;
        Ok(())
    }

    /// A file with its bytes (empty for a file that is only a URL).
    pub fn get_file(
        &self,
        tenant: &Tenant,
        id: FileId,
    ) -> Result<Option<(FileRecord, Vec<u8>)>, StoreError> {
        let t = self.t()?;
        let key = keys::file(tenant, id);
        let Some(record) = t.files.get(&key)? else {
            return Ok(None);
        };
        let bytes = match t.file_data.get(&key)? {
            Some(stored) => pieces::join(&t.pieces, Owner::File, &key, stored)?.to_vec(),
            None => Vec::new(),
        };
        Ok(Some((super::decode("files", &record)?, bytes)))
    }

    /// Deletes files by id.
    pub fn delete_files(&self, tenant: &Tenant, ids: &[FileId]) -> Result<(), StoreError> {
        let t = self.t()?;
        for id in ids {
            let key = keys::file(tenant, *id);
            t.files.remove(&key)?;
            t.file_data.remove(&key)?;
            pieces::remove(&t.pieces, Owner::File, &key)?;
        }
        Ok(())
    }

    /// Writes (or replaces) a tenant's provider definition.
    /// Its credentials are sealed: the database never holds them in plaintext.
    pub fn put_provider(&self, tenant: &Tenant, record: &ProviderRecord) -> Result<(), StoreError> {
        let credentials =
            serde_json::to_vec(&record.credentials).map_err(|source| StoreError::Codec {
                record: "providers",
                source,
            })?;
        let stored = StoredProvider {
            record: ProviderRecord {
                credentials: BTreeMap::new(),
                ..record.clone()
            },
            sealed_credentials: Some(self.sealer.seal(&credentials)?),
        };
        self.t()?.providers.insert(
            keys::named(tenant, &record.name),
            encode("providers", &stored)?,
        )?;
        Ok(())
    }

    /// A stored provider with its credentials opened.
    fn open_provider(&self, bytes: &[u8]) -> Result<ProviderRecord, StoreError> {
        let stored: StoredProvider = super::decode("providers", bytes)?;
        let mut record = stored.record;
        if let Some(sealed) = stored.sealed_credentials {
            let plain = self.sealer.open(&sealed)?;
            record.credentials =
                serde_json::from_slice(&plain).map_err(|source| StoreError::Codec {
                    record: "providers",
                    source,
                })?;
        }
        Ok(record)
    }

    /// A tenant's provider definition.
    pub fn get_provider(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<ProviderRecord>, StoreError> {
        self.t()?
            .providers
            .get(keys::named(tenant, name))?
            .map(|bytes| self.open_provider(&bytes))
            .transpose()
    }

    /// Deletes a tenant's provider definition; returns whether it existed.
    pub fn delete_provider(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .t()?
            .providers
            .remove(keys::named(tenant, name))?
            .is_some())
    }

    /// Every stored provider of every tenant, for start-up. One whose credentials do not
    /// open (another key) is reported as an error in its place, not a failure of all.
    #[allow(clippy::type_complexity)]
    pub fn all_providers(
        &self,
    ) -> Result<Vec<(Tenant, String, Result<ProviderRecord, StoreError>)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.t()?.providers.iter() {
            let (key, value) = entry?;
            if let Some((tenant, name)) = keys::split_tenant(&key) {
                let name = String::from_utf8_lossy(name).into_owned();
                out.push((tenant, name, self.open_provider(&value)));
            }
        }
        Ok(out)
    }

    /// Seals the credentials of providers an earlier version stored in plaintext; returns
    /// how many it sealed.
    pub fn seal_plaintext_credentials(&self) -> Result<usize, StoreError> {
        let mut sealed = 0;
        for entry in self.t()?.providers.iter() {
            let (key, value) = entry?;
            let stored: StoredProvider = super::decode("providers", &value)?;
            if stored.sealed_credentials.is_none() && !stored.record.credentials.is_empty() {
                if let Some((tenant, _)) = keys::split_tenant(&key) {
                    self.put_provider(&tenant, &stored.record)?;
                    sealed += 1;
                }
            }
        }
        Ok(sealed)
    }

    /// Appends a batch of one message's consecutive events as one record, keyed by its
    /// first `seq`: a burst of events costs one write.
    pub(super) fn put_events(
        &self,
        tenant: &Tenant,
        events: &[EventEnvelope],
    ) -> Result<(), StoreError> {
        let t = self.t()?;
        let Some(first) = events.first() else {
            return Ok(());
        };
        let key = keys::event(tenant, first.message_id, first.seq);
        let value = encode("events", &CompactRef::new(first, events))?;
        pieces::put(&t.events, &t.pieces, Owner::Events, &key, &value)
    }

    /// Keeps only the last event of up to `limit` messages that ended before `before`
    /// (see [`crate::store::contract::EventLog::retire_events`]); returns how many.
    pub fn retire_events(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let t = self.t()?;
        let cutoff = before.timestamp_nanos_opt().unwrap_or(i64::MAX);
        let mut retired = 0;
        for entry in t.ended.iter() {
            if retired >= limit {
                break;
            }
            let (key, value) = entry?;
            let ended = <[u8; 8]>::try_from(value.as_ref()).map_or(i64::MAX, i64::from_be_bytes);
            if ended >= cutoff {
                continue;
            }
            if let Some((tenant, id)) = keys::parse_message(&key) {
                let events = self.list_events(&tenant, id, 0)?;
                let children = keys::message_children(&tenant, id);
                super::messages::remove_prefix(&t.events, &children)?;
                pieces::remove_under(&t.pieces, Owner::Events, &children)?;
                if let Some(last) = events.last() {
                    self.put_events(&tenant, std::slice::from_ref(last))?;
                }
            }
            t.ended.remove(&key)?;
            retired += 1;
        }
        Ok(retired)
    }

    /// Whether event `seq` of `message` is stored in the batch that begins at `first_seq`:
    /// a burst tried again after a failure begins where its first try did, so its events
    /// are found with one read of that batch, never a scan of the message's.
    pub(super) fn has_event(
        &self,
        tenant: &Tenant,
        message: MessageId,
        first_seq: u64,
        seq: u64,
    ) -> Result<bool, StoreError> {
        let t = self.t()?;
        let key = keys::event(tenant, message, first_seq);
        let Some(value) = t.events.get(&key)? else {
            return Ok(false);
        };
        let last = StoredBatch::last_seq(&pieces::join(&t.pieces, Owner::Events, &key, value)?)?;
        Ok(last.is_some_and(|last| last >= seq))
    }

    /// A message's events with `seq > after_seq`, in order.
    pub fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        let t = self.t()?;
        let batches = scan_with(
            &t.events,
            (&t.pieces, Owner::Events),
            &keys::message_children(tenant, message),
            StoredBatch::decode,
        )?;
        let mut events = Vec::new();
        let mut answer: Option<String> = None;
        for batch in batches {
            let (batch, answer_apart) = batch.into_envelopes();
            for mut envelope in batch {
                if let (true, RunEvent::MessageEnd(end)) = (answer_apart, &mut envelope.event) {
                    if answer.is_none() {
                        answer = Some(
                            self.get_message(tenant, message)?
                                .map(|m| m.answer)
                                .unwrap_or_default(),
                        );
                    }
                    if let Some(whole) = &answer {
                        end.answer.clone_from(whole);
                    }
                }
                events.push(envelope);
            }
        }
        // Events whose commit is not durable yet are not there for readers.
        let limit = self.inflight.limit(message);
        events.retain(|event| event.seq > after_seq && event.seq <= limit);
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{FinishReason, Message, MessageStatus};
    use crate::store::test_records::{conversation, running_message};

    fn envelope(message: &Message, seq: u64, event: RunEvent) -> EventEnvelope {
        EventEnvelope {
            seq,
            conversation_id: message.conversation_id,
            message_id: message.id,
            created_at: DateTime::from_timestamp_nanos(1_795_000_000_123_456_789 + seq as i64),
            event,
        }
    }

    fn ended_message(store: &Embedded, tenant: &Tenant) -> Message {
        let conversation = conversation(tenant);
        let mut message = Message {
            answer: "Hello there.".into(),
            status: MessageStatus::Completed,
            finish_reason: Some(FinishReason::Stop),
            iterations: 1,
            ..running_message(conversation.id, 0)
        };
        store.insert_plain(tenant, &conversation, &mut message);
        message
    }

    fn end(answer: &str) -> RunEvent {
        RunEvent::completed(answer)
    }

    fn delta(text: &str) -> RunEvent {
        RunEvent::AnswerDelta { text: text.into() }
    }

    /// Batches read back as the envelopes written, to the nanosecond, with the end's
    /// answer (stored once, with the message) put back; `after_seq` skips what was seen.
    #[test]
    fn stored_batches_read_back_as_written() {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let message = ended_message(&store, &tenant);
        let first = vec![
            envelope(&message, 1, delta("Hello ")),
            envelope(&message, 2, delta("there.")),
        ];
        let second = vec![envelope(&message, 3, end("Hello there."))];
        store.put_events(&tenant, &first).unwrap();
        store.put_events(&tenant, &second).unwrap();

        let all: Vec<EventEnvelope> = first.iter().chain(&second).cloned().collect();
        assert_eq!(store.list_events(&tenant, message.id, 0).unwrap(), all);
        assert_eq!(
            store.list_events(&tenant, message.id, 2).unwrap(),
            second,
            "after_seq skips what was seen"
        );
        let stored = store
            .t()
            .unwrap()
            .events
            .get(keys::event(&tenant, message.id, 3))
            .unwrap()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&stored).contains("Hello there."),
            "the end's answer is stored once, with the message"
        );
    }

    /// Batches written whole by earlier versions, with or without the end's answer apart,
    /// still read.
    #[test]
    fn batches_of_earlier_versions_still_read() {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let message = ended_message(&store, &tenant);
        let whole = vec![envelope(&message, 1, delta("Hello there."))];
        let apart = vec![envelope(&message, 2, end(""))];
        store
            .t()
            .unwrap()
            .events
            .insert(
                keys::event(&tenant, message.id, 1),
                encode("events", &StoredBatch::Whole(whole.clone())).unwrap(),
            )
            .unwrap();
        store
            .t()
            .unwrap()
            .events
            .insert(
                keys::event(&tenant, message.id, 2),
                encode(
                    "events",
                    &StoredBatch::AnswerApart {
                        events: apart.clone(),
                        answer_apart: true,
                    },
                )
                .unwrap(),
            )
            .unwrap();

        let read = store.list_events(&tenant, message.id, 0).unwrap();
        assert_eq!(read[0], whole[0]);
        assert_eq!(read[1].event, end("Hello there."));
    }

    /// Whether an event is stored is told by the batch it would be in, whatever its form:
    /// a compact batch's span (its events unread), or an earlier version's events.
    #[test]
    fn an_event_is_known_stored_from_its_batch_of_each_form() {
        let store = Embedded::temporary().unwrap();
        let tenant = Tenant::default_tenant();
        let compact = ended_message(&store, &tenant);
        assert!(
            !store.has_event(&tenant, compact.id, 3, 3).unwrap(),
            "nothing stored"
        );
        let batch: Vec<EventEnvelope> = (3..=5)
            .map(|seq| envelope(&compact, seq, delta("piece")))
            .collect();
        store.put_events(&tenant, &batch).unwrap();
        assert!(store.has_event(&tenant, compact.id, 3, 3).unwrap());
        assert!(store.has_event(&tenant, compact.id, 3, 5).unwrap());
        assert!(!store.has_event(&tenant, compact.id, 3, 6).unwrap());
        assert!(
            !store.has_event(&tenant, compact.id, 6, 6).unwrap(),
            "a burst beginning after the batch finds none of it"
        );

        let earlier = ended_message(&store, &tenant);
        let whole: Vec<EventEnvelope> = (1..=2)
            .map(|seq| envelope(&earlier, seq, delta("piece")))
            .collect();
        store
            .t()
            .unwrap()
            .events
            .insert(
                keys::event(&tenant, earlier.id, 1),
                encode("events", &StoredBatch::Whole(whole)).unwrap(),
            )
            .unwrap();
        assert!(store.has_event(&tenant, earlier.id, 1, 2).unwrap());
        assert!(!store.has_event(&tenant, earlier.id, 1, 3).unwrap());
    }
}
