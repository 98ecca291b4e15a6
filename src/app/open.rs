//! Opening what the configuration names: the store, the bus between replicas, the secret
//! key and the TLS files.

use std::sync::Arc;

use super::error::AppError;
use crate::api::TlsPem;
use crate::cluster::nats::Nats;
use crate::cluster::Bus;
use crate::config::{Config, TlsConfig};
use crate::store::{SecretKey, Store, StoreSettings};

/// Opens the configured store (the shared database, else the embedded one under the data
/// directory), sealing what an earlier version kept in plaintext. The runs a previous
/// process left running are taken once the runner exists ([`super::serve`]).
pub async fn open_store(config: &Config) -> Result<Store, AppError> {
    let settings = super::settings::store_settings(config);
    match &settings {
        StoreSettings::Shared(_) => {
            if config.server.secret_key.is_none() && config.server.secret_key_file.is_none() {
                return Err(AppError::SharedKeyMissing);
            }
        }
        StoreSettings::Embedded { dir, .. } => {
            std::fs::create_dir_all(dir).map_err(|source| AppError::DataDir {
                path: dir.clone(),
                source,
            })?;
        }
    }
    let store = Store::open(&settings, &secret_key(config)?).await?;
    if let StoreSettings::Shared(database) = &settings {
        let place = crate::store::describe_database(&database.url);
        tracing::info!(database = %place, replica = %config.cluster.id(), "records are kept in PostgreSQL");
    }
    recover(&store).await?;
    Ok(store)
}

/// The bus between replicas: NATS when configured, else the shared database's
/// notifications, else none (a single process).
pub(super) async fn open_bus(config: &Config, store: &Store) -> Result<Arc<dyn Bus>, AppError> {
    if let Some(settings) = super::settings::nats_settings(&config.cluster) {
        let place = crate::cluster::nats::describe(&settings.url);
        // Only the deployment's replicas hold the shared key: what they say on NATS opens
        // for them alone.
        let key = secret_key(config)?.derive("nats notices");
        let bus = Nats::connect(&settings, &key).await?;
        tracing::info!(nats = %place, prefix = %settings.prefix, "live events and commands between replicas go over NATS");
        return Ok(bus);
    }
    Ok(match store.hear() {
        Some(heard) => crate::cluster::Notifications::over(heard, store.clone()),
        None => Arc::new(crate::cluster::Silent::default()),
    })
}

/// Seals what an earlier version kept in plaintext.
async fn recover(store: &Store) -> Result<(), AppError> {
    let sealed = store.seal_plaintext_credentials().await?;
    if sealed > 0 {
        tracing::info!(
            sealed,
            "sealed provider credentials stored in plaintext by an earlier version"
        );
    }
    Ok(())
}

/// The key credentials are sealed with: `AGENT_RUNNER_SECRET_KEY`, else the configured key
/// file, else a key file the store makes in the data directory at first start.
fn secret_key(config: &Config) -> Result<SecretKey, AppError> {
    if let Some(key) = &config.server.secret_key {
        return Ok(SecretKey::parse(key.expose())?);
    }
    let path = config
        .server
        .secret_key_file
        .clone()
        .unwrap_or_else(|| config.server.data_dir.join(crate::config::KEY_FILE));
    if config.server.secret_key_file.is_none() && !path.exists() {
        tracing::warn!(path = %path.display(), "no secret key configured: credentials are sealed with a key made in the data directory; keep a key outside it (AGENT_RUNNER_SECRET_KEY) to protect them from a copy of the data");
    }
    Ok(SecretKey::load_or_create(&path)?)
}

/// The PEM files of `[tls]`, read, if TLS is configured.
pub(super) fn read_tls(tls: &TlsConfig) -> Result<Option<TlsPem>, AppError> {
    let read = |path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|source| AppError::TlsFile {
            path: path.clone(),
            source,
        })
    };
    let (Some(cert), Some(key)) = (&tls.cert, &tls.key) else {
        return Ok(None);
    };
    Ok(Some(TlsPem {
        cert: read(cert)?,
        key: read(key)?,
        client_ca: tls.client_ca.as_ref().map(read).transpose()?,
    }))
}
