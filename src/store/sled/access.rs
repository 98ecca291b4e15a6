//! API keys and per-tenant usage counts.

use super::{decode, encode, keys, Embedded, StoreError};
use crate::domain::{ApiKeyRecord, Tenant};

impl Embedded {
    /// Writes (or replaces) an API key.
    pub fn put_api_key(&self, record: &ApiKeyRecord) -> Result<(), StoreError> {
        self.t()?
            .api_keys
            .insert(record.id.as_bytes(), encode("api_keys", record)?)?;
        Ok(())
    }

    /// Replaces an API key only while it is stored; returns whether it was.
    pub fn touch_api_key(&self, record: &ApiKeyRecord) -> Result<bool, StoreError> {
        let t = self.t()?;
        let Some(old) = t.api_keys.get(record.id.as_bytes())? else {
            return Ok(false);
        };
        let new = encode("api_keys", record)?;
        // Swapped against what was read: a delete in between wins.
        let swapped = t
            .api_keys
            .compare_and_swap(record.id.as_bytes(), Some(old), Some(new))?;
        Ok(swapped.is_ok())
    }

    /// Deletes an API key; returns whether it existed.
    pub fn delete_api_key(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.t()?.api_keys.remove(id.as_bytes())?.is_some())
    }

    /// Every API key, for start-up.
    pub fn all_api_keys(&self) -> Result<Vec<ApiKeyRecord>, StoreError> {
        self.t()?
            .api_keys
            .iter()
            .map(|entry| decode("api_keys", &entry?.1))
            .collect()
    }

    /// Tokens `tenant` used on `day` (e.g. `20261123`).
    pub fn tenant_tokens(&self, tenant: &Tenant, day: u32) -> Result<u64, StoreError> {
        let key = keys::named(tenant, &day.to_string());
        Ok(self
            .t()?
            .tenant_usage
            .get(key)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// Adds `tokens` to what `tenant` used on `day`, atomically.
    pub fn add_tenant_tokens(
        &self,
        tenant: &Tenant,
        day: u32,
        tokens: u64,
    ) -> Result<(), StoreError> {
        let key = keys::named(tenant, &day.to_string());
        self.t()?.tenant_usage.update_and_fetch(key, |old| {
            let used = old
                .and_then(|v| <[u8; 8]>::try_from(v).ok())
                .map_or(0, u64::from_be_bytes);
            Some(used.saturating_add(tokens).to_be_bytes().to_vec())
        })?;
        Ok(())
    }
}
