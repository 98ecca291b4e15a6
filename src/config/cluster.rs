//! `[cluster]`: how this process takes part in a fleet of replicas sharing one database.

use std::time::Duration;

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use crate::domain::Secret;

fn default_lease_secs() -> u64 {
    5
}

fn default_subject_prefix() -> String {
    "agent-runner".to_owned()
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
    /// NATS for live events and commands between replicas: `nats://[user:password@]host:port`
    /// (`tls://…` for TLS); `AGENT_RUNNER_NATS_URL` or `--nats-url` set it too. Never
    /// shown. Without it, replicas on PostgreSQL notify each other through the database.
    #[serde(default)]
    pub nats_url: Option<Secret>,
    /// A NATS `.creds` file (JWT and seed).
    #[serde(default)]
    pub nats_credentials_file: Option<PathBuf>,
    /// A CA (PEM) to trust for the NATS server's certificate besides the system's.
    #[serde(default)]
    pub nats_ca_file: Option<PathBuf>,
    /// Subjects start with it, so deployments sharing a NATS server stay apart.
    #[serde(default = "default_subject_prefix")]
    pub subject_prefix: String,
    /// How many times a run may be taken over after losing its owner (0 to 100); at the
    /// next loss it ends `INTERRUPTED` with code `owner_lost`, so a run that crashes every
    /// process it lands on does not take the fleet down one replica at a time.
    #[serde(default = "default_max_takeovers")]
    pub max_takeovers: u32,
}

/// The most takeovers a run may have.
const MAX_TAKEOVERS: u32 = 100;

fn default_max_takeovers() -> u32 {
    3
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            replica_id: None,
            lease_secs: default_lease_secs(),
            nats_url: None,
            nats_credentials_file: None,
            nats_ca_file: None,
            subject_prefix: default_subject_prefix(),
            max_takeovers: default_max_takeovers(),
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
            .map(|c| if c == '.' { '-' } else { c })
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
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
            // The id is part of NATS subjects, so it is held to their rule token by token:
            // `a..b` or `.` would make subjects no replica can be woken on.
            if id.len() > MAX_REPLICA_ID || !is_subject_tokens(id) {
                return Err(invalid(
                    "cluster.replica_id",
                    format!(
                        "must be 1 to {MAX_REPLICA_ID} of A-Z a-z 0-9 _ - in dot-separated \
                         non-empty parts"
                    ),
                ));
            }
        }
        if self.replica_id.is_none() {
            self.replica_id = Some(Self::made_up_id());
        }
        if self.max_takeovers > MAX_TAKEOVERS {
            return Err(invalid(
                "cluster.max_takeovers",
                format!("must be at most {MAX_TAKEOVERS}"),
            ));
        }
        if self.subject_prefix.len() > 100 || !is_subject_tokens(&self.subject_prefix) {
            return Err(invalid(
                "cluster.subject_prefix",
                "must be dot-separated tokens of A-Z a-z 0-9 _ - (up to 100 characters)".to_owned(),
            ));
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

/// Whether `text` is dot-separated, non-empty tokens of A-Z a-z 0-9 _ -, as a NATS subject's
/// tokens must be.
fn is_subject_tokens(text: &str) -> bool {
    text.split('.').all(|token| {
        !token.is_empty()
            && token
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    })
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
        for id in [
            "",
            "a b",
            "x/y",
            "a..b",
            ".",
            "a.",
            ".a",
            "x*",
            &"a".repeat(65),
        ] {
            let mut config = ClusterConfig {
                replica_id: Some(id.to_owned()),
                ..ClusterConfig::default()
            };
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.replica_id"), "{err}");
        }
        for prefix in ["", "a..b", "a b", "x.*", &"a".repeat(101)] {
            let mut config = ClusterConfig {
                subject_prefix: prefix.to_owned(),
                ..ClusterConfig::default()
            };
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.subject_prefix"), "{err}");
        }
        for lease_secs in [0, 1, 301] {
            let mut config = ClusterConfig {
                lease_secs,
                ..ClusterConfig::default()
            };
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.lease_secs"), "{err}");
        }
        let mut config = ClusterConfig {
            max_takeovers: 101,
            ..ClusterConfig::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("cluster.max_takeovers"), "{err}");
        let mut config = ClusterConfig {
            max_takeovers: 100,
            ..ClusterConfig::default()
        };
        config.validate().unwrap();
    }
}
