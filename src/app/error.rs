//! Why the service could not start or stopped abnormally.

use crate::access::AccessError;
use crate::llm::LlmError;
use crate::store::StoreError;
use crate::tools::RegistryError;

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The runs a previous process left could not be taken.
    #[error(transparent)]
    Runs(#[from] crate::runner::RunError),
    /// A shared database was configured without a key every replica shares.
    #[error("a shared database needs the secret key every replica seals credentials with: set AGENT_RUNNER_SECRET_KEY or server.secret_key_file (a key made in one replica's data directory would differ from the others')")]
    SharedKeyMissing,
    /// An LLM provider could not be set up.
    #[error("LLM provider setup failed: {0}")]
    Llm(#[from] LlmError),
    /// A tool could not be registered.
    #[error(transparent)]
    Tools(#[from] RegistryError),
    /// The router could not be built.
    #[error(transparent)]
    Router(#[from] crate::api::RouterError),
    /// The transport failed.
    #[error("server error: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The API keys could not be loaded.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// A TLS file could not be read.
    #[error("cannot read {path}: {source}")]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The NATS bus could not be set up.
    #[error(transparent)]
    Nats(#[from] crate::cluster::nats::NatsError),
    /// The metrics listener could not be bound.
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen {
        /// The address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}
