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
            statement_timeout_ms: default_statement_timeout_ms(),
            write_timeout_secs: default_write_timeout_secs(),
            event_retention_days: 0,
        }
    }
}
