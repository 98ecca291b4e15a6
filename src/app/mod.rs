//! The composition root: opens the core, starts the background and the replica, serves the
//! API, and runs the shutdown sequence.

mod background;
mod core;
mod error;
mod extensions;
mod open;
mod replica;
mod settings;

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;

use self::background::Background;
use self::core::Core;
use crate::config::Config;
use crate::runner::Runner;
pub use error::AppError;
pub use extensions::Extensions;
pub use open::open_store;

/// Serves the API on `listener` until `shutdown` resolves, then stops gracefully: health
/// turns `NOT_SERVING`, runs are cancelled and record themselves; every write is durable as it returns.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    extensions: Extensions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let api_addr = listener.local_addr().ok();
    let (core, metrics_listener) = Core::open(&config, extensions).await?;
    let background = Background::start(&core, &config, metrics_listener, api_addr).await?;
    let (reporter, health) = tonic_health::server::health_reporter();
    let router = core.router(&config, health, api_addr)?;
    crate::api::set_serving(&reporter).await;
    tracing::info!(addr = ?api_addr, replica = %config.cluster.id(), "serving");
    background.follow_health(&core, reporter.clone());
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    let stopping = stop_serving(shutdown, &background, reporter, core.runner.clone(), grace);
    let stop_accepting = CancellationToken::new();
    let incoming = core.incoming(
        &config,
        listener,
        stop_accepting.clone(),
        background.tasks(),
    )?;
    let served = router
        .serve_with_incoming_shutdown(incoming, stopping)
        .await;
    stop_accepting.cancel();
    served?;
    if !core.runner.shut_down(grace).await {
        tracing::warn!(
            ?grace,
            "some runs did not finish within the shutdown grace period"
        );
    }
    background.stop(&core).await;
    tracing::info!("stopped");
    Ok(())
}

/// Waits for `shutdown`, then turns health `NOT_SERVING` for good and hands the runs over:
/// they stop at the end of their step (or at once, when not handed over), so the
/// transport's graceful drain waits on them no longer than `grace`.
fn stop_serving(
    shutdown: impl Future<Output = ()> + Send + 'static,
    background: &Background,
    reporter: HealthReporter,
    runner: Runner,
    grace: Duration,
) -> impl Future<Output = ()> + Send + 'static {
    let health = background.health_token();
    async move {
        shutdown.await;
        tracing::info!("shutting down");
        health.cancel();
        crate::api::set_not_serving(&reporter).await;
        runner.hand_over(grace);
    }
}
