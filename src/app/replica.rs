//! What this process does as one replica among others: it takes the runs a previous
//! process of it left, keeps sweeping for runs whose replica is gone, and takes the commands
//! other replicas send it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::AppError;
use crate::config::Config;
use crate::runner::Runner;
use crate::store::Adoption;

/// Takes the runs a previous process left (before any run starts here), then sweeps and
/// follows commands on `tasks` until `stop`.
pub(super) async fn start_replica(
    runner: &Runner,
    config: &Config,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<(), AppError> {
    let adoption = adoption(config);
    adopt_at_start(runner, adoption).await?;
    tasks.spawn(sweep_orphans(runner.clone(), adoption, stop.clone()));
    let taking = runner.clone();
    let stop = stop.clone();
    tasks.spawn(async move { taking.follow_commands(stop).await });
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
