//! Work a component spawns for itself (a store's committers and heartbeat, a bus's
//! listeners), stopped and waited for together, so none of it outlives the service that
//! owns it or is cut off in the middle of a write at shutdown.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A component's own tasks and the signal that tells them to stop.
#[derive(Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Tasks {
    /// Runs `task` as one of these; it should end soon after [`Tasks::stopping`] fires.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Runs `task` as one of these, dropped where it stands once the owner stops: for a
    /// loop that holds nothing that must be finished (a listener, a relay).
    pub fn spawn_until_stopped<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stopping = self.stopping();
        self.tracker.spawn(async move {
            tokio::select! {
                () = task => {}
                () = stopping.cancelled() => {}
            }
        });
    }

    /// The tracker itself, for an owner that hands it on (accepting connections on it).
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Fires when the owner stops; a task selects on it between its steps.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Whether the owner has begun to stop.
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Tells every task to stop and waits for them, at most `within`; false when some
    /// were still running then (they are left to end on their own).
    pub async fn stop(&self, within: Duration) -> bool {
        self.stop.cancel();
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_tasks_that_heed_it_and_gives_up_on_others() {
        let heeding = Tasks::default();
        let stopping = heeding.stopping();
        heeding.spawn(async move { stopping.cancelled().await });
        assert!(heeding.stop(Duration::from_secs(1)).await);

        let deaf = Tasks::default();
        deaf.spawn(tokio::time::sleep(Duration::from_secs(60)));
        assert!(!deaf.stop(Duration::from_secs(1)).await);
    }
}
