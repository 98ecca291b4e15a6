//! Who may call: API keys, each belonging to one tenant, and the operators' admin token.
//!
//! A key is `ar_<id>_<secret>`: the id finds the key, and the secret (32 random bytes) is
//! kept only as its SHA-256, compared in constant time. With that much entropy a fast hash
//! is enough; nothing is gained from a slow one. Keys live in memory as well as in the
//! store, so checking one costs a lookup and a hash, and creating or revoking one takes
//! effect on the next call. This room knows neither tonic nor a database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use base64::Engine as _;
use chacha20poly1305::aead::rand_core::RngCore;
use chacha20poly1305::aead::OsRng;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::{ApiKeyRecord, ErrorKind, FieldError, Tenant, TenantLimits};
use crate::store::{Store, StoreError};

/// What every key starts with, so a leaked one is recognisable.
const PREFIX: &str = "ar_";

/// Why a caller is refused, or a key request failed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// No credential where one is required.
    #[error("this server requires an API key: send `authorization: Bearer <key>`")]
    Missing,
    /// The key is malformed, unknown or revoked.
    #[error("the API key is not valid (unknown or revoked)")]
    Invalid,
    /// The key belongs to another tenant than the request names.
    #[error("the API key belongs to tenant {key:?}, not {requested:?} (x-tenant-id)")]
    OtherTenant {
        /// The key's tenant.
        key: String,
        /// The tenant the request named.
        requested: String,
    },
    /// The admin token is missing or wrong.
    #[error("this call needs the admin token: send `authorization: Bearer <admin token>`")]
    NotAdmin,
    /// No admin token is configured, so no admin call can succeed.
    #[error("no admin token is configured (auth.admin_token or AGENT_RUNNER_ADMIN_TOKEN)")]
    NoAdminToken,
    /// No key with that id.
    #[error("API key {0} not found")]
    NotFound(String),
    /// A request field is invalid.
    #[error(transparent)]
    InvalidField(#[from] FieldError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AccessError {
    /// The class of failure, for the API layer's mapping.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Missing | Self::Invalid | Self::NotAdmin => ErrorKind::Unauthenticated,
            Self::OtherTenant { .. } => ErrorKind::PermissionDenied,
            Self::NoAdminToken => ErrorKind::FailedPrecondition,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::InvalidField(_) => ErrorKind::InvalidArgument,
            Self::Store(err) => err.kind(),
        }
    }
}

/// A key in memory: its record, and when it was last used (epoch seconds, 0: never).
struct Cached {
    record: ApiKeyRecord,
    last_used: AtomicI64,
}

/// A caller a key identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key's tenant.
    pub tenant: Tenant,
    /// The limits the key sets (0: the server's defaults).
    pub limits: TenantLimits,
}

/// The API keys, cached over the store.
pub struct Keys {
    store: Store,
    /// A `std` lock: held for a map lookup or insert, never across an await.
    cache: RwLock<HashMap<String, Arc<Cached>>>,
}

impl Keys {
    /// Every stored key.
    pub async fn load(store: Store) -> Result<Self, AccessError> {
        let cache = store
            .all_api_keys()
            .await?
            .into_iter()
            .map(|record| (record.id.clone(), Arc::new(cached(record))))
            .collect();
        Ok(Self {
            store,
            cache: RwLock::new(cache),
        })
    }

