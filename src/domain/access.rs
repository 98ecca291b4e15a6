//! Who may call, and how much: API key records and per-tenant limits.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Tenant;

/// Limits of one tenant; 0 is unlimited. Also the `[limits]` table of the configuration,
/// hence unknown fields are refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Runs in progress at once.
    #[serde(default)]
    pub max_concurrent_runs: u32,
    /// Runs started in any 60 seconds.
    #[serde(default)]
    pub runs_per_minute: u32,
    /// LLM tokens (prompt and completion) used in a UTC day.
    #[serde(default)]
    pub tokens_per_day: u64,
}

impl TenantLimits {
    /// These limits, each unset one (0) taken from `defaults`.
    pub fn or(self, defaults: TenantLimits) -> Self {
        let pick32 = |own: u32, default: u32| if own == 0 { default } else { own };
        Self {
            max_concurrent_runs: pick32(self.max_concurrent_runs, defaults.max_concurrent_runs),
            runs_per_minute: pick32(self.runs_per_minute, defaults.runs_per_minute),
            tokens_per_day: if self.tokens_per_day == 0 {
                defaults.tokens_per_day
            } else {
                self.tokens_per_day
            },
        }
    }
}

/// An API key as stored: its secret only as a hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// The key's public id (also the first part of the key).
    pub id: String,
    /// The tenant the key acts for.
    pub tenant: Tenant,
    /// A name for people.
    pub name: String,
    /// SHA-256 of the secret, hex.
    pub secret_hash: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it was last used, as last recorded.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Limits of its tenant while it calls with this key (0: the server's defaults).
    #[serde(default)]
    pub limits: TenantLimits,
}
