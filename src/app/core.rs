//! The core the API serves: the store, the models, tools and providers, the runner, the
//! keys, and the metrics they report to.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic_health::pb::health_server::{Health, HealthServer};

use super::error::AppError;
use super::extensions::Extensions;
use super::open::{open_bus, open_store, read_tls};
use crate::access::{AdminToken, Keys};
use crate::api::{AdminGate, ApiRouter, Gate};
use crate::catalog::Catalog;
use crate::cluster::Bus;
use crate::config::Config;
use crate::llm::{ChatModel, ModelEntry, ModelRegistry};
use crate::net::Descriptors;
use crate::runner::Runner;
use crate::store::{RegistryChanges, Store};
use crate::telemetry::Metrics;
use crate::tools::{Provider, ToolRegistry};

/// What the API and the background work on; built once by [`Core::open`].
pub(super) struct Core {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    pub runner: Runner,
    /// How replicas tell each other of events and commands.
    pub bus: Arc<dyn Bus>,
    pub catalog: Catalog,
    pub tools: Arc<ToolRegistry>,
    pub keys: Arc<Keys>,
    pub gate: Gate,
    pub descriptors: Descriptors,
    /// Longest a directly invoked tool may take.
    pub tool_timeout: Duration,
    /// Where the registry stood before the keys and providers were first read.
    pub seen: RegistryChanges,
    /// Whether the store was opened here (one an extension brings is its bringer's to
    /// stop).
    owns_store: bool,
}

impl Core {
    /// Opens the store (unless `extensions` brings one) and builds everything on it;
    /// returns the metrics listener to serve, if any.
    pub async fn open(
        config: &Config,
        extensions: Extensions,
    ) -> Result<(Self, Option<TcpListener>), AppError> {
        let owns_store = extensions.store.is_none();
        let store = match extensions.store {
            Some(store) => store,
            None => open_store(config).await?,
        };
        let metrics = Arc::new(Metrics::new(config.server.metrics_tenant_label));
        metrics.set_replica(config.cluster.id());
        let observed = Arc::clone(&metrics);
        store.observe_commits(Box::new(move |took| observed.store_flush(took)));
        let observed = Arc::clone(&metrics);
        store.observe_commit_waits(Box::new(move |took| observed.store_commit_wait(took)));
        let metrics_listener = metrics_listener(config, extensions.metrics_listener).await?;
        let models = models(config, extensions.model_providers)?;
        let tools = tools(config, extensions.tool_providers)?;
        let catalog = catalog(config, &store, &tools)?;
        let seen = store.registry_changes().await?;
        let loaded = catalog.load().await?;
        tracing::info!(providers = loaded, "registered tool providers loaded");
        let settings = super::settings::runner_settings(&config.runner, &config.store);
        let bus = bus(config, &store, &metrics).await?;
        let runner = Runner::new(
            store.clone(),
            Arc::new(models),
            Arc::clone(&tools),
            settings.clone(),
        )
        .with_metrics(Arc::clone(&metrics))
        .with_bus(Arc::clone(&bus));
        let keys = Arc::new(Keys::load(store.clone()).await?);
        let core = Self {
            gate: gate(config, &keys),
            store,
            metrics,
            runner,
            bus,
            catalog,
            tools,
            keys,
            descriptors: Descriptors::default(),
            tool_timeout: settings.tool_timeout,
            seen,
            owns_store,
        };
        Ok((core, metrics_listener))
    }

    /// Stops the bus's and the store's own tasks, each waited for at most `within`; the
    /// last step of a shutdown, once nothing runs, follows or writes any more.
    pub async fn stop(&self, within: Duration) {
        self.bus.stop(within).await;
        if self.owns_store {
            self.store.stop(within).await;
        }
    }