    /// Makes a key for `tenant`; returns it with its secret, which is kept nowhere.
    pub async fn create(
        &self,
        tenant: &str,
        name: &str,
        limits: TenantLimits,
    ) -> Result<(ApiKeyRecord, String), AccessError> {
        let tenant =
            Tenant::parse(tenant).ok_or_else(|| FieldError::new("tenant", Tenant::RULE))?;
        if name.len() > 128 {
            return Err(FieldError::new("name", "must be at most 128 bytes").into());
        }
        let id = random_hex(8);
        let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<32>());
        let record = ApiKeyRecord {
            id: id.clone(),
            tenant,
            name: name.to_owned(),
            secret_hash: hex_digest(secret.as_bytes()),
            created_at: crate::domain::now(),
            last_used_at: None,
            limits,
        };
        self.store.put_api_key(&record).await?;
        self.write()
            .insert(id.clone(), Arc::new(cached(record.clone())));
        Ok((record, format!("{PREFIX}{id}_{secret}")))
    }

    /// A tenant's keys, newest last, with when each was last used.
    pub fn list(&self, tenant: &str) -> Vec<ApiKeyRecord> {
        let mut keys: Vec<ApiKeyRecord> = self
            .read()
            .values()
            .filter(|key| key.record.tenant.as_str() == tenant)
            .map(|key| snapshot(key))
            .collect();
        keys.sort_by_key(|key| key.created_at);
        keys
    }

    /// Revokes a key: calls with it fail from now on.
    pub async fn revoke(&self, id: &str) -> Result<(), AccessError> {
        if self.write().remove(id).is_none() {
            return Err(AccessError::NotFound(id.to_owned()));
        }
        self.store.delete_api_key(id).await?;
        Ok(())
    }

    /// The caller `token` identifies; notes the key as used.
    pub fn verify(&self, token: &str) -> Result<Caller, AccessError> {
        let (id, secret) = token
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split_once('_'))
            .ok_or(AccessError::Invalid)?;
        let key = self.read().get(id).cloned().ok_or(AccessError::Invalid)?;
        let given = Sha256::digest(secret.as_bytes());
        let stored = decode_hex(&key.record.secret_hash);
        if !bool::from(given.as_slice().ct_eq(&stored)) {
            return Err(AccessError::Invalid);
        }
        key.last_used
            .store(crate::domain::now().timestamp(), Ordering::Relaxed);
        Ok(Caller {
            tenant: key.record.tenant.clone(),
            limits: key.record.limits,
        })
    }

    /// Reads every key again (another replica created or revoked one); what this process
    /// noted of a key's last use is kept.
    pub async fn reload(&self) -> Result<(), AccessError> {
        let stored = self.store.all_api_keys().await?;
        let mut cache = self.write();
        let fresh = stored
            .into_iter()
            .map(|record| {
                let key = cached(record);
                if let Some(known) = cache.get(&key.record.id) {
                    key.last_used
                        .fetch_max(known.last_used.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                (key.record.id.clone(), Arc::new(key))
            })
            .collect();
        *cache = fresh;
        Ok(())
    }

    /// Writes when each key was last used (kept in memory between these writes).
    pub async fn save_last_used(&self) -> Result<(), AccessError> {
        let keys: Vec<Arc<Cached>> = self.read().values().cloned().collect();
        for key in keys {
            let record = snapshot(&key);
            if record.last_used_at != key.record.last_used_at {
                // Only while the key is stored: one revoked meanwhile stays revoked.
                self.store.touch_api_key(&record).await?;
            }
        }
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Cached>>> {
        self.cache.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Cached>>> {
        self.cache.write().unwrap_or_else(PoisonError::into_inner)
    }
}

fn cached(record: ApiKeyRecord) -> Cached {
    let last_used = record.last_used_at.map_or(0, |t| t.timestamp());
    Cached {
        record,
        last_used: AtomicI64::new(last_used),
    }
}

fn snapshot(key: &Cached) -> ApiKeyRecord {
    let seconds = key.last_used.load(Ordering::Relaxed);
    ApiKeyRecord {
        last_used_at: (seconds > 0)
            .then(|| DateTime::<Utc>::from_timestamp(seconds, 0))
            .flatten(),
        ..key.record.clone()
    }
}

/// The operators' token, compared in constant time.
#[derive(Clone)]
pub struct AdminToken(Option<[u8; 32]>);

impl AdminToken {
    /// The configured token, if any.
    pub fn new(token: Option<&str>) -> Self {
        Self(
            token
                .filter(|t| !t.is_empty())
                .map(|t| Sha256::digest(t.as_bytes()).into()),
        )
    }

    /// Whether `given` is the admin token.
    pub fn check(&self, given: Option<&str>) -> Result<(), AccessError> {
        let Some(expected) = &self.0 else {
            return Err(AccessError::NoAdminToken);
        };
        let given = given.ok_or(AccessError::NotAdmin)?;
        let digest = Sha256::digest(given.as_bytes());
        if bool::from(digest.as_slice().ct_eq(expected)) {
            Ok(())
        } else {
            Err(AccessError::NotAdmin)
        }
    }
}

/// Bytes from the operating system's random source.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    OsRng.fill_bytes(&mut bytes);
    bytes
}

fn random_hex(len: usize) -> String {
    random_bytes::<16>()[..len]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_hex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// How often the keys' last-used times are written.
const LAST_USED_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Writes when keys were last used, every minute until `stop` and once more then: a check
/// stays a memory operation, and a crash loses at most a minute of last-used times.
pub async fn keep_last_used(keys: Arc<Keys>, stop: tokio_util::sync::CancellationToken) {
    loop {
        let stopping = tokio::select! {
            _ = stop.cancelled() => true,
            _ = tokio::time::sleep(LAST_USED_EVERY) => false,
        };
        if let Err(err) = keys.save_last_used().await {
            tracing::warn!(error = %err, "could not record when API keys were last used");
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_identifies_its_tenant_until_revoked() {
        let keys = Keys::load(Store::temporary().unwrap()).await.unwrap();
        let (record, secret) = keys
            .create("acme", "ci", TenantLimits::default())
            .await
            .unwrap();
        assert!(secret.starts_with("ar_"));
        assert!(!record.secret_hash.contains(&secret[20..]));
        let caller = keys.verify(&secret).unwrap();
        assert_eq!(caller.tenant.as_str(), "acme");
        assert!(keys.list("acme")[0].last_used_at.is_some());
        assert!(matches!(
            keys.verify(&format!("{secret}x")),
            Err(AccessError::Invalid)
        ));
        assert!(matches!(
            keys.verify("ar_nothing_here"),
            Err(AccessError::Invalid)
        ));
        assert!(matches!(keys.verify("Bearer"), Err(AccessError::Invalid)));
        keys.revoke(&record.id).await.unwrap();
        assert!(matches!(keys.verify(&secret), Err(AccessError::Invalid)));
        assert!(keys.list("acme").is_empty());
    }

    #[test]
    fn the_admin_token_is_checked_and_its_absence_said() {
        let token = AdminToken::new(Some("root-token"));
        assert!(token.check(Some("root-token")).is_ok());
        assert!(matches!(
            token.check(Some("root-tokex")),
            Err(AccessError::NotAdmin)
        ));
        assert!(matches!(token.check(None), Err(AccessError::NotAdmin)));
        assert!(matches!(
            AdminToken::new(None).check(Some("x")),
            Err(AccessError::NoAdminToken)
        ));
    }
}
