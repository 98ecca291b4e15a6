//! Tool providers (credentials sealed), API keys and tenant usage in PostgreSQL.

use std::collections::BTreeMap;
use std::time::Instant;

use async_trait::async_trait;

use super::error::{codec, from_sqlx};
use super::Postgres;
use crate::domain::{ApiKeyRecord, ProviderRecord, Tenant};
use crate::store::contract::{RegistryChanges, StoredProvider};
use crate::store::error::StoreError;

impl Postgres {
    /// A provider as read, its sealed credentials opened.
    fn open_provider(&self, record: &str, sealed: &str) -> Result<ProviderRecord, StoreError> {
        let mut record: ProviderRecord =
            serde_json::from_str(record).map_err(|err| codec("providers", err))?;
        let plain = self.sealer.open(sealed)?;
        record.credentials =
            serde_json::from_slice(&plain).map_err(|err| codec("providers", err))?;
        Ok(record)
    }

    /// Moves the counter `sequence` after a change it counts (the change committed first,
    /// so whoever sees the counter move reads the change).
    async fn changed(&self, sequence: &str) -> Result<(), StoreError> {
        self.bounded(async move {
            sqlx::query("SELECT nextval($1::regclass)")
                .bind(sequence)
                .execute(&mut *self.connection().await?)
                .await
                .map_err(|err| self.failed(err))
        })
        .await?;
        Ok(())
    }

    /// Runs one statement in a durable transaction; returns the rows it touched.
    async fn write(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64, StoreError> {
        self.bounded(async move {
            let started = Instant::now();
            let mut tx = self.begin().await?;
            let done = query
                .execute(&mut *tx)
                .await
                .map_err(|err| self.failed(err))?;
            self.finish(tx, started).await?;
            Ok(done.rows_affected())
        })
        .await
    }
}

#[async_trait]
impl crate::store::contract::Registry for Postgres {
    async fn put_provider(
        &self,
        tenant: &Tenant,
        record: &ProviderRecord,
    ) -> Result<(), StoreError> {
        let credentials =
            serde_json::to_vec(&record.credentials).map_err(|err| codec("providers", err))?;
        let sealed = self.sealer.seal(&credentials)?;
        let bare = ProviderRecord {
            credentials: BTreeMap::new(),
            ..record.clone()
        };
        let text = serde_json::to_string(&bare).map_err(|err| codec("providers", err))?;
        let query = sqlx::query(
            "INSERT INTO providers (tenant, name, record, sealed) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, name) DO UPDATE SET record = EXCLUDED.record, sealed = EXCLUDED.sealed",
        )
        .bind(tenant.as_str())
        .bind(&record.name)
        .bind(text)
        .bind(sealed);
        self.write(query).await?;
        self.changed("provider_changes").await
    }

    async fn get_provider(
        &self,
        tenant: &Tenant,
        name: &str,
    ) -> Result<Option<ProviderRecord>, StoreError> {
        let row: Option<(String, String)> =
            sqlx::query_as("SELECT record, sealed FROM providers WHERE tenant = $1 AND name = $2")
                .bind(tenant.as_str())
                .bind(name)
                .fetch_optional(&mut *self.connection().await?)
                .await
                .map_err(from_sqlx)?;
        row.map(|(record, sealed)| self.open_provider(&record, &sealed))
            .transpose()
    }

    async fn delete_provider(&self, tenant: &Tenant, name: &str) -> Result<bool, StoreError> {
        let query = sqlx::query("DELETE FROM providers WHERE tenant = $1 AND name = $2")
            .bind(tenant.as_str())
            .bind(name);
        let deleted = self.write(query).await? > 0;
        self.changed("provider_changes").await?;
        Ok(deleted)
    }

    async fn all_providers(&self) -> Result<Vec<StoredProvider>, StoreError> {
        let rows: Vec<(String, String, String, String)> = sqlx::query_as(
            "SELECT tenant, name, record, sealed FROM providers ORDER BY tenant, name",
        )
        .fetch_all(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(rows
            .into_iter()
            .filter_map(|(tenant, name, record, sealed)| {
                let tenant = Tenant::from_stored(&tenant)?;
                let opened = self.open_provider(&record, &sealed);
                Some((tenant, name, opened))
            })
            .collect())
    }

    /// Nothing to seal: this backend never held credentials in plaintext.
    async fn seal_plaintext_credentials(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    async fn put_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(record).map_err(|err| codec("api_keys", err))?;
        let query = sqlx::query(
            "INSERT INTO api_keys (id, record) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
        )
        .bind(&record.id)
        .bind(text);
        self.write(query).await?;
        self.changed("api_key_changes").await
    }

    async fn delete_api_key(&self, id: &str) -> Result<bool, StoreError> {
        let query = sqlx::query("DELETE FROM api_keys WHERE id = $1").bind(id);
        let deleted = self.write(query).await? > 0;
        self.changed("api_key_changes").await?;
        Ok(deleted)
    }

    async fn touch_api_key(&self, record: &ApiKeyRecord) -> Result<bool, StoreError> {
        let text = serde_json::to_string(record).map_err(|err| codec("api_keys", err))?;
        let query = sqlx::query("UPDATE api_keys SET record = $2 WHERE id = $1")
            .bind(&record.id)
            .bind(text);
        Ok(self.write(query).await? > 0)
    }

    async fn registry_changes(&self) -> Result<RegistryChanges, StoreError> {
        let (api_keys, providers): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM api_key_changes), \
             (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM provider_changes)",
        )
        .fetch_one(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(RegistryChanges {
            api_keys: u64::try_from(api_keys).unwrap_or_default(),
            providers: u64::try_from(providers).unwrap_or_default(),
        })
    }

    async fn all_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as("SELECT record FROM api_keys ORDER BY id")
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(from_sqlx)?;
        rows.iter()
            .map(|(text,)| serde_json::from_str(text).map_err(|err| codec("api_keys", err)))
            .collect()
    }

    async fn tenant_tokens(&self, tenant: &Tenant, day: u32) -> Result<u64, StoreError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT sum(tokens)::bigint FROM tenant_usage WHERE tenant = $1 AND day = $2",
        )
        .bind(tenant.as_str())
        .bind(i32::try_from(day).unwrap_or(i32::MAX))
        .fetch_optional(&mut *self.connection().await?)
        .await
        .map_err(from_sqlx)?;
        Ok(row
            .and_then(|(tokens,)| tokens)
            .map_or(0, |tokens| u64::try_from(tokens).unwrap_or_default()))
    }
}
