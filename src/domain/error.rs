//! How errors classify themselves without naming a transport.

use std::fmt;

/// The closed set of failure classes the API layer maps to gRPC codes.
///
/// Every core error reports one of these through a `kind()` method, so the mapping to
/// `tonic::Code` lives in a single exhaustive match in `api::status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or names something that does not exist in it.
    InvalidArgument,
    /// A referenced record does not exist.
    NotFound,
    /// A record with the same identity exists.
    AlreadyExists,
    /// The request is valid but the system is not in a state to serve it.
    FailedPrecondition,
    /// A quota or rate limit was hit.
    ResourceExhausted,
    /// The caller sent no credential, or one that is not valid.
    Unauthenticated,
    /// The caller's credential does not allow this.
    PermissionDenied,
    /// A dependency is unreachable; retrying later may help.
    Unavailable,
    /// A deadline passed before the work finished.
    DeadlineExceeded,
    /// The work was cancelled.
    Cancelled,
    /// The request met a concurrent one it may not run beside; retrying later may help.
    Aborted,
    /// A bug or an unexpected failure of our own.
    Internal,
}

/// A request field that failed validation, named the way clients spell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the field, e.g. `agent.max_iteration`.
    pub field: String,
    /// What is wrong with it, phrased to follow the field name.
    pub reason: String,
}

impl FieldError {
    /// A field error for `field` with a reason that reads after the field name.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.field, self.reason)
    }
}

impl std::error::Error for FieldError {}
