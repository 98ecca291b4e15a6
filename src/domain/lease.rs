//! This process's hold on the runs it owns, as the store's heartbeat renews it. A run
//! holds a copy, so a call that must not repeat starts only while enough of it is left,
//! without asking the store each time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long this process may still write the runs it owns before a peer may take them.
#[derive(Debug, Clone, Default)]
pub struct Lease {
    /// When the last renewal that landed was sent, and how long a renewal holds; `None`
    /// when no peer can take a run while this process lives (a store one process opens).
    held: Option<(Arc<Mutex<Instant>>, Duration)>,
}

impl Lease {
    /// The lease of a store one process opens: it never runs out.
    pub fn unbounded() -> Self {
        Self::default()
    }

    /// A lease of `whole` renewed at the instant `renewed` holds, which the heartbeat moves.
    pub fn renewed_at(renewed: Arc<Mutex<Instant>>, whole: Duration) -> Self {
        Self {
            held: Some((renewed, whole)),
        }
    }

    /// How much of the lease is left, and the whole lease; `None` when it never runs out.
    pub fn left(&self) -> Option<(Duration, Duration)> {
        let (renewed, whole) = self.held.as_ref()?;
        let renewed = *renewed.lock().unwrap_or_else(PoisonError::into_inner);
        Some((whole.saturating_sub(renewed.elapsed()), *whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_counts_down_from_its_last_renewal_and_an_unbounded_one_never_does() {
        assert_eq!(Lease::unbounded().left(), None);
        let renewed = Arc::new(Mutex::new(Instant::now()));
        let lease = Lease::renewed_at(Arc::clone(&renewed), Duration::from_secs(5));
        let (left, whole) = lease.left().unwrap_or_default();
        assert_eq!(whole, Duration::from_secs(5));
        assert!(left > Duration::from_secs(4), "just renewed: {left:?}");
        *renewed.lock().unwrap() = Instant::now() - Duration::from_secs(6);
        assert_eq!(lease.left().map(|(left, _)| left), Some(Duration::ZERO));
    }
}
