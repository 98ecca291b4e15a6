//! The composition root: opens the store, builds the registries and the runner, serves the
//! API, and runs the shutdown sequence.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;

use crate::access::{AccessError, AdminToken, Keys};
use crate::api::{AdminGate, Gate, TlsPem};
use crate::catalog::Catalog;
use crate::cluster::nats::Nats;
use crate::cluster::Bus;
use crate::config::{Config, TlsConfig};
use crate::llm::{ChatModel, LlmError, ModelEntry, ModelRegistry};
use crate::net::Descriptors;
use crate::runner::{Runner, RunnerSettings};
use crate::store::{Adoption, SecretKey, Store, StoreError};
use crate::telemetry::Metrics;
use crate::tools::{Provider, RegistryError, ToolRegistry};

/// Additions to what the configuration describes; how tests plug in scripted models and
/// deterministic tools while serving the real API.
#[derive(Default)]
pub struct Extensions {
    /// Extra tool providers, registered beside the built-in ones.
    pub tool_providers: Vec<Provider>,
    /// Extra LLM providers: name, client, known models.
    pub model_providers: Vec<(String, Arc<dyn ChatModel>, Vec<ModelEntry>)>,
    /// A listener for `/metrics` bound by the caller (tests bind port 0 and read it back);
    /// otherwise `server.metrics_listen` is bound, if set.
    pub metrics_listener: Option<TcpListener>,
    /// A store the caller opened (with [`open_store`]) and keeps a handle to; otherwise the
    /// configured one is opened.
    pub store: Option<Store>,
}

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The runs a previous process left could not be taken.
    #[error(transparent)]
    Runs(#[from] crate::runner::RunError),
    /// A shared database was configured without a key every replica shares.
    #[error("a shared database needs the secret key every replica seals credentials with: set AGENT_RUNNER_SECRET_KEY or server.secret_key_file (a key made in one replica's data directory would differ from the others')")]
    SharedKeyMissing,
    /// An LLM provider could not be set up.
    #[error("LLM provider setup failed: {0}")]
    Llm(#[from] LlmError),
    /// A tool could not be registered.
    #[error(transparent)]
    Tools(#[from] RegistryError),
    /// The router could not be built.
    #[error(transparent)]
    Router(#[from] crate::api::RouterError),
    /// The transport failed.
    #[error("server error: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The API keys could not be loaded.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A TLS file could not be read.
    #[error("cannot read {path}: {source}")]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The NATS bus could not be set up.
    #[error(transparent)]
    Nats(#[from] crate::cluster::nats::NatsError),
    /// The metrics listener could not be bound.
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Opens the configured store (the shared database, else the embedded one under the data
/// directory), sealing what an earlier version kept in plaintext. The runs a previous
/// process left running are taken once the runner exists ([`serve`]).
pub async fn open_store(config: &Config) -> Result<Store, AppError> {
    let store = match config.store.database(&config.cluster) {
        Some(settings) => {
            if config.server.secret_key.is_none() && config.server.secret_key_file.is_none() {
                return Err(AppError::SharedKeyMissing);
            }
            let key = secret_key(config)?;
            let place = crate::store::describe_database(&settings.url);
            let store = Store::connect(&settings, &key).await?;
            tracing::info!(database = %place, replica = %config.cluster.id(), "records are kept in PostgreSQL");
            store
        }
        None => open_embedded(config)?,
    };
    recover(&store).await?;
    Ok(store)
}

/// The bus between replicas: NATS when configured, else the shared database's
/// notifications, else none (a single process).
async fn open_bus(config: &Config, store: &Store) -> Result<Arc<dyn Bus>, AppError> {
    if let Some(settings) = config.cluster.nats() {
        let place = crate::cluster::nats::describe(&settings.url);
        // Only the deployment's replicas hold the shared key: what they say on NATS opens
        // for them alone.
        let key = secret_key(config)?.derive("nats notices");
        let bus = Nats::connect(&settings, &key).await?;
        tracing::info!(nats = %place, prefix = %settings.prefix, "live events and commands between replicas go over NATS");
        return Ok(bus);
    }
    Ok(store
        .bus()
        .unwrap_or_else(|| Arc::new(crate::cluster::Silent::default())))
}

/// The embedded store under the data directory.
fn open_embedded(config: &Config) -> Result<Store, AppError> {
    let dir = &config.server.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| AppError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let key = secret_key(config)?;
    let store = Store::open_with_cache(
        dir,
        config.server.store_cache_mb.saturating_mul(1024 * 1024),
        &key,
    )?;
    Ok(store)
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

/// How runs whose owner was lost are treated, as configured.
fn adoption(config: &Config) -> Adoption {
    match config.runner.resume_after_restart {
        true => Adoption {
            resume: true,
            max_takeovers: config.cluster.max_takeovers,
        },
        false => Adoption::INTERRUPT,
    }
}

/// Takes the runs a previous process of this replica left (before any run starts here):
/// resumed, or ended interrupted, as configured.
async fn adopt_at_start(runner: &Runner, adoption: Adoption) -> Result<(), AppError> {
    let adopted = runner.adopt_orphans(adoption).await?;
    if adopted.interrupted > 0 {
        tracing::warn!(
            interrupted = adopted.interrupted,
            "messages left running by a previous process are now interrupted"
        );
    }
    if adopted.resumed > 0 {
        tracing::warn!(
            resumed = adopted.resumed,
            "messages left running by a previous process go on from their last durable round"
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
        .unwrap_or_else(|| config.server.data_dir.join(crate::store::KEY_FILE));
    if config.server.secret_key_file.is_none() && !path.exists() {
        tracing::warn!(path = %path.display(), "no secret key configured: credentials are sealed with a key made in the data directory; keep a key outside it (AGENT_RUNNER_SECRET_KEY) to protect them from a copy of the data");
    }
    Ok(SecretKey::load_or_create(&path)?)
}

/// The PEM files of `[tls]`, read, if TLS is configured.
fn read_tls(tls: &TlsConfig) -> Result<Option<TlsPem>, AppError> {
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

/// How often the keys' last-used times are written.
const LAST_USED_EVERY: Duration = Duration::from_secs(60);

/// Writes when keys were last used, every minute until `stop` and once more then: a check
/// stays a memory operation, and a crash loses at most a minute of last-used times.
async fn save_last_used(keys: Arc<Keys>, stop: CancellationToken) {
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

/// The gate of the agent and tool services.
fn gate(config: &Config, keys: &Arc<Keys>) -> Gate {
    if config.auth.required && config.auth.admin_token.is_none() {
        tracing::warn!("auth is required but no admin token is set (AGENT_RUNNER_ADMIN_TOKEN): no API key can be created, only the stored ones work");
    }
    if !config.auth.required {
        tracing::warn!("auth is not required: the x-tenant-id header names the tenant of each call; require API keys before exposing the service");
    }
    Gate {
        keys: Arc::clone(keys),
        required: config.auth.required,
        defaults: config.limits,
    }
}

/// How often ended messages' old events are looked for.
const RETIRE_EVERY: Duration = Duration::from_secs(3600);

/// Messages whose events one batch retires.
const RETIRE_BATCH: usize = 100;

/// Retires the events of messages that ended more than `days` ago, every hour until
/// `stop`, a batch at a time so the store never runs one long delete.
async fn retire_events(store: Store, days: u32, stop: CancellationToken) {
    loop {
        let before = crate::domain::now() - chrono::Duration::days(i64::from(days));
        let mut retired = 0;
        loop {
            match store.retire_events(before, RETIRE_BATCH).await {
                Ok(count) => {
                    retired += count;
                    if count < RETIRE_BATCH {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "could not retire old events; trying again later");
                    break;
                }
            }
            if stop.is_cancelled() {
                return;
            }
        }
        if retired > 0 {
            tracing::info!(
                messages = retired,
                days,
                "retired the events of ended messages"
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RETIRE_EVERY) => {}
        }
    }
}

/// How often the store is asked whether API keys or providers changed.
const REGISTRY_EVERY: Duration = Duration::from_millis(500);

/// Reads API keys and providers again whenever the store says they changed (another
/// replica created, changed or deleted one), until `stop`: in force everywhere within a
/// second.
/// `seen` is where the store stood before the caches were first read.
async fn follow_registry(
    store: Store,
    keys: Arc<Keys>,
    catalog: Catalog,
    mut seen: crate::store::RegistryChanges,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REGISTRY_EVERY) => {}
        }
        let Ok(now) = store.registry_changes().await else {
            continue;
        };
        if now.api_keys != seen.api_keys {
            match keys.reload().await {
                Ok(()) => seen.api_keys = now.api_keys,
                Err(err) => tracing::warn!(error = %err, "could not read API keys again"),
            }
        }
        if now.providers != seen.providers {
            match catalog.reload().await {
                Ok(_) => seen.providers = now.providers,
                Err(err) => tracing::warn!(error = %err, "could not read tool providers again"),
            }
        }
    }
}

/// How often runs whose replica is gone are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Takes over (or ends) the runs of replicas whose heartbeat lapsed, every second until
/// `stop`, so no message stays running without a live owner. (On the embedded store, which
/// one process opens, there are none after start-up.)
async fn sweep_orphans(runner: Runner, adoption: Adoption, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        if let Err(err) = runner.adopt_orphans(adoption).await {
            tracing::debug!(error = %err, "could not look for runs whose replica is gone");
        }
    }
}

/// How often a store that cannot write is probed for room again.
const STORE_PROBE: Duration = Duration::from_secs(1);

/// Keeps health in step with the store: `NOT_SERVING` while writes fail (a full disk),
/// `SERVING` again once one succeeds. While writes fail, a small probe write is tried every
/// second, so recovery shows without waiting for a run.
async fn follow_health(
    store: Store,
    mut descriptors: watch::Receiver<bool>,
    reporter: HealthReporter,
    stop: CancellationToken,
) {
    let mut writable = store.writable();
    loop {
        let ok = *writable.borrow_and_update();
        let can_open = *descriptors.borrow_and_update();
        if ok && can_open {
            crate::api::set_serving(&reporter).await;
        } else {
            if !ok {
                tracing::error!("the store cannot write: health is NOT_SERVING until it can");
            }
            crate::api::set_not_serving(&reporter).await;
        }
        let probe = async {
            if ok {
                std::future::pending::<()>().await;
            }
            loop {
                tokio::time::sleep(STORE_PROBE).await;
                if store.probe().await.is_ok() {
                    return;
                }
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = writable.changed() => if changed.is_err() { return },
            changed = descriptors.changed() => if changed.is_err() { return },
            () = probe => {}
        }
    }
}

/// The address a card names when `[a2a] public_url` is unset: where the API listens.
fn listener_address(addr: &Option<std::net::SocketAddr>) -> Option<String> {
    addr.map(|addr| addr.to_string())
}

/// Serves the API on `listener` until `shutdown` resolves, then stops gracefully: health
/// turns `NOT_SERVING`, runs are cancelled and record themselves; every write is durable as it returns.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    extensions: Extensions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    // Built on a blocking thread before anything else starts (the store's heartbeat
    // included), not by a run's first count on a runtime worker: see
    // `Tokenizer::load_all`.
    if tokio::task::spawn_blocking(crate::llm::Tokenizer::load_all)
        .await
        .is_err()
    {
        tracing::warn!("the tokenizers could not be loaded ahead; the first count loads them");
    }
    let listener_addr = listener.local_addr().ok();
    let store = match extensions.store {
        Some(store) => store,
        None => open_store(&config).await?,
    };
    let metrics = Arc::new(Metrics::new(config.server.metrics_tenant_label));
    metrics.set_replica(config.cluster.id());
    let observed = Arc::clone(&metrics);
    store.observe_commits(Box::new(move |took| observed.store_flush(took)));
    let metrics_listener = match (extensions.metrics_listener, config.server.metrics_listen) {
        (Some(listener), _) => Some(listener),
        (None, Some(addr)) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|source| AppError::MetricsListen { addr, source })?,
        ),
        (None, None) => None,
    };
    let mut models = ModelRegistry::from_config(&config.providers)?;
    for (name, client, entries) in extensions.model_providers {
        models.insert(&name, client, &entries, false);
    }
    crate::tools::schema::configure(config.runner.schema_limits());
    let tools = Arc::new(ToolRegistry::with_builtins()?);
    for provider in extensions.tool_providers {
        tools.register_builtin(provider);
    }
    let outbound = Arc::new(config.outbound.policy()?);
    let catalog = Catalog::new(
        store.clone(),
        Arc::clone(&tools),
        config.runner.provider_settings(Arc::clone(&outbound)),
        outbound.client(),
    );
    let seen = store.registry_changes().await?;
    let loaded = catalog.load().await?;
    tracing::info!(providers = loaded, "registered tool providers loaded");
    let settings = RunnerSettings {
        write_timeout: Duration::from_secs(config.store.write_timeout_secs),
        ..config.runner.settings()
    };
    let bus = open_bus(&config, &store).await?;
    let relays = Arc::clone(&metrics);
    bus.observe_relays(Box::new(move |events, lag| relays.relayed(events, lag)));
    let rejections = Arc::clone(&metrics);
    bus.observe_rejections(Box::new(move || rejections.bus_rejected()));
    let runner = Runner::new(
        store.clone(),
        Arc::new(models),
        Arc::clone(&tools),
        settings.clone(),
    )
    .with_metrics(Arc::clone(&metrics))
    .with_bus(bus);
    let descriptors = Descriptors::default();
    let keys = Arc::new(Keys::load(store.clone()).await?);
    let gate = gate(&config, &keys);
    let stop_metrics = CancellationToken::new();
    if let Some(listener) = metrics_listener {
        tracing::info!(addr = ?listener.local_addr().ok(), "serving metrics");
        let cards = config.a2a.enabled.then(|| {
            let public_url = config
                .a2a
                .public_url
                .clone()
                .or_else(|| listener_address(&listener_addr))
                .unwrap_or_default();
            Arc::new(crate::api::a2a::card::CardPages::new(
                runner.clone(),
                store.clone(),
                gate.clone(),
                public_url,
            )) as Arc<dyn crate::telemetry::Pages>
        });
        tokio::spawn(crate::telemetry::serve_metrics(
            listener,
            config.server.metrics_limits(),
            descriptors.clone(),
            Arc::clone(&metrics),
            cards,
            stop_metrics.clone(),
        ));
    }

    let stop_retiring = CancellationToken::new();
    if config.store.event_retention_days > 0 {
        tokio::spawn(retire_events(
            store.clone(),
            config.store.event_retention_days,
            stop_retiring.clone(),
        ));
    }
    let adoption = adoption(&config);
    adopt_at_start(&runner, adoption).await?;
    tokio::spawn(sweep_orphans(
        runner.clone(),
        adoption,
        stop_retiring.clone(),
    ));
    let taking = runner.clone();
    let stop_taking = stop_retiring.clone();
    tokio::spawn(async move { taking.follow_commands(stop_taking).await });
    let stop_keys = CancellationToken::new();
    let saving_keys = tokio::spawn(save_last_used(Arc::clone(&keys), stop_keys.clone()));
    tokio::spawn(follow_registry(
        store.clone(),
        Arc::clone(&keys),
        catalog.clone(),
        seen,
        stop_keys.clone(),
    ));
    let (reporter, health) = tonic_health::server::health_reporter();
    let router = crate::api::router(
        runner.clone(),
        store.clone(),
        catalog,
        tools,
        crate::library::Library::new(store.clone(), runner.clone()),
        crate::api::ApiSettings {
            tool_timeout: settings.tool_timeout,
            max_request_bytes: config.server.max_request_bytes,
            gate,
            admin: AdminGate(AdminToken::new(
                config.auth.admin_token.as_ref().map(|t| t.expose()),
            )),
            reflection: config.auth.reflection,
            a2a: config.a2a.enabled,
        },
        health,
    )?;
    crate::api::set_serving(&reporter).await;
    tracing::info!(addr = ?listener.local_addr().ok(), replica = %config.cluster.id(), "serving");
    let stop_health = CancellationToken::new();
    tokio::spawn(follow_health(
        store.clone(),
        descriptors.watch(),
        reporter.clone(),
        stop_health.clone(),
    ));

    let stopping = runner.clone();
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let on_shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down");
        stop_health.cancel();
        crate::api::set_not_serving(&reporter).await;
        // Runs stop at the end of their step (or at once, when not handed over), so the
        // transport's graceful drain waits on them no longer than the grace period.
        stopping.hand_over(grace);
    };
    let tls = read_tls(&config.tls)?
        .map(|pem| crate::api::incoming::tls_acceptor(&pem))
        .transpose()?;
    let stop_accepting = CancellationToken::new();
    let incoming = crate::api::incoming::incoming(
        listener,
        config.server.grpc_limits(),
        tls,
        descriptors.clone(),
        stop_accepting.clone(),
    );
    let served = router
        .serve_with_incoming_shutdown(incoming, on_shutdown)
        .await;
    stop_accepting.cancel();
    served?;
    if !runner.shut_down(grace).await {
        tracing::warn!(
            ?grace,
            "some runs did not finish within the shutdown grace period"
        );
    }
    stop_metrics.cancel();
    stop_retiring.cancel();
    stop_keys.cancel();
    let _ = saving_keys.await;
    tracing::info!("stopped");
    Ok(())
}
