//! The service's background work, on one tracker that shutdown waits for: the metrics
//! listener, retiring old events, the replica's loops, keys' last-used times, following
//! the registry, and health.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic_health::server::HealthReporter;

use super::core::Core;
use super::error::AppError;
use super::replica::start_replica;
use crate::access::Keys;
use crate::catalog::Catalog;
use crate::config::Config;
use crate::store::{RegistryChanges, Store};
use crate::tasks::Tasks;

/// How long shutdown waits for the background to finish its last writes.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// The background tasks; stopped, and waited for, by [`Background::stop`] (or cancelled
/// when dropped, if the service fails to start).
pub(super) struct Background {
    tasks: Tasks,
    health: CancellationToken,
}

impl Background {
    /// Starts every background task of `core`, and takes the runs a previous process left.
    pub async fn start(
        core: &Core,
        config: &Config,
        metrics_listener: Option<TcpListener>,
        api_addr: Option<SocketAddr>,
    ) -> Result<Self, AppError> {
        let tasks = Tasks::default();
        let background = Self {
            health: tasks.stopping().child_token(),
            tasks,
        };
        if let Some(listener) = metrics_listener {
            background.serve_metrics(core, config, listener, api_addr);
        }
        if config.store.event_retention_days > 0 {
            background.tasks.spawn(crate::store::retire_old_events(
                core.store.clone(),
                config.store.event_retention_days,
                background.tasks.stopping(),
            ));
        }
        start_replica(
            core,
            config,
            background.tasks.tracker(),
            &background.tasks.stopping(),
        )
        .await?;
        background.tasks.spawn(crate::access::keep_last_used(
            Arc::clone(&core.keys),
            background.tasks.stopping(),
        ));
        background.tasks.spawn(follow_registry(
            core.store.clone(),
            Arc::clone(&core.keys),
            core.catalog.clone(),
            core.seen,
            background.tasks.stopping(),
        ));
        Ok(background)
    }

    /// Serves `/metrics` (and the A2A agent cards, when A2A is on) on `listener`.
    fn serve_metrics(
        &self,
        core: &Core,
        config: &Config,
        listener: TcpListener,
        api_addr: Option<SocketAddr>,
    ) {
        tracing::info!(addr = ?listener.local_addr().ok(), "serving metrics");
        let cards = config.a2a.enabled.then(|| {
            Arc::new(crate::api::a2a::card::CardPages::new(
                core.runner.clone(),
                core.store.clone(),
                core.gate.clone(),
                super::settings::cards_public_url(config, api_addr),
            )) as Arc<dyn crate::telemetry::Pages>
        });
        self.tasks.spawn(crate::telemetry::serve_metrics(
            listener,
            super::settings::metrics_limits(&config.server),
            core.descriptors.clone(),
            Arc::clone(&core.metrics),
            cards,
            self.tasks.stopping(),
        ));
    }

    /// Keeps `reporter` in step with the store and the process's file descriptors until
    /// the token of [`Background::health_token`] is cancelled.
    pub fn follow_health(&self, core: &Core, reporter: HealthReporter) {
        self.tasks.spawn(crate::api::follow_health(
            core.store.clone(),
            core.descriptors.watch(),
            reporter,
            self.health.clone(),
        ));
    }

    /// The tracker the API's connections are accepted on, so shutdown waits for them too.
    pub fn tasks(&self) -> &TaskTracker {
        self.tasks.tracker()
    }

    /// A token that stops following health: shutdown turns health `NOT_SERVING` for good.
    pub fn health_token(&self) -> CancellationToken {
        self.health.clone()
    }

    /// Stops every task and waits (at most [`STOP_WITHIN`]) for their last writes, then
    /// the bus's and the store's own tasks of `core`.
    pub async fn stop(self, core: &Core) {
        if !self.tasks.stop(STOP_WITHIN).await {
            tracing::warn!(
                within = ?STOP_WITHIN,
                "some background tasks did not stop in time"
            );
        }
        core.stop(STOP_WITHIN).await;
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.tasks.stopping().cancel();
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
    mut seen: RegistryChanges,
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
