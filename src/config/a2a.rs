//! `[a2a]`: the A2A protocol's gRPC binding, served for every stored agent beside our own
//! services, with agent cards on the metrics listener. Off by default.

use serde::Deserialize;

/// The longest `public_url`: it is written into every card.
pub const MAX_PUBLIC_URL: usize = 2048;

/// `[a2a]` settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aConfig {
    /// Serve `lf.a2a.v1.A2AService` on the gRPC port and agent cards at
    /// `/agents/{agent_id}/.well-known/agent-card.json` on the metrics listener.
    #[serde(default)]
    pub enabled: bool,
    /// The gRPC address cards name (`host:port`, as clients reach it through the mesh);
    /// the listen address when unset.
    #[serde(default)]
    pub public_url: Option<String>,
}

impl A2aConfig {
    /// Why these settings cannot be served, if they cannot: cards need the metrics
    /// listener, and the public address must be one line of sensible length.
    pub fn problem(&self, metrics_listener: bool) -> Option<(&'static str, String)> {
        if !self.enabled {
            return None;
        }
        if !metrics_listener {
            return Some((
                "a2a.enabled",
                "needs server.metrics_listen (--metrics-listen): agent cards are served there"
                    .to_owned(),
            ));
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
    fn a2a_needs_the_metrics_listener_and_a_sane_public_url() {
        let off = A2aConfig::default();
        assert!(off.problem(false).is_none());
        let on = A2aConfig {
            enabled: true,
            public_url: None,
        };
        assert_eq!(on.problem(false).unwrap().0, "a2a.enabled");
        assert!(on.problem(true).is_none());
        let bad = A2aConfig {
            enabled: true,
            public_url: Some("x\ny".into()),
        };
        assert_eq!(bad.problem(true).unwrap().0, "a2a.public_url");
        let config = crate::config::Config::from_toml("[a2a]\nenabled = true\n").unwrap();
        let err = config.validated().unwrap_err().to_string();
        assert!(err.contains("a2a.enabled"), "{err}");
    }
}
