//! `[outbound]`: where tools may send requests besides public addresses.

use serde::Deserialize;

use super::ConfigError;
use crate::tools::OutboundPolicy;

/// `[outbound]`: what tool traffic may reach besides public addresses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundConfig {
    /// Networks (`10.0.0.0/8`), addresses and host names tools may reach although they are
    /// not public; `AGENT_RUNNER_OUTBOUND_ALLOW` (comma-separated) adds to them.
    #[serde(default)]
    pub allow: Vec<String>,
}

impl OutboundConfig {
    /// The policy these settings describe.
    pub fn policy(&self) -> Result<OutboundPolicy, ConfigError> {
        OutboundPolicy::allowing(&self.allow).map_err(|reason| ConfigError::Invalid {
            field: "outbound.allow".to_owned(),
            reason,
        })
    }
}
