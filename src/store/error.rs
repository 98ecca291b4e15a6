//! Storage failures.

use crate::domain::ErrorKind;

/// A failure of the embedded database or of a record's encoding.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an I/O or corruption error.
    #[error("storage error: {0}")]
    Sled(#[from] sled::Error),
    /// A record could not be encoded or decoded.
    #[error("record codec error in {tree}: {source}")]
    Codec {
        /// The tree holding the record.
        tree: &'static str,
        /// The serde failure.
        source: serde_json::Error,
    },
    /// Making writes durable failed.
    #[error("flush failed: {0}")]
    Flush(String),
    /// A record was written by a newer schema than this build understands.
    #[error("record in {tree} has schema version {found}, this build reads up to {supported}")]
    UnsupportedVersion {
        /// The tree holding the record.
        tree: &'static str,
        /// Version found.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
    },
    /// The secret key is missing, malformed or unreadable.
    #[error("secret key: {0}")]
    SecretKey(String),
    /// A sealed value could not be sealed or opened.
    #[error("sealed credentials: {0}")]
    Sealed(String),
    /// The database is being opened again after it could not write.
    #[error("the store is being reopened after a write failure; try again")]
    Reopening,
}

impl StoreError {
    /// Storage failures are always ours to fix, never the caller's.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Internal
    }
}
