//! Thoughts and events: the per-message records, keyed so scans come out in order.

use super::{encode, keys, scan, Store, StoreError};
use crate::domain::{MessageId, Tenant, Thought};
use crate::events::EventEnvelope;

impl Store {
    /// Writes (or overwrites) a thought record.
    pub fn put_thought(&self, tenant: &Tenant, thought: &Thought) -> Result<(), StoreError> {
        let key = keys::thought(tenant, thought.message_id, thought.position);
        self.thoughts.insert(key, encode("thoughts", thought)?)?;
        Ok(())
    }

    /// A message's thoughts by position.
    pub fn list_thoughts(
        &self,
        tenant: &Tenant,
        message: MessageId,
    ) -> Result<Vec<Thought>, StoreError> {
        scan(
            &self.thoughts,
            "thoughts",
            &keys::message_children(tenant, message),
        )
    }

    /// Appends an event to its message's log.
    pub fn put_event(&self, tenant: &Tenant, event: &EventEnvelope) -> Result<(), StoreError> {
        let key = keys::event(tenant, event.message_id, event.seq);
        self.events.insert(key, encode("events", event)?)?;
        Ok(())
    }

    /// A message's events with `seq > after_seq`, in order.
    pub fn list_events(
        &self,
        tenant: &Tenant,
        message: MessageId,
        after_seq: u64,
    ) -> Result<Vec<EventEnvelope>, StoreError> {
        let prefix = keys::message_children(tenant, message);
        let start = keys::event(tenant, message, after_seq.saturating_add(1));
        self.events
            .range(start..)
            .take_while(|entry| {
                entry
                    .as_ref()
                    .map_or(true, |(key, _)| key.starts_with(&prefix))
            })
            .map(|entry| super::decode("events", &entry?.1))
            .collect()
    }
}
