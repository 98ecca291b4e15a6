//! The notices a replica's runs announced and its relay has not sent yet. The runs of one
//! commit wake together and announce one after another; the relay's publisher, woken by
//! the first, lets the others have their turn before it takes what is queued, so one
//! commit group goes out as one message to each peer rather than one per run.

use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

/// The most bytes of notices waiting: past it (NATS away, the publisher behind) a notice
/// is dropped, which costs its followers a read of the store, as any lost notice does.
pub const MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;

/// Encoded notices in the order their runs announced them.
#[derive(Default)]
pub struct Outbox {
    queued: Mutex<Queued>,
    ready: Notify,
}

#[derive(Default)]
struct Queued {
    notices: Vec<Vec<u8>>,
    bytes: usize,
}

impl Outbox {
    /// Queues `notice`; false when it was dropped for the queue being full.
    pub fn push(&self, notice: Vec<u8>) -> bool {
        {
            let mut queued = self.lock();
            if queued.bytes + notice.len() > MAX_QUEUED_BYTES {
                return false;
            }
            queued.bytes += notice.len();
            queued.notices.push(notice);
        }
        self.ready.notify_one();
        true
    }

    /// The next group of notices: waits for one, lets the other runs woken by the same
    /// commit announce theirs, and takes everything queued.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is taken until the last step, which does not wait.
    pub async fn next_group(&self) -> Vec<Vec<u8>> {
        loop {
            self.ready.notified().await;
            tokio::task::yield_now().await;
            let mut queued = self.lock();
            if !queued.notices.is_empty() {
                queued.bytes = 0;
                return std::mem::take(&mut queued.notices);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn notices_queued_together_are_taken_together_in_order() {
        let outbox = Arc::new(Outbox::default());
        for n in 0..5u8 {
            assert!(outbox.push(vec![n]));
        }
        let group = outbox.next_group().await;
        assert_eq!(group, (0..5u8).map(|n| vec![n]).collect::<Vec<_>>());
        let more = tokio::time::timeout(Duration::from_millis(50), outbox.next_group()).await;
        assert!(more.is_err(), "nothing is taken twice");
    }

    #[tokio::test]
    async fn a_full_queue_drops_what_does_not_fit_until_it_is_taken() {
        let outbox = Outbox::default();
        assert!(outbox.push(vec![0; MAX_QUEUED_BYTES - 10]));
        assert!(!outbox.push(vec![0; 11]), "past the limit");
        assert!(outbox.push(vec![0; 10]), "up to it");
        assert_eq!(outbox.next_group().await.len(), 2);
        assert!(outbox.push(vec![0; 11]), "room again once taken");
    }
}
