//! Events a commit has written but not yet made durable, held back from readers.
//!
//! sled shows a write at once and makes it durable at the next flush. A run's events are
//! written, then flushed with everyone's; until the flush returns, a reader must not see
//! them (a crash could still take them back). One run commits one burst at a time, so a
//! message has at most one commit in flight.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::domain::MessageId;

/// Per message, the last `seq` readers may see while a commit is in flight.
#[derive(Default)]
pub struct InFlight {
    held: Mutex<HashMap<MessageId, u64>>,
}

impl InFlight {
    /// Holds back `message`'s events after `durable_seq`; a hold already there (a commit
    /// that failed and is tried again) stays, with the lower bound.
    pub fn hold(&self, message: MessageId, durable_seq: u64) {
        let mut held = self.lock();
        let limit = held.entry(message).or_insert(durable_seq);
        *limit = (*limit).min(durable_seq);
    }

    /// Shows `message`'s events again: its commit is durable.
    pub fn release(&self, message: MessageId) {
        self.lock().remove(&message);
    }

    /// The last `seq` of `message` readers may see.
    pub fn limit(&self, message: MessageId) -> u64 {
        self.lock().get(&message).copied().unwrap_or(u64::MAX)
    }

    /// Forgets every hold: the database was opened again from what was durable.
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageId, u64>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_keeps_its_lowest_bound_until_released() {
        let held = InFlight::default();
        let message = MessageId::new();
        assert_eq!(held.limit(message), u64::MAX);
        held.hold(message, 4);
        held.hold(message, 9);
        assert_eq!(
            held.limit(message),
            4,
            "a retried commit keeps the first bound"
        );
        held.release(message);
        assert_eq!(held.limit(message), u64::MAX);
    }
}
