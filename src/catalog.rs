//! The tool catalog: providers a tenant registers, persisted in the store and live in the
//! registry. Built-in providers are listed with them but cannot be created over or deleted.

use std::sync::Arc;

use crate::domain::{ErrorKind, FieldError, ProviderRecord, Tenant};
use crate::store::{Store, StoreError};
use crate::tools::providers::{self, ProviderError, ProviderSettings};
use crate::tools::{Provider, ToolRegistry};

/// Why a catalog request failed.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A field is invalid.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The definition cannot become tools.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The name is taken.
    #[error("provider {0:?} already exists")]
    Exists(String),
    /// No such provider.
    #[error("tool provider {0} not found")]
    NotFound(String),
    /// Built-in providers are fixed.
    #[error("provider {0:?} is built in and cannot be changed or deleted")]
    Builtin(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CatalogError {
    /// The class of failure, for the API layer's mapping.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidField(_) => ErrorKind::InvalidArgument,
            Self::Provider(err) => err.kind(),
            Self::Exists(_) => ErrorKind::AlreadyExists,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Builtin(_) => ErrorKind::FailedPrecondition,
            Self::Store(err) => err.kind(),
        }
    }
}

/// A provider as the catalog shows it: its tools, and its definition unless built in.
#[derive(Clone)]
pub struct Entry {
    /// The live provider.
    pub provider: Arc<Provider>,
    /// Its stored definition; `None` for built-in providers.
    pub record: Option<ProviderRecord>,
}

/// Registered providers.
#[derive(Clone)]
pub struct Catalog {
    store: Store,
    registry: Arc<ToolRegistry>,
    settings: ProviderSettings,
    http: reqwest::Client,
    /// The stored definitions registered, as last read: what a reload compares with.
    known: Arc<tokio::sync::Mutex<std::collections::HashMap<(Tenant, String), ProviderRecord>>>,
}

/// Provider names are also tool names (knowledge tools) and must suit every model API.
fn check_name(name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            "provider.name",
            "must be 1 to 64 letters, digits, `_` or `-`",
        ))
    }
}

impl Catalog {
    /// A catalog over `store` feeding `registry`.
    pub fn new(
        store: Store,
        registry: Arc<ToolRegistry>,
        settings: ProviderSettings,
        http: reqwest::Client,
    ) -> Self {
        Self {
            store,
            registry,
            settings,
            http,
            known: Arc::default(),
        }
    }

    /// Registers every stored provider; one that no longer builds is logged and skipped.
    pub async fn load(&self) -> Result<usize, StoreError> {
        self.reload().await
    }

    /// Brings the registered providers in line with the stored ones (another replica
    /// created, changed or deleted one): new or changed ones are built and registered,
    /// deleted ones removed. Returns how many changed.
    pub async fn reload(&self) -> Result<usize, StoreError> {
        let stored = self.store.all_providers().await?;
        let mut known = self.known.lock().await;
        let mut fresh = std::collections::HashMap::new();
        let mut changed = 0;
        for (tenant, name, record) in stored {
            let Ok(record) = record else { continue };
            let key = (tenant.clone(), name);
            if known.get(&key) != Some(&record) {
                match providers::build(&record, &self.settings, &self.http) {
                    Ok(provider) => {
                        self.registry.register(&tenant, provider);
                        changed += 1;
                    }
                    Err(err) => {
                        tracing::warn!(%tenant, provider = %record.name, error = %err, "skipping a stored provider");
                        continue;
                    }
                }
            }
            fresh.insert(key, record);
        }
        for (tenant, name) in known.keys() {
            if !fresh.contains_key(&(tenant.clone(), name.clone())) {
                self.registry.remove(tenant, name);
                changed += 1;
            }
        }
        *known = fresh;
        Ok(changed)
    }

    /// Validates, builds, stores and registers a new provider.
    pub async fn create(
        &self,
        tenant: &Tenant,
        record: ProviderRecord,
    ) -> Result<Entry, CatalogError> {
        check_name(&record.name)?;
        if self.registry.is_builtin(&record.name) {
            return Err(CatalogError::Builtin(record.name));
        }
        if self
            .store
            .get_provider(tenant, &record.name)
            .await?
            .is_some()
        {
            return Err(CatalogError::Exists(record.name));
        }
        let record = providers::discover(record, &self.settings, &self.http).await?;
        let provider = providers::build(&record, &self.settings, &self.http)?;
        self.store.put_provider(tenant, &record).await?;
        self.registry.register(tenant, provider);
        self.get(tenant, &record.name).await
    }

    /// Reads a registered provider's tools again (an MCP server's list may have changed).
    pub async fn refresh(&self, tenant: &Tenant, name: &str) -> Result<Entry, CatalogError> {
        if self.registry.is_builtin(name) {
            return self.get(tenant, name).await;
        }
        let record = self
            .store
            .get_provider(tenant, name)
            .await?
            .ok_or_else(|| CatalogError::NotFound(name.to_owned()))?;
        let record = providers::discover(record, &self.settings, &self.http).await?;
        let provider = providers::build(&record, &self.settings, &self.http)?;
        self.store.put_provider(tenant, &record).await?;
        self.registry.register(tenant, provider);
        self.get(tenant, name).await
    }

    /// One provider the tenant can use.
    pub async fn get(&self, tenant: &Tenant, name: &str) -> Result<Entry, CatalogError> {
        let provider = self
            .registry
            .snapshot(tenant)
            .get(name)
            .cloned()
            .ok_or_else(|| CatalogError::NotFound(name.to_owned()))?;
        let record = self.store.get_provider(tenant, name).await?;
        Ok(Entry { provider, record })
    }

    /// Every provider the tenant can use, built-in ones included.
    pub async fn list(&self, tenant: &Tenant) -> Result<Vec<Entry>, CatalogError> {
        let snapshot = self.registry.snapshot(tenant);
        let mut entries = Vec::with_capacity(snapshot.len());
        for name in snapshot.keys() {
            entries.push(self.get(tenant, name).await?);
        }
        Ok(entries)
    }

    /// Deletes a tenant's provider. Runs already started keep their tools; new runs that
    /// name its tools are refused.
    pub async fn delete(&self, tenant: &Tenant, name: &str) -> Result<(), CatalogError> {
        if self.registry.is_builtin(name) {
            return Err(CatalogError::Builtin(name.to_owned()));
        }
        if !self.store.delete_provider(tenant, name).await? {
            return Err(CatalogError::NotFound(name.to_owned()));
        }
        self.registry.remove(tenant, name);
        Ok(())
    }
}
