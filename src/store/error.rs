//! Storage failures.

use crate::domain::ErrorKind;

/// A failure of the database or of a record's encoding.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database reported a failure; a backend files it under its category.
    #[error("storage error: {message}")]
    Backend {
        /// What a caller may do about it.
        category: Category,
        /// The backend's account of it, with no credential in it.
        message: String,
    },
    /// A record could not be encoded or decoded.
    #[error("record codec error in {record}: {source}")]
    Codec {
        /// The kind of record (`messages`, `thoughts`, …).
        record: &'static str,
        /// The serde failure.
        source: serde_json::Error,
    },
    /// Writes could not be made durable (a full disk, a stopped writer).
    #[error("writes could not be made durable: {0}")]
    NotDurable(String),
    /// A record was written by a newer schema than this build understands.
    #[error("record in {record} has schema version {found}, this build reads up to {supported}")]
    UnsupportedVersion {
        /// The kind of record (`messages`, `thoughts`, …).
        record: &'static str,
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
    /// A run's write was refused: the run is no longer this replica's (its owner's lease
    /// lapsed and a peer ended or took it). Its owner stops it and writes nothing more.
    #[error("the run belongs to another replica now")]
    Fenced,
    /// The database is being opened again after it could not write.
    #[error("the store is being reopened after a write failure; try again")]
    Reopening,
}

/// What kind of failure a store error is, whichever backend reported it: what a caller may
/// do about it depends on this, never on the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The store cannot be reached or cannot write now (a full disk, a lost connection, a
    /// reopening); trying again later may work.
    Unavailable,
    /// Another writer got there first.
    Conflict,
    /// The record is not there.
    NotFound,
    /// What is stored cannot be read as a record (damaged, or written by a newer build).
    Corrupt,
    /// A bug or an unexpected failure.
    Internal,
}

impl StoreError {
    /// The failure's category.
    pub fn category(&self) -> Category {
        match self {
            Self::Backend { category, .. } => *category,
            Self::NotDurable(_) | Self::Reopening => Category::Unavailable,
            Self::Codec { .. } | Self::UnsupportedVersion { .. } | Self::Sealed(_) => {
                Category::Corrupt
            }
            Self::SecretKey(_) => Category::Internal,
            Self::Fenced => Category::Conflict,
        }
    }

    /// How a caller sees it: unavailable when waiting may help; otherwise ours to fix.
    pub fn kind(&self) -> ErrorKind {
        match self.category() {
            Category::Unavailable => ErrorKind::Unavailable,
            Category::Conflict => ErrorKind::FailedPrecondition,
            Category::NotFound => ErrorKind::NotFound,
            Category::Corrupt | Category::Internal => ErrorKind::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_a_wait_may_cure_are_unavailable_and_the_rest_internal() {
        let full = StoreError::Backend {
            category: Category::Unavailable,
            message: "No space left on device".into(),
        };
        assert_eq!(full.category(), Category::Unavailable);
        assert_eq!(full.kind(), ErrorKind::Unavailable);
        assert_eq!(StoreError::Reopening.kind(), ErrorKind::Unavailable);
        assert_eq!(
            StoreError::NotDurable("disk full".into()).kind(),
            ErrorKind::Unavailable
        );
        let newer = StoreError::UnsupportedVersion {
            record: "messages",
            found: 9,
            supported: 1,
        };
        assert_eq!(newer.category(), Category::Corrupt);
        assert_eq!(newer.kind(), ErrorKind::Internal);
    }
}
