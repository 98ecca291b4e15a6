//! A sled tree whose writes are also written to the write-ahead log (see [`super::wal`]),
//! and the writes of one record.

use std::ops::Deref;
use std::sync::Arc;

use sled::IVec;

use super::wal::{Log, RecordWriter};
use super::StoreError;

/// A tree of the store. Reads go to sled directly (through `Deref`); every write goes
/// through [`Writes`] (or the one-write shortcuts here), which logs it: a write that
/// skipped them would be lost after a crash.
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
    #[cfg(test)]
    pub fn id(&self) -> u8 {
        self.id
    }

    /// Sets `key` to `value`, as a record of its own; returns the value it replaced.
    pub fn insert(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, StoreError> {
        write(self.log.as_deref(), |w| w.insert(self, key, value))
    }

    /// Removes `key`, as a record of its own; returns the value it had.
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<Option<IVec>, StoreError> {
        write(self.log.as_deref(), |w| w.remove(self, key))
    }

    /// Replaces the value of `key` by what `update` makes of it, atomically; `None`
    /// removes it.
    pub fn update_and_fetch(
        &self,
        key: impl AsRef<[u8]>,
        update: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<Option<IVec>, StoreError> {
        let key = key.as_ref();
        write(self.log.as_deref(), |w| {
            let updated = self.tree.update_and_fetch(key, update)?;
            match &updated {
                Some(value) => w.logged_put(self, key, value),
                None => w.logged_remove(self, key),
            }
            Ok(updated)
        })
    }
}

/// The writes of one record: each is applied to sled at once and logged with the rest.
pub struct Writes<'w, 'r> {
    log: Option<&'w mut RecordWriter<'r>>,
}

impl Writes<'_, '_> {
    /// Sets `key` of `tree` to `value`; returns the value it replaced.
    pub fn insert(
        &mut self,
        tree: &Tree,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, StoreError> {
        let (key, value) = (key.as_ref(), value.as_ref());
        let replaced = tree.tree.insert(key, value)?;
        self.logged_put(tree, key, value);
        Ok(replaced)
    }

    /// Removes `key` of `tree`; returns the value it had.
    pub fn remove(
        &mut self,
        tree: &Tree,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<IVec>, StoreError> {
        let key = key.as_ref();
        let removed = tree.tree.remove(key)?;
        if removed.is_some() {
            self.logged_remove(tree, key);
        }
        Ok(removed)
    }

    /// Logs that sled set `key` of `tree` to `value` by other means (a transaction).
    pub fn logged_put(&mut self, tree: &Tree, key: &[u8], value: &[u8]) {
        if let Some(log) = &mut self.log {
            log.put(tree.id, key, value);
        }
    }

    /// Logs that sled removed `key` of `tree` by other means.
    pub fn logged_remove(&mut self, tree: &Tree, key: &[u8]) {
        if let Some(log) = &mut self.log {
            log.remove(tree.id, key);
        }
    }
}

/// Runs `f`'s writes as one record of `log`; without a log (a temporary store) only runs
/// them.
pub fn write<T>(
    log: Option<&Log>,
    f: impl FnOnce(&mut Writes<'_, '_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match log {
        Some(log) => log.write(|record| f(&mut Writes { log: Some(record) })),
        None => f(&mut Writes { log: None }),
    }
}
