//! `[console]`: the browser console served from the binary on the API's port.

use serde::Deserialize;

/// `[console]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console at `/` (and its pages under `/runs/`, `/conversations/`,
    /// `/agents/`); on by default. It calls the public API over gRPC-Web, so it sees what
    /// the caller's key may see.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}
