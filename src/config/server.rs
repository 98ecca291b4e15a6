//! `[server]`: where the API listens, how many connections it keeps, and which browsers may
//! call it (other origins by CORS, hosts the API answers when keys are off).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::LogFormat;
use crate::domain::Secret;

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 50051))
}
fn default_data_dir() -> PathBuf {
    PathBuf::from("./data")
}
fn default_grace() -> u64 {
    30
}
fn default_max_request_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_max_connections() -> usize {
    10_000
}
fn default_metrics_max_connections() -> usize {
    64
}
fn default_handshake_timeout_secs() -> u64 {
    10
}
/// The embedded database's page cache when the configuration does not say. sled's own
/// default (1 GiB) lets the cache grow with everything written; runs mostly read back their
/// own recent records.
fn default_store_cache_mb() -> u64 {
    16
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Directory of the embedded database.
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Seconds that shutdown waits for runs to record how they ended.
    #[serde(default = "default_grace")]
    pub shutdown_grace_secs: u64,
    /// Log format.
    #[serde(default)]
    pub log_format: LogFormat,
    /// MiB of database pages kept in memory.
    #[serde(default = "default_store_cache_mb")]
    pub store_cache_mb: u64,
    /// Largest request message accepted; larger ones are refused with
    /// `RESOURCE_EXHAUSTED` before they are read.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// Address of the Prometheus `/metrics` listener; none when unset.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Connections the gRPC listener keeps open at once; one more is closed at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Connections the metrics listener keeps open at once.
    #[serde(default = "default_metrics_max_connections")]
    pub metrics_max_connections: usize,
    /// Seconds a new connection has to finish its TLS handshake and send its HTTP/2
    /// preface (or, on the metrics listener, a request head); then it is closed.
    /// Established connections are never closed for being idle.
    #[serde(default = "default_handshake_timeout_secs")]
    pub handshake_timeout_secs: u64,
    /// Label run counts and cost with the tenant. Off by default: tenants are many.
    #[serde(default)]
    pub metrics_tenant_label: bool,
    /// A file holding the key provider credentials are sealed with (base64 or hex of 32
    /// bytes); without it and without `AGENT_RUNNER_SECRET_KEY`, `{data_dir}/secret.key`.
    #[serde(default)]
    pub secret_key_file: Option<PathBuf>,
    /// The key itself, from `AGENT_RUNNER_SECRET_KEY` only (never from the file).
    #[serde(skip)]
    pub secret_key: Option<Secret>,
    /// Origins (`scheme://host[:port]`) whose pages may call the API from a browser (CORS);
    /// none by default, so only pages the service itself serves can. `*` is any origin,
    /// allowed only with API keys on.
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Host names, besides loopback ones, that browsers may reach the API by when API keys
    /// are off; any other `Host` is refused, so a page on a rebound domain cannot call it.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Threads that run the service's tasks; unset, one per core the process may use (its
    /// CPU quota included). A replica that holds a few runs at a time spends less CPU per
    /// run on fewer: threads then wake one another less (docs/operations.md).
    #[serde(default)]
    pub worker_threads: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            data_dir: default_data_dir(),
            shutdown_grace_secs: default_grace(),
            log_format: LogFormat::default(),
            store_cache_mb: default_store_cache_mb(),
            max_request_bytes: default_max_request_bytes(),
            metrics_listen: None,
            max_connections: default_max_connections(),
            metrics_max_connections: default_metrics_max_connections(),
            handshake_timeout_secs: default_handshake_timeout_secs(),
            metrics_tenant_label: false,
            secret_key_file: None,
            secret_key: None,
            cors_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            worker_threads: None,
        }
    }
}

/// The most worker threads accepted: far past any core count a replica is given, short of
/// what would only cost memory (each thread keeps its own stack and queues).
pub const MAX_WORKER_THREADS: usize = 256;

/// Entries `cors_origins` and `allowed_hosts` hold at most each.
pub const MAX_BROWSER_ENTRIES: usize = 64;

/// The longest origin or host name accepted.
const MAX_NAME_BYTES: usize = 255;

impl ServerConfig {
    /// Why the browser settings cannot be served, if they cannot: an origin must be what a
    /// browser sends (`scheme://host[:port]`), `*` needs API keys (any page on the web could
    /// call otherwise), and an allowed host is a bare name or address.
    pub fn browser_problem(&self, keys_required: bool) -> Option<(&'static str, String)> {
        if self.cors_origins.len() > MAX_BROWSER_ENTRIES {
            return Some((
                "server.cors_origins",
                format!("holds at most {MAX_BROWSER_ENTRIES} origins"),
            ));
        }
        if self.allowed_hosts.len() > MAX_BROWSER_ENTRIES {
            return Some((
                "server.allowed_hosts",
                format!("holds at most {MAX_BROWSER_ENTRIES} hosts"),
            ));
        }
        for origin in &self.cors_origins {
            if origin == "*" {
                if !keys_required {
                    return Some((
                        "server.cors_origins",
                        "`*` lets any web page call the service; it needs API keys on \
                         (auth.required), and --insecure-no-auth turns them off"
                            .to_owned(),
                    ));
                }
            } else if !is_origin(origin) {
                return Some((
                    "server.cors_origins",
                    format!(
                        "{:?} is not an origin as a browser sends it: scheme://host[:port], \
                         with no path and no default port",
                        shorten(origin)
                    ),
                ));
            }
        }
        for host in &self.allowed_hosts {
            if !is_host(host) {
                return Some((
                    "server.allowed_hosts",
                    format!(
                        "{:?} is not a host name or address (no scheme, port or path)",
                        shorten(host)
                    ),
                ));
            }
        }
        None
    }
}

/// Whether `text` is an origin written as browsers write it in `Origin`.
fn is_origin(text: &str) -> bool {
    if text.len() > MAX_NAME_BYTES {
        return false;
    }
    match url::Url::parse(text) {
        Ok(url) => {
            matches!(url.scheme(), "http" | "https") && url.origin().ascii_serialization() == text
        }
        Err(_) => false,
    }
}

/// Whether `text` is a bare host: a DNS name or an IP address, without port or scheme.
fn is_host(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_NAME_BYTES {
        return false;
    }
    let bare = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    bare.parse::<std::net::IpAddr>().is_ok()
        || text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// At most the first 80 characters of a refused value, for the message.
fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}