    /// The API's router, with `health` beside our services.
    pub fn router(
        &self,
        config: &Config,
        health: HealthServer<impl Health>,
        api_addr: Option<std::net::SocketAddr>,
    ) -> Result<ApiRouter, AppError> {
        let settings = crate::api::ApiSettings {
            tool_timeout: self.tool_timeout,
            max_request_bytes: config.server.max_request_bytes,
            gate: self.gate.clone(),
            admin: AdminGate(AdminToken::new(
                config.auth.admin_token.as_ref().map(|t| t.expose()),
            )),
            reflection: config.auth.reflection,
            a2a: config.a2a.enabled,
            public_url: super::settings::cards_public_url(config, api_addr),
            browsers: super::settings::browsers(config),
        };
        Ok(crate::api::router(
            self.runner.clone(),
            self.store.clone(),
            self.catalog.clone(),
            Arc::clone(&self.tools),
            crate::library::Library::new(self.store.clone(), self.runner.clone()),
            settings,
            health,
        )?)
    }

    /// The connections the API is served on: `listener`'s, admitted within the configured
    /// limits, over TLS when configured, until `stop`; accepting runs on `tasks`.
    pub fn incoming(
        &self,
        config: &Config,
        listener: TcpListener,
        stop: CancellationToken,
        tasks: &TaskTracker,
    ) -> Result<crate::api::incoming::Incoming, AppError> {
        let tls = read_tls(&config.tls)?
            .map(|pem| crate::api::incoming::tls_acceptor(&pem))
            .transpose()?;
        Ok(crate::api::incoming::incoming(
            listener,
            super::settings::grpc_limits(&config.server),
            tls,
            self.descriptors.clone(),
            stop,
            tasks,
        ))
    }
}

/// The listener of `/metrics`: the one the caller bound, else `server.metrics_listen`'s.
async fn metrics_listener(
    config: &Config,
    bound: Option<TcpListener>,
) -> Result<Option<TcpListener>, AppError> {
    match (bound, config.server.metrics_listen) {
        (Some(listener), _) => Ok(Some(listener)),
        (None, Some(addr)) => {
            Ok(Some(TcpListener::bind(addr).await.map_err(|source| {
                AppError::MetricsListen { addr, source }
            })?))
        }
        (None, None) => Ok(None),
    }
}

/// The configured LLM providers, and the caller's.
fn models(
    config: &Config,
    extra: Vec<(String, Arc<dyn ChatModel>, Vec<ModelEntry>)>,
) -> Result<ModelRegistry, AppError> {
    let mut models = ModelRegistry::from_config(&config.providers)?;
    for (name, client, entries) in extra {
        models.insert(&name, client, &entries, false);
    }
    Ok(models)
}

/// The built-in tools, and the caller's, under the configured schema limits.
fn tools(config: &Config, extra: Vec<Provider>) -> Result<Arc<ToolRegistry>, AppError> {
    crate::tools::schema::configure(super::settings::schema_limits(&config.runner));
    let tools = Arc::new(ToolRegistry::with_builtins()?);
    for provider in extra {
        tools.register_builtin(provider);
    }
    Ok(tools)
}

/// The providers tenants register, reached through the outbound policy.
fn catalog(config: &Config, store: &Store, tools: &Arc<ToolRegistry>) -> Result<Catalog, AppError> {
    let outbound = Arc::new(super::settings::outbound_policy(&config.outbound)?);
    Ok(Catalog::new(
        store.clone(),
        Arc::clone(tools),
        super::settings::provider_settings(&config.runner, Arc::clone(&outbound)),
        outbound.client(),
    ))
}

/// The bus between replicas, reporting to `metrics`.
async fn bus(
    config: &Config,
    store: &Store,
    metrics: &Arc<Metrics>,
) -> Result<Arc<dyn Bus>, AppError> {
    let bus = open_bus(config, store).await?;
    let relays = Arc::clone(metrics);
    bus.observe_relays(Box::new(move |events, lag| relays.relayed(events, lag)));
    let rejections = Arc::clone(metrics);
    bus.observe_rejections(Box::new(move || rejections.bus_rejected()));
    Ok(bus)
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
