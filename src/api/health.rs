//! Health that follows the store: `NOT_SERVING` while it cannot write.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;

use crate::store::Store;

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
            super::set_serving(&reporter).await;
        } else {
            if !ok {
                tracing::error!("the store cannot write: health is NOT_SERVING until it can");
            }
            super::set_not_serving(&reporter).await;
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
