//! Who may call, and how much: API key records and per-tenant limits.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
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
    /// Ceiling on each run's tokens (its sub-agents' included).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub max_run_tokens: u64,
    /// Ceiling on each run's cost, in its models' currency.
    #[serde(default, skip_serializing_if = "Decimal::is_zero")]
    pub max_run_cost: Decimal,
    /// Ceiling on each run's running seconds.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_run_seconds: u32,
    /// Ceiling on each run's tool calls.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_run_tool_calls: u32,
    /// Sub-agents' runs in progress at once, over all the tenant's trees (the server's
    /// default is [`DEFAULT_MAX_CONCURRENT_CHILD_RUNS`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_concurrent_child_runs: u32,
    /// Streams following runs (`Attach`, A2A `SubscribeToTask`) open at once on one
    /// replica (the server's default is [`DEFAULT_MAX_FOLLOW_STREAMS`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_follow_streams: u32,
    /// Runs queued at once in one conversation (`enqueue`; the server's default is
    /// [`DEFAULT_MAX_QUEUED_PER_CONVERSATION`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub max_queued_per_conversation: u32,
}

/// The server's `[limits] max_follow_streams` when the configuration sets none.
pub const DEFAULT_MAX_FOLLOW_STREAMS: u32 = 1_000;

/// The server's `[limits] max_queued_per_conversation` when the configuration sets none.
pub const DEFAULT_MAX_QUEUED_PER_CONVERSATION: u32 = 8;

/// The server's `[limits] max_concurrent_child_runs` when the configuration sets none: a
/// tree's runs take no tenant slot, so this is what bounds a tenant's trees together.
pub const DEFAULT_MAX_CONCURRENT_CHILD_RUNS: u32 = 64;

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

impl TenantLimits {
    /// These limits, each unset one (0) taken from `defaults`.
    pub fn or(self, defaults: TenantLimits) -> Self {
        let pick32 = |own: u32, default: u32| if own == 0 { default } else { own };
        let pick64 = |own: u64, default: u64| if own == 0 { default } else { own };
        Self {
            max_concurrent_runs: pick32(self.max_concurrent_runs, defaults.max_concurrent_runs),
            runs_per_minute: pick32(self.runs_per_minute, defaults.runs_per_minute),
            tokens_per_day: pick64(self.tokens_per_day, defaults.tokens_per_day),
            max_run_tokens: pick64(self.max_run_tokens, defaults.max_run_tokens),
            max_run_cost: if self.max_run_cost.is_zero() {
                defaults.max_run_cost
            } else {
                self.max_run_cost
            },
            max_run_seconds: pick32(self.max_run_seconds, defaults.max_run_seconds),
            max_run_tool_calls: pick32(self.max_run_tool_calls, defaults.max_run_tool_calls),
            max_concurrent_child_runs: pick32(
                self.max_concurrent_child_runs,
                defaults.max_concurrent_child_runs,
            ),
            max_follow_streams: pick32(self.max_follow_streams, defaults.max_follow_streams),
            max_queued_per_conversation: pick32(
                self.max_queued_per_conversation,
                defaults.max_queued_per_conversation,
            ),
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
