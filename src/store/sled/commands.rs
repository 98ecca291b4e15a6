//! Ownership in the embedded store. One process opens it and owns every run: only what an
//! earlier process left is orphaned, and a command is taken by that process, in the order
//! it was kept.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{keys, Embedded};
use crate::domain::{ConversationId, MessageId, RunCommand, Tenant};
use crate::store::contract::TakenCommand;
use crate::store::error::StoreError;

/// A kept command, as stored.
#[derive(Serialize, Deserialize)]
struct Kept {
    tenant: Tenant,
    message: MessageId,
    command: RunCommand,
}

impl Embedded {
    fn running(&self, tenant: &Tenant, message: MessageId) -> Result<bool, StoreError> {
        Ok(self
            .get_message(tenant, message)?
            .is_some_and(|m| !m.status.is_terminal()))
    }

    fn keep_command(
        &self,
        tenant: &Tenant,
        message: MessageId,
        command: &RunCommand,
    ) -> Result<Option<String>, StoreError> {
        if !self.running(tenant, message)? {
            return Ok(None);
        }
        let kept = Kept {
            tenant: tenant.clone(),
            message,
            command: command.clone(),
        };
        let value = serde_json::to_vec(&kept).map_err(|source| StoreError::Codec {
            record: "commands",
            source,
        })?;
        // Time-ordered keys: commands come out in the order they were kept.
        let key = uuid::Uuid::now_v7();
        self.t()?.commands.insert(key.as_bytes(), value)?;
        Ok(Some(crate::store::contract::Fence::local().owner))
    }

    fn take_kept(&self, runs: &[MessageId]) -> Result<Vec<TakenCommand>, StoreError> {
        let t = self.t()?;
        let mut taken = Vec::new();
        for entry in t.commands.iter() {
            let (key, value) = entry?;
            let Ok(kept) = serde_json::from_slice::<Kept>(&value) else {
                t.commands.remove(&key)?;
                continue;
            };
            let running = self.running(&kept.tenant, kept.message)?;
            if running && !runs.contains(&kept.message) {
                // Its run is not here to take it (being handed over): it waits.
                continue;
            }
            t.commands.remove(&key)?;
            if running {
                taken.push(TakenCommand {
                    tenant: kept.tenant,
                    message: kept.message,
                    command: kept.command,
                });
            }
        }
        Ok(taken)
    }

    /// Whether a message of the conversation is live: read from the index of each
    /// conversation's live messages, not a scan of every running marker.
    pub(super) fn running_in(
        &self,
        tenant: &Tenant,
        conversation: ConversationId,
    ) -> Result<bool, StoreError> {
        Ok(!self.live_in(tenant, conversation, u64::MAX)?.is_empty())
    }

    /// The running sub-agent runs of `parent`: read through the running markers of
    /// children, which are few.
    pub(super) fn running_children(
        &self,
        tenant: &Tenant,
        parent: MessageId,
    ) -> Result<Vec<MessageId>, StoreError> {
        let mut children = Vec::new();
        for entry in self
            .t()?
            .running
            .scan_prefix(keys::tenant_prefix(tenant, 0))
        {
            let (key, marker) = entry?;
            if marker.as_ref() != super::admission::CHILD_MARKER {
                continue;
            }
            let Some((_, id)) = keys::parse_message(&key) else {
                continue;
            };
            let Some(message) = self.get_message(tenant, id)? else {
                continue;
            };
            let of_parent = message
                .parent
                .as_deref()
                .is_some_and(|link| link.message_id == parent);
            if of_parent && !message.status.is_terminal() {
                children.push(id);
            }
        }
        Ok(children)
    }
}

#[async_trait]
impl crate::store::contract::Ownership for Embedded {
    /// One process opens the database, so only what an earlier process left is orphaned,
    /// and only the first call finds anything.
    async fn take_orphans(
        &self,
        adoption: crate::domain::Adoption,
    ) -> Result<crate::store::contract::Swept, StoreError> {
        if self.swept.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Ok(crate::store::contract::Swept::default());
        }
        self.written(self.take_unfinished(adoption)).await
    }

    async fn send_command(
        &self,
        tenant: &Tenant,
        message: MessageId,
        command: &RunCommand,
    ) -> Result<Option<String>, StoreError> {
        self.written(self.keep_command(tenant, message, command))
            .await
    }

    async fn take_commands(&self, runs: &[MessageId]) -> Result<Vec<TakenCommand>, StoreError> {
        // Looked at every second: nothing to take writes nothing.
        if self.t()?.commands.is_empty() {
            return Ok(Vec::new());
        }
        self.written(self.take_kept(runs)).await
    }

    /// This process, the one replica, holding every run not yet ended.
    async fn replicas(&self) -> Result<Vec<crate::store::contract::ReplicaEntry>, StoreError> {
        let t = self.t()?;
        let mut held = 0;
        for key in t.running.iter().keys() {
            if keys::parse_message(&key?).is_some() {
                held += 1;
            }
        }
        Ok(vec![crate::store::contract::ReplicaEntry {
            id: crate::store::contract::Fence::local().owner,
            started_at: self.opened_at,
            lease_until: None,
            live: true,
            runs_held: held,
        }])
    }
}
