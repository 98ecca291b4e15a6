//! `[outbound]`: where tools may send requests besides public addresses. The entries are
//! read as the tools room parses them when the service starts (`app/settings.rs`).

use serde::Deserialize;

/// `[outbound]`: what tool traffic may reach besides public addresses.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundConfig {
    /// Networks (`10.0.0.0/8`), addresses and host names tools may reach although they are
    /// not public; `AGENT_RUNNER_OUTBOUND_ALLOW` (comma-separated) adds to them.
    #[serde(default)]
    pub allow: Vec<String>,
}
