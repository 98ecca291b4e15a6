//! `[cluster]`: how this process takes part in a fleet of replicas sharing one database.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

fn default_lease_secs() -> u64 {
    5
}

/// The longest replica id: it is written with every run the replica owns.
pub const MAX_REPLICA_ID: usize = 64;

/// `[cluster]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This replica's name among its peers (`[A-Za-z0-9._-]`, up to 64 characters); made
    /// up at start when unset. Two live processes never share one.
    #[serde(default)]
    pub replica_id: Option<String>,
    /// Seconds a replica's heartbeat holds: a replica silent that long is gone, and its
    /// runs are ended by its peers. Renewed about five times per lease.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            replica_id: None,
            lease_secs: default_lease_secs(),
        }
    }
}

impl ClusterConfig {
    /// This replica's id (made up by [`Self::validate`] when none was configured).
    pub fn id(&self) -> &str {
        self.replica_id.as_deref().unwrap_or("local")
    }

    /// An id for a process started without one: the host's name (a pod's name, where
    /// there is one) and a random suffix, so a restart is a new replica.
    fn made_up_id() -> String {
        let host: String = std::env::var("HOSTNAME")
            .unwrap_or_default()
            .chars()
            .filter(|c| is_id_char(*c))
            .take(40)
            .collect();
        let suffix = format!("{:08x}", fastrand::u32(..));
        match host.is_empty() {
            true => format!("replica-{suffix}"),
            false => format!("{host}-{suffix}"),
        }
    }

    /// How long a heartbeat holds.
    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }

    /// Refuses ids other replicas could not tell apart or a log could not show, and leases
    /// too short to renew in time or too long to notice a lost replica.
    /// Makes up an id when none was configured.
    pub fn validate(&mut self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| ConfigError::Invalid {
            field: field.to_owned(),
            reason,
        };
        if let Some(id) = &self.replica_id {
            if id.is_empty() || id.len() > MAX_REPLICA_ID || !id.chars().all(is_id_char) {
                return Err(invalid(
                    "cluster.replica_id",
                    format!("must be 1 to {MAX_REPLICA_ID} of A-Z a-z 0-9 . _ -"),
                ));
            }
        }
        if self.replica_id.is_none() {
            self.replica_id = Some(Self::made_up_id());
        }
        if !(2..=300).contains(&self.lease_secs) {
            return Err(invalid(
                "cluster.lease_secs",
                "must be between 2 and 300".to_owned(),
            ));
        }
        Ok(())
    }
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_ids_are_valid_and_differ() {
        let mut ids = Vec::new();
        for _ in 0..2 {
            let mut config = ClusterConfig::default();
            config.validate().unwrap();
            let mut again = config.clone();
            again.validate().unwrap();
            assert_eq!(again.id(), config.id(), "an id, once made up, stays");
            ids.push(config.id().to_owned());
        }
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn bad_ids_and_leases_are_refused_naming_the_field() {
        for id in ["", "a b", "x/y", &"a".repeat(65)] {
            let mut config = ClusterConfig {
                replica_id: Some(id.to_owned()),
                ..ClusterConfig::default()
            };
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.replica_id"), "{err}");
        }
        for lease_secs in [0, 1, 301] {
            let mut config = ClusterConfig {
                lease_secs,
                ..ClusterConfig::default()
            };
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.lease_secs"), "{err}");
        }
    }
}
