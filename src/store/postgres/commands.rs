//! Ownership in PostgreSQL: the fence of new runs, the sweep of runs whose replica is gone
//! (`replicas.rs`), commands kept in `run_commands` while their run is running and taken by
//! the replica that owns it, the lease its heartbeat renews, and what is heard on the
//! database's notifications (`listen.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::error::{codec, from_sqlx};
use super::start::FIRST_EPOCH;
use super::Postgres;
use crate::domain::{Adoption, EventEnvelope, Lease, MessageId, RunCommand, Tenant};
use crate::store::contract::{Fence, Heard, ReplicaEntry, Swept, TakenCommand};
use crate::store::error::StoreError;

#[async_trait]
impl crate::store::contract::Ownership for Postgres {
    fn fence(&self) -> Fence {
        Fence {
            owner: self.identity.id.clone(),
            epoch: u64::try_from(FIRST_EPOCH).unwrap_or_default(),
        }
    }

    async fn take_orphans(&self, adoption: Adoption) -> Result<Swept, StoreError> {
        self.bounded(async move { self.sweep_orphans(adoption).await })
            .await
    }

    fn lease(&self) -> Lease {
        Lease::renewed_at(Arc::clone(&self.last_renewed), self.identity.lease)
    }

    fn hear(&self) -> Option<broadcast::Receiver<Heard>> {
        self.heard.as_ref().map(broadcast::Sender::subscribe)
    }

    async fn flash(&self, message: MessageId, events: &[EventEnvelope]) {
        Postgres::flash(self, message, events).await;
    }

    async fn replicas(&self) -> Result<Vec<ReplicaEntry>, StoreError> {
        type Row = (String, DateTime<Utc>, DateTime<Utc>, bool, i64);
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT r.id, r.started_at, r.lease_until, r.lease_until > now(), \
                 (SELECT count(*) FROM messages m WHERE m.owner = r.id AND m.running) \
             FROM replicas r ORDER BY r.id",
        )
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(rows
            .into_iter()
            .map(|(id, started_at, lease_until, live, held)| ReplicaEntry {
                id,
                started_at,
                lease_until: Some(lease_until),
                live,
                runs_held: u64::try_from(held).unwrap_or_default(),
            })
            .collect())
    }

    /// Kept while the message's row is held, so a run that ends at the same moment either
    /// takes the command or leaves it to the sweep.
    async fn send_command(
        &self,
        tenant: &Tenant,
        message: MessageId,
        command: &RunCommand,
    ) -> Result<Option<String>, StoreError> {
        self.bounded(async move {
            let text = serde_json::to_string(command).map_err(|err| codec("run_commands", err))?;
            let started = std::time::Instant::now();
            let mut tx = self.begin().await?;
            let failed = |err| self.failed(err);
            let owner: Option<(String,)> = sqlx::query_as(
                "SELECT owner FROM messages WHERE tenant = $1 AND id = $2 AND running FOR SHARE",
            )
            .bind(tenant.as_str())
            .bind(message.0)
            .fetch_optional(&mut *tx)
            .await
            .map_err(failed)?;
            let Some((owner,)) = owner else {
                return Ok(None);
            };
            sqlx::query(
                "INSERT INTO run_commands (tenant, message_id, command) VALUES ($1, $2, $3)",
            )
            .bind(tenant.as_str())
            .bind(message.0)
            .bind(text)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
            self.notify_owner(&mut tx, &owner).await?;
            self.finish(tx, started).await?;
            Ok(Some(owner))
        })
        .await
    }

    async fn take_commands(&self, runs: &[MessageId]) -> Result<Vec<TakenCommand>, StoreError> {
        self.bounded(async move {
            if runs.is_empty() {
                return Ok(Vec::new());
            }
            let runs: Vec<Uuid> = runs.iter().map(|id| id.0).collect();
            let mut rows: Vec<(i64, String, Uuid, String)> = sqlx::query_as(
                "DELETE FROM run_commands c USING messages m \
                 WHERE m.tenant = c.tenant AND m.id = c.message_id AND m.running AND m.owner = $1 \
                 AND c.message_id = ANY($2) \
                 RETURNING c.id, c.tenant, c.message_id, c.command",
            )
            .bind(&self.identity.id)
            .bind(&runs)
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(|err| self.failed(err))?;
            rows.sort_by_key(|(id, ..)| *id);
            rows.into_iter()
                .map(|(_, tenant, message, text)| {
                    let tenant =
                        Tenant::from_stored(&tenant).ok_or_else(|| StoreError::Backend {
                            category: crate::store::error::Category::Corrupt,
                            message: "a command names a tenant that is not valid".to_owned(),
                        })?;
                    Ok(TakenCommand {
                        tenant,
                        message: MessageId(message),
                        command: serde_json::from_str(&text)
                            .map_err(|err| codec("run_commands", err))?,
                    })
                })
                .collect()
        })
        .await
    }
}

impl Postgres {
    /// Drops the commands of messages no longer running (their run ended before taking
    /// them, or the conversation was deleted).
    pub(super) async fn drop_stale_commands(&self) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM run_commands c WHERE NOT EXISTS (SELECT 1 FROM messages m \
             WHERE m.tenant = c.tenant AND m.id = c.message_id AND m.running)",
        )
        .execute(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(())
    }
}
