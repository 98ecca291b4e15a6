//! The replica's start, as configured: see [`crate::replica`].

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::core::Core;
use super::error::AppError;
use crate::config::Config;
use crate::replica::Replica;
use crate::store::Adoption;

/// Takes the runs a previous process left (before any run starts here), then sweeps and
/// follows commands on `tasks` until `stop`.
pub(super) async fn start_replica(
    core: &Core,
    config: &Config,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(), AppError> {
    let replica = Replica::new(
        core.runner.clone(),
        core.store.clone(),
        core.bus.clone(),
        adoption(config),
    );
    replica.start(tasks, stop).await?;
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
