//! One subscription shared by every message followed here: in place while any is followed
//! (each holds a [`Lease`]), let go once none has been for a while ([`LINGER`]), so a
//! replica whose followed runs come and go does not subscribe again for each. Subscribing
//! waits for the server, so the first lease is handed out only once the subscription is in
//! place, and a lease taken meanwhile waits for it too: no follower reads the store before
//! it would hear what comes after.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long the subscription stays without a lease before it is let go.
pub const LINGER: Duration = Duration::from_secs(30);

/// The shared subscription's leases.
#[derive(Default)]
pub struct Listening {
    state: Mutex<State>,
    /// Held while subscribing, so a second first lease does not subscribe again.
    subscribing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    leases: usize,
    /// Stops the subscription; `None` while there is none.
    stop: Option<CancellationToken>,
    /// Since when no lease is held.
    idle_since: Option<tokio::time::Instant>,
}

/// Keeps the subscription in place while held.
pub struct Lease(Arc<Listening>);

impl Listening {
    /// A lease on the subscription. When none is in place, `subscribe` puts it there and
    /// returns what stops it (`None`: it could not, and the next lease tries again).
    pub async fn lease<F, Fut>(self: &Arc<Self>, subscribe: F) -> Lease
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Option<CancellationToken>>,
    {
        let _one_at_a_time = self.subscribing.lock().await;
        let needed = {
            let mut state = self.lock();
            state.leases += 1;
            state.idle_since = None;
            state.stop.is_none()
        };
        // Held from here, so a lease given up while subscribing keeps the count right.
        let lease = Lease(Arc::clone(self));
        if needed {
            if let Some(stop) = subscribe().await {
                self.lock().stop = Some(stop);
            }
        }
        lease
    }

    /// Lets the subscription go if no lease has been held for `linger`; true when it did.
    pub fn let_go_if_idle(&self, linger: Duration) -> bool {
        let mut state = self.lock();
        let idle = state.leases == 0
            && state
                .idle_since
                .is_some_and(|since| since.elapsed() >= linger);
        if !idle {
            return false;
        }
        state.idle_since = None;
        state
            .stop
            .take()
            .inspect(CancellationToken::cancel)
            .is_some()
    }

    /// Whether the subscription is in place.
    #[cfg(test)]
    pub fn is_listening(&self) -> bool {
        self.lock().stop.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.leases -= 1;
        if state.leases == 0 {
            state.idle_since = Some(tokio::time::Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_subscription_while_any_lease_is_held_and_a_while_after() {
        let listening = Arc::new(Listening::default());
        let subscribed = Arc::new(AtomicUsize::new(0));
        let stops: Arc<Mutex<Vec<CancellationToken>>> = Arc::default();
        let subscribe = || {
            let (subscribed, stops) = (Arc::clone(&subscribed), Arc::clone(&stops));
            move || async move {
                subscribed.fetch_add(1, Ordering::SeqCst);
                let stop = CancellationToken::new();
                stops.lock().unwrap().push(stop.clone());
                Some(stop)
            }
        };
        let (a, b) = tokio::join!(listening.lease(subscribe()), listening.lease(subscribe()));
        assert_eq!(
            subscribed.load(Ordering::SeqCst),
            1,
            "subscribed once for two"
        );
        assert!(listening.is_listening());
        drop(a);
        assert!(!stops.lock().unwrap()[0].is_cancelled(), "one lease left");
        drop(b);
        tokio::time::advance(LINGER / 2).await;
        assert!(!listening.let_go_if_idle(LINGER), "kept a while");
        let again = listening.lease(subscribe()).await;
        assert_eq!(
            subscribed.load(Ordering::SeqCst),
            1,
            "the lingering one serves"
        );
        drop(again);
        tokio::time::advance(LINGER / 2).await;
        assert!(
            !listening.let_go_if_idle(LINGER),
            "idle counts from the last lease"
        );
        tokio::time::advance(LINGER / 2).await;
        assert!(listening.let_go_if_idle(LINGER));
        assert!(
            stops.lock().unwrap()[0].is_cancelled(),
            "let go after the while"
        );
        assert!(!listening.is_listening());
        let _c = listening.lease(subscribe()).await;
        assert_eq!(subscribed.load(Ordering::SeqCst), 2, "subscribed again");
    }

    #[tokio::test]
    async fn a_subscription_that_failed_is_tried_again_by_the_next_lease() {
        let listening = Arc::new(Listening::default());
        let _failed = listening.lease(|| async { None }).await;
        assert!(!listening.is_listening());
        let _next = listening
            .lease(|| async { Some(CancellationToken::new()) })
            .await;
        assert!(listening.is_listening());
    }
}
