//! Stored agents and their versions in PostgreSQL. A change to an agent (a new version, an
//! alias moved) reads its row `FOR UPDATE` and writes it back in one transaction, so changes
//! from any replica apply one at a time and version numbers never repeat or skip.

use std::collections::BTreeMap;
use std::time::Instant;

use async_trait::async_trait;

use super::error::{codec, from_sqlx};
use super::Postgres;
use crate::domain::agent::MAX_AGENTS;
use crate::domain::{AgentChange, AgentRecord, AgentRefusal, AgentVersionRecord, Tenant};
use crate::store::contract::{Page, PageSize};
use crate::store::error::StoreError;

type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// The first key of the advisory locks that count a tenant's agents as one is created.
const AGENT_COUNT_LOCK: i32 = 0x6167_6e74;

fn agent_text(record: &AgentRecord) -> Result<String, StoreError> {
    serde_json::to_string(record).map_err(|err| codec("agents", err))
}

fn agent_of(text: &str) -> Result<AgentRecord, StoreError> {
    serde_json::from_str(text).map_err(|err| codec("agents", err))
}

fn version_of(text: &str) -> Result<AgentVersionRecord, StoreError> {
    serde_json::from_str(text).map_err(|err| codec("agent_versions", err))
}

impl Postgres {
    /// The agent row, locked until `tx` ends.
    async fn lock_agent(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT record::text FROM agents WHERE tenant = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant.as_str())
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        row.map(|(text,)| agent_of(&text)).transpose()
    }

    async fn put_agent(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        record: &AgentRecord,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE agents SET record = $3::jsonb WHERE tenant = $1 AND id = $2")
            .bind(tenant.as_str())
            .bind(&record.id)
            .bind(agent_text(record)?)
            .execute(&mut **tx)
            .await
            .map_err(|err| self.failed(err))?;
        Ok(())
    }

    async fn put_version(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        version: &AgentVersionRecord,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(version).map_err(|err| codec("agent_versions", err))?;
        sqlx::query(
            "INSERT INTO agent_versions (tenant, agent_id, version, record) VALUES ($1, $2, $3, $4)",
        )
        .bind(tenant.as_str())
        .bind(&version.agent_id)
        .bind(i32::try_from(version.version).unwrap_or(i32::MAX))
        .bind(text)
        .execute(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        Ok(())
    }

    async fn insert_agent(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        record: &AgentRecord,
        first: Option<&AgentVersionRecord>,
    ) -> Result<Result<(), AgentRefusal>, StoreError> {
        // Creates of one tenant count its agents one at a time, so two never pass the limit
        // together.
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(AGENT_COUNT_LOCK)
            .bind(tenant.as_str())
            .execute(&mut **tx)
            .await
            .map_err(|err| self.failed(err))?;
        let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM agents WHERE tenant = $1")
            .bind(tenant.as_str())
            .fetch_one(&mut **tx)
            .await
            .map_err(|err| self.failed(err))?;
        if u64::try_from(count).unwrap_or(u64::MAX) >= MAX_AGENTS {
            return Ok(Err(AgentRefusal::TooManyAgents));
        }
        let inserted = sqlx::query(
            "INSERT INTO agents (tenant, id, record) VALUES ($1, $2, $3::jsonb) \
             ON CONFLICT (tenant, id) DO NOTHING",
        )
        .bind(tenant.as_str())
        .bind(&record.id)
        .bind(agent_text(record)?)
        .execute(&mut **tx)
        .await
        .map_err(|err| self.failed(err))?;
        if inserted.rows_affected() == 0 {
            return Ok(Err(AgentRefusal::Exists(record.id.clone())));
        }
        if let Some(first) = first {
            self.put_version(tx, tenant, first).await?;
        }
        Ok(Ok(()))
    }

    /// Commits `tx` (durably) when `done` is not a refusal; a refusal rolls it back.
    async fn settle<T>(
        &self,
        tx: Tx,
        started: Instant,
        done: Result<T, AgentRefusal>,
    ) -> Result<Result<T, AgentRefusal>, StoreError> {
        if done.is_ok() {
            self.finish(tx, started).await?;
        }
        Ok(done)
    }

    async fn change_locked(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        id: &str,
        change: &AgentChange,
    ) -> Result<Result<AgentRecord, AgentRefusal>, StoreError> {
        let Some(mut record) = self.lock_agent(tx, tenant, id).await? else {
            return Ok(Err(AgentRefusal::NoAgent(id.to_owned())));
        };
        if let Err(refusal) = change.apply(&mut record, crate::domain::now()) {
            return Ok(Err(refusal));
        }
        self.put_agent(tx, tenant, &record).await?;
        Ok(Ok(record))
    }

    async fn append_locked(
        &self,
        tx: &mut Tx,
        tenant: &Tenant,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<Result<AgentVersionRecord, AgentRefusal>, StoreError> {
        let Some(mut record) = self.lock_agent(tx, tenant, id).await? else {
            return Ok(Err(AgentRefusal::NoAgent(id.to_owned())));
        };
        let version = match record.next_version(config, crate::domain::now()) {
            Ok(version) => version,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.put_version(tx, tenant, &version).await?;
        self.put_agent(tx, tenant, &record).await?;
        Ok(Ok(version))
    }
}

#[async_trait]
impl crate::store::contract::Agents for Postgres {
    async fn create_agent(
        &self,
        tenant: &Tenant,
        record: &AgentRecord,
        first: Option<&AgentVersionRecord>,
    ) -> Result<Result<(), AgentRefusal>, StoreError> {
        self.bounded(async move {
            if let Some(field) = record.field_with_nul() {
                return Ok(Err(AgentRefusal::HoldsNul(field)));
            }
            let started = Instant::now();
            let mut tx = self.begin().await?;
            let done = self.insert_agent(&mut tx, tenant, record, first).await?;
            self.settle(tx, started, done).await
        })
        .await
    }

    async fn get_agent(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let row: Option<(String,)> =
            sqlx::query_as("SELECT record::text FROM agents WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.map(|(text,)| agent_of(&text)).transpose()
    }

    async fn list_agents(
        &self,
        tenant: &Tenant,
        after: &str,
        labels: &BTreeMap<String, String>,
        limit: usize,
    ) -> Result<Page<AgentRecord>, StoreError> {
        let wanted = serde_json::to_string(labels).map_err(|err| codec("agents", err))?;
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT record::text FROM agents WHERE tenant = $1 AND id > $2 \
             AND record -> 'labels' @> $3::jsonb ORDER BY id LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(after)
        .bind(wanted)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1))
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let more = rows.len() > limit;
        let items = rows
            .iter()
            .take(limit)
            .map(|(text,)| agent_of(text))
            .collect::<Result<_, _>>()?;
        Ok(Page { items, more })
    }

    async fn change_agent(
        &self,
        tenant: &Tenant,
        id: &str,
        change: &AgentChange,
    ) -> Result<Result<AgentRecord, AgentRefusal>, StoreError> {
        self.bounded(async move {
            let started = Instant::now();
            let mut tx = self.begin().await?;
            let done = self.change_locked(&mut tx, tenant, id, change).await?;
            self.settle(tx, started, done).await
        })
        .await
    }

    async fn delete_agent(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        self.bounded(async move {
            let started = Instant::now();
            let mut tx = self.begin().await?;
            let done = sqlx::query("DELETE FROM agents WHERE tenant = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|err| self.failed(err))?;
            sqlx::query("DELETE FROM agent_versions WHERE tenant = $1 AND agent_id = $2")
                .bind(tenant.as_str())
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|err| self.failed(err))?;
            self.finish(tx, started).await?;
            Ok(done.rows_affected() > 0)
        })
        .await
    }

    async fn add_version(
        &self,
        tenant: &Tenant,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<Result<AgentVersionRecord, AgentRefusal>, StoreError> {
        self.bounded(async move {
            let started = Instant::now();
            let mut tx = self.begin().await?;
            let done = self.append_locked(&mut tx, tenant, id, config).await?;
            self.settle(tx, started, done).await
        })
        .await
    }

    async fn get_version(
        &self,
        tenant: &Tenant,
        id: &str,
        version: u32,
    ) -> Result<Option<AgentVersionRecord>, StoreError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT record FROM agent_versions WHERE tenant = $1 AND agent_id = $2 AND version = $3",
        )
        .bind(tenant.as_str())
        .bind(id)
        .bind(i32::try_from(version).unwrap_or(i32::MAX))
        .fetch_optional(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        row.map(|(text,)| version_of(&text)).transpose()
    }

    async fn list_versions(
        &self,
        tenant: &Tenant,
        id: &str,
        before: u32,
        size: PageSize,
    ) -> Result<Page<AgentVersionRecord>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(
            "SELECT record FROM agent_versions WHERE tenant = $1 AND agent_id = $2 \
             AND version < $3 ORDER BY version DESC LIMIT $4",
        )
        .bind(tenant.as_str())
        .bind(id)
        .bind(i32::try_from(before).unwrap_or(i32::MAX))
        .bind(
            i64::try_from(size.limit)
                .unwrap_or(i64::MAX)
                .saturating_add(1),
        )
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        let mut items = Vec::new();
        let mut bytes = 0;
        for (text,) in &rows {
            let full = items.len() == size.limit
                || (!items.is_empty() && bytes + text.len() > size.max_bytes);
            if full {
                return Ok(Page { items, more: true });
            }
            bytes += text.len();
            items.push(version_of(text)?);
        }
        Ok(Page { items, more: false })
    }
}
