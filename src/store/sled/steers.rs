//! A steer that joined a live run leaves no message of its own.

use super::messages::{agent_key, remove_prefix};
use super::pieces::{self, Owner};
use super::{decode, encode, keys, run_index, Embedded, StoreError};
use crate::domain::{IdempotencyRecord, MessageId, MessageStatus, Tenant};

impl Embedded {
    /// Removes the queued steer `steer` that `joined` took, and points its idempotency key
    /// at `joined`; `false` when it is not queued (gone already, or started).
    pub(super) fn drop_steer(
        &self,
        tenant: &Tenant,
        steer: MessageId,
        joined: MessageId,
    ) -> Result<bool, StoreError> {
        let t = self.t()?;
        let Some(record) = self.get_message(tenant, steer)? else {
            return Ok(false);
        };
        // Held as a new message is placed: none is placed from the index half changed.
        let _place = self.order.lock(record.conversation_id);
        if record.status != MessageStatus::Queued {
            return Ok(false);
        }
        let key = keys::message(tenant, steer);
        t.conversation_messages.remove(keys::conversation_message(
            tenant,
            record.conversation_id,
            record.seq,
        ))?;
        if let Some(agent) = agent_key(tenant, &record) {
            t.agent_messages.remove(agent)?;
        }
        let (runs, run_key) = run_index::entry_of(tenant, &record);
        runs.of(&t).remove(run_key)?;
        t.messages.remove(&key)?;
        self.past.forget(&key);
        t.running.remove(&key)?;
        t.specs.remove(&key)?;
        pieces::remove(&t.pieces, Owner::Spec, &key)?;
        let children = keys::message_children(tenant, steer);
        remove_prefix(&t.events, &children)?;
        pieces::remove_under(&t.pieces, Owner::Events, &children)?;
        self.live.ended(tenant, record.conversation_id, record.seq);
        for entry in t.idempotency.scan_prefix(keys::tenant_prefix(tenant, 0)) {
            let (name, value) = entry?;
            let mut kept: IdempotencyRecord = decode("idempotency", &value)?;
            if kept.message_id == steer {
                kept.message_id = joined;
                t.idempotency.insert(name, encode("idempotency", &kept)?)?;
            }
        }
        Ok(true)
    }
}
