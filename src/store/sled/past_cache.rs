//! Ended messages as history reads them, kept in memory.
//!
//! Every turn of a conversation reads its earlier messages again, newest first, as far as
//! the context window reaches: at 300 turns about 130 of them, 5 µs each from sled (a get,
//! a JSON decode, the answer's own get), which made the last turns of a long conversation
//! cost twice its first. An ended message does not change until it is deleted, so what
//! history took from it is kept here, up to [`BUDGET_BYTES`], the oldest entries leaving
//! first: a conversation's window moves forward one message a turn, so the entries read
//! first are the first it no longer needs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::domain::PastMessage;

/// Memory the cache may take, counted as the texts held plus a fixed cost per entry.
pub const BUDGET_BYTES: usize = 8 * 1024 * 1024;

/// What an entry costs beyond its texts (the map slot, the record's other fields).
const ENTRY_OVERHEAD: usize = 160;

/// Past messages by their store key (tenant and id).
pub struct PastCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Vec<u8>, PastMessage>,
    /// Keys in the order they came in, the oldest first; may name entries since removed.
    order: VecDeque<Vec<u8>>,
    bytes: usize,
    /// Counts [`PastCache::forget`] calls, so a read that raced a write is not kept.
    forgets: u64,
}

fn cost(message: &PastMessage) -> usize {
    message.query.len() + message.answer.len() + ENTRY_OVERHEAD
}

impl PastCache {
    /// An empty cache holding up to `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// To be taken before reading a message from the store and handed to [`PastCache::put`]:
    /// a message written or deleted in between (its `forget` came after the read began) is
    /// then not kept in the state read.
    pub fn stamp(&self) -> u64 {
        self.lock().forgets
    }

    /// The message under `key`, when it is kept.
    pub fn get(&self, key: &[u8]) -> Option<PastMessage> {
        self.lock().entries.get(key).cloned()
    }

    /// Keeps an ended message read after `stamp` was taken, unless a message was forgotten
    /// since; one larger than a sixteenth of the budget is not kept, so a few huge answers
    /// cannot push out every conversation's window.
    pub fn put(&self, key: Vec<u8>, message: PastMessage, stamp: u64) {
        let size = cost(&message);
        if !message.status.is_terminal() || size > self.budget / 16 {
            return;
        }
        let mut inner = self.lock();
        if inner.forgets != stamp {
            return;
        }
        if let Some(old) = inner.entries.insert(key.clone(), message) {
            inner.bytes -= cost(&old);
        }
        inner.bytes += size;
        inner.order.push_back(key);
        while inner.bytes > self.budget {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.entries.remove(&oldest) {
                inner.bytes -= cost(&gone);
            }
        }
        // Keys of entries removed or replaced stay in `order` until they come up; keep the
        // queue from growing past a few times the entries.
        if inner.order.len() > 4 * inner.entries.len() + 64 {
            let Inner { entries, order, .. } = &mut *inner;
            let mut seen = std::collections::HashSet::new();
            order.retain(|key| entries.contains_key(key) && seen.insert(key.clone()));
        }
    }

    /// Forgets every message (the database was opened again and may hold less).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.forgets += 1;
        inner.entries.clear();
        inner.order.clear();
        inner.bytes = 0;
    }

    /// Forgets the message under `key`; called after it was written again or deleted.
    pub fn forget(&self, key: &[u8]) {
        let mut inner = self.lock();
        inner.forgets += 1;
        if let Some(gone) = inner.entries.remove(key) {
            inner.bytes -= cost(&gone);
        }
    }

    /// Bytes held, for tests.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Entries held, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{MessageId, MessageStatus};

    fn message(answer: &str, status: MessageStatus) -> PastMessage {
        PastMessage {
            id: MessageId::new(),
            ordinal: 1,
            query: "q".into(),
            answer: answer.into(),
            status,
            finish_reason: None,
            iterations: 1,
            history_tokens: Default::default(),
            rolled_back: false,
        }
    }

    #[test]
    fn keeps_ended_messages_only() {
        let cache = PastCache::new(BUDGET_BYTES);
        cache.put(
            b"a".to_vec(),
            message("x", MessageStatus::Running),
            cache.stamp(),
        );
        assert!(cache.get(b"a").is_none(), "a running message still changes");
        cache.put(
            b"a".to_vec(),
            message("x", MessageStatus::Completed),
            cache.stamp(),
        );
        assert_eq!(cache.get(b"a").unwrap().answer, "x");
        cache.forget(b"a");
        assert!(cache.get(b"a").is_none());
        assert_eq!(cache.bytes(), 0);
    }

    /// Past the budget the oldest entries go first; an entry too large for its share is
    /// never kept; the byte count follows replacements.
    #[test]
    fn stays_within_its_budget_oldest_first() {
        let cache = PastCache::new(16 * 1024);
        let answer = "y".repeat(700);
        for i in 0..40u32 {
            cache.put(
                i.to_be_bytes().to_vec(),
                message(&answer, MessageStatus::Completed),
                cache.stamp(),
            );
            assert!(cache.bytes() <= 16 * 1024);
        }
        assert!(cache.get(&0u32.to_be_bytes()).is_none(), "the oldest left");
        assert!(
            cache.get(&39u32.to_be_bytes()).is_some(),
            "the newest stays"
        );
        let kept = cache.len();
        assert!(kept > 10 && kept < 40, "kept {kept}");

        let huge = message(&"z".repeat(2000), MessageStatus::Completed);
        cache.put(b"huge".to_vec(), huge, cache.stamp());
        assert!(cache.get(b"huge").is_none());

        let before = cache.bytes();
        let short = message("short", MessageStatus::Completed);
        cache.put(39u32.to_be_bytes().to_vec(), short, cache.stamp());
        assert!(
            cache.bytes() < before,
            "a replaced entry's bytes are given back"
        );
    }

    /// A read that began before a message was written again is not kept: it may hold the
    /// state before the write.
    #[test]
    fn a_read_that_raced_a_write_is_not_kept() {
        let cache = PastCache::new(BUDGET_BYTES);
        let stamp = cache.stamp();
        cache.forget(b"other");
        cache.put(
            b"a".to_vec(),
            message("old", MessageStatus::Completed),
            stamp,
        );
        assert!(cache.get(b"a").is_none());
    }

    /// Replacing one key again and again does not grow the queue without bound.
    #[test]
    fn the_queue_does_not_grow_with_replacements() {
        let cache = PastCache::new(BUDGET_BYTES);
        for _ in 0..10_000 {
            cache.put(
                b"same".to_vec(),
                message("x", MessageStatus::Completed),
                cache.stamp(),
            );
        }
        assert!(cache.lock().order.len() < 200);
        assert_eq!(cache.len(), 1);
    }
}
