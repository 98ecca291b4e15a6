//! Stored agents and their versions. One process opens the database, so a mutex makes
//! each read-change-write of an agent record atomic; every write is durable on return.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use async_trait::async_trait;

use super::{decode, encode, keys, Embedded, StoreError};
use crate::domain::agent::MAX_AGENTS;
use crate::domain::{AgentChange, AgentRecord, AgentRefusal, AgentVersionRecord, Tenant};
use crate::store::contract::{Page, PageSize};

/// Key of version `version` of agent `id`: its agent's key, a NUL, the number.
fn version_key(tenant: &Tenant, id: &str, version: u32) -> Vec<u8> {
    let mut key = versions_prefix(tenant, id);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

fn versions_prefix(tenant: &Tenant, id: &str) -> Vec<u8> {
    let mut key = keys::named(tenant, id);
    key.push(0);
    key
}

impl Embedded {
    fn lock_agents(&self) -> std::sync::MutexGuard<'_, ()> {
        self.agent_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn read_agent(&self, tenant: &Tenant, id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.t()?
            .agents
            .get(keys::named(tenant, id))?
            .map(|bytes| decode("agents", &bytes))
            .transpose()
    }

    fn insert_agent(
        &self,
        tenant: &Tenant,
        record: &AgentRecord,
        first: Option<&AgentVersionRecord>,
    ) -> Result<Result<(), AgentRefusal>, StoreError> {
        let _held = self.lock_agents();
        let t = self.t()?;
        let key = keys::named(tenant, &record.id);
        if t.agents.contains_key(&key)? {
            return Ok(Err(AgentRefusal::Exists(record.id.clone())));
        }
        let count = t.agents.scan_prefix(keys::tenant_prefix(tenant, 0)).count();
        if count as u64 >= MAX_AGENTS {
            return Ok(Err(AgentRefusal::TooManyAgents));
        }
        if let Some(first) = first {
            t.agent_versions.insert(
                version_key(tenant, &record.id, first.version),
                encode("agent_versions", first)?,
            )?;
        }
        t.agents.insert(key, encode("agents", record)?)?;
        Ok(Ok(()))
    }

    fn apply_agent_change(
        &self,
        tenant: &Tenant,
        id: &str,
        change: &AgentChange,
    ) -> Result<Result<AgentRecord, AgentRefusal>, StoreError> {
        let _held = self.lock_agents();
        let Some(mut record) = self.read_agent(tenant, id)? else {
            return Ok(Err(AgentRefusal::NoAgent(id.to_owned())));
        };
        if let Err(refusal) = change.apply(&mut record, crate::domain::now()) {
            return Ok(Err(refusal));
        }
        self.t()?
            .agents
            .insert(keys::named(tenant, id), encode("agents", &record)?)?;
        Ok(Ok(record))
    }

    fn remove_agent(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        let _held = self.lock_agents();
        let t = self.t()?;
        let existed = t.agents.remove(keys::named(tenant, id))?.is_some();
        for entry in t.agent_versions.scan_prefix(versions_prefix(tenant, id)) {
            t.agent_versions.remove(entry?.0)?;
        }
        Ok(existed)
    }

    fn append_version(
        &self,
        tenant: &Tenant,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<Result<AgentVersionRecord, AgentRefusal>, StoreError> {
        let _held = self.lock_agents();
        let Some(mut record) = self.read_agent(tenant, id)? else {
            return Ok(Err(AgentRefusal::NoAgent(id.to_owned())));
        };
        let version = match record.next_version(config, crate::domain::now()) {
            Ok(version) => version,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let t = self.t()?;
        t.agent_versions.insert(
            version_key(tenant, id, version.version),
            encode("agent_versions", &version)?,
        )?;
        t.agents
            .insert(keys::named(tenant, id), encode("agents", &record)?)?;
        Ok(Ok(version))
    }
}

#[async_trait]
impl crate::store::contract::Agents for Embedded {
    async fn create_agent(
        &self,
        tenant: &Tenant,
        record: &AgentRecord,
        first: Option<&AgentVersionRecord>,
    ) -> Result<Result<(), AgentRefusal>, StoreError> {
        if let Some(field) = record.field_with_nul() {
            return Ok(Err(AgentRefusal::HoldsNul(field)));
        }
        self.written(self.insert_agent(tenant, record, first)).await
    }

    async fn get_agent(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        self.read_agent(tenant, id)
    }

    async fn list_agents(
        &self,
        tenant: &Tenant,
        after: &str,
        labels: &BTreeMap<String, String>,
        limit: usize,
    ) -> Result<Page<AgentRecord>, StoreError> {
        let t = self.t()?;
        let prefix = keys::tenant_prefix(tenant, 0);
        let start = if after.is_empty() {
            prefix.clone()
        } else {
            let mut key = keys::named(tenant, after);
            key.push(0);
            key
        };
        let mut items = Vec::new();
        for entry in t.agents.range(start..) {
            let (key, value) = entry?;
            if !key.starts_with(&prefix) {
                break;
            }
            let record: AgentRecord = decode("agents", &value)?;
            if !labels.iter().all(|(k, v)| record.labels.get(k) == Some(v)) {
                continue;
            }
            if items.len() == limit {
                return Ok(Page { items, more: true });
            }
            items.push(record);
        }
        Ok(Page { items, more: false })
    }

    async fn change_agent(
        &self,
        tenant: &Tenant,
        id: &str,
        change: &AgentChange,
    ) -> Result<Result<AgentRecord, AgentRefusal>, StoreError> {
        self.written(self.apply_agent_change(tenant, id, change))
            .await
    }

    async fn delete_agent(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        self.written(self.remove_agent(tenant, id)).await
    }

    async fn add_version(
        &self,
        tenant: &Tenant,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<Result<AgentVersionRecord, AgentRefusal>, StoreError> {
        self.written(self.append_version(tenant, id, config)).await
    }

    async fn get_version(
        &self,
        tenant: &Tenant,
        id: &str,
        version: u32,
    ) -> Result<Option<AgentVersionRecord>, StoreError> {
        self.t()?
            .agent_versions
            .get(version_key(tenant, id, version))?
            .map(|bytes| decode("agent_versions", &bytes))
            .transpose()
    }

    async fn list_versions(
        &self,
        tenant: &Tenant,
        id: &str,
        before: u32,
        size: PageSize,
    ) -> Result<Page<AgentVersionRecord>, StoreError> {
        let t = self.t()?;
        let low = versions_prefix(tenant, id);
        let high = version_key(tenant, id, before);
        let mut items = Vec::new();
        let mut bytes = 0;
        for entry in t.agent_versions.range(low..high).rev() {
            let (_, value) = entry?;
            let full = items.len() == size.limit
                || (!items.is_empty() && bytes + value.len() > size.max_bytes);
            if full {
                return Ok(Page { items, more: true });
            }
            bytes += value.len();
            items.push(decode("agent_versions", &value)?);
        }
        Ok(Page { items, more: false })
    }
}
