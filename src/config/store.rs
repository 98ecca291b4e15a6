//! `[store]`: where records are kept. Without a database URL, the embedded store in
//! `[server] data_dir`; with one, PostgreSQL, shared by every replica.

use serde::Deserialize;

use crate::domain::Secret;

fn default_pool_size() -> u32 {
    10
}

fn default_statement_timeout_ms() -> u64 {
    5_000
}

fn default_pool_wait_ms() -> u64 {
    60_000
}

/// The longest `pool_wait_ms` accepted: a call held longer than this waits for nothing a
/// client still expects.
pub const MAX_POOL_WAIT_MS: u64 = 600_000;

fn default_write_timeout_secs() -> u64 {
    10
}

/// `[store]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database` (`?sslmode=require` or `verify-full`
    /// for TLS); `AGENT_RUNNER_DATABASE_URL` or `--database-url` set it too. Never shown.
    #[serde(default)]
    pub database_url: Option<Secret>,
    /// Connections each process keeps to the database.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// How long a call (a start, an attach, a read) waits for a free connection when all
    /// are in use, before it is refused `UNAVAILABLE`; the call's own deadline, when
    /// shorter, ends the wait first. Commits have connections of their own and never
    /// wait behind calls.
    #[serde(default = "default_pool_wait_ms")]
    pub pool_wait_ms: u64,
    /// A statement running longer fails, and the database counts as unavailable.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// How long a run tries to commit its records while the database is unavailable
    /// before it stops as on a full disk.
    #[serde(default = "default_write_timeout_secs")]
    pub write_timeout_secs: u64,
    /// Days after which an ended message's events are retired, all but its last (its
    /// end); 0 keeps them until the conversation is deleted.
    #[serde(default)]
    pub event_retention_days: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            database_url: None,
            pool_size: default_pool_size(),
            pool_wait_ms: default_pool_wait_ms(),
            statement_timeout_ms: default_statement_timeout_ms(),
            write_timeout_secs: default_write_timeout_secs(),
            event_retention_days: 0,
        }
    }
}

impl StoreConfig {
    /// The first setting out of its bounds, with why.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !(1..=MAX_POOL_WAIT_MS).contains(&self.pool_wait_ms) {
            return Some((
                "store.pool_wait_ms",
                format!("must be between 1 and {MAX_POOL_WAIT_MS}"),
            ));
        }
        None
    }
}
