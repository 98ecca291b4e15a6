//! `[a2a]`: the A2A protocol's gRPC binding, served for every stored agent beside our own
//! services, with agent cards on the API's port (and on the metrics listener, when there is
//! one). Off by default.

use serde::Deserialize;

/// The longest `public_url`: it is written into every card.
pub const MAX_PUBLIC_URL: usize = 2048;

/// `[a2a]` settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aConfig {
    /// Serve `lf.a2a.v1.A2AService` on the gRPC port and agent cards at
    /// `/agents/{agent_id}/.well-known/agent-card.json` on the same port (and on the
    /// metrics listener, when there is one).
    #[serde(default)]
    pub enabled: bool,
    /// The gRPC address cards name (`host:port`, as clients reach it through the mesh);
    /// the listen address when unset.
    #[serde(default)]
    pub public_url: Option<String>,
}

impl A2aConfig {
    /// Why these settings cannot be served, if they cannot: the public address must be one
    /// line of sensible length.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !self.enabled {
            return None;
        }
        match &self.public_url {
            Some(url) if url.is_empty() || url.len() > MAX_PUBLIC_URL => Some((
                "a2a.public_url",
                format!("must be 1 to {MAX_PUBLIC_URL} bytes"),
            )),
            Some(url) if url.chars().any(char::is_control) => Some((
                "a2a.public_url",
                "must not hold control characters".to_owned(),
            )),
            Some(_) | None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_needs_a_sane_public_url_and_no_metrics_listener() {
        let off = A2aConfig::default();
        assert!(off.problem().is_none());
        let on = A2aConfig {
            enabled: true,
            public_url: None,
        };
        assert!(on.problem().is_none());
        let bad = A2aConfig {
            enabled: true,
            public_url: Some("x\ny".into()),
        };
        assert_eq!(bad.problem().unwrap().0, "a2a.public_url");
        let config = crate::config::Config::from_toml("[a2a]\nenabled = true\n").unwrap();
        assert!(
            config.validated().is_ok(),
            "cards are served on the API's port"
        );
    }
}
