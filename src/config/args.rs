//! The flags of `serve`, each also an `AGENT_RUNNER_*` environment variable; each
//! overrides the configuration file.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::LogFormat;
use crate::domain::Secret;

/// Flags of `serve`; each overrides the file.
#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:50051].
    #[arg(long, env = "AGENT_RUNNER_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory of the embedded database [default: ./data].
    #[arg(long, env = "AGENT_RUNNER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long, env = "AGENT_RUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "AGENT_RUNNER_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Address of the Prometheus `/metrics` listener [default: none, no listener].
    #[arg(long, env = "AGENT_RUNNER_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Every call needs `authorization: Bearer <API key>`; the key names the tenant.
    #[arg(long, env = "AGENT_RUNNER_REQUIRE_AUTH")]
    pub require_auth: bool,
    /// Serve without authentication on a non-loopback address (a network you trust).
    #[arg(long, env = "AGENT_RUNNER_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
    /// Serve over TLS with this certificate chain (PEM).
    #[arg(long, env = "AGENT_RUNNER_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "AGENT_RUNNER_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM): mutual TLS.
    #[arg(long, env = "AGENT_RUNNER_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Keep records in PostgreSQL (`postgres://user:password@host:port/database`), shared
    /// by every replica, instead of the embedded store; needs a secret key.
    #[arg(long, env = "AGENT_RUNNER_DATABASE_URL", hide_env_values = true, value_parser = secret)]
    pub database_url: Option<Secret>,
    /// This replica's id among those sharing the database [default: made up at start].
    #[arg(long, env = "AGENT_RUNNER_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// NATS for live events and commands between replicas (`nats://host:4222`).
    #[arg(long, env = "AGENT_RUNNER_NATS_URL", hide_env_values = true, value_parser = secret)]
    pub nats_url: Option<Secret>,
    /// An origin (`https://app.example.com`) whose pages may call the API from a browser;
    /// repeat for more (the variable takes a comma-separated list). Replaces
    /// `[server] cors_origins`.
    #[arg(
        long = "cors-origin",
        env = "AGENT_RUNNER_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Serve the browser console at `/` [default: true]. Replaces `[console] enabled`.
    #[arg(long, env = "AGENT_RUNNER_CONSOLE", action = clap::ArgAction::Set)]
    pub console: Option<bool>,
    /// Threads that run the service's tasks [default: one per core it may use]. Replaces
    /// `[server] worker_threads`.
    #[arg(long, env = "AGENT_RUNNER_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
}

/// A flag's value kept as a secret: never shown in help, errors or debug output.
fn secret(value: &str) -> Result<Secret, String> {
    Ok(Secret::new(value))
}
