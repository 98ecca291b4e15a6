//! Connections a start gave back, for the next call: taken from the pool and given back
//! each time, a connection costs a round trip as it comes back (sqlx tests every one
//! returned), on top of the start's own one.

use std::sync::Mutex;
use std::time::Instant;

use sqlx::pool::PoolConnection;

use super::ALIVE_WITHOUT_TEST;

/// Connections answered in full lately, the newest last. One in use within
/// [`ALIVE_WITHOUT_TEST`] is handed out untested; an older one goes back to the pool (which
/// tests it) when a call next looks. They are never more than the starts in flight at once,
/// and any call takes one before the pool's, so none sits idle while a call waits.
#[derive(Default)]
pub(super) struct Warm(Mutex<Vec<(PoolConnection<sqlx::Postgres>, Instant)>>);

impl Warm {
    /// The connection given back last, if it is still warm; those gone cold go back to the
    /// pool.
    pub(super) fn take(&self) -> Option<PoolConnection<sqlx::Postgres>> {
        let (taken, cold) = {
            let Ok(mut kept) = self.0.lock() else {
                return None;
            };
            // Kept in the order given back: those gone cold lead.
            let warm_from = kept
                .iter()
                .position(|(_, used)| used.elapsed() <= ALIVE_WITHOUT_TEST)
                .unwrap_or(kept.len());
            let cold: Vec<_> = kept.drain(..warm_from).collect();
            (kept.pop().map(|(connection, _)| connection), cold)
        };
        drop(cold);
        taken
    }

    /// Keeps `connection`, whose last statement was answered in full, for the next call.
    pub(super) fn give_back(&self, connection: PoolConnection<sqlx::Postgres>) {
        if let Ok(mut kept) = self.0.lock() {
            kept.push((connection, Instant::now()));
        }
    }

    /// Every connection back to the pool, as the store stops.
    pub(super) fn clear(&self) {
        let all = self
            .0
            .lock()
            .map(|mut kept| std::mem::take(&mut *kept))
            .unwrap_or_default();
        drop(all);
    }
}
