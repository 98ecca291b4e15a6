//! Where the records are kept, in the plain terms the configuration gives.

use std::path::PathBuf;

pub use super::postgres::Settings as DatabaseSettings;

/// Which backend keeps the records, and how: what [`super::Store::open`] is given.
#[derive(Clone)]
pub enum StoreSettings {
    /// The embedded database, for one process: records under `dir`, at most
    /// `cache_bytes` of its pages in memory.
    Embedded {
        /// The data directory.
        dir: PathBuf,
        /// The page cache's size.
        cache_bytes: u64,
    },
    /// A shared database (PostgreSQL) that every replica uses.
    Shared(DatabaseSettings),
}
