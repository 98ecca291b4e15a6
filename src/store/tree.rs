//! A sled tree whose writes are also written to the write-ahead log (see [`super::wal`]).

use std::ops::Deref;
use std::sync::Arc;

use sled::IVec;

use super::wal::{self, Log};
use super::StoreError;

/// A tree of the store. Reads go to sled directly (through `Deref`); every write goes
/// through the methods here, which log it, so a write that skipped them would be lost
/// after a crash.
#[derive(Clone)]
pub struct Tree {
    tree: sled::Tree,
    /// The tree's number in the log.
    id: u8,
    /// `None` for a temporary store, which nothing replays.
    log: Option<Arc<Log>>,
}

impl Deref for Tree {
    type Target = sled::Tree;

    fn deref(&self) -> &sled::Tree {
        &self.tree
    }
}

impl Tree {
    /// Wraps `tree`, numbered `id` in `log`.
    pub fn new(tree: sled::Tree, id: u8, log: Option<Arc<Log>>) -> Self {
        Self { tree, id, log }
    }

    /// The tree's number in the log.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, StoreError> {
        let (key, value) = (key.as_ref(), value.as_ref());
        wal::record(
            self.log.as_deref(),
            || Ok(self.tree.insert(key, value)?),
            |_, log| log.put(self.id, key, value),
        )
    }

    /// Removes `key`; returns the value it had.
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, StoreError> {
        let key = key.as_ref();
        wal::record(
            self.log.as_deref(),
            || Ok(self.tree.remove(key)?),
            |removed, log| {
                if removed.is_some() {
                    log.remove(self.id, key);
                }
            },
        )
    }

    /// Replaces the value of `key` by what `update` makes of it, atomically; `None`
    /// removes it.
    pub fn update_and_fetch(
        &self,
        key: impl AsRef<[u8]>,
        update: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<Option<IVec>, StoreError> {
        let key = key.as_ref();
        wal::record(
            self.log.as_deref(),
            || Ok(self.tree.update_and_fetch(key, update)?),
            |updated, log| match updated {
                Some(value) => log.put(self.id, key, value),
                None => log.remove(self.id, key),
            },
        )
    }
}
