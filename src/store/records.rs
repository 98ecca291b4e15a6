//! Thoughts and events: the per-message records, keyed so scans come out in order.

use super::pieces::{self, Owner};
use super::{encode, keys, scan, Store, StoreError};
use crate::domain::EventEnvelope;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::{FileId, FileRecord, MessageId, ProviderRecord, RunEvent, Tenant, Thought};

/// A stored batch of events: as emitted, or with the end's answer left to the message.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum StoredBatch {
    /// Every event whole.
    Whole(Vec<EventEnvelope>),
    /// The `end` event's answer is the message's answer, not repeated here.
    AnswerApart {
        events: Vec<EventEnvelope>,
        answer_apart: bool,
    },
}

fn ends_with_answer(event: &EventEnvelope) -> bool {
    matches!(&event.event, RunEvent::MessageEnd { answer, .. } if !answer.is_empty())
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

impl Store {
    /// Writes (or overwrites) a thought record.
    pub fn put_thought(&self, tenant: &Tenant, thought: &Thought) -> Result<(), StoreError> {
        let key = keys::thought(tenant, thought.message_id, thought.position);
        let value = encode("thoughts", thought)?;
        pieces::put(&self.thoughts, &self.pieces, Owner::Thought, &key, &value)
    }

    /// A message's thoughts by position.
    pub fn list_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Vec<Thought>, StoreError> {
        scan(
            &self.thoughts,
            (&self.pieces, Owner::Thought),
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
        let key = keys::file(tenant, record.id);
        if let Some(bytes) = bytes {
            pieces::put(&self.file_data, &self.pieces, Owner::File, &key, bytes)?;
        }
        self.files.insert(key, encode("files", record)?)?;
        Ok(())
    }

    /// A file with its bytes (empty for a file that is only a URL).
    pub fn get_file(
        &self,
        tenant: &Tenant,
        id: FileId,
    ) -> Result<Option<(FileRecord, Vec<u8>)>, StoreError> {
        let key = keys::file(tenant, id);
        let Some(record) = self.files.get(&key)? else {
            return Ok(None);
        };
        let bytes = match self.file_data.get(&key)? {
            Some(stored) => pieces::join(&self.pieces, Owner::File, &key, stored)?.to_vec(),
            None => Vec::new(),
        };
        Ok(Some((super::decode("files", &record)?, bytes)))
    }

    /// Deletes files by id.
    pub fn delete_files(&self, tenant: &Tenant, ids: &[FileId]) -> Result<(), StoreError> {
        for id in ids {
            let key = keys::file(tenant, *id);
            self.files.remove(&key)?;
            self.file_data.remove(&key)?;
            pieces::remove(&self.pieces, Owner::File, &key)?;
        }
        Ok(())
    }

    /// Writes (or replaces) a tenant's provider definition.
    /// Its credentials are sealed: the database never holds them in plaintext.
    pub fn put_provider(&self, tenant: &Tenant, record: &ProviderRecord) -> Result<(), StoreError> {
        let credentials =
            serde_json::to_vec(&record.credentials).map_err(|source| StoreError::Codec {
                tree: "providers",
                source,
            })?;
        let stored = StoredProvider {
            record: ProviderRecord {
                credentials: BTreeMap::new(),
                ..record.clone()
            },
            sealed_credentials: Some(self.sealer.seal(&credentials)?),
        };
        self.providers.insert(
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
                    tree: "providers",
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
        self.providers
            .get(keys::named(tenant, name))?
            .map(|bytes| self.open_provider(&bytes))
            .transpose()
    }

    /// Deletes a tenant's provider definition; returns whether it existed.
    pub fn delete_provider(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError> {
        Ok(self.providers.remove(keys::named(tenant, name))?.is_some())
    }

    /// Every stored provider of every tenant, for start-up. One whose credentials do not
    /// open (another key) is reported as an error in its place, not a failure of all.
    #[allow(clippy::type_complexity)]
    pub fn all_providers(
        &self,
    ) -> Result<Vec<(Tenant, String, Result<ProviderRecord, StoreError>)>, StoreError> {
        let mut out = Vec::new();
        for entry in self.providers.iter() {
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
        for entry in self.providers.iter() {
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
    pub fn put_events(&self, tenant: &Tenant, events: &[EventEnvelope]) -> Result<(), StoreError> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let key = keys::event(tenant, first.message_id, first.seq);
        let value = match events.iter().position(ends_with_answer) {
            // The end's answer is the message's: kept once, there, and put back on reading.
            Some(end) => {
                let mut events = events.to_vec();
                if let RunEvent::MessageEnd { answer, .. } = &mut events[end].event {
                    answer.clear();
                }
                encode(
                    "events",
                    &StoredBatch::AnswerApart {
                        events,
                        answer_apart: true,
                    },
                )?
            }
            None => encode("events", &events)?,
        };
        pieces::put(&self.events, &self.pieces, Owner::Events, &key, &value)
    }

    /// A message's events with `seq > after_seq`, in order.
    pub fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        let batches: Vec<StoredBatch> = scan(
            &self.events,
            (&self.pieces, Owner::Events),
            "events",
            &keys::message_children(tenant, message),
        )?;
        let mut events = Vec::new();
        for batch in batches {
            match batch {
                StoredBatch::Whole(batch) => events.extend(batch),
                StoredBatch::AnswerApart { events: batch, .. } => {
                    let answer = self
                        .get_message(tenant, message)?
                        .map(|m| m.answer)
                        .unwrap_or_default();
                    events.extend(batch.into_iter().map(|mut event| {
                        if let RunEvent::MessageEnd { answer: end, .. } = &mut event.event {
                            end.clone_from(&answer);
                        }
                        event
                    }));
                }
            }
        }
        events.retain(|event| event.seq > after_seq);
        Ok(events)
    }
}
