//! Health that follows the store: `NOT_SERVING` while it cannot write.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;

use crate::pb::agent_registry_server::AgentRegistryServer;
use crate::pb::agent_service_server::AgentServiceServer;
use crate::pb::tool_registry_server::ToolRegistryServer;
use crate::store::Store;

use super::agent_registry_service::AgentRegistryApi;
use super::agent_service::AgentApi;
use super::tool_registry_service::ToolRegistryApi;

/// How often a store that cannot write is probed for room again.
const STORE_PROBE: Duration = Duration::from_secs(1);

/// Keeps health in step with the store: `NOT_SERVING` while writes fail (a full disk),
/// `SERVING` again once one succeeds. While writes fail, a small probe write is tried every
/// second, so recovery shows without waiting for a run.
pub async fn follow_health(
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
            set_serving(&reporter).await;
        } else {
            if !ok {
                tracing::error!("the store cannot write: health is NOT_SERVING until it can");
            }
            set_not_serving(&reporter).await;
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

/// The whole server's name in gRPC health (what Kubernetes' gRPC probe asks by default):
/// it follows our named services, so a probe of the server sees what they say.
const WHOLE_SERVER: &str = "";

/// Marks our services serving; called once the store is open.
pub async fn set_serving(reporter: &HealthReporter) {
    reporter
        .set_service_status(WHOLE_SERVER, tonic_health::ServingStatus::Serving)
        .await;
    reporter.set_serving::<AgentServiceServer<AgentApi>>().await;
    reporter
        .set_serving::<AgentRegistryServer<AgentRegistryApi>>()
        .await;
    reporter
        .set_serving::<ToolRegistryServer<ToolRegistryApi>>()
        .await;
}

/// Marks our services not serving: as shutdown begins, and while the store cannot write.
pub async fn set_not_serving(reporter: &HealthReporter) {
    reporter
        .set_service_status(WHOLE_SERVER, tonic_health::ServingStatus::NotServing)
        .await;
    reporter
        .set_not_serving::<AgentServiceServer<AgentApi>>()
        .await;
    reporter
        .set_not_serving::<AgentRegistryServer<AgentRegistryApi>>()
        .await;
    reporter
        .set_not_serving::<ToolRegistryServer<ToolRegistryApi>>()
        .await;
}
