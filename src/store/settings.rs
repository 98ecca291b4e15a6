//! Where the records are kept, in the plain terms the configuration gives.

use std::path::PathBuf;
use std::time::Duration;

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

/// How to reach the database.
#[derive(Clone)]
pub struct DatabaseSettings {
    /// `postgres://user:password@host:port/database?sslmode=…`; never shown.
    pub url: String,
    /// Connections for calls (starts, attaches, reads); the committers hold their own.
    pub pool_size: u32,
    /// How long a call waits for one of them when all are in use.
    pub pool_wait: Duration,
    /// A statement running longer counts as the database being unavailable.
    pub statement_timeout: Duration,
    /// This replica's id: the owner of the runs it starts.
    pub replica_id: String,
    /// How long its heartbeat holds.
    pub lease: Duration,
    /// Whether commits notify other replicas through the database (when no other bus
    /// carries notices).
    pub notify: bool,
}
